"""`fuselm generate` and `fuselm serve` run a request through the same engine loop: for the same
prompt ids and sampling parameters (greedy, and a seeded sampled request) they give the same
tokens with the same logprobs, bit for bit (serve reports each token as its text; generate's ids
are turned into that text by serve's /detokenize). With --logits-out generate computes every
prompt row's logits, which may move the first logprob in its last bits: there only the tokens
must agree."""
from __future__ import annotations

import pytest

from fuselm_runner import generate
from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

MODEL = "SmolLM2-135M-Instruct"
PROMPT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
MAX_TOKENS = 24
REQUESTS = {
    "greedy": ({"temperature": 0}, ["--temperature", "0"]),
    "sampled": ({"temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 1234},
                ["--temperature", "1", "--top-p", "0.9", "--top-k", "50", "--seed", "1234"]),
}


@pytest.fixture(scope="module")
def server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-num-seqs", "2", "--no-prefix-caching"],
               tmp_path_factory.mktemp("serve") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def served(server, body: dict) -> tuple[list[str], list[float], str]:
    status, r = server.post_json("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                                                     "ignore_eos": True, "logprobs": 0, **body})
    assert status == 200, r
    lp = r["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"], r["choices"][0]["finish_reason"]


def token_texts(server, ids: list[int]) -> list[str]:
    out = []
    for i in ids:
        status, r = server.post_json("/detokenize", {"tokens": [i]})
        assert status == 200, r
        out.append(r["content"])
    return out


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_generate_and_serve_give_the_same_tokens(fuselm_bin, smollm2_dir, server, tmp_path, kind):  # noqa: F811
    body, flags = REQUESTS[kind]
    tokens, logprobs, finish = served(server, body)
    assert len(tokens) == MAX_TOKENS and finish == "length"
    ours, _ = generate(fuselm_bin, smollm2_dir, PROMPT, MAX_TOKENS, tmp_path, extra=flags, logits=False)
    assert ours["finish_reason"] == finish
    assert token_texts(server, ours["token_ids"]) == tokens
    assert ours["logprobs"] == logprobs  # the same logits, not merely the same argmax
    with_rows, rows = generate(fuselm_bin, smollm2_dir, PROMPT, MAX_TOKENS, tmp_path, extra=flags)
    assert with_rows["token_ids"] == ours["token_ids"]
    assert rows.shape[0] == len(PROMPT) + MAX_TOKENS - 1


def test_the_sampled_request_is_not_greedy(server):
    greedy, _, _ = served(server, REQUESTS["greedy"][0])
    sampled, _, _ = served(server, REQUESTS["sampled"][0])
    assert greedy != sampled  # the sampled comparison is not the greedy one again
