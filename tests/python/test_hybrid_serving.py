"""Serving a tiny hybrid model (recurrent layers with per-sequence state between attention layers,
docs/recurrent.md "State in the engine") against the openai client, with transformers as the oracle:
16 concurrent greedy streams each equal the same request run alone; a request that shares a
200-token prefix with an earlier one reports cached tokens and gives transformers' greedy tokens
(those of a cold run); after a client hangs up every KV block and state slot is free (/metrics);
a pool too small for the load preempts and recomputes the state; n > 1 choices copy the prompt's
state. Texts and logprobs are compared (a tiny random model's greedy tokens may survive a wrong
state; its logprobs do not).

The model is tests/python/hybrid_models.py's tiny family (FUSELM_HYBRID_FAMILY, default bamba:
Mamba2 mixers around one attention layer at index 1), with SmolLM2's tokenizer so serve takes text.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

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
    """(text, token logprobs) of a greedy completion."""
    kw = dict(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=1,
              extra_body={"ignore_eos": True})
    if not stream:
        c = client.completions.create(**kw).choices[0]
        return c.text, c.logprobs.token_logprobs
    text, lps = "", []
    for chunk in client.completions.create(stream=True, **kw):
        c = chunk.choices[0]
        text += c.text or ""
        lps += c.logprobs.token_logprobs if c.logprobs else []
    return text, lps


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
    assert [t for t, _ in together] == [t for t, _ in alone]
    # Each stream's state is its own: the logprobs agree too (a state read from another sequence's
    # slot would move them by far more than batching's fp32 rounding).
    for (_, got), (_, want) in zip(together, alone):
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)
    assert len({t for t, _ in alone}) > 1  # the prompts lead somewhere different


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
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = parity.hf_model(model_dir)
    for prompt, got in ((first, a), (second, b)):  # transformers' cold run of each prompt
        want = parity.hf_greedy(model, prompt, 6)
        assert got.choices[0].text == tok.decode(want)
        # The logprobs too: a tiny random model's greedy tokens may survive a wrong state, its
        # logprobs do not.
        logits = torch.log_softmax(torch.from_numpy(parity.hf_logits(model, prompt + want)), dim=-1)
        hf_lps = [float(logits[len(prompt) - 1 + i, t]) for i, t in enumerate(want)]
        np.testing.assert_allclose(got.choices[0].logprobs.token_logprobs, hf_lps, atol=2e-3, rtol=0)
    assert after["state_checkpoint_hits_total"] - before["state_checkpoint_hits_total"] == 1


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
    m = server.wait_for_metrics(lambda m: m["request_aborted_total"] > before["request_aborted_total"]
                                and m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0
                                and m["state_slots_used"] == 0, "the hung-up request's blocks and state slots")
    assert m["state_slots_free"] == m["state_slots_total"]
    assert m["state_bytes_used"] == 0


def test_small_pool_preempts_and_recomputes_the_state(fuselm_bin, model_dir, server, tmp_path):
    """A pool whose KV blocks hold far less than 8 concurrent requests need (admitted in 32-token
    chunks, so they grow past it): sequences are preempted (their state slots freed) and recomputed,
    and each still gives its text and logprobs run alone."""
    slot = int(server.metrics()["state_slot_bytes"])
    small = Server(fuselm_bin, model_dir, ["--served-model-name", MODEL, "--max-num-seqs", "8",
                                           "--max-num-batched-tokens", "32", "--kv-cache-memory", str(8 * slot + 160000)], tmp_path / "small.log")
    try:
        note = next(line for line in small.log_path.read_text().splitlines() if "stateful ops" in line)
        blocks = int(note.split("KV: ")[1].split(" blocks")[0])
        if "(0.0 MiB)" in note.split("KV: ")[1]:
            pytest.skip(f"{FAMILY} has no attention: its blocks cost nothing, nothing is preempted")
        import openai
        c = openai.OpenAI(base_url=small.base + "/v1", api_key="none", max_retries=0, timeout=600)
        pool = blocks * 16
        length = pool // 3  # three fit at once, not eight
        rng = np.random.default_rng(3)
        prompts = [[int(x) for x in rng.integers(100, 40000, length - 40)] for _ in range(8)]
        alone = [complete(c, p, max_tokens=40) for p in prompts]
        assert small.metrics()["num_preemptions_total"] == 0
        with cf.ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda p: complete(c, p, max_tokens=40, stream=True), prompts))
        m = small.wait_for_metrics(lambda m: m["state_slots_used"] == 0 and m["kv_blocks_used"] == 0,
                                   "state slots and blocks after the last response")
        assert m["num_preemptions_total"] > 0
        assert [t for t, _ in together] == [t for t, _ in alone]
        for (_, got), (_, want) in zip(together, alone):
            np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)
    finally:
        assert small.stop() == 0


def test_n_choices_each_take_a_copy_of_the_prompt_state(client, server):
    """n = 3 greedy choices: the first computes the prompt, the others copy its state checkpoint
    (prompt_tokens_shared_total) into their own slots; each equals the request with n = 1."""
    rng = np.random.default_rng(11)
    prompt = [int(x) for x in rng.integers(100, 40000, 100)]
    before = server.metrics()  # a prompt never seen: the owner's own checkpoint is what the others copy
    three = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, logprobs=1, n=3,
                                      extra_body={"ignore_eos": True}).choices
    after = server.metrics()
    one = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, logprobs=1,
                                    extra_body={"ignore_eos": True}).choices[0]
    assert after["prompt_tokens_shared_total"] - before["prompt_tokens_shared_total"] == 2 * 96
    for c in three:
        assert c.text == one.text
        np.testing.assert_allclose(c.logprobs.token_logprobs, one.logprobs.token_logprobs, atol=1e-3, rtol=0)


def test_inspect_lists_each_stateful_op_and_the_bytes_the_server_holds(fuselm_bin, model_dir, server):
    import subprocess
    r = subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--json", "--no-capture"], capture_output=True,
                       text=True, check=True)
    state = json.loads(r.stdout)["state"]
    ops = state["ops"]
    assert [op["state_idx"] for op in ops] == list(range(len(ops))) and ops
    assert {op["op"] for op in ops} <= {"fuselm.causal_conv1d.default", "fuselm.ssd_scan.default",
                                        "fuselm.selective_scan.default", "fuselm.gated_delta_rule.default",
                                        "fuselm.decay_softmax_scan.default", "fuselm.linear_scan.default"}
    assert state["bytes_per_sequence"] == sum(op["bytes_per_sequence"] for op in ops)
    assert state["bytes_per_sequence"] == server.metrics()["state_slot_bytes"]
    text = subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--no-capture"], capture_output=True, text=True,
                          check=True).stdout
    assert f"state: {len(ops)} stateful ops, {state['bytes_per_sequence']} bytes per sequence (f32)" in text
