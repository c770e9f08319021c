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


if __name__ == "__main__":
    safetensors_seeds(HERE / "corpus" / "safetensors_fuzz")
    tokenizer_seeds(HERE / "corpus" / "tokenizer_fuzz")
    ir_seeds(HERE / "corpus" / "ir_fuzz")
