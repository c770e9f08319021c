"""The request limits of `fuselm serve` (src/server/request_limits.h), over raw HTTP and the openai
client: a 100 MB body answers 413 without the server holding it; JSON nested 100,000 deep answers
400 on every endpoint; a prompt past the context answers 400 naming both lengths; max_tokens past
--max-tokens-limit answers 400 and a chat without max_tokens stops at the limit; a request past
--request-timeout is cancelled (504, or an error event in a stream) and frees its blocks; a full
waiting queue answers 503. Each would have been accepted, buffered or run on before the limits."""
from __future__ import annotations

import concurrent.futures as cf
import http.client
import json

import openai
import pytest

from fuselm_server import Server, raw_post
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"
DEEP = 100_000


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-body-mb", "1", "--max-tokens-limit", "64", "--max-num-seqs", "4",
                                         "--kv-cache-memory", "256MiB"],
               tmp_path_factory.mktemp("limits") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)


def rss_kib(server) -> int:
    for line in open(f"/proc/{server.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_100_mb_body_answers_413_without_being_held(server):
    before = rss_kib(server)
    body = b'{"model": "m", "prompt": "' + b"a" * (100 << 20) + b'"}'
    status, err = raw_post(server, "/v1/completions", body)
    assert status == 413, err
    assert "larger than this server accepts" in err["error"]["message"]
    assert str(1 << 20) in err["error"]["message"]
    # The body was skipped, not read into memory (it would add 100 MB, twice over as JSON).
    assert rss_kib(server) - before < 50 * 1024
    # The server still answers.
    assert server.get("/health")[0] == 200


def test_body_under_the_cap_is_read(server):
    status, r = raw_post(server, "/tokenize", json.dumps({"prompt": "a" * (512 << 10)}).encode())
    assert status == 200 and r["count"] > 0


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", '{"model": "%s", "prompt": %s}'),
    ("/v1/chat/completions", '{"model": "%s", "messages": [{"role": "user", "content": %s}]}'),
    ("/tokenize", '{"model": "%s", "prompt": %s}'),
    ("/detokenize", '{"model": "%s", "tokens": %s}'),
    ("/apply-template", '{"model": "%s", "messages": %s}'),
])
def test_json_nested_100000_deep_answers_400_on_every_endpoint(server, path, body):
    status, err = raw_post(server, path, (body % (MODEL, deep(DEEP))).encode())
    assert status == 400, err
    assert "deeper than 64 levels" in err["error"]["message"]


def test_json_at_the_depth_limit_is_read(server):
    # 64 levels in all: the body object, "messages", one message... and content nested below.
    status, r = raw_post(server, "/apply-template",
                         json.dumps({"messages": [{"role": "user", "content": "hi", "x": json.loads(deep(61))}]}).encode())
    assert status == 200, r


def test_prompt_longer_than_the_context_names_both_lengths(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[1] * 9000, max_tokens=1)
    assert "the prompt has 9000 tokens but the model's context is 8192 tokens" in str(e.value)


def test_max_tokens_past_the_limit_answers_400_naming_both(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hello", max_tokens=65)
    assert "max_tokens (65)" in str(e.value) and "(64; --max-tokens-limit)" in str(e.value)
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=64, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 64


def test_chat_without_max_tokens_stops_at_the_limit(client):
    r = client.chat.completions.create(model=MODEL, temperature=0, extra_body={"ignore_eos": True},
                                       messages=[{"role": "user", "content": "Count to one thousand."}])
    assert r.usage.completion_tokens == 64 and r.choices[0].finish_reason == "length"


@pytest.fixture(scope="module")
def slow_server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--request-timeout", "4", "--max-num-seqs", "1", "--max-waiting", "1",
                                         "--kv-cache-memory", "256MiB"],
               tmp_path_factory.mktemp("slow") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


LONG = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 5000, "ignore_eos": True}


def test_request_past_the_timeout_answers_504_and_frees_its_blocks(slow_server):
    # 5000 tokens take minutes on a CPU; the 4 s timeout cancels the request long before.
    status, err = slow_server.post_json("/v1/completions", LONG)
    assert status == 504, err
    assert "per-request timeout of 4 s" in err["error"]["message"]
    m = slow_server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0, "timed out request")
    assert m["generation_tokens_total"] < 5000


def test_stream_past_the_timeout_ends_with_an_error_event(slow_server):
    c = openai.OpenAI(base_url=slow_server.base + "/v1", api_key="none", max_retries=0, timeout=600)
    text, errors = "", []
    with pytest.raises(openai.APIError) as e:
        for chunk in c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5000, stream=True,
                                          extra_body={"ignore_eos": True}):
            text += chunk.choices[0].text
    errors.append(str(e.value))
    assert "per-request timeout of 4 s" in errors[0]
    slow_server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0, "timed out stream")


def test_full_waiting_queue_answers_503(slow_server):
    # One running, one waiting: a third request finds the queue full.
    with cf.ThreadPoolExecutor(2) as pool:
        first = pool.submit(slow_server.post_json, "/v1/completions", LONG)
        slow_server.wait_for_metrics(lambda m: m["num_requests_running"] == 1, "the first request running")
        second = pool.submit(slow_server.post_json, "/v1/completions", LONG)
        slow_server.wait_for_metrics(lambda m: m["num_requests_waiting"] == 1, "the second request waiting")
        status, err = slow_server.post_json("/v1/completions", dict(LONG, max_tokens=4))
        assert status == 503, err
        assert "queue is full" in err["error"]["message"]
        assert first.result()[0] == 504 and second.result()[0] == 504


def test_number_past_double_range_answers_400(server):
    # Found by fuzz/request_fuzz: nlohmann's out_of_range escaped the parser and answered 500.
    status, err = raw_post(server, "/v1/completions", b'{"prompt": "x", "temperature": 1e400}')
    assert status == 400, err
    assert "out of range" in err["error"]["message"]


def chunks(total: int, piece: int = 1 << 20):
    yield b'{"model": "m", "prompt": "'
    for _ in range(total // piece):
        yield b"a" * piece
    yield b'"}'


def test_chunked_100_mb_body_answers_413_without_being_held(server):
    # cpp-httplib 0.11.4 checks its payload limit against Content-Length only: a chunked body was
    # read whole into memory and run. Now it is capped as it is read (src/server/body_reader.h).
    before = rss_kib(server)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    try:
        conn.request("POST", "/v1/completions", body=chunks(100 << 20), encode_chunked=True,
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        err = json.loads(r.read())
        assert r.status == 413, err
        assert "larger than this server accepts" in err["error"]["message"] and str(1 << 20) in err["error"]["message"]
        assert rss_kib(server) - before < 50 * 1024
        # The rest of the body was read past, so the same connection still answers in step.
        conn.request("POST", "/tokenize", body=json.dumps({"prompt": "Hello"}).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["count"] > 0
    finally:
        conn.close()


def test_chunked_body_under_the_cap_is_read(server):
    body = json.dumps({"prompt": "Hello world"}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    try:
        conn.request("POST", "/tokenize", body=iter([body[:5], body[5:]]), encode_chunked=True,
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["count"] > 0
    finally:
        conn.close()


def test_bad_chunk_framing_answers_400(server):
    import socket
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as s:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                  b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
        head = s.recv(65536).decode("latin-1")
    assert head.startswith("HTTP/1.1 400"), head
    assert server.get("/health")[0] == 200
