"""`fuselm serve` fed what a hostile or broken client sends: a client that vanishes mid-request or
mid-stream, headers that stall (slowloris), invalid UTF-8 in prompts, n/max_tokens/temperature and
friends out of range, a huge logit_bias, stop lists of 10,000 strings, token ids outside the
vocabulary. Each gets a 4xx naming the field, or a clean end; afterwards the server still answers,
no request is left running and every KV block is free (no crash, hang or leak)."""
from __future__ import annotations

import http.client
import json
import socket

import pytest

from fuselm_server import Server, raw_post as post
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-body-mb", "8", "--max-num-seqs", "4", "--kv-cache-memory", "256MiB"],
               tmp_path_factory.mktemp("hostile") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def settled(server, limit_s: float = 120) -> dict:
    """The metrics once no request runs or waits and no KV block is held (fails after limit_s)."""
    return server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0
                                   and m["kv_blocks_used"] == 0, "requests or blocks still held", limit_s)


def raw(server, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=600) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_client_vanishing_mid_request(server):
    # Headers promising 1000 bytes, 10 sent, then gone; and headers cut off half way.
    for _ in range(20):
        raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n{\"prompt\":", read=False)
        raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le", read=False)
        raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nabc", read=False)
    assert server.get("/health")[0] == 200
    settled(server)


def test_client_vanishing_mid_stream_many_times(server):
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 200, "stream": True,
                       "ignore_eos": True}).encode()
    for _ in range(8):
        with socket.create_connection(("127.0.0.1", server.port), timeout=600) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while b"data: " not in got:
                got += s.recv(4096)
    m = settled(server)
    assert m["num_requests_running"] == 0


def test_stalled_headers_are_cut_off_and_others_served(server):
    # A slowloris client: part of a request line and headers, then nothing. cpp-httplib's read
    # timeout (5 s) ends the connection; meanwhile other clients are answered.
    socks = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=600)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    assert server.get("/health")[0] == 200
    for s in socks:
        got = b""
        while chunk := s.recv(65536):  # until the server closes the connection
            got += chunk
        assert got == b"" or got.startswith(b"HTTP/1.1 400"), got
        s.close()
    assert server.get("/health")[0] == 200


@pytest.mark.parametrize("body", [
    b'{"model": "m", "prompt": "caf\xc3 au lait"}',          # a cut-off two-byte sequence
    b'{"model": "m", "prompt": "\xff\xfe\xfd"}',             # bytes that are never UTF-8
    b'{"model": "m", "prompt": "\xed\xa0\x80"}',             # an encoded surrogate
    b'{"model": "m", "prompt": "\\ud800"}',                  # a lone surrogate escape
    b'{"model": "m", "messages": [{"role": "user", "content": "\xc0\xaf"}]}',  # overlong
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize"])
def test_invalid_utf8_answers_400(server, path, body):
    status, err = post(server, path, body)
    assert status == 400, err
    assert "malformed JSON" in err["error"]["message"]


@pytest.mark.parametrize("field,value", [
    ("n", 0), ("n", -1), ("n", 129), ("n", 10 ** 30), ("n", "two"),
    ("max_tokens", 0), ("max_tokens", -5), ("max_tokens", 2 ** 63), ("max_tokens", 2 ** 64), ("max_tokens", 1.5),
    ("temperature", -0.1), ("temperature", 2.5), ("temperature", 1e308), ("temperature", "hot"),
    ("top_p", 0), ("top_p", 1.5), ("top_k", -2), ("min_p", 2),
    ("presence_penalty", 3), ("frequency_penalty", -9), ("repetition_penalty", 0),
    ("logprobs", 100), ("logprobs", -1), ("seed", 2 ** 64), ("best_of", 0),
    ("stop", 5), ("stop", [1, 2]), ("stop_token_ids", "x"), ("stream", "yes"),
])
def test_out_of_range_fields_answer_400_naming_the_field(server, field, value):
    status, err = post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "x", field: value}).encode())
    assert status == 400, err
    assert err["error"]["param"] == field, err


def test_chat_out_of_range_fields_answer_400(server):
    for field, value in [("top_logprobs", 21), ("max_completion_tokens", 0), ("n", 200)]:
        status, err = post(server, "/v1/chat/completions", json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": True, field: value}).encode())
        assert status == 400 and err["error"]["param"] == field, err


def test_huge_logit_bias_answers_400(server):
    bias = {str(i): 100 for i in range(300_000)}
    status, err = post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "logit_bias": bias}).encode())
    assert status == 400 and err["error"]["param"] == "logit_bias", err


@pytest.mark.parametrize("ids", [[-1], [2 ** 40], [1, 2, 49152], [2 ** 63 - 1]])
def test_prompt_ids_outside_the_vocabulary_answer_400(server, ids):
    status, err = post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": ids, "max_tokens": 1}).encode())
    assert status == 400, err
    assert "outside the vocabulary" in err["error"]["message"]


def test_detokenize_ids_outside_the_vocabulary_answer_400(server):
    for ids in ([-1], [2 ** 40], [2 ** 64 - 1]):
        status, err = post(server, "/detokenize", json.dumps({"tokens": ids}).encode())
        assert status == 400 and err["error"]["param"] == "tokens", err


def test_stop_list_of_10000_strings_answers_400(server):
    stops = [f"never-said-{i}" for i in range(10_000)]
    status, err = post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "stop": stops}).encode())
    assert status == 400 and err["error"]["param"] == "stop", err
    assert "10000 strings, more than this server allows (64)" in err["error"]["message"]


def test_stop_string_of_a_megabyte_answers_400(server):
    status, err = post(server, "/v1/completions", json.dumps({"model": MODEL, "prompt": "x", "stop": "a" * (1 << 20)}).encode())
    assert status == 400 and err["error"]["param"] == "stop", err
    assert f"{1 << 20} bytes, more than this server allows (1024)" in err["error"]["message"]


def test_stop_token_ids_past_the_limit_answer_400(server):
    status, err = post(server, "/v1/completions", json.dumps(
        {"model": MODEL, "prompt": "x", "stop_token_ids": list(range(100_000))}).encode())
    assert status == 400 and err["error"]["param"] == "stop_token_ids", err


def test_stops_within_the_limits_run_to_a_clean_end(server):
    # 64 stop strings that never occur, an empty one (ignored) and stop ids outside the vocabulary.
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "stop": [f"never-said-{i}" for i in range(63)] + [""], "stop_token_ids": [-1, 2 ** 40]}
    status, r = post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, r
    assert r["usage"]["completion_tokens"] == 8 and r["choices"][0]["finish_reason"] == "length"
    settled(server)
