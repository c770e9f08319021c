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
    # Gemma 3n: AltUp predict/correct around each layer, LAuReL, per-layer inputs from a second
    # embedding, a Gaussian top-k activation sparsity on layers 0-1 (its cut-off from Normal.icdf
    # of a constant made in forward: erfinv, std), and layers 2-3 attending over the K/V of the last
    # earlier layer of their kind (KV sharing).
    "gemma3n_text": ("Gemma3nTextConfig", {"head_dim": 16, "sliding_window": 16, "num_hidden_layers": 4,
                                           "layer_types": ["sliding_attention", "full_attention"] * 2,
                                           "vocab_size_per_layer_input": 512, "hidden_size_per_layer_input": 16,
                                           "num_kv_shared_layers": 2, "laurel_rank": 8, "intermediate_size": [128] * 4,
                                           "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0]}),
    # Gemma 4: per-layer inputs, full-attention layers with their own head size and a proportional
    # partial rope, values equal to keys (attention_k_eq_v), the last layer sharing the K/V of layer 1.
    "gemma4_text": ("Gemma4TextConfig", {"head_dim": 16, "sliding_window": 16, "num_hidden_layers": 4,
                                         "layer_types": ["sliding_attention", "full_attention"] * 2,
                                         "vocab_size_per_layer_input": 512, "hidden_size_per_layer_input": 16,
                                         "per_layer_config": {"01": {"head_dim": 32}, "03": {"head_dim": 32}},
                                         "attention_k_eq_v": True, "num_kv_shared_layers": 1}),
    "phi3": ("Phi3Config", {"num_key_value_heads": 2, "pad_token_id": 0}),
    "gpt2": ("GPT2Config", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024}),
    "gpt_bigcode_mqa": ("GPTBigCodeConfig", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024,
                                             "multi_query": True}),
    "gpt_bigcode_mha": ("GPTBigCodeConfig", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024,
                                             "multi_query": False}),
    "opt": ("OPTConfig", {"ffn_dim": 128, "word_embed_proj_dim": 64, "enable_bias": True}),
    "gpt_neox": ("GPTNeoXConfig", {"rotary_pct": 0.5}),
    # Families of issue 15's Done-when list (and a few more that no engine code names).
    "phi": ("PhiConfig", {"partial_rotary_factor": 0.5}),
    "gpt_neo": ("GPTNeoConfig", {"num_layers": 3, "num_heads": 4, "window_size": 16,
                                 "attention_types": [[["global", "local"], 1], [["global"], 1]]}),
    "gptj": ("GPTJConfig", {"n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 1024, "rotary_dim": 8}),
    "falcon": ("FalconConfig", {"new_decoder_architecture": False, "multi_query": True, "parallel_attn": True,
                                "bias": False}),
    "falcon_new": ("FalconConfig", {"new_decoder_architecture": True, "num_kv_heads": 2, "bias": True}),
    "bloom": ("BloomConfig", {"n_layer": 3, "n_head": 4}),
    "stablelm": ("StableLmConfig", {"partial_rotary_factor": 0.25, "use_qkv_bias": True}),
    "stablelm_qk_norm": ("StableLmConfig", {"partial_rotary_factor": 0.25, "qk_layernorm": True,
                                            "use_parallel_residual": True}),
    "olmo": ("OlmoConfig", {"clip_qkv": 4.0}),
    "olmo2": ("Olmo2Config", {}),
    "cohere": ("CohereConfig", {"logit_scale": 0.5}),
    "cohere2": ("Cohere2Config", {"head_dim": 16, "sliding_window": 16, "logit_scale": 0.5,
                                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
    "granite": ("GraniteConfig", {"embedding_multiplier": 4.0, "residual_multiplier": 0.5,
                                  "attention_multiplier": 0.1, "logits_scaling": 2.0}),
    "starcoder2": ("Starcoder2Config", {"sliding_window": None, "use_bias": True}),
    "helium": ("HeliumConfig", {"head_dim": 16}),
    "glm": ("GlmConfig", {"head_dim": 16, "partial_rotary_factor": 0.5}),
    "smollm3": ("SmolLM3Config", {"no_rope_layer_interval": 2}),
    "nemotron": ("NemotronConfig", {"partial_rotary_factor": 0.5}),
    "persimmon": ("PersimmonConfig", {"partial_rotary_factor": 0.5}),
    "xglm": ("XGLMConfig", {"d_model": 64, "num_layers": 3, "ffn_dim": 128}),
    "exaone4": ("Exaone4Config", {"sliding_window": 16,
                                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
    "arcee": ("ArceeConfig", {}),
    "seed_oss": ("SeedOssConfig", {"head_dim": 16}),
    # From scripts/family_sweep.py: families whose capture needed a general mechanism (codegen:
    # aten.index.Tensor reading a rotary table at position_ids).
    "codegen": ("CodeGenConfig", {"n_ctx": 1024, "rotary_dim": 8}),
    # (mpt: attention by hand with an ALiBi bias, as bloom's, but no packed-QKV transpose.)
    "mpt": ("MptConfig", {"d_model": 64, "n_heads": 4, "n_layers": 3, "expansion_ratio": 2, "max_seq_len": 1024}),
    # Doge: a mask built as a per-key bias under the causal mask (key_bias.py), its dynamic top-k of
    # keep_window_size keys not taken within a context of that many (as the published configs: both
    # 2048); a shorter window makes the forward branch on the token count and is refused.
    "doge": ("DogeConfig", {"keep_window_size": 1024}),
}

# Token ids a config defaults to (those of the full-size model) moved inside the small vocabulary.
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def make_config(family: str):
    import transformers
    cls_name, overrides = FAMILIES[family]
    kw = dict(COMMON)
    kw.update(overrides)
    cfg = getattr(transformers, cls_name)(**kw)
    for i, field in enumerate(TOKEN_ID_FIELDS):
        value = getattr(cfg, field, None)
        if isinstance(value, int) and value >= cfg.vocab_size:
            setattr(cfg, field, i + 1)
        elif isinstance(value, list):
            setattr(cfg, field, [v if v < cfg.vocab_size else i + 1 for v in value])
    return cfg


def randomize(model: torch.nn.Module, std: float) -> None:
    """Peaked random weights in place: matrices N(0, std), biases N(0, 0.02), every other vector (norm
    weights, sinks) its own value plus N(0, 0.05), i.e. around its neutral value (0 for Gemma's 1+w
    form is fine too). Draws in named_parameters order, so a seed gives the same model every time."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.02)
            else:
                p.add_(torch.randn_like(p) * 0.05)


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0, dtype=torch.float32) -> Path:
    """Saves a tiny random model of the family to out_dir (config.json + model.safetensors)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(family)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model, std)
    model = model.to(dtype)
    model.save_pretrained(out_dir)
    return Path(out_dir)
