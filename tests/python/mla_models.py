"""Tiny random-weight MLA models (DeepSeek-V2 and -V3 style) with dense MLPs only.

Kept apart from tiny_models.FAMILIES so MoE and MLA configs evolve separately. Every layer is a
dense MLP (first_k_dense_replace = num_hidden_layers): MLA is tested here, MoE elsewhere.
"""
from __future__ import annotations

from pathlib import Path

import torch

import tiny_models

_LAYERS = 3
_MLA = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=_LAYERS,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
            kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
            first_k_dense_replace=_LAYERS, moe_intermediate_size=32, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1)

# name -> (config class name, overrides). Built through AutoModelForCausalLM.
MLA_FAMILIES: dict[str, tuple[str, dict]] = {
    # DeepSeek-V2 style: no q-LoRA (one q projection), plain rope in the half-split layout.
    "v2_style": ("DeepseekV3Config", dict(_MLA, q_lora_rank=None, n_group=1, topk_group=1,
                                          rope_interleave=False)),
    # DeepSeek-V2's own class: no q-LoRA, rope computed with complex numbers (view_as_complex,
    # polar), so the rope key reaches the latent op through complex ops.
    "deepseek_v2": ("DeepseekV2Config", dict(_MLA, q_lora_rank=None, n_group=1, topk_group=1)),
    # DeepSeek-V3 style: q-LoRA, yarn rope scaling with mscale / mscale_all_dim (softmax scale
    # != head_dim**-0.5), rope in the interleaved layout.
    "v3_style": ("DeepseekV3Config", dict(
        _MLA, q_lora_rank=24, n_group=1, topk_group=1, rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 256, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0})),
}


def make_config(family: str):
    import transformers
    cls_name, overrides = MLA_FAMILIES[family]
    return getattr(transformers, cls_name)(**overrides)


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0) -> Path:
    """Saves a tiny random MLA model to out_dir (config.json + model.safetensors), fp32."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(make_config(family), dtype=torch.float32)
    tiny_models.randomize(model, std)
    model.save_pretrained(out_dir)
    return Path(out_dir)


# Benchmark model (bench/bench_mla.cc): DeepSeek-V3-style at moderate size. Not a parity case.
BENCH_FAMILIES: dict[str, tuple[str, dict]] = {
    "v3_bench": ("DeepseekV3Config", dict(
        vocab_size=4096, hidden_size=1024, intermediate_size=2048, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=8192,
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=768,
        first_k_dense_replace=4, moe_intermediate_size=256, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, n_group=1, topk_group=1, rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 2048, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0})),
}


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] not in {**MLA_FAMILIES, **BENCH_FAMILIES}:
        sys.exit(f"usage: python mla_models.py {{{'|'.join([*MLA_FAMILIES, *BENCH_FAMILIES])}}} OUT_DIR")
    MLA_FAMILIES.update(BENCH_FAMILIES)
    build(sys.argv[1], Path(sys.argv[2]), std=0.15 if sys.argv[1] not in BENCH_FAMILIES else 0.02)
    print(sys.argv[2])
