"""Every chat template in tests/data/chat-templates/ renders in fuselm byte for byte as
transformers' render_jinja_template renders it (jinja2 is the oracle), for a one-turn chat, a
system prompt with several turns (non-ASCII, quotes, markup), a tool definition, and an assistant
tool call with its result, each with add_generation_prompt true and false. Where transformers
raises, fuselm raises with the same message. All cases go through one `fuselm apply-template
--batch` process; a few go through the plain command to check its output and exit status."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from chat_template_oracle import fuselm_render, same_error, transformers_render

DATA = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
TEMPLATES = sorted(DATA.glob("*.jinja"))

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

CONVERSATIONS = {
    "one_turn": {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "You are a helpful assistant. Réponds en français — «toujours»."},
        {"role": "user", "content": "Hello! <b>bold</b> & \"double\" 'single' {{ not a tag }} <|im_end|>"},
        {"role": "assistant", "content": "Bonjour ! 你好 😀\nSecond line with a trailing space \n"},
        {"role": "user", "content": "  Leading and trailing spaces,\ttabs\nand lines.  "},
    ]},
    "tools": {"messages": [{"role": "user", "content": "What's the weather in Paris?"}], "tools": [WEATHER_TOOL]},
    "tool_call": {"messages": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_0001", "type": "function",
            "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "{\"temperature\": 22}"},
    ], "tools": [WEATHER_TOOL]},
}


# Templates that take their tools in another form: Cohere's tool_use template wants
# {name, description, parameter_definitions}; firefunction-v2 reads `functions` (a JSON string) and
# `datetime`.
COHERE_TOOL = {"name": "get_weather", "description": "Get the current weather in a city.",
               "parameter_definitions": {"location": {"description": "City name", "type": "str", "required": True}}}
INPUT_FORMS = {
    "CohereForAI-c4ai-command-r-plus-tool_use": lambda v: {**v, "tools": [COHERE_TOOL]},
    "fireworks-ai-llama-3-firefunction-v2": lambda v: {**v, "functions": json.dumps([WEATHER_TOOL["function"]], indent=2),
                                                       "datetime": "2026-12-01"},
}


def cases_for(stem: str) -> list[tuple[str, dict]]:
    out = []
    for name, conv in CONVERSATIONS.items():
        for agp in (False, True):
            variables = {**json.loads(json.dumps(conv)), "add_generation_prompt": agp,
                         "bos_token": "<s>", "eos_token": "</s>"}
            out.append((f"{name}/agp={agp}", INPUT_FORMS.get(stem, lambda v: v)(variables)))
    return out


@pytest.fixture(scope="module")
def all_results(fuselm_bin, tmp_path_factory):
    cases, keys = [], []
    for path in TEMPLATES:
        source = path.read_text(encoding="utf-8")
        for label, variables in cases_for(path.stem):
            cases.append({"template": source, "variables": variables})
            keys.append((path.name, label, source, variables))
    ours = fuselm_render(fuselm_bin, cases, tmp_path_factory.mktemp("tmpl"))
    return {(k[0], k[1]): (k[2], k[3], r) for k, r in zip(keys, ours)}


def test_templates_present():
    assert len(TEMPLATES) >= 38


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_template_matches_transformers(path, all_results):
    failures = []
    rendered = 0
    for label, _ in cases_for(path.stem):
        source, variables, ours = all_results[(path.name, label)]
        oracle = transformers_render(source, variables)
        if "output" in oracle:
            rendered += 1
            if ours.get("output") != oracle["output"]:
                failures.append(f"{label}: fuselm {ours!r:.600}\n   transformers {oracle['output']!r:.600}")
        elif not same_error(oracle, ours):
            failures.append(f"{label}: transformers raised {oracle['kind']}: {oracle['error']!r}; fuselm {ours!r:.300}")
    assert not failures, "\n".join(failures)
    # DeepSeek-V4 uses a filter transformers lacks (from_json): every case raises, in both
    assert rendered > 0 or path.stem == "deepseek-ai-DeepSeek-V4", "no case rendered: the comparison is vacuous"


def test_plain_command_prints_exactly_and_fails_with_template_message(fuselm_bin, tmp_path):
    src = DATA / "google-gemma-2-2b-it.jinja"
    conv = {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True, "bos_token": "<bos>"}
    (tmp_path / "ok.json").write_text(json.dumps(conv))
    proc = subprocess.run([str(fuselm_bin), "apply-template", "--template", str(src), "--messages",
                           str(tmp_path / "ok.json")], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == transformers_render(src.read_text(), conv)["output"]
    bad = dict(conv, messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    proc = subprocess.run([str(fuselm_bin), "apply-template", "--template", str(src), "--messages",
                           str(tmp_path / "bad.json")], capture_output=True, text=True)
    oracle = transformers_render(src.read_text(), bad)
    assert oracle["raised_by_template"]
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip() == f"fuselm: error: {oracle['error']}"


def test_messages_list_form_and_default_model(fuselm_bin, tmp_path):
    """A bare list is the messages; without --template the default model's own template and its
    bos/eos tokens are used (as transformers' apply_chat_template passes them)."""
    from transformers import AutoTokenizer
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    proc = subprocess.run([str(fuselm_bin), "apply-template", "--messages", str(tmp_path / "m.json")],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    model_dir = Path(__file__).resolve().parents[2] / "models" / "SmolLM2-135M-Instruct"
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert proc.stdout.decode() == tok.apply_chat_template(msgs, tokenize=False)
