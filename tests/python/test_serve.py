"""`fuselm serve` against the official openai client (and transformers/tokenizers as oracles):
chat and completions, streamed and not, stop strings, logprobs, seeds, usage, API key; 32
concurrent greedy streams equal to each request run alone; a client that hangs up frees its
blocks; a pool too small for the load preempts and still gives the right text; a repeated system
prompt hits the prefix cache; a seeded request keeps its text among other requests; a streamed stop
string is cut and counted; OpenAI error objects. One server per module keeps it quick."""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shlex
import socket

import numpy as np
import openai
import pytest
import torch

from fuselm_server import Server
from parity import hf_model
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

KEY = "test-key"
MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = ["What is the capital of France?", "Name three colors.", "How many legs does a spider have?",
             "What is 2 + 2?", "Who wrote Hamlet?", "What is water made of?", "Say hello in Spanish.",
             "What is the largest planet?"]


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    # FUSELM_TEST_SERVE_ARGS: more flags for this server (e.g. --kv-cache-dtype q8_0, to run the
    # batching and prefix-cache tests over another cache; the f32-cache assertions then fail).
    extra = shlex.split(os.environ.get("FUSELM_TEST_SERVE_ARGS", ""))
    s = Server(fuselm_bin, smollm2_dir, ["--api-key", KEY, "--max-num-seqs", "32", "--kv-cache-memory", "1GiB", *extra],
               tmp_path_factory.mktemp("serve") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]
    assert "server stopped" in s.log_path.read_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def tok(smollm2_dir):  # noqa: F811
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smollm2_dir)


def chat(client, content, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kw)


def test_startup_line_models_and_wrong_key(server, client):
    log = server.log_path.read_text()
    assert f"serving {MODEL} at http://127.0.0.1:{server.port}" in log and "KV pool" in log
    assert [m.id for m in client.models.list().data] == [MODEL]
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401


def test_chat_usage_and_logprobs_match_the_tokens(client, tok):
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=3)
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    content = r.choices[0].logprobs.content
    assert r.usage.prompt_tokens == len(prompt)
    assert r.usage.completion_tokens == len(content) <= 12
    assert r.usage.total_tokens == len(prompt) + len(content)
    assert r.choices[0].finish_reason == ("length" if len(content) == 12 else "stop")
    # The text is the tokens' text, special tokens (the end of turn) left out.
    shown = [t.token for t in content if t.token not in tok.all_special_tokens]
    assert "".join(shown) == r.choices[0].message.content
    for t in r.choices[0].logprobs.content:  # greedy: the chosen token is the most likely one
        assert len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob


def test_completion_logprobs_equal_transformers(client, tok, smollm2_dir):  # noqa: F811
    prompt = "The capital of France is"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, logprobs=5)
    ids = tok(prompt)["input_ids"]
    with torch.no_grad():
        ref = torch.log_softmax(hf_model(smollm2_dir)(torch.tensor([ids])).logits[0, -1].double(), -1).numpy()
    order = np.argsort(-ref)[:5]
    got = r.choices[0].logprobs.top_logprobs[0]
    names = [tok.decode([int(i)]) for i in order]
    assert list(got) == names  # best first, as OpenAI orders them (the object keeps its keys' order)
    np.testing.assert_allclose([got[n] for n in names], ref[order], atol=2e-3)
    assert r.choices[0].text == tok.decode([int(order[0])])


def test_streaming_equals_non_streaming_with_usage(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].usage.completion_tokens == 10 == full.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    # Chat streams deltas after a role chunk.
    stream = chat(client, QUESTIONS[3], max_tokens=8, temperature=0, stream=True)
    deltas = [c.choices[0].delta for c in stream]
    assert deltas[0].role == "assistant"
    text = "".join(d.content or "" for d in deltas)
    assert text == chat(client, QUESTIONS[3], max_tokens=8, temperature=0).choices[0].message.content


def test_stop_string_across_tokens_is_cut(client):
    kw = dict(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0)
    text = client.completions.create(**kw).choices[0].text
    assert len(text) > 8, text
    stop = text[3:7]  # starts and ends inside tokens most of the time
    first = text.find(stop)
    r = client.completions.create(stop=[stop, "never-appears"], **kw)
    assert r.choices[0].text == text[:first]
    assert r.choices[0].finish_reason == "stop"


def test_seeded_runs_repeat_and_unseeded_differ(client):
    kw = dict(model=MODEL, prompt="My favourite animal is", max_tokens=16, temperature=1.0, extra_body={"ignore_eos": True})
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    assert a == b
    c = client.completions.create(**kw).choices[0].text
    d = client.completions.create(**kw).choices[0].text
    assert c != d


def test_a_seed_gives_the_same_text_whatever_else_is_in_the_batch(client):
    kw = dict(model=MODEL, prompt="My favourite animal is", max_tokens=16, temperature=1.0, extra_body={"ignore_eos": True})
    alone = client.completions.create(seed=99, **kw).choices[0].text

    def run(i):  # the seeded request twice among unseeded sampled ones with other prompts
        if i in (2, 5):
            return client.completions.create(seed=99, **kw).choices[0].text
        return client.completions.create(**{**kw, "prompt": QUESTIONS[i]}).choices[0].text

    with cf.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(run, range(8)))
    assert got[2] == got[5] == alone


def test_streamed_stop_string_is_cut_and_usage_counts_the_tokens(client, tok):
    kw = dict(model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=20, temperature=0)
    full = client.completions.create(logprobs=0, **kw)
    text = full.choices[0].text
    assert full.usage.prompt_tokens == len(tok(kw["prompt"])["input_ids"])
    assert full.usage.completion_tokens == len(full.choices[0].logprobs.tokens)
    stop = text[5:9]
    chunks = list(client.completions.create(stop=[stop], stream=True, stream_options={"include_usage": True}, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text[:text.find(stop)]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    # Every sampled token counts, the one that completed the stop string included (as vLLM).
    lp = full.choices[0].logprobs
    end = text.find(stop) + len(stop)
    used = next(k + 1 for k in range(len(lp.tokens)) if lp.text_offset[k] + len(lp.tokens[k]) >= end)
    assert chunks[-1].usage.completion_tokens == used
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_32_concurrent_greedy_streams_equal_each_run_alone(client, server):
    # Batch invariance in fp32: the default model's weights are fp32, so the default KV cache
    # (--kv-cache-dtype auto) is fp32 too (or the dtype FUSELM_TEST_SERVE_ARGS asks for).
    extra = shlex.split(os.environ.get("FUSELM_TEST_SERVE_ARGS", ""))
    asked = extra[extra.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in extra else "f32"
    assert _kv_dtype(server.log_path.read_text()) == asked
    prompts = [f"{QUESTIONS[i % len(QUESTIONS)]} (question {i})" for i in range(32)]

    def run(p, stream):
        kw = dict(max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        if not stream:
            return chat(client, p, **kw).choices[0].message.content
        return "".join(c.choices[0].delta.content or "" for c in chat(client, p, stream=True, **kw))

    alone = [run(p, False) for p in prompts]
    with cf.ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda p: run(p, True), prompts))
    assert together == alone


def _raw_stream_then_hang_up(server, tokens_to_read: int):
    body = json.dumps({"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 400, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < tokens_to_read:
        chunk = s.recv(4096)
        assert chunk, "the server closed the stream early"
        got += chunk
    s.close()


def test_disconnect_mid_stream_frees_blocks(server):
    before = server.metrics()
    _raw_stream_then_hang_up(server, 3)
    m = server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0
                 and m["request_aborted_total"] > before["request_aborted_total"], "the hung-up stream")
    assert m["generation_tokens_total"] - before["generation_tokens_total"] < 400


def test_disconnect_before_a_non_streaming_answer_frees_blocks(server):
    before = server.metrics()
    body = json.dumps({"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 2000,
                       "ignore_eos": True, "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    server.wait_for_metrics(lambda m: m["num_requests_running"] == 1 and m["kv_blocks_used"] > 0
             and m["generation_tokens_total"] > before["generation_tokens_total"], "the request to start")
    s.close()
    m = server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0
                 and m["request_aborted_total"] > before["request_aborted_total"], "the hung-up request")
    assert m["generation_tokens_total"] - before["generation_tokens_total"] < 1500


def test_repeated_system_prompt_hits_the_prefix_cache(client, server):
    system = "You are a meticulous assistant. " * 20  # well over several 16-token blocks
    def ask(q):
        return client.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                              messages=[{"role": "system", "content": system}, {"role": "user", "content": q}])
    before = server.metrics()
    first = ask("What is 1 + 1?")
    mid = server.metrics()
    second = ask("What is 3 + 3?")
    after = server.metrics()
    assert second.usage.prompt_tokens_details.cached_tokens >= 16 * ((first.usage.prompt_tokens - 20) // 16)
    assert after["prefix_cache_hits_total"] - mid["prefix_cache_hits_total"] >= 8
    assert mid["prefix_cache_hits_total"] - before["prefix_cache_hits_total"] < after["prefix_cache_hits_total"] - mid["prefix_cache_hits_total"]


@pytest.mark.parametrize("body,status,param", [
    (b"{not json", 400, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
    ({"model": MODEL, "prompt": "x", "temperature": 7}, 400, "temperature"),
    ({"model": "no-such-model", "prompt": "x"}, 404, "model"),
    ({"model": MODEL, "prompt": [1] * 9000, "max_tokens": 1}, 400, None),
    ({"model": MODEL, "prompt": "x", "max_tokens": 9000}, 400, None),
    ({"model": MODEL, "prompt": "x", "n": 129}, 400, "n"),
    ({"model": MODEL, "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {}}}, 400, "response_format"),
])
def test_completion_errors_are_openai_error_objects(server, body, status, param):
    got, err = server.post_json("/v1/completions", body, {"Authorization": f"Bearer {KEY}"})
    assert got == status, err
    assert err["error"]["message"] and err["error"]["type"]
    if param:
        assert err["error"]["param"] == param


def test_tools_with_a_template_that_cannot_express_them_are_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as e:  # SmolLM2's own template renders no tools
        chat(client, "hi", tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
             tool_choice="required")
    assert "'tools'" in str(e.value) and "tool format could not be derived" in str(e.value)


def test_tokenize_and_detokenize_match_the_tokenizer(server, tok):
    text = "Hello, world! Ünïcödé"
    status, r = server.post_json("/tokenize", {"prompt": text})
    assert status == 200 and r["tokens"] == tok(text)["input_ids"]
    status, d = server.post_json("/detokenize", {"tokens": r["tokens"]})
    assert status == 200 and d["prompt"] == tok.decode(r["tokens"])


def test_small_pool_preempts_and_completes_with_the_right_text(fuselm_bin, smollm2_dir, tmp_path):  # noqa: F811
    # 16 blocks of 16 tokens: six requests of ~61 tokens (4 blocks) each cannot all stay resident.
    s = Server(fuselm_bin, smollm2_dir, ["--kv-cache-memory", str(16 * 16 * 46080), "--max-num-seqs", "6"], tmp_path / "small.log")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=600)
        prompts = [f"Write about the number {i}. " * 3 for i in range(6)]

        def run(p):
            return c.completions.create(model=MODEL, prompt=p, max_tokens=40, temperature=0,
                                        extra_body={"ignore_eos": True}).choices[0].text

        alone = [run(p) for p in prompts]
        assert s.metrics()["num_preemptions_total"] == 0
        with cf.ThreadPoolExecutor(6) as pool:
            together = list(pool.map(run, prompts))
        assert s.metrics()["num_preemptions_total"] > 0
        assert together == alone
        s.wait_for_metrics(lambda m: m["kv_blocks_used"] == 0, "blocks after the last response")
    finally:
        assert s.stop() == 0


def _pool_tokens(log: str) -> int:
    line = next(l for l in log.splitlines() if "KV pool" in l)
    return int(line.split("KV pool ")[1].split(" tokens")[0])


def _kv_dtype(log: str) -> str:
    """The KV cache dtype of the startup line ('KV pool N tokens: B blocks of 16, bf16, 1.07 GB')."""
    line = next(l for l in log.splitlines() if "KV pool" in l)
    return line.split(" blocks of ")[1].split(", ")[1]


# Bytes per value of each cache dtype relative to f32: bf16 2 of 4, q8_0 34 per 32 values (the
# default model's heads of 64 are two whole blocks), so q8_0 holds 64/34 = 1.88x the tokens of bf16;
# and how far the first token's log-probability may move (q8_0 measured up to 0.053 on these
# questions, bf16 under 0.05). The fp32 forward is batch-invariant to about 1e-5, not bit for bit
# (batched and lone streams' log-probabilities differ by up to 8e-6 at 32 streams); rounding K/V
# to bf16 amplifies that to 4e-3, quantizing to q8_0 (a step of max|x|/127) to 3e-2, which can flip
# a near-tie: a q8_0 batched stream may differ from its lone run, so 7 of 8 must agree there.
@pytest.mark.parametrize("kv,share,logprob_tol,least_same", [  # bf16: long mode
    pytest.param("bf16", 2 / 4, 0.05, 8, id="long_bf16"), pytest.param("q8_0", 34 / 32 / 4, 0.12, 7, id="q8_0")])
def test_smaller_kv_cache_holds_more_tokens_and_agrees_greedily(kv, share, logprob_tol, least_same, fuselm_bin,  # noqa: F811
                                                                  smollm2_dir, server, client, tmp_path):
    s = Server(fuselm_bin, smollm2_dir, ["--kv-cache-dtype", kv, "--kv-cache-memory", "1GiB", "--max-num-seqs", "8"],
               tmp_path / f"{kv}.log")
    try:
        # The same bytes hold 1/share times the tokens (the module's server has a 1 GiB fp32 pool),
        # up to one 16-token block of rounding.
        assert _kv_dtype(s.log_path.read_text()) == kv
        assert abs(_pool_tokens(s.log_path.read_text()) - _pool_tokens(server.log_path.read_text()) / share) <= 16 / share
        c16 = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=600)

        def run(cl, q):
            r = cl.completions.create(model=MODEL, prompt=q, max_tokens=16, temperature=0, logprobs=1,
                                      extra_body={"ignore_eos": True})
            return r.choices[0].logprobs.tokens, r.choices[0].logprobs.token_logprobs

        with cf.ThreadPoolExecutor(8) as pool:  # batched on the bf16 (q8_0) server
            got = list(pool.map(lambda q: run(c16, q), QUESTIONS))
        # Batch invariance, up to the near-ties above: each batched stream equals its request run
        # alone there (a row is rounded or quantized once, when written).
        alone = [run(c16, q)[0] for q in QUESTIONS]
        assert sum(a == g[0] for a, g in zip(alone, got)) >= least_same, (alone, got)
        want = [run(client, q) for q in QUESTIONS]
        same = sum(g[0] == w[0] for g, w in zip(got, want))
        assert same >= 6, (got, want)
        for (gt, gl), (wt, wl) in zip(got, want):
            assert gt[:4] == wt[:4]
            assert abs(gl[0] - wl[0]) < logprob_tol  # the first token's log-probability (same context)
        s.wait_for_metrics(lambda m: m["kv_blocks_used"] == 0, "blocks after the last response")
    finally:
        assert s.stop() == 0


def test_kv_cache_dtype_auto_follows_the_weights(fuselm_bin, smollm2_dir, server, tmp_path):  # noqa: F811
    # --dtype bf16 weights: the default KV cache (auto) is bf16, so 1 GiB holds twice the tokens of
    # the module's server (fp32 weights, fp32 cache, the same 1 GiB).
    s = Server(fuselm_bin, smollm2_dir, ["--dtype", "bf16", "--kv-cache-memory", "1GiB", "--max-num-seqs", "8"],
               tmp_path / "auto.log")
    try:
        log = s.log_path.read_text()
        assert _kv_dtype(log) == "bf16" and _kv_dtype(server.log_path.read_text()) == "f32"
        assert _pool_tokens(log) == 2 * _pool_tokens(server.log_path.read_text())
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=600)
        r = c.completions.create(model=MODEL, prompt=QUESTIONS[0], max_tokens=4, temperature=0,
                                 extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4
        s.wait_for_metrics(lambda m: m["kv_blocks_used"] == 0, "blocks after the last response")
    finally:
        assert s.stop() == 0
