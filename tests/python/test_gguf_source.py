"""fuselm_capture.gguf_source on the default model's GGUF: transformers' GGUF config mapping gives
its config, and every parameter of the model built from it maps to one GGUF tensor of its shape
whose values (dequantized by gguf.quants) are the parameter's values in the fp32 HF directory that
transformers' own GGUF loader wrote (scripts/prepare_default_model.sh), q and k after undoing
llama.cpp's row permutation with the formula of src/weights/gguf_tensor.cc."""
from __future__ import annotations

import numpy as np
import pytest

from fuselm_capture.gguf_source import gguf_config, gguf_parameter_map
from fuselm_capture.prepare_default import DEFAULT_OUT, find_default_gguf


def rope_unpermute_rows(rows: int, n_head: int) -> np.ndarray:
    half = rows // n_head // 2
    h, two, d = np.meshgrid(np.arange(n_head), np.arange(2), np.arange(half), indexing="ij")
    return (h * 2 * half + 2 * d + two).reshape(-1)


def test_config_and_parameters_match_transformers_gguf_loader() -> None:
    import gguf
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    path = find_default_gguf()
    cfg = gguf_config(path)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (576, 30, 9, 3)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    mapping = gguf_parameter_map(path, model)
    assert len(set(mapping.values())) == len(mapping)
    assert set(mapping) == {n for n, _ in model.named_parameters()}  # all but the tied LM head

    st = DEFAULT_OUT / "model.safetensors"
    if not st.exists():
        pytest.fail(f"{st} is missing: run scripts/prepare_default_model.sh")
    hf = load_file(str(st))
    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    checked = 0
    for name, gguf_name in mapping.items():
        if not (".layers.0." in name or ".layers.29." in name or "embed" in name):
            continue
        t = tensors[gguf_name]
        value = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(hf[name].shape)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            value = value[rope_unpermute_rows(value.shape[0], heads)]
        np.testing.assert_array_equal(value, hf[name], err_msg=name)
        checked += 1
    assert checked == 1 + 2 * 9  # embedding + two layers of 9 parameters
