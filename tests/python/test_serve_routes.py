"""/v1/responses through the official openai client (its text equal to the chat completion of the
same messages, greedy; the Responses event stream in order, its deltas adding up to the final
text), CORS preflights and headers (allowed and refused origins, before the API-key check, on
errors and streams) checked with requests, and the field policy: a field that would change the
output is a 400 naming it, a neutral value of it and harmless fields are accepted, an unknown field
is logged once per name."""
from __future__ import annotations

import json
import uuid

import openai
import pytest
import requests

from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

KEY = "routes-key"
MODEL = "SmolLM2-135M-Instruct"
ORIGIN = "http://app.example"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--api-key", KEY, "--max-num-seqs", "4", "--kv-cache-memory", "256MiB",
                                         "--allowed-origins", json.dumps([ORIGIN, "http://other.example"])],
               tmp_path_factory.mktemp("routes") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=600)


QUESTION = "What is the capital of France?"
INSTRUCTIONS = "You are a geography teacher."


def _chat_reference(client, max_tokens):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}],
        max_completion_tokens=max_tokens, temperature=0)


@pytest.mark.parametrize("max_tokens", [8, 200])
def test_response_text_and_usage_equal_the_chat_completion(client, max_tokens):
    ref = _chat_reference(client, max_tokens)
    r = client.responses.create(model=MODEL, input=QUESTION, instructions=INSTRUCTIONS,
                                max_output_tokens=max_tokens, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == ref.choices[0].message.content
    assert [o.type for o in r.output] == ["message"]
    assert r.status == ("incomplete" if ref.choices[0].finish_reason == "length" else "completed")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.input_tokens == ref.usage.prompt_tokens
    assert r.usage.output_tokens == ref.usage.completion_tokens
    assert r.store is False  # nothing is kept server-side


def test_response_input_items_are_the_chat_messages(client):
    history = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
               {"role": "user", "content": QUESTION}]
    ref = client.chat.completions.create(model=MODEL, messages=history, max_completion_tokens=16, temperature=0)
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi!"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello! How can I help?"}]},
             {"role": "user", "content": QUESTION}]
    r = client.responses.create(model=MODEL, input=items, max_output_tokens=16, temperature=0)
    assert r.output_text == ref.choices[0].message.content


def test_streamed_response_events(client):
    plain = client.responses.create(model=MODEL, input=QUESTION, instructions=INSTRUCTIONS, max_output_tokens=24, temperature=0)
    events = list(client.responses.create(model=MODEL, input=QUESTION, instructions=INSTRUCTIONS,
                                          max_output_tokens=24, temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete" if plain.status == "incomplete" else "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert deltas == done.text == final.output_text == plain.output_text
    assert final.usage.output_tokens == plain.usage.output_tokens


def test_response_json_schema_format_is_enforced_or_refused(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    try:
        r = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=64, temperature=0,
                                    text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}})
    except openai.BadRequestError as e:  # until the grammar engine constrains output: refused by name, never ignored
        assert e.body["param"] == "text.format", e.body  # the chat path's response_format, by its Responses name
        return
    got = json.loads(r.output_text)
    assert set(got) == {"city"} and isinstance(got["city"], str)


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
    ({"truncation": "auto"}, "truncation"),
    ({"input": 7}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),  # the chat path's max_completion_tokens, by its Responses name
])
def test_response_requests_it_cannot_honour_are_400s_naming_the_field(server, extra, param):
    status, err = server.post_json("/v1/responses", {"model": MODEL, "input": "hi", **extra}, AUTH)
    assert status == 400, err
    assert err["error"]["param"] == param


def test_response_function_call_history_translates_to_tool_turns(server):
    # The client keeps the state: its previous call and the tool's output come back as items. The
    # prompt they render to is the chat prompt of the equivalent messages (/tokenize renders it).
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    chat_status, chat = server.post_json("/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0}, AUTH)
    status, r = server.post_json("/v1/responses", {"model": MODEL, "input": items, "max_output_tokens": 8, "temperature": 0}, AUTH)
    assert status == chat_status, (r, chat)
    if status == 200:
        assert r["output"][0]["content"][0]["text"] == chat["choices"][0]["message"]["content"]


def _preflight(server, origin, method="POST", headers="authorization, content-type", path="/v1/chat/completions"):
    h = {"Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}
    if origin:
        h["Origin"] = origin
    return requests.options(server.base + path, headers=h, timeout=60)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/models", "/health", "/no/such/route"])
def test_preflight_from_an_allowed_origin_passes_without_the_key(server, path):
    r = _preflight(server, ORIGIN, path=path)
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"].lower() == "authorization, content-type"


def test_preflight_from_another_origin_gets_no_cors_headers(server):
    r = _preflight(server, "http://evil.example")
    assert r.status_code == 403
    assert not any(k.lower().startswith("access-control-") for k in r.headers)
    plain = _preflight(server, None)  # not a preflight: just the Allow header
    assert plain.status_code == 204 and "Access-Control-Allow-Origin" not in plain.headers


def test_actual_responses_carry_the_origin_when_allowed(server):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    url = server.base + "/v1/chat/completions"
    ok = requests.post(url, json=body, headers={**AUTH, "Origin": ORIGIN}, timeout=600)
    assert ok.status_code == 200 and ok.headers["Access-Control-Allow-Origin"] == ORIGIN
    unauthorized = requests.post(url, json=body, headers={"Origin": ORIGIN}, timeout=600)
    assert unauthorized.status_code == 401 and unauthorized.headers["Access-Control-Allow-Origin"] == ORIGIN
    with requests.post(url, json={**body, "stream": True}, headers={**AUTH, "Origin": ORIGIN}, stream=True, timeout=600) as s:
        assert s.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert b"[DONE]" in s.content
    other = requests.post(url, json=body, headers={**AUTH, "Origin": "http://evil.example"}, timeout=600)
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers


@pytest.mark.parametrize("path, extra, param", [
    ("/v1/chat/completions", {"typical_p": 0.5}, "typical_p"),
    ("/v1/chat/completions", {"use_beam_search": True}, "use_beam_search"),
    ("/v1/completions", {"mirostat": 2}, "mirostat"),
    ("/v1/completions", {"n_predict": 4}, "n_predict"),
    ("/v1/chat/completions", {"reasoning_effort": "high"}, "reasoning_effort"),
])
def test_output_changing_fields_are_400s_naming_them(server, path, extra, param):
    base = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    status, err = server.post_json(path, {"model": MODEL, "max_tokens": 2, **base, **extra}, AUTH)
    assert status == 400, err
    assert err["error"]["param"] == param and f"'{param}'" in err["error"]["message"]


def test_neutral_values_and_harmless_fields_are_accepted(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       user="u1", metadata={"k": "v"}, store=True,
                                       extra_body={"typical_p": 1, "use_beam_search": False, "cache_prompt": True})
    assert r.choices[0].finish_reason in ("length", "stop")


def test_unknown_fields_are_accepted_and_logged_once_per_name(server, client):
    name = "x_unknown_" + uuid.uuid4().hex[:8]
    for _ in range(3):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1,
                                       extra_body={name: 1})
    client.responses.create(model=MODEL, input="hi", max_output_tokens=1, extra_body={name + "_r": 1})
    log = server.log_path.read_text()
    assert log.count(f'"{name}"') == 1, log[-2000:]
    assert f'"{name}" on /v1/chat/completions' in log
    assert log.count(f'"{name}_r" on /v1/responses') == 1


def _raw_post(server, path, body: dict):
    import socket
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


LONG = {"model": MODEL, "input": "Write a very long story about a dragon who learns to bake bread.",
        "max_output_tokens": 1500, "temperature": 0}


@pytest.mark.parametrize("stream", [True, False])
def test_a_responses_client_that_hangs_up_cancels_the_request(server, stream):
    before = server.metrics()
    s = _raw_post(server, "/v1/responses", {**LONG, "stream": stream})
    if stream:  # three text deltas, then gone
        got = b""
        while got.count(b"event: response.output_text.delta") < 3:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
    else:
        server.wait_for_metrics(lambda m: m["generation_tokens_total"] > before["generation_tokens_total"] + 3, "the request to start")
    s.close()
    m = server.wait_for_metrics(lambda m: m["num_requests_running"] == 0 and m["kv_blocks_used"] == 0
                      and m["request_aborted_total"] > before["request_aborted_total"], "the hung-up request")
    assert m["generation_tokens_total"] - before["generation_tokens_total"] < 1500
