"""Writes the seed corpora of fuzz/ (run once; the seeds are committed): small valid inputs that
show libFuzzer each parser's grammar. The IR seeds are copies of captured toys in tests/cpp/data.

    .venv/bin/python fuzz/make_corpus.py
"""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import torch
from safetensors.torch import save
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TEXT = ["Hello, world! It's 12 o'clock.", "The capital of France is Paris.", "café 東京 naïve", "def f(x):\n\treturn x"]


def safetensors_seeds(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "two_f32.safetensors").write_bytes(save({"a.weight": torch.arange(6.0).reshape(2, 3),
                                                    "b": torch.ones(4)}, metadata={"format": "pt"}))
    (out / "bf16_f16.safetensors").write_bytes(save({"w": torch.ones(2, 2, dtype=torch.bfloat16),
                                                     "h": torch.zeros(3, dtype=torch.float16)}))
    (out / "ints_scalar.safetensors").write_bytes(save({"i": torch.arange(3, dtype=torch.int64),
                                                        "s": torch.tensor(1.5), "e": torch.zeros(0, 2)}))
    header = json.dumps({"x": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}).encode()
    (out / "hand_u8.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\x01\x02")


def tokenizer_seeds(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(TEXT * 4, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_end|>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (out / "byte_level_bpe").write_bytes(tok.to_str().encode() + b"\0" + TEXT[0].encode())

    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.post_processor = processors.TemplateProcessing(single="<|im_end|> $A", special_tokens=[("<|im_end|>", 0)])
    (out / "normalized_digits_template").write_bytes(tok.to_str().encode() + b"\0" + TEXT[2].encode())


def ir_seeds(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("rms_llama", "glu_silu", "attn_scale_opt", "qkv_mqa_packed"):
        shutil.copy(REPO / "tests/cpp/data/fusers" / f"{name}.json", out / f"{name}.json")


def gguf_seeds(out: Path) -> None:
    """The GGUF fixtures of the C++ reader's tests (every metadata type, plain and block types)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("basic", "align64"):
        shutil.copy(REPO / "tests/cpp/data/gguf" / f"{name}.gguf", out / f"{name}.gguf")


CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
        "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
TEMPLATES = {
    "chatml": "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "macros_filters": "{% macro r(x, n=2) %}{{ x|upper }}{% if n > 0 %}{{ r(x, n - 1) }}{% endif %}{% endmacro %}"
                      "{%- set ns = namespace(c=0) -%}{% for m in messages if m.role != 'system' %}"
                      "{% set ns.c = ns.c + 1 %}[{{ loop.index }}/{{ loop.length }}] {{ r(m.content) }}"
                      "{{ m.content|trim|replace('H', 'h')|length }}{% endfor %}{{ ns.c }}"
                      "{{ messages|map(attribute='role')|join(',') }}{{ messages[0]|tojson }}",
    "raise_dict": "{% if messages[0]['role'] != 'system' %}{{ raise_exception('no system') }}{% endif %}"
                  "{% set d = {'a': [1, 2.5, none, true], 'b': 'x' ~ 3} %}{% for k, v in d.items() %}"
                  "{{ k }}={{ v }};{% endfor %}{{ 'abc'[1:] }}{{ '%s-%d'|format('q', 7) }}"
                  "{{ bos_token if add_generation_prompt else eos_token }}{{ range(3)|list }}",
}


def template_seeds(out: Path) -> None:
    """Chat templates, each with a NUL and a JSON context after it; SmolLM2's when it is prepared."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = json.dumps(CHAT).encode()
    for name, src in TEMPLATES.items():
        (out / name).write_bytes(src.encode() + b"\0" + ctx)
    tools = dict(CHAT, tools=[{"type": "function", "function": {"name": "get", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}])
    (out / "chatml_tools").write_bytes(TEMPLATES["chatml"].encode() + b"{{ tools|tojson(indent=2) }}\0" +
                                       json.dumps(tools).encode())
    cfg = REPO / "models/SmolLM2-135M-Instruct/tokenizer_config.json"
    if cfg.exists():
        (out / "smollm2").write_bytes(json.loads(cfg.read_text())["chat_template"].encode() + b"\0" + ctx)


REQUESTS = {
    "completion": {"model": "m", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                   "stop": ["\\n", "."], "seed": 3, "logprobs": 2, "stream": True,
                   "stream_options": {"include_usage": True}},
    "completion_ids": {"prompt": [[1, 2, 3]], "max_tokens": 4, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
                       "stop_token_ids": [2], "ignore_eos": True, "n": 1, "best_of": 1},
    "chat": {"model": "m", "messages": CHAT["messages"], "max_completion_tokens": 16, "logprobs": True,
             "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
             "response_format": {"type": "text"}, "tools": [], "tool_choice": "auto"},
    "tokenize": {"prompt": "Hello", "add_special_tokens": False},
    "detokenize": {"tokens": [1, 2, 3]},
    "apply_template": {"messages": CHAT["messages"], "add_generation_prompt": True},
    "bad_types": {"prompt": 5, "max_tokens": "8", "temperature": 3, "stream": "yes", "stop": [1]},
}


def request_seeds(out: Path) -> None:
    """Request bodies of every endpoint of `fuselm serve`, good and bad."""
    out.mkdir(parents=True, exist_ok=True)
    for name, body in REQUESTS.items():
        (out / f"{name}.json").write_text(json.dumps(body))


if __name__ == "__main__":
    gguf_seeds(HERE / "corpus" / "gguf_fuzz")
    template_seeds(HERE / "corpus" / "template_fuzz")
    request_seeds(HERE / "corpus" / "request_fuzz")
    safetensors_seeds(HERE / "corpus" / "safetensors_fuzz")
    tokenizer_seeds(HERE / "corpus" / "tokenizer_fuzz")
    ir_seeds(HERE / "corpus" / "ir_fuzz")
