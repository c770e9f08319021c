"""`fuselm serve`'s sampling and evaluation fields and /v1/embeddings, through the openai client
with transformers as the oracle: n choices (distinct seeds, the prompt's KV blocks shared, as
/metrics shows), several prompts per completions request, echo with the prompt's logprobs,
top_logprobs in rank order, logit_bias, min_tokens, pooled embeddings (cosine with transformers'
pooled final hidden states), and each refused value a 400 naming its field."""
from __future__ import annotations

import json
import random
import string

import numpy as np
import openai
import pytest
import torch

from fuselm_server import Server
from parity import hf_model
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-num-seqs", "16", "--kv-cache-memory", "512MiB"],
               tmp_path_factory.mktemp("serve_outputs") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def tok(smollm2_dir):  # noqa: F811
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def hf(smollm2_dir):  # noqa: F811
    return hf_model(smollm2_dir)


def fresh_text(words: int) -> str:
    """A prompt no other test sent (so the prefix cache holds none of it)."""
    r = random.Random()
    return " ".join("".join(r.choices(string.ascii_lowercase, k=5)) for _ in range(words))


def test_n_choices_have_distinct_seeds_and_share_the_prompt_blocks(server, client, tok):
    prompt = "Write a short story about a dragon. " + fresh_text(30)
    n_prompt = len(tok(prompt)["input_ids"])
    before = server.metrics()
    # top_k keeps each draw among a few well-separated probabilities. Over the whole vocabulary a draw at
    # temperature 1 lands within rounding of a boundary often enough to flip when a cached prefix, or another
    # batch size, computes the last logits in another order (a GEMM tile and a GEMV sum): seen once in CI.
    kw = dict(model=MODEL, prompt=prompt, max_tokens=12, temperature=1.0, seed=1234,
              extra_body={"ignore_eos": True, "top_k": 8})
    r = client.completions.create(n=4, **kw)
    after = server.metrics()
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    texts = [c.text for c in r.choices]
    assert len(set(texts)) == 4, texts  # each choice samples with its own seed
    assert r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == 4 * 12
    # Choices 1..3 took every full block of the prompt from choice 0 instead of computing it.
    shared = after["prompt_tokens_shared_total"] - before["prompt_tokens_shared_total"]
    assert shared == 3 * 16 * ((n_prompt - 1) // 16) and shared > 0
    assert after["prompt_tokens_cached_total"] - before["prompt_tokens_cached_total"] >= shared
    # Seeded: the same request (now hitting the prefix cache for choice 0 too) gives the same choices, and
    # choice 0 samples with the seed n=1 uses: the same first token.
    again = client.completions.create(n=4, best_of=4, **kw)  # best_of = n: the same n choices
    assert [c.text for c in again.choices] == texts
    first = client.completions.create(n=4, logprobs=1, **kw).choices[0].logprobs.tokens[0]
    assert client.completions.create(n=1, logprobs=1, **kw).choices[0].logprobs.tokens[0] == first


def test_streamed_chat_n_equals_non_streamed(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a fact."}], max_tokens=10, temperature=0.8,
              seed=7, n=3)
    full = client.chat.completions.create(**kw)
    assert [c.index for c in full.choices] == [0, 1, 2]
    got, roles, finish = {0: "", 1: "", 2: ""}, set(), {}
    for ch in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        for c in ch.choices:
            if c.delta.role:
                roles.add(c.index)
            got[c.index] += c.delta.content or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
        if ch.usage:
            assert ch.usage.completion_tokens == full.usage.completion_tokens
    assert roles == {0, 1, 2}
    assert [got[i] for i in range(3)] == [c.message.content for c in full.choices]
    assert finish == {c.index: c.finish_reason for c in full.choices}


def test_several_prompts_are_choices_prompt_major(client, tok):
    prompts = ["The capital of France is", "One, two, three,"]
    ids = tok(prompts[1])["input_ids"]
    for given in (prompts, [tok(prompts[0])["input_ids"], ids]):
        r = client.completions.create(model=MODEL, prompt=given, n=2, max_tokens=6, temperature=0)
        assert [c.index for c in r.choices] == [0, 1, 2, 3]
        alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=6, temperature=0).choices[0].text
                 for p in prompts]
        assert [c.text for c in r.choices] == [alone[0], alone[0], alone[1], alone[1]]
        assert r.usage.prompt_tokens == len(tok(prompts[0])["input_ids"]) + len(ids)


def test_echo_with_logprobs_gives_the_prompt_logprobs_of_transformers(client, tok, hf):
    prompt = "The quick brown fox jumps over the lazy dog because it was"
    ids = tok(prompt)["input_ids"]
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=3, temperature=0, echo=True, logprobs=3)
    c = r.choices[0]
    assert c.text.startswith(prompt) and len(c.text) > len(prompt)
    lp = c.logprobs
    assert lp.tokens[:len(ids)] == [tok.decode([i]) for i in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].double(), -1)
    want = [float(ref[p, ids[p + 1]]) for p in range(len(ids) - 1)]
    np.testing.assert_allclose(lp.token_logprobs[1:len(ids)], want, atol=2e-3)
    # The prompt's alternatives too, best first.
    for p in range(1, len(ids)):
        top = lp.top_logprobs[p]
        order = torch.argsort(ref[p - 1], descending=True)[:3]
        assert list(top) == [tok.decode([int(i)]) for i in order]
        np.testing.assert_allclose(list(top.values()), ref[p - 1, order].numpy(), atol=2e-3)
    # Streamed: the prompt comes first.
    text = "".join(ch.choices[0].text for ch in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=3, temperature=0, echo=True, stream=True))
    assert text == c.text


def test_top_logprobs_are_in_rank_order(client):
    r = client.completions.create(model=MODEL, prompt="My favourite colour is", max_tokens=4, temperature=0, logprobs=8)
    for top in r.choices[0].logprobs.top_logprobs:
        values = list(top.values())
        assert len(values) == 8 and values == sorted(values, reverse=True)


def test_logit_bias_forces_and_bans_tokens(client, tok):
    forced = tok(" banana")["input_ids"]
    assert len(forced) == 1
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0,
                                  logit_bias={str(forced[0]): 100})
    assert r.choices[0].text == " banana" * 5
    plain = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0, logprobs=2)
    first = tok(plain.choices[0].text)["input_ids"][0]
    banned = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0,
                                       logprobs=2, logit_bias={str(first): -100})
    # The second most likely token wins; logprobs stay the model's own.
    assert banned.choices[0].text == list(plain.choices[0].logprobs.top_logprobs[0])[1]


def test_min_tokens_holds_back_eos(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What is 2 + 2?"}], max_tokens=60, temperature=0)
    short = client.chat.completions.create(**kw)
    assert short.choices[0].finish_reason == "stop" and short.usage.completion_tokens < 20
    longer = client.chat.completions.create(extra_body={"min_tokens": 20}, **kw)
    assert longer.usage.completion_tokens >= 20
    assert longer.choices[0].message.content.startswith(short.choices[0].message.content)


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_embeddings_match_transformers_pooled_hidden_states(fuselm_bin, smollm2_dir, tmp_path, tok, hf, pooling):  # noqa: F811
    args = ["--kv-cache-memory", "256MiB"] + (["--pooling", pooling] if pooling != "last" else [])
    s = Server(fuselm_bin, smollm2_dir, args, tmp_path / "serve.log")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=600)
        texts = ["Hello", "The quick brown fox jumps over the lazy dog.",
                 "Embeddings pool the final hidden states of every token of a longer input like this one, " * 3]
        r = c.embeddings.create(model=MODEL, input=texts)  # the client asks for base64 and decodes it
        floats = c.embeddings.create(model=MODEL, input=texts, encoding_format="float")
        by_ids = c.embeddings.create(model=MODEL, input=[tok(t)["input_ids"] for t in texts], encoding_format="float")
        assert [d.index for d in r.data] == [0, 1, 2]
        assert r.usage.prompt_tokens == sum(len(tok(t)["input_ids"]) for t in texts)
        for i, t in enumerate(texts):
            with torch.no_grad():
                h = hf(torch.tensor([tok(t)["input_ids"]]), output_hidden_states=True).hidden_states[-1][0].double()
            ref = (h.mean(0) if pooling == "mean" else h[-1]).numpy()
            for v in (r.data[i].embedding, floats.data[i].embedding, by_ids.data[i].embedding):
                v = np.asarray(v, dtype=np.float64)
                assert v.shape == ref.shape and abs(np.linalg.norm(v) - 1) < 1e-5
                assert np.dot(v, ref) / np.linalg.norm(ref) >= 0.999
        one = c.embeddings.create(model=MODEL, input=texts[1], encoding_format="float")
        np.testing.assert_allclose(one.data[0].embedding, floats.data[1].embedding, atol=1e-5)
        raw = c.embeddings.create(model=MODEL, input=texts[1], encoding_format="float", extra_body={"normalize": False})
        v = np.asarray(raw.data[0].embedding)
        assert np.linalg.norm(v) > 2  # the pooled hidden state as it is
        np.testing.assert_allclose(v / np.linalg.norm(v), floats.data[1].embedding, atol=1e-5)
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "x", "n": 129}, "n"),
    ("/v1/completions", {"prompt": ["x"] * 40, "n": 4}, "n"),
    ("/v1/completions", {"prompt": "x", "best_of": 2}, "best_of"),
    ("/v1/completions", {"prompt": "x", "best_of": 3, "n": 2}, "best_of"),
    ("/v1/completions", {"prompt": ["x", 5]}, "prompt"),
    ("/v1/completions", {"prompt": "x", "echo": "yes"}, "echo"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "echo": True}, "echo"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"49152": 1}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": "up"}}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "logit_bias": [5]}, "logit_bias"),
    ("/v1/completions", {"prompt": "x", "min_tokens": -1}, "min_tokens"),
    ("/v1/completions", {"prompt": "x", "min_tokens": 9, "max_tokens": 3}, "min_tokens"),
    ("/v1/embeddings", {"input": "x", "dimensions": 64}, "dimensions"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, "encoding_format"),
    ("/v1/embeddings", {"input": []}, "input"),
    ("/v1/embeddings", {"input": [[]]}, "input"),
    ("/v1/embeddings", {"input": [1, "x"]}, "input"),
    ("/v1/embeddings", {}, "input"),
    ("/v1/embeddings", {"input": "x", "normalize": "no"}, "normalize"),
])
def test_refused_values_answer_400_naming_the_field(server, path, body, param):
    status, err = server.post_json(path, {"model": MODEL, **body})
    assert status == 400, err
    assert err["error"]["param"] == param, err
    assert "/" not in err["error"]["message"].replace("/v1/completions", ""), err  # no server paths


def test_embedding_ids_outside_the_vocabulary_answer_400(server):
    status, err = server.post_json("/v1/embeddings", {"model": MODEL, "input": [[1, 2, 49152]]})
    assert status == 400 and "outside the vocabulary" in err["error"]["message"], err
    assert server.get("/health")[0] == 200
