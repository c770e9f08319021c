"""GGUFs the `gguf` package writes for three tiny families (llama, qwen2, qwen3; random weights),
one file per block type of the linear weights, embeddings and LM head (Q8_0, Q4_0, Q4_1, Q5_0,
Q5_1 through gguf.quants.quantize; Q4_K, Q5_K, Q6_K as random codes with small scales, which the
package can dequantize but not quantize): fuselm runs each file as it is and transformers runs the
same file (`from_pretrained(..., gguf_file=...)`, which dequantizes it) as the oracle. By default
each type runs in one family and each family with two or three types; FUSELM_GGUF_FULL=1 runs all
24 pairs.

Llama files hold q/k rows permuted as llama.cpp's converter permutes them (ggml's interleaved
rope); qwen2/qwen3 files do not (neox rope): fuselm must undo the permutation for llama only, from
structure (docs/gguf.md), or the logits disagree.

Stated agreement (fuselm quantizes activations to int8 per block before each product with a block
weight, transformers multiplies in fp32): over a 24-token prompt and 16 greedy tokens
(teacher-forced on fuselm's tokens), the top-1 token equals transformers' on >= 85% of rows and
every logits row is within 10% of its max |logit|; the first 4 greedy tokens are equal.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1"]
FAMILIES = ["llama", "qwen2", "qwen3"]
MIN_TOP1 = 0.85
MAX_REL = 0.10
GREEDY_PREFIX = 4
PROMPT = [5, 17, 99, 3, 250, 1, 64, 42, 7, 7, 180, 33, 12, 200, 8, 91, 150, 2, 77, 16, 240, 101, 9, 60]
NEW = 16
H, FF, LAYERS, HEADS, KV, VOCAB = 256, 512, 2, 4, 2, 256


def _config(family):
    from transformers import LlamaConfig, Phi3Config, Qwen2Config, Qwen3Config

    common = dict(vocab_size=VOCAB, hidden_size=H, intermediate_size=FF, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    if family == "phi3":
        return Phi3Config(**common, pad_token_id=0)  # its default pad id is outside the tiny vocabulary
    return {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[family](**common)


def _permute(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _blocks(x: np.ndarray, qtype, rng):
    """x's rows as `qtype` blocks: gguf.quants.quantize where the package can, else random codes
    with scales small enough for sane logits (K-quants)."""
    import gguf

    if qtype.name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        return gguf.quants.quantize(x, qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = x.size // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    f16 = lambda v: np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)  # noqa: E731
    if qtype.name in ("Q4_K", "Q5_K"):
        # Each sub-block's 6-bit scale equal to its minimum (scales[4:8] = scales[0:4], equal
        # nibbles in scales[8:12]) and dmin = d·(max code)/2: zero-mean values d·sc·(q - max/2).
        d = 3e-4 if qtype.name == "Q4_K" else 1.5e-4
        raw[:, 0:2] = f16(d)
        raw[:, 2:4] = f16(d * (7.5 if qtype.name == "Q4_K" else 15.5))
        raw[:, 8:12] = raw[:, 4:8]
        raw[:, 12:16] = (raw[:, 12:16] & 0x0F) * 0x11
    elif qtype.name == "Q2_K":  # d, dmin at the end (only the refusal test writes it)
        raw[:, 80:82] = f16(1e-4)
        raw[:, 82:84] = f16(1e-4)
    else:  # Q6_K: d at the end
        raw[:, 208:210] = f16(4e-5)
    return raw.reshape(x.shape[0], -1)


def _tokens():
    """GPT-2's byte-level alphabet: one token per byte (a byte-level BPE vocabulary with no merges)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_gguf(family: str, qname: str, path: Path, config=None, extra: dict | None = None, metadata=None):
    """Writes the family's tiny random model (or one of `config`) to path with its matrices as
    `qname` blocks (F32: as they are), `extra` tensors (name -> float32 array) after them and
    `metadata(writer)` after the common fields; returns the transformers model whose weights the
    file holds."""
    import gguf
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = config or _config(family)
    config.initializer_range = 0.08
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
            "phi3": gguf.MODEL_ARCH.PHI3}[family]
    names = gguf.get_tensor_name_map(arch, LAYERS)
    qtype = getattr(gguf.GGMLQuantizationType, qname)
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"] if getattr(config, "rope_parameters", None)
                         else config.rope_theta)
    w.add_key_length(getattr(config, "head_dim", None) or H // HEADS)
    w.add_value_length(getattr(config, "head_dim", None) or H // HEADS)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(_tokens())
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if metadata:
        metadata(w)
    for name, p in model.state_dict().items():
        x = p.detach().numpy().astype(np.float32)
        base, _, suffix = name.rpartition(".")
        gname = names.get_name(base.removeprefix("model.")) or names.get_name(base)
        assert gname, name
        if family == "llama" and base.endswith(("q_proj", "k_proj")):
            x = _permute(x, HEADS if base.endswith("q_proj") else KV)
        if x.ndim == 2 and qname != "F32":
            w.add_tensor(f"{gname}.{suffix}", _blocks(x, qtype, rng), raw_dtype=qtype)
        else:
            w.add_tensor(f"{gname}.{suffix}", x)
    for name, x in (extra or {}).items():
        w.add_tensor(name, np.asarray(x, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model.eval()


def _fuselm(fuselm_bin, gguf_path, tmp_path, env):
    logits = tmp_path / "logits.f32"
    cmd = [str(fuselm_bin), "generate", str(gguf_path), "--prompt-ids", ",".join(map(str, PROMPT)),
           "--max-tokens", str(NEW), "--json", "--ignore-eos", "--logits-out", str(logits)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["token_ids"], np.fromfile(logits, dtype=np.float32).reshape(len(PROMPT) + NEW - 1, -1)


# Every block type once, every family twice (each file is captured anew, which is slow on a loaded
# machine); FUSELM_GGUF_FULL=1 runs every family with every type.
CASES = ([(f, q) for f in FAMILIES for q in TYPES] if os.environ.get("FUSELM_GGUF_FULL") else
         [("llama", "Q4_0"), ("llama", "Q4_K"), ("qwen2", "Q8_0"), ("qwen2", "Q5_K"), ("qwen3", "Q4_1"),
          ("qwen3", "Q6_K"), ("llama", "Q5_0"), ("qwen2", "Q5_1")])


@pytest.mark.parametrize("family,qname", CASES)
def test_gguf_family_matches_transformers(family, qname, fuselm_bin, tmp_path, tmp_path_factory):
    import os

    from transformers import AutoModelForCausalLM

    path = tmp_path / f"{family}-{qname}.gguf"
    write_gguf(family, qname, path)
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path_factory.mktemp("cache")))
    tokens, ours = _fuselm(fuselm_bin, path, tmp_path, env)
    ref_model = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    ref_model.eval()
    with torch.no_grad():
        ids = torch.tensor([PROMPT + tokens[:-1]])
        ref = ref_model(ids).logits[0].numpy()
        greedy = ref_model.generate(torch.tensor([PROMPT]), max_new_tokens=GREEDY_PREFIX, do_sample=False)[0, len(PROMPT):]
    top1 = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    rel = float(np.max(np.abs(ours - ref).max(-1) / np.abs(ref).max(-1)))
    print(f"\n{family} {qname}: top-1 {top1:.1%}, max relative logit difference {rel:.3f}")
    assert top1 >= MIN_TOP1
    assert rel <= MAX_REL
    assert tokens[:GREEDY_PREFIX] == greedy.tolist()


def refusal(fuselm_bin, path: Path, tmp_path_factory) -> str:
    """The last stderr line of `fuselm generate path`, which must fail (a fresh cache each call)."""
    env = dict(os.environ, FUSELM_CACHE=str(tmp_path_factory.mktemp("cache")))
    proc = subprocess.run([str(fuselm_bin), "generate", str(path), "--prompt-ids", "1,2", "--max-tokens", "1"],
                          capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode != 0
    return proc.stderr.strip().splitlines()[-1]


def test_unsupported_block_type_is_one_line_naming_the_tensor(fuselm_bin, tmp_path, tmp_path_factory):
    """A type the reader knows but the engine has no kernel for (Q2_K) is refused at load."""
    path = tmp_path / "llama-Q2_K.gguf"
    write_gguf("llama", "Q2_K", path)
    last = refusal(fuselm_bin, path, tmp_path_factory)
    assert "tensor 'blk.0." in last or "tensor 'token_embd.weight'" in last or "tensor 'output.weight'" in last, last
    assert "has ggml type Q2_K, which fuselm cannot compute with" in last, last
