"""Sweeps transformers' causal-LM families that no parity test names: one line per family.

Every model_type of the installed transformers' AutoModelForCausalLM mapping is tried, except the
families the parity lists already build (tests/python/{tiny,mla,moe}_models.py) and those that are
not a text decoder on their own (encoder-decoder, a multimodal wrapper, an encoder run as a decoder:
listed with that reason). Each is built as the parity tests build theirs: a tiny random-weight config
(vocab 512, hidden 64, 3 layers, 4 heads / 2 KV heads, every size-like field shrunk, token ids moved
inside the vocabulary, no all-zero weights), then run by `fuselm generate` and compared with
transformers by tests/python/parity.check_parity (greedy tokens, logits within 1e-3 x max|logit|).

Each family runs in its own process with a timeout, so one that crashes or hangs is a line too.
Output: `family: pass (worst rel diff)` or `family: fail [stage] first error line`, the stage being
`config` / `transformers` (transformers itself cannot build or run it) / `fuselm`.

    .venv/bin/python scripts/family_sweep.py [--only F ...] [--lengths 7 40] [--models DIR]
                                             [--json rows.json] [--timeout 900]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "python"))

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)

MAX_PARAMS = 8_000_000

# Not a text decoder on its own (this tool's table, not the engine's: the engine never sees names).
ENCODER_AS_DECODER = {"bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
                      "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
                      "xlm-roberta", "xlm-roberta-xl", "xmod", "xlm", "xlnet", "reformer"}
DECODER_OF_ENC_DEC = {"bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
                      "pegasus", "plbart", "prophetnet", "trocr", "whisper", "musicgen", "musicgen_melody",
                      "moshi"}

# Sub-configs of a multimodal wrapper (other sub-configs, such as an attention config, are a text model's).
MODALITIES = {"text_config", "vision_config", "audio_config", "vq_config"}

# Per-family config fields the generic shrink cannot guess (consistency constraints of the config).
OVERRIDES: dict[str, dict] = {
    "mamba2": dict(num_heads=8, head_dim=16, n_groups=1, expand=2),
    "codegen": dict(n_ctx=1024, rotary_dim=8),
    "mpt": dict(d_model=64, n_heads=4, n_layers=3, expansion_ratio=2, max_seq_len=1024),
    "ctrl": dict(n_embd=64, dff=128, n_layer=3, n_head=4, n_positions=1024),
    "openai-gpt": dict(n_embd=64, n_layer=3, n_head=4, n_positions=1024),
    "gpt-sw3": dict(n_embd=64, n_layer=3, n_head=4, n_positions=1024),
    "biogpt": dict(),
    # Nested or per-layer-type fields the generic shrink does not reach, or defaults transformers
    # itself cannot run (a clip of None, per-layer lists of the default depth).
    "dbrx": dict(d_model=64, n_heads=4, n_layers=3, max_seq_len=1024,
                 attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(hidden_size=64, ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2)),
    "dots1": dict(n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32),
    "cohere_compass_text": dict(rope_parameters={
        kind: dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
        for kind in ("full_attention", "sliding_attention")}),
    # Its QSA indexer's fields have no defaults (None) while every fourth layer needs them.
    "qwen4_exp_text": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=64,
                           indexer_compress_ratio=4),
    # Its recurrent step builds the state with the value width for queries too (qk_dim_factor 0.5
    # then fails transformers' own shape check).
    "xlstm": dict(qk_dim_factor=1.0, num_heads=4),
    "gemma4_text": dict(vocab_size_per_layer_input=512, hidden_size_per_layer_input=16, per_layer_config={}),
    "gemma3n_text": dict(vocab_size_per_layer_input=512, hidden_size_per_layer_input=16, num_hidden_layers=4,
                         layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                         laurel_rank=8, activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0], intermediate_size=[128] * 4),
}


def tested_families() -> set[str]:
    """model_types the parity lists already build."""
    import mla_models
    import moe_models
    import tiny_models
    import transformers
    out = set()
    for table in (tiny_models.FAMILIES, mla_models.MLA_FAMILIES, moe_models.MOE_FAMILIES):
        for cls_name, _ in table.values():
            out.add(getattr(transformers, cls_name).model_type)
    return out


def skip_reason(model_type: str) -> str | None:
    from transformers import CONFIG_MAPPING
    if model_type in ENCODER_AS_DECODER:
        return "an encoder run as a decoder (is_decoder), not a causal LM family"
    if model_type in DECODER_OF_ENC_DEC:
        return "the decoder of an encoder-decoder (or audio) model"
    cfg = CONFIG_MAPPING[model_type]()
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder"
    subs = set(getattr(type(cfg), "sub_configs", None) or {}) & MODALITIES
    if subs:
        return f"a multimodal wrapper (sub-configs {', '.join(sorted(subs))}); its text part is its own family"
    return None


def shrink(default: dict) -> dict:
    """Size-like fields of a default config dict, shrunk so the model is tiny and consistent."""
    out = {}
    for k, v in default.items():
        if isinstance(v, bool) or not isinstance(v, int):
            continue
        lk = k.lower()
        if "expert" in lk and ("num" in lk or lk.startswith("n_")) and "per_tok" not in lk and "shared" not in lk:
            if v > 8:
                out[k] = 8
        elif lk in ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token") and v > 2:
            out[k] = 2
        elif ("intermediate" in lk or "ffn" in lk or lk.endswith("_dim_ff")) and v > 128:
            out[k] = 32 if ("moe" in lk or "expert" in lk) else 128
        elif lk in ("head_dim", "attention_head_dim") and v > 16:
            out[k] = 16
        elif lk == "kv_lora_rank" and v > 32:
            out[k] = 32
        elif lk == "q_lora_rank" and v > 48:
            out[k] = 48
        elif lk in ("qk_rope_head_dim",) and v > 8:
            out[k] = 8
        elif lk in ("qk_nope_head_dim", "v_head_dim") and v > 16:
            out[k] = 16
        elif lk in ("n_group", "topk_group", "num_expert_group") and v > 1:
            out[k] = 1
        elif lk in ("first_k_dense_replace", "first_dense_layers") and v > 1:
            out[k] = 1
        elif "window" in lk and "layer" not in lk and v > 16:
            out[k] = 16
        elif lk in ("state_size", "d_state", "ssm_state_size", "mamba_d_state") and v > 16:
            out[k] = 16
        elif lk in ("n_shared_experts", "num_shared_experts") and v > 1:
            out[k] = 1
        elif "shared_expert_intermediate" in lk and v > 64:
            out[k] = 64
    if "head_dim" in default and default["head_dim"] is None:  # no default: the model reads it as given
        out["head_dim"] = COMMON["hidden_size"] // COMMON["num_attention_heads"]
    if "kv_lora_rank" in default:  # latent attention expands K/V to every query head; head_dim is the rope part
        out["num_key_value_heads"] = COMMON["num_attention_heads"]
        if "head_dim" in default and "qk_rope_head_dim" in default:
            out["head_dim"] = out.get("qk_rope_head_dim", default["qk_rope_head_dim"])
    # Per-layer lists (layer kinds, block types): the default's kinds, cycled over the tiny depth.
    depth = default.get("num_hidden_layers")
    for k, v in default.items():
        if isinstance(v, list) and v and (k == "layer_types" or (isinstance(depth, int) and len(v) == depth > 3)):
            try:
                kinds = list(dict.fromkeys(v))
            except TypeError:  # unhashable members
                continue
            out[k] = [kinds[i % len(kinds)] for i in range(COMMON["num_hidden_layers"])]
    return out


def make_config(model_type: str, overrides: dict | None = None):
    """The tiny config of model_type; overrides: more config fields (a parity test's variant)."""
    from transformers import CONFIG_MAPPING
    cls = CONFIG_MAPPING[model_type]
    kw = dict(COMMON)
    kw.update(shrink(cls().to_dict()))
    kw.update(OVERRIDES.get(model_type, {}))
    kw.update(overrides or {})
    cfg = cls(**kw)
    vocab = cfg.vocab_size
    for i, field in enumerate(("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")):
        value = getattr(cfg, field, None)
        if isinstance(value, int) and value >= vocab:
            setattr(cfg, field, i + 1)
        elif isinstance(value, list):
            setattr(cfg, field, [v if v < vocab else i + 1 for v in value])
    return cfg


def build(model_type: str, out_dir: Path, std: float = 0.15, seed: int = 0, overrides: dict | None = None) -> None:
    """The parity tests' build (tests/python/moe_models.build): wide random matrices, small biases,
    norm weights and other vectors around their neutral value, correction biases nonzero."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(model_type, overrides)
    with torch.device("meta"):  # a config the shrink missed would take the machine's memory
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        raise RuntimeError(f"the shrunk config still has {n / 1e6:.0f}M parameters (over {MAX_PARAMS / 1e6:.0f}M)")
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
            else:
                p.add_(torch.randn_like(p) * 0.05)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    model.save_pretrained(out_dir)


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = next((ln for ln in reversed(lines) if "error:" in ln.lower()), lines[-1] if lines else "?")
    return picked[:300]


def run_one(model_type: str, models: Path, lengths: list[int]) -> dict:
    """One family in this process: {'status', 'stage', 'error' | 'worst'}."""
    import numpy as np
    import torch
    import parity
    model_dir = models / model_type
    row: dict = {"family": model_type, "lengths": lengths}
    stage = "config"
    try:
        if not (model_dir / "config.json").exists():
            make_config(model_type)
            stage = "transformers"
            build(model_type, model_dir)
        stage = "transformers"
        model = parity.hf_model(model_dir)
        vocab = model.config.get_text_config().vocab_size
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
        stage = "fuselm"
        worst = 0.0
        with tempfile.TemporaryDirectory() as tmp:
            for n in lengths:
                prompt = [int(x) for x in np.random.default_rng(n).integers(0, vocab, size=n)]
                worst = max(worst, parity.check_parity(f"{model_type}/{n}", REPO / "build" / "fuselm", model_dir,
                                                       prompt, Path(tmp), model=model))
        row.update(status="pass", worst=f"{worst:.1e}")
    except Exception as e:  # noqa: BLE001 - every failure is a line of the sweep
        row.update(status="fail", stage=stage, error=first_line(f"{type(e).__name__}: {e}"))
    return row


def candidates() -> list[tuple[str, str | None]]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    tested = tested_families()
    out = []
    for mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        if mt in tested:
            continue
        try:
            out.append((mt, skip_reason(mt)))
        except Exception as e:  # noqa: BLE001
            out.append((mt, f"its config does not build with defaults: {first_line(str(e))}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--lengths", nargs="*", type=int, default=[7, 40])
    ap.add_argument("--models", type=Path, default=REPO / "models" / "sweep")
    ap.add_argument("--json", type=Path, default=None, help="rows (merged with the file's earlier rows)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--reverse", action="store_true", help="walk the mapping from its end")
    ap.add_argument("--skip-done", type=Path, default=None,
                    help="skip families with a row in this file (read before each: a second sweep running)")
    ap.add_argument("--resume", action="store_true", help="skip families that have a row in --json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.models.mkdir(parents=True, exist_ok=True)
    if args.one:
        print(json.dumps(run_one(args.one, args.models, args.lengths)))
        return 0
    rows = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    todo = candidates()
    for mt, skip in reversed(todo) if args.reverse else todo:
        if args.only and mt not in args.only:
            continue
        if args.resume and mt in rows:
            continue
        if args.skip_done and args.skip_done.exists() and mt in json.loads(args.skip_done.read_text()):
            continue
        t0 = time.time()
        if skip:
            row = {"family": mt, "status": "skip", "error": skip}
        else:
            cmd = [sys.executable, __file__, "--one", mt, "--models", str(args.models), "--lengths",
                   *map(str, args.lengths)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                      env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
                out = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(out[-1]) if out else {
                    "family": mt, "status": "fail", "stage": "crash",
                    "error": first_line(proc.stderr) + f" (exit {proc.returncode})"}
            except subprocess.TimeoutExpired:
                row = {"family": mt, "status": "fail", "stage": "timeout", "error": f"over {args.timeout:.0f}s"}
        row["date"] = time.strftime("%Y-%m-%d")
        row["seconds"] = round(time.time() - t0)
        rows[mt] = row
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        detail = row.get("worst") if row["status"] == "pass" else f"[{row.get('stage', '')}] {row.get('error')}"
        print(f"{mt}: {row['status']} {detail} ({row['seconds']}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
