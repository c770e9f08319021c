"""Constrained decoding through `fuselm serve` and the official openai client, with python's
jsonschema and re as the oracles: response_format json_schema (strict) on 20 schemas gives JSON the
schema validates; json_object gives a JSON object; vLLM's guided_regex / guided_choice /
structured_outputs and llama-server's grammar are obeyed; an unsupported schema keyword, two
constraints at once and malformed values are 400s naming the field; an unconstrained request in
the same batch gets the text it gets alone; logprobs stay the model's own."""
from __future__ import annotations

import concurrent.futures as cf
import json
import math
import re

import jsonschema
import openai
import pytest

from fuselm_server import Server
from structured_schemas import SCHEMAS
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-num-seqs", "8", "--kv-cache-memory", "512MiB"],
               tmp_path_factory.mktemp("structured") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)


def chat(client, content, max_tokens=120, **kw):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                       max_tokens=max_tokens, temperature=0, **kw)
    return r.choices[0]


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_schema_strict_output_validates(client, i):
    prompt, schema = SCHEMAS[i]
    jsonschema.Draft202012Validator.check_schema(schema)
    c = chat(client, prompt, response_format={"type": "json_schema",
                                              "json_schema": {"name": f"s{i}", "strict": True, "schema": schema}})
    assert c.finish_reason == "stop", c.message.content
    jsonschema.validate(json.loads(c.message.content), schema)


def test_json_schema_sampled_at_temperature_validates(client):
    _, schema = SCHEMAS[10]  # an array of objects: many choices per token
    for seed in range(3):
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "List items as JSON."}], max_tokens=120,
            temperature=1.0, seed=seed,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}})
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_json_object_is_a_json_object(client):
    c = chat(client, "Describe a cat as a JSON object.", max_tokens=200, response_format={"type": "json_object"})
    assert c.finish_reason == "stop", c.message.content
    assert isinstance(json.loads(c.message.content), dict)


def test_guided_regex_and_structured_outputs_regex(client):
    c = chat(client, "Is it raining? Give a percentage.", extra_body={"guided_regex": r"(yes|no), [0-9]{2}%"})
    assert re.fullmatch(r"(yes|no), [0-9]{2}%", c.message.content), c.message.content
    c = chat(client, "Spell a word.", extra_body={"structured_outputs": {"regex": "[a-c]{3}"}})
    assert re.fullmatch("[a-c]{3}", c.message.content), c.message.content


def test_llama_server_grammar_and_guided_grammar(client):
    gbnf = 'root ::= "The answer is " ans "."\nans ::= "yes" | "no" | [0-9]+'
    for field in ("grammar", "guided_grammar"):
        c = chat(client, "Is the earth round?", extra_body={field: gbnf})
        assert re.fullmatch(r"The answer is (yes|no|[0-9]+)\.", c.message.content), c.message.content


def test_guided_choice_and_completions_guided_json(client):
    c = chat(client, "Pick a fruit.", extra_body={"guided_choice": ["apple pie", "banana", "cherry \"red\""]})
    assert c.message.content in ("apple pie", "banana", "cherry \"red\"")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = client.completions.create(model=MODEL, prompt="The answer in JSON:", max_tokens=40, temperature=0,
                                  extra_body={"guided_json": schema, "json_schema": None})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_logprobs_stay_those_of_the_model(client):
    kw = {"logprobs": True, "top_logprobs": 3, "max_tokens": 6}
    free = chat(client, "Say something.", **kw)
    forced = chat(client, "Say something.", extra_body={"guided_regex": "zzz[a-z]*"}, **kw)
    assert forced.message.content.startswith("zzz")
    # The first step's alternatives are the model's own, the same with and without the mask.
    first_free, first_forced = free.logprobs.content[0], forced.logprobs.content[0]
    assert [t.token for t in first_forced.top_logprobs] == [t.token for t in first_free.top_logprobs]
    for a, b in zip(first_free.top_logprobs, first_forced.top_logprobs):
        assert math.isclose(a.logprob, b.logprob, abs_tol=1e-4)
    assert first_forced.token != first_free.token and first_forced.logprob < first_free.top_logprobs[-1].logprob


def test_unconstrained_requests_in_the_batch_are_unchanged(client):
    prompts = ["Name three colors.", "What is 2 + 2?", "Who wrote Hamlet?"]
    alone = [chat(client, p, max_tokens=24).message.content for p in prompts]
    _, schema = SCHEMAS[10]
    rf = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}
    with cf.ThreadPoolExecutor(6) as ex:
        free = [ex.submit(chat, client, p, 24) for p in prompts]
        constrained = [ex.submit(chat, client, "List items as JSON.", 120, response_format=rf) for _ in range(3)]
        assert [f.result().message.content for f in free] == alone
        for f in constrained:
            jsonschema.validate(json.loads(f.result().message.content), schema)


def bad(client, **extra):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, "hi", max_tokens=4, extra_body=extra)
    return e.value


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems", "/uniqueItems"),
    ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "not", "/properties/a/not"),
    ({"type": "string", "format": "uri-reference"}, "format", "/format"),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf", "/oneOf"),
    ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, "if", "/if"),
])
def test_unsupported_keyword_is_a_400_naming_it(client, schema, keyword, pointer):
    e = bad(client, response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}})
    assert e.body["param"] == "response_format"
    assert f"'{keyword}'" in e.body["message"] and f"'{pointer}'" in e.body["message"], e.body["message"]
    e = bad(client, guided_json=schema)
    assert e.body["param"] == "guided_json" and f"'{keyword}'" in e.body["message"]


@pytest.mark.parametrize("extra,param", [
    ({"guided_json": {"type": "object"}, "guided_regex": "a"}, "guided_regex"),
    ({"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "grammar"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"guided_regex": "a(b"}, "guided_regex"),
    ({"grammar": "root ::= ("}, "grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": ["a", 3]}, "guided_choice"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"guided_whitespace_pattern": " *"}, "guided_whitespace_pattern"),
    ({"json_schema": {"type": "strin"}}, "json_schema"),
])
def test_malformed_or_conflicting_fields_are_400s_naming_them(client, extra, param):
    e = bad(client, **extra)
    assert e.body["param"] == param, e.body
    assert ".cc" not in e.body["message"] and "/root" not in e.body["message"], e.body["message"]  # no server paths


def test_properties_come_in_the_schema_order(client):
    schema = {"type": "object", "properties": {"zebra": {"type": "boolean"}, "apple": {"type": "boolean"}},
              "required": ["zebra", "apple"]}
    for extra in ({"response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}},
                  {"extra_body": {"guided_json": json.dumps(schema)}}):
        c = chat(client, "Answer as JSON.", max_tokens=30, **extra)
        assert c.message.content.startswith('{"zebra": '), c.message.content
        assert list(json.loads(c.message.content)) == ["zebra", "apple"]
