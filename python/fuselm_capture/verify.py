"""python -m fuselm_capture.verify WORK: transformers' side of `fuselm verify` (docs/verify.md).

`fuselm verify` runs the model in the engine first: for each prompt it writes WORK/request.json
(model directory, prompt ids, the tokens fuselm generated greedily) and each prompt's logits rows
(raw f32, one row per prompt token and decode step, as `generate --logits-out`). This module then
loads the same checkpoint in transformers (a GGUF through `from_pretrained(dir, gguf_file=...)`,
which dequantizes it) and runs the prompt plus fuselm's tokens through it in one forward, so every
row is compared on the same prefix (teacher forcing). It writes WORK/reference.json with the
figures per prompt; the engine side applies the tolerance rule and prints the verdict.

Figures per prompt (rows = prompt tokens + generated tokens - 1):
- top1: rows whose argmax equals transformers'; ties: of the others, those where transformers' own
  logits of the two tokens differ by at most tie_tol x max|logit| of the row (either is right);
- kld_mean, kld_max: KL(transformers || fuselm) of each row's softmax, in nats (as llama.cpp's
  `llama-perplexity --kl-divergence` reports it, the reference first);
- max_abs: max |Δlogit|; max_rel: max over rows of max |Δlogit| / max |logit of the row|;
- greedy: generated tokens equal to transformers' greedy choice before the first that is not.
The reference runs in float32 when the model fits in memory at 4 bytes per parameter (with room
for the logits), else in bfloat16 (reported: the engine side then applies the 16-bit rule).
Errors are one line "fuselm verify: error: ..." on stderr, exit 1.
"""
from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

ERROR_PREFIX = "fuselm verify: error: "
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                     "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class VerifyError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"fuselm verify: {msg}", file=sys.stderr, flush=True)


def gguf_file(model_dir: Path) -> Path | None:
    """The GGUF a directory made by gguf_dir.py runs (its model.gguf link, resolved), else None."""
    link = model_dir / "model.gguf"
    return link.resolve() if link.exists() else None


def _safetensors_elements(path: Path) -> int:
    """Elements of every tensor in a .safetensors file, from its JSON header (no tensor read)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return sum(int(np.prod(t["shape"], dtype=np.int64)) for k, t in header.items() if k != "__metadata__")


def checkpoint_elements(model_dir: Path) -> int:
    """Parameter count of the checkpoint (GGUF tensors or safetensors headers)."""
    gguf = gguf_file(model_dir)
    if gguf is not None:
        from gguf import GGUFReader
        return sum(int(t.n_elements) for t in GGUFReader(str(gguf)).tensors)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise VerifyError(f"{model_dir}: no *.safetensors and no model.gguf; transformers has nothing to load")
    return sum(_safetensors_elements(f) for f in files)


def mem_available() -> int:
    """Bytes of memory available now (/proc/meminfo MemAvailable; unknown: assume plenty)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def reference_dtype(model_dir: Path, logits_bytes: int):
    """float32 when 4 bytes per parameter, the largest prompt's logits four times over and a
    quarter to spare fit in available memory; else bfloat16 when that fits; else an error."""
    import torch

    elements = checkpoint_elements(model_dir)
    avail = mem_available()
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        if (elements * size + 4 * logits_bytes) * 1.25 <= avail:
            return dtype
    raise VerifyError(f"{model_dir}: transformers needs about {elements * 2 / 2**30:.1f} GiB for the model in bfloat16 "
                      f"and {avail / 2**30:.1f} GiB are available; free memory or verify on a larger machine")


def _apply_rope_factors(model, reader) -> None:
    """The file's `rope_freqs.weight` divides the reference's buffers that hold its plain RoPE
    frequencies (gguf_rope_factors.apply_rope_factors, as capture divides the graph's)."""
    from .gguf_rope_factors import apply_rope_factors
    buffers = {name: b for name, b in model.named_buffers()}
    for name in apply_rope_factors(reader, buffers, set(buffers)):
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = buffers[name]


def load_reference(model_dir: Path, dtype, trust_remote_code: bool):
    """The transformers model of the same checkpoint, eager attention (the plainest oracle)."""
    from transformers import AutoModelForCausalLM

    gguf = gguf_file(model_dir)
    kwargs = dict(dtype=dtype, attn_implementation="eager", trust_remote_code=trust_remote_code)
    if gguf is not None:
        from gguf import GGUFReader

        from .gguf_source import gguf_config
        reader = GGUFReader(str(gguf))
        log(f"loading {gguf} in transformers ({str(dtype).removeprefix('torch.')}, dequantized by transformers)")
        # The config with the file's RoPE fields transformers' mapping drops (gguf_rope_config.py), and
        # the file's RoPE factors applied to its frequencies as capture applies them to the graph's.
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     config=gguf_config(gguf, reader=reader), **kwargs).eval()
        _apply_rope_factors(model, reader)
        return model
    log(f"loading {model_dir} in transformers ({str(dtype).removeprefix('torch.')})")
    return AutoModelForCausalLM.from_pretrained(str(model_dir), **kwargs).eval()


def compare_rows(ours: np.ndarray, ref: np.ndarray, n_prompt: int, generated: list[int], tie_tol: float) -> dict:
    """The figures of the module doc for fuselm's rows `ours` against transformers' `ref`."""
    top_ours, top_ref = ours.argmax(-1), ref.argmax(-1)
    rows = np.arange(len(ref))
    row_max = np.abs(ref).max(-1)
    gap = ref[rows, top_ref] - ref[rows, top_ours]  # >= 0; 0 where they agree
    agree = top_ours == top_ref
    ties = (~agree) & (gap <= tie_tol * row_max)
    kld = np.empty(len(ref))
    for i in range(len(ref)):  # row by row in float64: a vocabulary of 256k in f32 loses the small KLDs
        lr = ref[i].astype(np.float64)
        lo = ours[i].astype(np.float64)
        lr = lr - lr.max() - np.log(np.exp(lr - lr.max()).sum())
        lo = lo - lo.max() - np.log(np.exp(lo - lo.max()).sum())
        kld[i] = max(float(np.sum(np.exp(lr) * (lr - lo))), 0.0)
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max(-1)
    greedy = 0
    for k, tok in enumerate(generated):
        if top_ref[n_prompt - 1 + k] != tok:
            break
        greedy += 1
    return {"rows": int(len(ref)), "top1": int(agree.sum()), "ties": int(ties.sum()),
            "kld_mean": float(kld.mean()), "kld_max": float(kld.max()), "max_abs": float(diff.max()),
            "max_rel": float((diff / np.maximum(row_max, 1e-30)).max()), "greedy": greedy,
            "generated": len(generated)}


def run(work: Path) -> dict:
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF dequantizer draws a bar per tensor
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # one progress line per step is ours
    req = json.loads((work / "request.json").read_text())
    model_dir = Path(req["model_dir"])
    prompts = req["prompts"]
    longest = max(len(p["prompt_ids"]) + len(p["token_ids"]) for p in prompts)
    dtype = reference_dtype(model_dir, longest * int(req["vocab_size"]) * 4)
    model = load_reference(model_dir, dtype, bool(req.get("trust_remote_code")))
    out = []
    for i, p in enumerate(prompts):
        ids = list(p["prompt_ids"]) + list(p["token_ids"][:-1])
        ours = np.fromfile(work / p["logits"], dtype=np.float32)
        if ours.size % len(ids):
            raise VerifyError(f"{work / p['logits']}: {ours.size} floats are not {len(ids)} rows")
        ours = ours.reshape(len(ids), -1)
        with torch.no_grad():
            ref = model(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        if ref.shape != ours.shape:
            raise VerifyError(f"prompt {i + 1}: transformers gives logits {list(ref.shape)}, fuselm {list(ours.shape)}")
        out.append(compare_rows(ours, ref, len(p["prompt_ids"]), p["token_ids"], float(req["tie_tol"])))
        log(f"prompt {i + 1}/{len(prompts)} compared ({len(ids)} rows)")
    return {"reference": {"dtype": str(dtype).removeprefix("torch."), "transformers": transformers.__version__,
                          "torch": torch.__version__, "source": "gguf" if gguf_file(model_dir) else "safetensors"},
            "prompts": out}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"{ERROR_PREFIX}usage: python -m fuselm_capture.verify WORK (run by `fuselm verify`)", file=sys.stderr)
        return 2
    work = Path(argv[0])
    try:
        result = run(work)
        tmp = work / f".reference.json.{os.getpid()}"
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(work / "reference.json")
    except Exception as e:  # noqa: BLE001 - whatever fails is one line, never a traceback
        from .messages import reason
        msg = str(e) if isinstance(e, VerifyError) else f"{type(e).__name__}: {reason(str(e))}"
        print(f"{ERROR_PREFIX}{' '.join(msg.split())}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
