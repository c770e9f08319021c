"""No engine or capture code names a model family or a module attribute (issue 15): decisions are
made by structure. Greps src/ and python/fuselm_capture/ outside comments (C++ // and /* */,
Python # and docstrings) for whole words of the lists below; string literals count (an error
message or a lookup table naming a family is per-family code too).
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FAMILIES = [
    "llama", "mistral", "mixtral", "qwen", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "phi", "phi3", "gpt2", "gpt_bigcode", "bigcode", "starcoder", "starcoder2", "gpt_neo", "gpt_neox", "neox", "gptj",
    "falcon", "bloom", "stablelm", "olmo", "olmo2", "olmoe", "cohere", "cohere2", "granite", "granitemoe",
    "deepseek", "deepseek_v2", "deepseek_v3", "glm", "glm4", "glm4_moe", "gpt_oss", "longcat", "longcat_flash",
    "smollm", "smollm2", "smollm3", "helium", "nemotron", "persimmon", "xglm", "exaone", "arcee", "seed_oss", "mpt",
    "jamba", "mamba", "jetmoe", "dbrx", "internlm", "baichuan", "chatglm", "yi", "minicpm",
    # hybrid and recurrent families (issue 29: their mixers are found by kernel dispatch name)
    "mamba2", "falcon_mamba", "bamba", "zamba", "zamba2", "falcon_h1", "granitemoehybrid", "nemotron_h",
    "qwen3_next", "qwen3_5", "lfm2", "lfm2_moe", "kimi", "kimi_linear", "minimax", "rwkv", "recurrent_gemma",
    "xlstm", "olmo_hybrid",
]
ATTRIBUTES = [
    "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj",
    "self_attn", "embed_tokens", "lm_head", "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
    "post_feedforward_layernorm", "c_attn", "c_proj", "c_fc", "query_key_value", "dense_h_to_4h", "dense_4h_to_h",
    "wte", "wpe", "ln_f", "ln_1", "ln_2", "rotary_emb", "q_norm", "k_norm", "shared_expert", "shared_experts",
    "shared_expert_gate", "e_score_correction_bias", "kv_a_proj_with_mqa", "kv_b_proj", "q_a_proj", "q_b_proj",
    "fc1", "fc2", "final_layernorm", "norm_f", "attention_multiplier", "logits_scaling", "logit_scale",
    "model_type", "layer_types", "attn_implementation",
]
WORDS = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, FAMILIES + ATTRIBUTES)) + r")(?![A-Za-z0-9_])",
                   re.IGNORECASE)

# (file, word or "*") that are code for reasons other than a per-family decision, each with its
# reason. ("opt" is left out of FAMILIES: it is also a common identifier; "sliding_window" is the
# engine's own attention argument.)
ALLOWED = {
    # capture passes transformers' own keyword to pick fuselm's attention (AttentionInterface's
    # registration name), not a model's attribute
    ("python/fuselm_capture/capture.py", "attn_implementation"),
    # verify's reference asks transformers for its eager attention, the plainest oracle (as the
    # parity tests do); a transformers keyword, not a model's attribute
    ("python/fuselm_capture/verify.py", "attn_implementation"),
    # the capture progress line quotes the config's model_type back to the user; nothing branches on it
    ("python/fuselm_capture/capture.py", "model_type"),
    # GGUF sources: a GGUF names its architecture, and transformers' GGUF loader maps it to a
    # model_type; the mapping is transformers', read here as data
    ("python/fuselm_capture/gguf_source.py", "model_type"),
    # a GGUF metadata field (llama.cpp's key) -> the transformers config attributes that may hold
    # its value (gguf_metadata.FIELDS): a table between two file formats, GGUF metadata and
    # config.json, like transformers' own GGUF_CONFIG_MAPPING; a value is compared or placed, and
    # nothing branches on which attribute a model has
    ("python/fuselm_capture/gguf_metadata.py", "*"),
    # llama.cpp's pre-tokenizer names and tokenizer model kinds ("gpt2" is byte-level BPE) are
    # values of the GGUF format's tokenizer metadata, mapped to pre-tokenizer rules
    ("python/fuselm_capture/gguf_prep.py", "*"),
    # transformers' ExpertsInterface hands the experts function the experts module, whose
    # parameters the interface itself names gate_up_proj / up_proj / down_proj
    ("python/fuselm_capture/ops.py", "gate_up_proj"),
    ("python/fuselm_capture/ops.py", "up_proj"),
    ("python/fuselm_capture/ops.py", "down_proj"),
    # GGUF-format facts: ggml's rope type of each GGUF `general.architecture` (llama.cpp's
    # llama_model_rope_type table: which files hold q/k rows permuted for interleaved rope) and
    # transformers' GGUF tensor processors (which files' tensors its loader rewrites), read as data
    ("python/fuselm_capture/gguf_capture.py", "*"),
    # `fuselm bench` prints llama-bench's output field `model_type` (a label; nothing branches on it)
    ("src/cli/bench_report.cc", "model_type"),
    ("src/cli/cmd_bench.cc", "model_type"),
    ("src/cli/bench_report.h", "model_type"),
    # `fuselm bench`'s help names the peer tool whose form it follows (llama-bench) and the default model
    ("src/cli/cmd_bench.cc", "llama"),
    ("src/cli/cmd_bench.cc", "smollm2"),
    # the default model (its package and directory name) and help texts naming it
    ("python/fuselm_capture/prepare_default.py", "smollm2"),
    ("src/cli/cmd_apply_template.cc", "smollm2"),
    ("src/cli/cmd_inspect.cc", "smollm2"),
    ("src/cli/model_args.cc", "smollm2"),
}


def cpp_code(text: str) -> str:
    """text with // and /* */ comments blanked (string literals kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def python_code(text: str) -> str:
    """text without comments and docstrings (a string that is a statement of its own)."""
    keep = []
    prev = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
            prev = tok.type
            continue
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.type
        keep.append(tok.string)
    return " ".join(keep)


def hits() -> list[str]:
    found = []
    files = sorted((REPO / "src").rglob("*.cc")) + sorted((REPO / "src").rglob("*.h"))
    files += sorted((REPO / "python" / "fuselm_capture").rglob("*.py"))
    for path in files:
        text = path.read_text()
        code = python_code(text) if path.suffix == ".py" else cpp_code(text)
        rel = str(path.relative_to(REPO))
        for m in WORDS.finditer(code):
            if (rel, m.group(1).lower()) not in ALLOWED and (rel, "*") not in ALLOWED:
                found.append(f"{rel}: {m.group(1)!r} in ...{code[max(0, m.start() - 40):m.end() + 40]!r}...")
    return found


def test_no_family_or_attribute_names_in_engine_or_capture():
    found = hits()
    assert not found, "family or module attribute names in code:\n" + "\n".join(found)


def test_the_grep_finds_names_in_code_but_not_in_comments():
    """The stripping is what it claims: a name in code is found, the same name in a comment is not."""
    assert WORDS.search(cpp_code('auto w = find("q_proj");'))
    assert not WORDS.search(cpp_code("// q_proj is read by structure\n/* llama */ int x;"))
    assert WORDS.search(python_code("if cfg.model_type == 'llama':\n    pass\n"))
    assert not WORDS.search(python_code('"""Docstring naming llama."""\nx = 1  # gemma\n'))
