"""Every template of tests/data/chat-templates swapped into SmolLM2-135M-Instruct and served: a
request with tools is answered by the format discovered from the template (or refused with a 400
naming `tools` where no format could be derived). For each template that has a format, the model
is made (vLLM's guided_regex) to write exactly the text the template itself writes for an
assistant turn with a call (rendered by transformers, the oracle), and the server must give that
call back as tool_calls; and tool_choice naming the function must
give a call whose arguments the schema validates."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import openai
import pytest

import long_mode
from chat_template_oracle import transformers_render
from fuselm_server import Server, model_with_template
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(p.name for p in (ROOT / "tests/data/chat-templates").glob("*.jinja"))
DEFAULT_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                     "mistralai-Mistral-Nemo-Instruct-2407.jinja", "openai-gpt-oss-120b.jinja",
                     "google-gemma-4-31B-it.jinja"]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}}, "required": ["city"],
                   "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# docs/templates.md: templates whose tool format cannot be derived.
NO_FORMAT = {"google-gemma-2-2b-it.jinja", "HuggingFaceTB-SmolLM3-3B.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
             "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
             "fireworks-ai-llama-3-firefunction-v2.jinja", "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
             "ibm-granite-granite-3.3-2B-Instruct.jinja", "LFM2-8B-A1B.jinja", "Kimi-K2-Instruct.jinja",
             "moonshotai-Kimi-K2.jinja", "muse-glimmer.jinja"}


def call_text(template: str, bos: str, eos: str) -> str:
    """What the template writes after its generation prompt for an assistant turn with one call."""
    src = (ROOT / "tests/data/chat-templates" / template).read_text()
    base = {"bos_token": bos, "eos_token": eos, "tools": TOOLS}
    call = {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    gen = transformers_render(src, {"messages": ASK, "add_generation_prompt": True, **base})["output"]
    turn = transformers_render(src, {"messages": ASK + [{"role": "assistant", "content": "", "reasoning_content": "ok",
                                                        "tool_calls": [call]}], **base})["output"]
    plain = transformers_render(src, {"messages": ASK + [{"role": "assistant", "content": "@@x"}], **base})["output"]
    p = len(os.path.commonprefix([turn, gen]))
    while p and turn[p - 1] in "<[{|":
        p -= 1
    s = len(os.path.commonprefix([turn[p:][::-1], plain[::-1]]))
    return turn[p:len(turn) - s]


# The default run takes one template of each common tool-call format; long mode runs every template.
@pytest.mark.parametrize("template", long_mode.split(TEMPLATES, default=DEFAULT_TEMPLATES))
def test_template_tools_end_to_end(fuselm_bin, smollm2_dir, tmp_path, template):  # noqa: F811
    d = model_with_template(smollm2_dir, tmp_path / "model", template)
    server = Server(fuselm_bin, d, ["--kv-cache-memory", "128MiB"], tmp_path / "serve.log")
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=600)
        named = {"type": "function", "function": {"name": "get_weather"}}
        if template in NO_FORMAT:
            status, err = server.post_json("/v1/chat/completions", {"messages": ASK, "tools": TOOLS, "max_tokens": 2})
            assert status == 400 and err["error"]["param"] == "tools", err
            assert "tool format could not be derived" in err["error"]["message"]
            return
        cfg = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
        text = call_text(template, cfg.get("bos_token") or "", cfg.get("eos_token") or "")
        r = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
                                           extra_body={"guided_regex": re.escape(text)})
        ch = r.choices[0]
        assert ch.message.tool_calls, (text, ch)
        assert ch.message.tool_calls[0].function.name == "get_weather", (text, ch)
        assert json.loads(ch.message.tool_calls[0].function.arguments) == {"city": "Paris"}, (text, ch)
        assert ch.finish_reason == "tool_calls"
        r = client.chat.completions.create(model="model", messages=ASK, tools=TOOLS, tool_choice=named, max_tokens=300,
                                           temperature=0)
        assert r.choices[0].message.tool_calls, r
        [call] = r.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and r.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
    finally:
        assert server.stop() == 0, server.log_path.read_text()[-2000:]
