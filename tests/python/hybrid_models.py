"""Tiny random-weight hybrid and recurrent models (state-space scans, gated delta rules, short
convolutions, linear attention), built like tiny_models and moe_models (fp32, peaked weights).

Each config is the family's config class with the tiny sizes of tiny_models.COMMON and the
consistency overrides transformers itself needs to build it tiny (layer-type lists of the tiny
depth, head counts and widths that divide, experts fewer and narrower); no field is tuned for
fuselm. Every entry mixes recurrent layers with the family's other kinds (attention, experts,
dense MLPs) within three or four layers, so each kind is exercised.
"""
from __future__ import annotations

from pathlib import Path

import torch

import tiny_models

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)

# Mamba2-style mixers: 8 heads of 16 (2 x hidden), state 16; a chunk shorter than the 300-token
# prompts so transformers' chunked scan (the oracle) crosses chunk boundaries.
MAMBA2 = dict(mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
              mamba_chunk_size=32)
# Gated delta-rule mixers (Qwen3-Next style): 2 key heads and 4 value heads of 16.
GDN = dict(linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
           linear_num_value_heads=4, layer_types=["linear_attention", "full_attention", "linear_attention"])
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)

# name -> (config class name, overrides). Every entry is built through AutoModelForCausalLM.
HYBRID_FAMILIES: dict[str, tuple[str, dict]] = {
    # State-space models (Mamba: selective scan; Mamba2: the SSD scan), each with its short convolution.
    "mamba": ("MambaConfig", dict(state_size=16, expand=2, conv_kernel=4, time_step_rank=8)),
    "falcon_mamba": ("FalconMambaConfig", dict(state_size=16, expand=2, conv_kernel=4, time_step_rank=8)),
    "mamba2": ("Mamba2Config", dict(num_heads=8, head_dim=16, n_groups=2, state_size=16, expand=2, conv_kernel=4,
                                    time_step_rank=8, chunk_size=32)),
    # Hybrids: attention layers between Mamba layers (and experts).
    "jamba": ("JambaConfig", dict(num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1, num_experts=4,
                                  expert_layer_period=2, expert_layer_offset=1, mamba_d_state=16, mamba_d_conv=4,
                                  mamba_expand=2, mamba_dt_rank=8, use_mamba_kernels=False)),
    "bamba": ("BambaConfig", dict(MAMBA2, attn_layer_indices=[1])),
    "falcon_h1": ("FalconH1Config", dict(MAMBA2, mamba_d_ssm=128, head_dim=16)),
    "granitemoehybrid": ("GraniteMoeHybridConfig", dict(
        MAMBA2, layer_types=["mamba", "attention", "mamba"], num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=64)),
    "nemotron_h": ("NemotronHConfig", dict(
        num_hidden_layers=4, layers_block_type=["mamba", "moe", "attention", "mlp"], head_dim=16,
        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, chunk_size=32, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, moe_shared_expert_intermediate_size=32)),
    "zamba": ("ZambaConfig", dict(num_hidden_layers=4, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], attention_hidden_size=128,
                                  attention_head_dim=32, n_mamba_heads=2, mamba_d_state=16, mamba_dt_rank=8,
                                  use_mamba_kernels=False)),
    "zamba2": ("Zamba2Config", dict(layers_block_type=["mamba", "hybrid", "mamba"], hybrid_layer_ids=[1],
                                    mamba_d_state=16, mamba_ngroups=2, n_mamba_heads=8, chunk_size=32,
                                    use_mamba_kernels=False, num_key_value_heads=4)),
    # Gated delta rule (and Kimi delta attention) between full-attention layers.
    "qwen3_next": ("Qwen3NextConfig", dict(GDN, **MOE, head_dim=16, shared_expert_intermediate_size=32)),
    "qwen3_5_text": ("Qwen3_5TextConfig", dict(GDN, head_dim=16)),
    "qwen3_5_moe_text": ("Qwen3_5MoeTextConfig", dict(GDN, **MOE, head_dim=16, shared_expert_intermediate_size=32)),
    "olmo_hybrid": ("OlmoHybridConfig", dict(GDN)),
    "kimi_linear": ("KimiLinearConfig", dict(
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse"], linear_head_dim=16, linear_num_heads=4, num_key_value_heads=4,
        kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, num_experts=4,
        num_experts_per_token=2, moe_intermediate_size=32, num_shared_experts=1)),
    # Short convolutions between attention layers (with experts in lfm2_moe).
    "lfm2": ("Lfm2Config", dict(layer_types=["conv", "full_attention", "conv"], block_auto_adjust_ff_dim=False)),
    "lfm2_moe": ("Lfm2MoeConfig", dict(MOE, num_hidden_layers=4, num_dense_layers=1,
                                       layer_types=["conv", "full_attention", "conv", "full_attention"])),
    # Decay-masked linear attention written inline in blocks of 16 (capture proves it and rewrites
    # it into the SSD scan: linear_attn_by_hand.py), between attention and experts layers.
    "minimax": ("MiniMaxConfig", dict(layer_types=["full_attention", "linear_attention", "full_attention"],
                                      head_dim=16, num_local_experts=4, block_size=16)),
    # Recurrences written inline token by token (no dispatch point), proved on probes
    # (recurrence_by_hand.py): rwkv's WKV runs as the decayed softmax scan, recurrent_gemma's RG-LRU
    # as the linear scan (its nn.Conv1d, padded and cut, as a causal convolution), between
    # sliding-window attention layers.
    "rwkv": ("RwkvConfig", dict(attention_hidden_size=64, context_length=1024)),
    "recurrent_gemma": ("RecurrentGemmaConfig", dict(lru_width=64, head_dim=16, num_key_value_heads=4,
                                                     block_types=["recurrent", "attention", "recurrent"],
                                                     attention_window_size=16)),
}

# Families whose recurrence is written inline token by token: module class -> each is captured as
# one scan (rwkv: fuselm.decay_softmax_scan, recurrent_gemma: fuselm.linear_scan), token shifts and
# padded convolutions as causal_conv1d (recurrence_by_hand.py; structure tests:
# test_recurrence_by_hand.py).
INLINE_SCAN = {"rwkv": "RwkvSelfAttention", "recurrent_gemma": "RecurrentGemmaRglru"}
# Families whose linear attention is written inline (no dispatch point): module class -> each is
# captured as one fuselm.ssd_scan (the oracle: the family's source).
INLINE_LINEAR_ATTENTION = {"minimax": "MiniMaxLightningAttention"}

# Attention-only families that call attention more than once per decoder layer: each call is its
# own KV layer (capture numbers the calls in graph order). DiffLlama's differential attention calls
# it twice per layer over one K; HRM-Text runs its two stacks in cycles (H_cycles x (L_cycles + 1)
# calls of each attention module: 1 layer per stack here, 2 x 4 = 8 calls).
ATTENTION_CALLS: dict[str, tuple[str, dict]] = {
    "diffllama": ("DiffLlamaConfig", {}),
    "hrm_text": ("HrmTextConfig", dict(num_hidden_layers=1, head_dim=16)),
}


def make_config(family: str):
    import transformers
    cls_name, overrides = HYBRID_FAMILIES[family] if family in HYBRID_FAMILIES else ATTENTION_CALLS[family]
    kw = dict(COMMON)
    kw.update(overrides)
    cfg = getattr(transformers, cls_name)(**kw)
    for i, field in enumerate(tiny_models.TOKEN_ID_FIELDS):
        value = getattr(cfg, field, None)
        if isinstance(value, int) and value >= cfg.vocab_size:
            setattr(cfg, field, i + 1)
        elif isinstance(value, list):
            setattr(cfg, field, [v if v < cfg.vocab_size else i + 1 for v in value])
    return cfg


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0, dtype=torch.float32) -> Path:
    """Saves a tiny random model of the family to out_dir (config.json + model.safetensors): the
    parity tests' weights (tiny_models.randomize), correction biases nonzero as in moe_models."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(family)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    tiny_models.randomize(model, std)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith(("e_score_correction_bias", "expert_bias")):
                b.copy_(torch.randn_like(b) * 0.1)
    model = model.to(dtype)
    model.save_pretrained(out_dir)
    return Path(out_dir)
