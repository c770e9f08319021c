"""Tool calls, reasoning and the message shapes agents send, through the openai client against
`fuselm serve` on SmolLM2-135M-Instruct's weights with a tool-capable template swapped in
(tests/data/chat-templates' Qwen2.5 template as the model's chat_template.jinja). The calls are
parsed by the format discovered from the template (src/template/tool_format.h); tool_choice
required / named forces the call's opening text, so even this tiny model calls."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest

from fuselm_server import Server, model_with_template
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    d = model_with_template(smollm2_dir, tmp_path_factory.mktemp("m") / "model", "Qwen-Qwen2.5-7B-Instruct.jinja")
    s = Server(fuselm_bin, d, ["--kv-cache-memory", "512MiB"], tmp_path_factory.mktemp("serve") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=600)


NAMED = {"type": "function", "function": {"name": "get_weather"}}


def test_named_tool_choice_non_streamed_is_a_tool_call(client):
    r = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content is None
    [call] = ch.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert len(call.id) == 9 and call.id.isalnum()
    assert isinstance(json.loads(call.function.arguments), dict)


def test_streamed_tool_call_equals_the_non_streamed_one(client):
    whole = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0,
                                           max_tokens=60).choices[0].message.tool_calls[0]
    calls, finish = {}, None
    for chunk in client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0,
                                                max_tokens=60, stream=True):
        for d in chunk.choices[0].delta.tool_calls or []:
            c = calls.setdefault(d.index, {"name": "", "arguments": ""})
            c["name"] += d.function.name or ""
            c["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls == {0: {"name": whole.function.name, "arguments": whole.function.arguments}}


TWO_TOOLS = TOOLS + [{"type": "function", "function": {
    "name": "add", "description": "Add two integers", "strict": True,
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                                    "b": {"type": "integer"}}, "required": ["a", "b"],
                   "additionalProperties": False}}}]


@pytest.mark.parametrize("choice", [NAMED, {"type": "function", "function": {"name": "add"}}, "required"])
@pytest.mark.parametrize("stream", [False, True])
def test_forced_call_arguments_match_the_schema(client, choice, stream):
    for question in ["What is the weather in Paris?", "What is 2 + 3?", "Hello"]:
        kw = dict(model="model", messages=[{"role": "user", "content": question}], tools=TWO_TOOLS, tool_choice=choice,
                  temperature=0.8, seed=len(question), max_tokens=80)
        if stream:
            name, args, finish = "", "", None
            for chunk in client.chat.completions.create(stream=True, **kw):
                for d in chunk.choices[0].delta.tool_calls or []:
                    name += d.function.name or ""
                    args += d.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
        else:
            r = client.chat.completions.create(**kw).choices[0]
            [call] = r.message.tool_calls
            name, args, finish = call.function.name, call.function.arguments, r.finish_reason
        assert finish == "tool_calls"
        if isinstance(choice, dict):
            assert name == choice["function"]["name"]
        [fn] = [t["function"] for t in TWO_TOOLS if t["function"]["name"] == name]
        jsonschema.validate(json.loads(args), fn["parameters"])


def test_a_tool_schema_keyword_the_grammar_cannot_enforce_is_named(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}}}]
    status, err = server.post_json("/v1/chat/completions", {"messages": ASK, "tools": tools, "tool_choice": "required"})
    assert status == 400 and err["error"]["param"] == "tools", err
    assert "uniqueItems" in err["error"]["message"] and "/properties/xs" in err["error"]["message"], err


def test_two_step_agent_loop(client):
    first = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice=NAMED, temperature=0,
                                           max_tokens=60).choices[0].message
    call = first.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "clear"})}]
    r = client.chat.completions.create(model="model", messages=history, tools=TOOLS, temperature=0, max_tokens=30)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.content


def test_tool_choice_none_gives_text(client):
    r = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=20)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content


def test_message_shapes(client, server):
    parts = [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}] + ASK
    r = client.chat.completions.create(model="model", messages=parts, temperature=0, max_tokens=5)
    assert r.choices[0].message.content
    # The Qwen2.5 template prints any role's name: developer has no role of its own, so it is system.
    status, body = server.post_json("/tokenize", {"messages": [{"role": "developer", "content": "Be brief."}] + ASK})
    status2, body2 = server.post_json("/tokenize", {"messages": [{"role": "system", "content": "Be brief."}] + ASK})
    assert status == status2 == 200 and body["tokens"] == body2["tokens"]


@pytest.mark.parametrize("extra, param, words", [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages", "'wizard'"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope'"),
    ({"tool_choice": "sometimes"}, "tool_choice", "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools", "tools[0]"),
    ({"chat_template_kwargs": [1]}, "chat_template_kwargs", "object"),
    ({"enable_thinking": "yes"}, "enable_thinking", "boolean"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]}, "messages", "arguments"),
])
def test_bad_shapes_are_400_naming_the_field(server, extra, param, words):
    body = {"model": "model", "messages": ASK, "tools": TOOLS, "max_tokens": 2, **extra}
    status, err = server.post_json("/v1/chat/completions", body)
    assert status == 400, err
    assert err["error"]["param"] == param and words in err["error"]["message"], err
    assert "/" not in err["error"]["message"].replace("</", "")  # no server paths


def test_template_errors_carry_no_path(server):
    status, err = server.post_json("/v1/chat/completions", {"messages": [{"role": "assistant", "content": "x"}] * 0 + [
        {"role": "user", "content": "a", "tool_calls": 5}], "max_tokens": 2})
    assert status in (200, 400)
    if status == 400:
        assert str(ROOT) not in err["error"]["message"] and "/tmp" not in err["error"]["message"]


# --- the renders against transformers' own (the oracle), and reasoning, on Qwen3's template ---

@pytest.fixture(scope="module")
def qwen3(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    d = model_with_template(smollm2_dir, tmp_path_factory.mktemp("q3") / "model", "Qwen-Qwen3-0.6B.jinja")
    s = Server(fuselm_bin, d, ["--kv-cache-memory", "256MiB"], tmp_path_factory.mktemp("serve") / "serve.log")
    yield s, d
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def transformers_ids(model_dir, messages, **kw):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
    return tok(text, add_special_tokens=False)["input_ids"]


AGENT_HISTORY = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "abcDEF123", "content": '{"temperature_c": 21}'}]


@pytest.mark.parametrize("kwargs", [{}, {"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}])
def test_agent_history_renders_as_transformers_renders_the_vllm_form(qwen3, kwargs):
    server, model_dir = qwen3
    status, body = server.post_json("/tokenize", {"messages": AGENT_HISTORY, "tools": TOOLS, **kwargs})
    assert status == 200, body
    # vLLM's form of the same history: content "" and the arguments as an object.
    expected = json.loads(json.dumps(AGENT_HISTORY))
    expected[1]["content"] = ""
    expected[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    extra = dict(kwargs.get("chat_template_kwargs", {}))
    if "enable_thinking" in kwargs:
        extra["enable_thinking"] = kwargs["enable_thinking"]
    assert body["tokens"] == transformers_ids(model_dir, expected, tools=TOOLS, **extra)


def test_reasoning_content_is_split_by_the_template_markers(qwen3):
    server, _ = qwen3
    c = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0)
    # The output is forced (vLLM's guided_regex) to a reasoning block then an answer.
    forced = {"guided_regex": r"<think>\nI add\.\n</think>\n\nFour\."}
    r = c.chat.completions.create(model="model", messages=ASK, max_tokens=30, extra_body=forced)
    m = r.choices[0].message
    assert (m.reasoning_content, m.content) == ("I add.", "Four.")
    reasoning, content = "", ""
    for chunk in c.chat.completions.create(model="model", messages=ASK, max_tokens=30, extra_body=forced, stream=True):
        d = chunk.choices[0].delta if chunk.choices else None
        reasoning += getattr(d, "reasoning_content", None) or ""
        content += (d.content or "") if d else ""
    assert (reasoning, content) == ("I add.", "Four.")
