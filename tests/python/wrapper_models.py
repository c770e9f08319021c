"""Tiny random-weight multimodal wrappers (`...ForConditionalGeneration` with a text config inside),
built from the wrapper config classes as tiny_models.py builds text models: a 2-layer language
model of width 64 and a one-layer vision or audio tower. transformers' own wrapper class is the oracle.
"""
from __future__ import annotations

from pathlib import Path

import torch

import tiny_models

TEXT = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, head_dim=16)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)
SLIDING = {"sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]}
MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
QWEN_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "out_hidden_size": 64, "num_heads": 2}

AUDIO_WHISPER = {"d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
                 "num_mel_bins": 16, "max_source_positions": 16}
AUDIO = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 2, "head_dim": 16, "num_mel_bins": 16, "max_source_positions": 16}


def vision(**overrides) -> dict:
    return {"vision_config": {**VISION, **overrides}}


# model_type -> (text config overrides, the tower sub-configs, wrapper overrides)
WRAPPERS: dict[str, tuple[dict, dict, dict]] = {
    "gemma3": ({"query_pre_attn_scalar": 24, **SLIDING}, vision(), {"mm_tokens_per_image": 4}),
    "mistral3": ({"sliding_window": None}, vision(head_dim=16), {"spatial_merge_size": 1}),
    "llava": ({}, vision(), {}),
    "llava_next": ({}, vision(), {}),
    "aya_vision": (dict(SLIDING), vision(), {"downsample_factor": 1}),
    "internvl": ({}, vision(), {}),
    "idefics3": ({}, vision(), {}),
    "smolvlm": ({}, vision(), {}),
    # Builds its language model's mask and hands it down, where the language model asks again.
    "paligemma": ({}, vision(), {}),
    "qwen2_vl": ({"rope_parameters": MROPE},
                 {"vision_config": {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2}},
                 {}),
    "qwen2_5_vl": ({"rope_parameters": MROPE}, {"vision_config": {**QWEN_VISION, "fullatt_block_indexes": [0]}}, {}),
    "qwen3_vl": ({"rope_parameters": {**MROPE, "mrope_interleaved": True}},
                 {"vision_config": {**QWEN_VISION, "deepstack_visual_indexes": [0], "num_position_embeddings": 16}},
                 {}),
    "llava_onevision": ({}, vision(), {}),
    "cohere2_vision": ({}, vision(), {}),
    "lfm2_vl": ({"layer_types": ["conv", "full_attention"]},
                {"vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "patch_size": 14}}, {}),
    "got_ocr2": ({}, {"vision_config": {"hidden_size": 32, "mlp_dim": 64, "num_hidden_layers": 1,
                                        "num_attention_heads": 2, "output_channels": 32, "image_size": 64,
                                        "patch_size": 16, "global_attn_indexes": [0]}}, {}),
    "glm4v": ({"rope_parameters": {**MROPE, "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5}},
              {"vision_config": {**QWEN_VISION}}, {}),
    # Cross-attention layers to the image, which a text-only prompt skips; AutoModelForCausalLM
    # maps its config to a text-only class, the checkpoint holds the wrapper.
    "mllama": ({"cross_attention_layers": [1]},
               {"vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                  "num_global_layers": 1, "attention_heads": 2, "image_size": 28, "patch_size": 14,
                                  "vision_output_dim": 64, "intermediate_layers_indices": [0]}}, {}),
    # Audio towers.
    "qwen2_audio": ({}, {"audio_config": AUDIO_WHISPER}, {}),
    "voxtral": ({}, {"audio_config": AUDIO}, {}),
}

TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")
# Special-token fields of wrappers (image/video markers) that must stay inside the small vocabulary.
MARKER_FIELDS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                 "vision_end_token_id", "boi_token_index", "eoi_token_index")


def make_config(family: str):
    import transformers
    text, towers, top = WRAPPERS[family]
    cfg = transformers.CONFIG_MAPPING[family](text_config={**TEXT, **text}, **towers, **top)
    vocab = cfg.get_text_config().vocab_size
    for c in (cfg, cfg.get_text_config()):
        for i, field in enumerate(TOKEN_ID_FIELDS):
            value = getattr(c, field, None)
            if isinstance(value, int) and value >= vocab:
                setattr(c, field, i + 1)
            elif isinstance(value, list):
                setattr(c, field, [v if v < vocab else i + 1 for v in value])
    for i, field in enumerate(MARKER_FIELDS):
        if isinstance(getattr(cfg, field, None), int) and getattr(cfg, field) >= vocab:
            setattr(cfg, field, vocab - 1 - i)
    return cfg


def wrapper_class(config):
    """The class transformers builds for a wrapper config (its multimodal-LM auto class)."""
    from transformers import AutoModelForMultimodalLM
    return AutoModelForMultimodalLM._model_mapping[type(config)]


def build(family: str, out_dir: Path, std: float = 0.15, seed: int = 0) -> Path:
    """Saves a tiny random wrapper of the family to out_dir, as transformers saves it."""
    torch.manual_seed(seed)
    cfg = make_config(family)
    model = wrapper_class(cfg)(cfg).to(torch.float32).eval()
    tiny_models.randomize(model, std)
    model.save_pretrained(out_dir)
    return Path(out_dir)


def hf_wrapper(model_dir: Path):
    """The oracle: transformers' wrapper class loaded from model_dir in fp32, eager attention."""
    from transformers import AutoConfig
    cls = wrapper_class(AutoConfig.from_pretrained(model_dir))
    return cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
