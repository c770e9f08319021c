"""Tiny random-weight models of every family in the parity list, built from transformers configs.

Weights use a larger init std than transformers' default so logits are peaked (flat logits make
greedy decoding a coin toss between near-ties); true ties that remain are counted by the tests.
"""
from __future__ import annotations

from pathlib import Path

import torch

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)

# name -> (config class name, overrides). Every entry is built through AutoModelForCausalLM.
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 16}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "gemma": ("GemmaConfig", {"head_dim": 16}),
    "gemma2": ("Gemma2Config", {"head_dim": 16, "sliding_window": 16, "query_pre_attn_scalar": 24,
                                 "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
    "gemma3_text": ("Gemma3TextConfig", {"head_dim": 16, "sliding_window": 16, "query_pre_attn_scalar": 24,
                                         "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
    "phi3": ("Phi3Config", {"num_key_value_heads": 2, "pad_token_id": 0}),
    "gpt2": ("GPT2Config", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024}),
    "gpt_bigcode_mqa": ("GPTBigCodeConfig", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024,
                                             "multi_query": True}),
    "gpt_bigcode_mha": ("GPTBigCodeConfig", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024,
                                             "multi_query": False}),
    "opt": ("OPTConfig", {"ffn_dim": 128, "word_embed_proj_dim": 64, "enable_bias": True}),
    "gpt_neox": ("GPTNeoXConfig", {"rotary_pct": 0.5}),
}


def make_config(family: str):
    import transformers
    cls_name, overrides = FAMILIES[family]
    kw = dict(COMMON)
    kw.update(overrides)
    cfg = getattr(transformers, cls_name)(**kw)
    return cfg


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0, dtype=torch.float32) -> Path:
    """Saves a tiny random model of the family to out_dir (config.json + model.safetensors)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(family)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
            else:  # norm weights: around their neutral value (0 for Gemma's 1+w form is fine too)
                p.add_(torch.randn_like(p) * 0.05)
    model = model.to(dtype)
    model.save_pretrained(out_dir)
    return Path(out_dir)
