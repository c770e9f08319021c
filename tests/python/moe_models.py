"""Tiny random-weight mixture-of-experts models of every MoE family in the parity list.

Built like tiny_models (larger init std so logits are peaked), plus: router weights drawn wider so
the top-k choice is clear of near-ties, and correction biases (e_score_correction_bias) given
random nonzero values so that selection by corrected scores and weighting by uncorrected scores
really differ.
"""
from __future__ import annotations

from pathlib import Path

import torch

import tiny_models

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)

# MLA expands K/V to every query head: no GQA (transformers repeats kv heads otherwise).
MLA = dict(num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=24,
           rope_scaling=None)

# name -> (config class name, overrides). Every entry is built through AutoModelForCausalLM.
MOE_FAMILIES: dict[str, tuple[str, dict]] = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(head_dim=16, num_experts=8, num_experts_per_tok=2,
                                         moe_intermediate_size=32, norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", dict(num_local_experts=6, num_experts_per_tok=2, sliding_window=None)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=48, decoder_sparse_step=2,
                                         norm_topk_prob=False, sliding_window=None)),
    "deepseek_v3": ("DeepseekV3Config", dict(MLA, n_routed_experts=16, num_experts_per_tok=3,
                                             moe_intermediate_size=32, n_shared_experts=1, n_group=4,
                                             topk_group=2, routed_scaling_factor=2.5,
                                             first_k_dense_replace=1, norm_topk_prob=True)),
    "deepseek_v2": ("DeepseekV2Config", dict(MLA, n_routed_experts=12, num_experts_per_tok=3,
                                             moe_intermediate_size=32, n_shared_experts=2, n_group=4,
                                             topk_group=2, topk_method="group_limited_greedy",
                                             routed_scaling_factor=1.5, first_k_dense_replace=1)),
    "glm4_moe": ("Glm4MoeConfig", dict(head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
                                       moe_intermediate_size=32, n_shared_experts=1, n_group=1, topk_group=1,
                                       routed_scaling_factor=1.8, first_k_dense_replace=1,
                                       partial_rotary_factor=0.5)),
    # DeepSeek-V3's router (sigmoid, correction bias, grouped top-k, scaling) on GQA attention, so
    # the router is tested apart from MLA.
    "glm4_moe_grouped": ("Glm4MoeConfig", dict(head_dim=16, n_routed_experts=16, num_experts_per_tok=3,
                                               moe_intermediate_size=32, n_shared_experts=1, n_group=4,
                                               topk_group=2, routed_scaling_factor=2.5, first_k_dense_replace=1,
                                               norm_topk_prob=True)),
    "gpt_oss": ("GptOssConfig", dict(head_dim=16, num_local_experts=8, num_experts_per_tok=2,
                                     intermediate_size=32, sliding_window=16,
                                     layer_types=["sliding_attention", "full_attention", "sliding_attention"])),
    "olmoe": ("OlmoeConfig", dict(num_experts=8, num_experts_per_tok=2, intermediate_size=32, norm_topk_prob=False)),
    "granitemoe": ("GraniteMoeConfig", dict(num_local_experts=6, num_experts_per_tok=2, intermediate_size=32,
                                            embedding_multiplier=4.0, residual_multiplier=0.5,
                                            attention_multiplier=0.1, logits_scaling=2.0)),
    # Qwen2-MoE with its sliding window on the layers from max_window_layers up: the window is
    # known to the mask (layer_types), not passed by the attention call.
    "qwen2_moe_sliding": ("Qwen2MoeConfig", dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
                                                 shared_expert_intermediate_size=48, decoder_sparse_step=2,
                                                 norm_topk_prob=False, use_sliding_window=True, sliding_window=16,
                                                 max_window_layers=1)),
    # Its experts module is not routed through ExpertsInterface: captured by the structural rule
    # (ops.identify_experts), with its default zero_expert_num (256 zero-compute, identity, experts
    # beside the 8 routed ones; gate_up holds rows for all of them).
    "longcat_flash": ("LongcatFlashConfig", dict(MLA, num_hidden_layers=4, head_dim=8, ffn_hidden_size=128,
                                                 expert_ffn_hidden_size=32, n_routed_experts=8,
                                                 moe_topk=2, routed_scaling_factor=2.0)),
    # The same with no zero-compute experts: its experts are only the structural rule's stacked pair,
    # and the MoE fuser fuses its router (with zero experts it declines, see test_moe).
    # From scripts/family_sweep.py: its longrope table choice reads torch.max(position_ids) (a
    # whole-tensor max, decomposed at capture).
    "phimoe": ("PhimoeConfig", dict(num_local_experts=8, num_experts_per_tok=2)),
    # Gemma 4's MoE block beside its dense MLP, its router scaling each picked expert's weight by a
    # learned per-expert factor.
    "gemma4_text_moe": ("Gemma4TextConfig", dict(head_dim=16, sliding_window=16, num_hidden_layers=4,
                                                 layer_types=["sliding_attention", "full_attention"] * 2,
                                                 vocab_size_per_layer_input=512, hidden_size_per_layer_input=16,
                                                 enable_moe_block=True, num_experts=4, top_k_experts=2,
                                                 moe_intermediate_size=32)),
    # Llama 4: chunked attention on the rope layers; on the no-rope layer a query temperature computed
    # from arange(T) (its past_seen_tokens is 0 in capture's cacheless call), which capture reads from
    # the position input (step_positions.py). floor_scale 4 and chunks of 16 make both act within a
    # 7-token prompt and its 32 decoded tokens (the defaults, 8192, act only past 8 k tokens).
    "llama4_text": ("Llama4TextConfig", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=1,
                                             intermediate_size=32, intermediate_size_mlp=64,
                                             attention_chunk_size=16, floor_scale=4, attn_scale=0.5,
                                             no_rope_layers=[1, 0, 1])),
    # DeepSeek Sparse Attention: an indexer picks each query's top index_topk keys. Up to that many
    # keys the pick is every key (key_selection.py), so the context is capped at it: 512 here, past
    # the 300-token prompt and its decoded tokens, under the config's 1024 positions.
    "deepseek_v32": ("DeepseekV32Config", dict(MLA, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                               n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
                                               index_n_heads=4, index_head_dim=16, index_topk=512)),
    # GLM's DSA with a layer that reuses the previous layer's top-k (indexer_types "shared").
    "glm_moe_dsa": ("GlmMoeDsaConfig", dict(MLA, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                            n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1,
                                            index_n_heads=4, index_head_dim=16, index_topk=512,
                                            indexer_types=["full", "shared", "full"])),
    # DBRX: each expert projection one 2-D [E·I, H] tensor (row_stacked_experts.py); a router
    # normalised by the L1 norm of its top-k weights; q/k/v clipped.
    "dbrx": ("DbrxConfig", dict(d_model=64, attn_config=dict(kv_n_heads=2, clip_qkv=8.0, rope_theta=10000.0),
                                ffn_config=dict(hidden_size=64, ffn_hidden_size=32, moe_num_experts=6, moe_top_k=2,
                                                moe_normalize_expert_weights=1.0))),
    "longcat_flash_routed": ("LongcatFlashConfig", dict(MLA, num_hidden_layers=4, head_dim=8, ffn_hidden_size=128,
                                                        expert_ffn_hidden_size=32, n_routed_experts=8,
                                                        zero_expert_num=0, moe_topk=2, routed_scaling_factor=2.0)),
}


def make_config(family: str):
    import transformers
    cls_name, overrides = MOE_FAMILIES[family]
    kw = dict(COMMON)
    kw.update(overrides)
    return getattr(transformers, cls_name)(**kw)


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0, dtype=torch.float32) -> Path:
    """Saves a tiny random MoE model of the family to out_dir (config.json + model.safetensors)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(family)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    tiny_models.randomize(model, std)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    model = model.to(dtype)
    model.save_pretrained(out_dir)
    return Path(out_dir)
