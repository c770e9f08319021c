#!/usr/bin/env python3
"""Writes a random-weight Hugging Face model directory of any family from a config shape (a JSON
file of transformers config fields with its model_type, bench/compare/shapes/), with the
tokenizer of another directory (default: the default model's SmolLM2 tokenizer, whose pre-tokenizer
llama.cpp's converter knows), so that both engines read the same weights and vocabulary. The
vocabulary size becomes the tokenizer's.

    make_random_model.py OUT_DIR --shape bench/compare/shapes/qwen3_5-0.8b.json [--tokenizer DIR]

Weights: matrices N(0, 0.02), vectors 1 + N(0, 0.05) (norm weights near 1), bf16 on disk; enough to
measure speed, not to read text.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, default=REPO / "models" / "SmolLM2-135M-Instruct")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in json.loads(args.shape.read_text()).items() if not k.startswith("_")}
    vocab = len(json.loads((args.tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
    tok_cfg = json.loads((args.tokenizer / "config.json").read_text()) if (args.tokenizer / "config.json").exists() else {}
    fields.update(vocab_size=vocab, bos_token_id=tok_cfg.get("bos_token_id", 1), eos_token_id=tok_cfg.get("eos_token_id", 2),
                  pad_token_id=None)
    cfg = AutoConfig.for_model(fields.pop("model_type"), **fields)
    cfg.dtype = "bfloat16"
    torch.manual_seed(args.seed)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            else:
                p.copy_(1.0 + 0.05 * torch.randn_like(p))
    model.save_pretrained(args.out)  # non-persistent buffers (rotary tables) are recomputed at load
    for f in TOKENIZER_FILES:
        if (args.tokenizer / f).exists():
            shutil.copy(args.tokenizer / f, args.out / f)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.out}: {type(model).__name__}, {n / 1e9:.2f} B parameters")


if __name__ == "__main__":
    main()
