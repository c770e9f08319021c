#!/usr/bin/env python3
"""Writes a random-weight Llama model of TinyLlama-1.1B's shape (hidden 2048, intermediate 5632,
22 layers, 32 heads, 4 KV heads, vocabulary 32000), where memory bandwidth rather than per-op
overhead decides decode speed, as a Hugging Face directory (config.json, bf16 model.safetensors,
tokenizer.json).

The tokenizer is a Llama-2-style byte-fallback BPE over a made-up vocabulary of exactly 32000
pieces (3 specials, 256 byte tokens, then letters and their concatenations with BPE merges), so
that llama.cpp's convert_hf_to_gguf.py converts it through its Llama HF vocabulary path (no
pre-tokenizer hash needed) and both engines see the same vocabulary size.

    make_random_llama.py OUT_DIR [--layers 22]
"""
from __future__ import annotations

import argparse
import itertools
import json
import string
from pathlib import Path

SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000)


def make_tokenizer(vocab_size: int):
    """A byte-fallback BPE (Llama 2's layout) with exactly vocab_size pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    specials = ["<unk>", "<s>", "</s>"]
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)]
    letters = ["\u2581"] + list(string.ascii_lowercase)
    pieces += letters
    merges: list[tuple[str, str]] = []
    frontier = letters
    while len(pieces) < vocab_size:  # words of growing length, each the merge of (prefix, letter)
        grown = []
        for prefix, c in itertools.product(frontier, letters):
            if len(pieces) >= vocab_size:
                break
            pieces.append(prefix + c)
            merges.append((prefix, c))
            grown.append(prefix + c)
        frontier = grown
    vocab = {p: i for i, p in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(specials)
    return tok


MAX_POSITIONS = 32768


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(args.seed)
    shape = dict(SHAPE, num_hidden_layers=args.layers)
    # max_position_embeddings 32768 (TinyLlama has 2048) lets `-d 4096,16384` run; it does not change
    # the weights (plain RoPE, no scaling) or the speed at a given depth.
    cfg = LlamaConfig(**shape, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            else:  # norm weights around 1
                p.copy_(1.0 + 0.05 * torch.randn_like(p))
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tok = PreTrainedTokenizerFast(tokenizer_object=make_tokenizer(shape["vocab_size"]), bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>")
    tok.save_pretrained(args.out)
    assert len(json.loads((args.out / "tokenizer.json").read_text())["model"]["vocab"]) == shape["vocab_size"]
    print(args.out)


if __name__ == "__main__":
    main()
