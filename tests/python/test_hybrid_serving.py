"""Serving a tiny hybrid model (recurrent layers with per-sequence state between attention layers,
docs/recurrent.md "State in the engine") against the openai client, with transformers as the oracle:
16 concurrent greedy streams each equal the same request run alone; a request that shares a
200-token prefix with an earlier one reports cached tokens and gives transformers' greedy tokens
(those of a cold run); after a client hangs up every KV block and state slot is free (/metrics).

The model is tests/python/hybrid_models.py's tiny family (FUSELM_HYBRID_FAMILY, default bamba:
Mamba2 mixers around one attention layer at index 1), with SmolLM2's tokenizer so serve takes text.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest

import parity
from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

hybrid_models = pytest.importorskip("hybrid_models")

FAMILY = os.environ.get("FUSELM_HYBRID_FAMILY", "bamba")
MODEL = "hybrid_tok"
PROMPTS = ["The capital of France is", "Once upon a time", "Name three colors:", "The largest planet is",
           "Water is made of", "In the beginning", "My favourite food is", "The quick brown fox"]


def hybrid_with_tokenizer(model_cache: Path, tokenizer_dir: Path) -> Path:
    """The tiny hybrid over SmolLM2's tokenizer (vocabulary 49152)."""
    out = model_cache / f"{FAMILY}_tok"
    if (out / "config.json").exists():
        return out
    cls, overrides = hybrid_models.HYBRID_FAMILIES[FAMILY]
    hybrid_models.HYBRID_FAMILIES[f"{FAMILY}_v49152"] = (cls, dict(overrides, vocab_size=49152, bos_token_id=1,
                                                                   eos_token_id=2, pad_token_id=0))
    hybrid_models.build(f"{FAMILY}_v49152", out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out


@pytest.fixture(scope="module")
def model_dir(model_cache, smollm2_dir):  # noqa: F811
    return hybrid_with_tokenizer(model_cache, smollm2_dir)


@pytest.fixture(scope="module")
def server(fuselm_bin, model_dir, tmp_path_factory):
    s = Server(fuselm_bin, model_dir, ["--served-model-name", MODEL, "--max-num-seqs", "16", "--kv-cache-memory", "256MiB"],
               tmp_path_factory.mktemp("hybrid") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)


def complete(client, prompt, max_tokens=8, stream=False):
    kw = dict(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True})
    if not stream:
        return client.completions.create(**kw).choices[0].text
    return "".join(c.choices[0].text or "" for c in client.completions.create(stream=True, **kw))


def test_the_model_is_stateful_and_every_slot_is_counted(server):
    m = server.metrics()
    assert m["state_sequence_slots"] == 16
    assert m["state_slot_bytes"] > 0
    assert m["state_slots_total"] >= 16
    assert m["state_bytes_total"] == m["state_slot_bytes"] * m["state_slots_total"]
    assert "stateful ops" in server.log_path.read_text()


def test_16_concurrent_greedy_streams_equal_each_run_alone(client):
    prompts = [f"{PROMPTS[i % len(PROMPTS)]} (number {i})" for i in range(16)]
    alone = [complete(client, p) for p in prompts]
    with cf.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda p: complete(client, p, stream=True), prompts))
    assert together == alone
    assert len(set(alone)) > 1  # the prompts lead somewhere different


def test_shared_200_token_prefix_is_cached_and_gives_the_cold_tokens(client, server, model_dir):
    rng = np.random.default_rng(7)
    prefix = [int(x) for x in rng.integers(100, 40000, 200)]
    first = prefix + [int(x) for x in rng.integers(100, 40000, 30)]
    second = prefix + [int(x) for x in rng.integers(100, 40000, 20)]
    before = server.metrics()
    a = client.completions.create(model=MODEL, prompt=first, max_tokens=6, temperature=0, logprobs=1,
                                  extra_body={"ignore_eos": True})
    b = client.completions.create(model=MODEL, prompt=second, max_tokens=6, temperature=0, logprobs=1,
                                  extra_body={"ignore_eos": True})
    after = server.metrics()
    assert a.usage.prompt_tokens_details.cached_tokens == 0
    # 16-token blocks: 12 whole blocks of the prefix, and a state checkpoint at 192 (the first
    # prompt's 230 tokens are checkpointed at 128, 192 and 224).
    assert b.usage.prompt_tokens_details.cached_tokens == 192
    assert after["state_checkpoint_hits_total"] - before["state_checkpoint_hits_total"] == 1
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = parity.hf_model(model_dir)
    for prompt, got in ((first, a), (second, b)):
        assert got.choices[0].text == tok.decode(parity.hf_greedy(model, prompt, 6))


def _stream_then_hang_up(server, tokens_to_read: int):
    body = json.dumps({"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 400, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < tokens_to_read:
        chunk = s.recv(4096)
        assert chunk, "the server closed the stream early"
        got += chunk
    s.close()


def test_disconnect_frees_every_block_and_state_slot(server):
    before = server.metrics()
    _stream_then_hang_up(server, 3)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        m = server.metrics()
        if m["request_aborted_total"] > before["request_aborted_total"] and m["num_requests_running"] == 0:
            break
        time.sleep(0.2)
    assert m["request_aborted_total"] > before["request_aborted_total"], m
    assert m["kv_blocks_used"] == 0
    assert m["state_slots_used"] == 0
    assert m["state_slots_free"] == m["state_slots_total"]
    assert m["state_bytes_used"] == 0
