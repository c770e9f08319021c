"""Tensor parallelism over MPI (docs/tensor-parallel.md): `mpirun -np N fuselm generate
--tensor-parallel-size N` must give transformers' greedy tokens and logits (fp32, the parity
tolerance) and the same tokens as one process, on tiny random models of each family; inspect says
what the plan shards and what it replicates and why; widths that do not divide fail in one line.
The plan checks (`fuselm inspect --tensor-parallel-size N`, one process) run everywhere; the runs
under mpirun are skipped when it is missing (a build without MPI runs TP size 1 only).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import fuselm_runner
from fuselm_server import Server
from test_smollm2_parity import smollm2_dir  # noqa: F401  (fixture)
import hybrid_models
import mla_models
import moe_models
import parity
import tiny_models

MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)")

PROMPT = [3, 17, 101, 7, 42, 250, 9]
NEW = 12
# One thread per rank: the ranks share this machine's cores.
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")

tiny_models.FAMILIES.setdefault("llama_kv4", ("LlamaConfig", {"num_key_value_heads": 4}))
moe_models.MOE_FAMILIES.setdefault("olmoe", ("OlmoeConfig", dict(num_experts=8, num_experts_per_tok=2,
                                                                  norm_topk_prob=False)))


def build(family: str, cache: Path) -> Path:
    out = cache / family
    if (out / "config.json").exists():
        return out
    if family in tiny_models.FAMILIES:
        return tiny_models.build(family, out)
    if family in moe_models.MOE_FAMILIES:
        return moe_models.build(family, out)
    if family in hybrid_models.ATTENTION_CALLS or family in hybrid_models.HYBRID_FAMILIES:
        return hybrid_models.build(family, out)
    return mla_models.build(family, out)


def run_tp(fuselm_bin: Path, model_dir: Path, n: int, tmp: Path) -> tuple[dict, np.ndarray]:
    """fuselm_runner.generate under mpirun -np n (rank 0 prints the result)."""
    tmp.mkdir(parents=True, exist_ok=True)
    logits = tmp / "logits.f32"
    cmd = [MPIRUN, "--oversubscribe", "-np", str(n), str(fuselm_bin), "generate", str(model_dir), "--prompt-ids",
           ",".join(map(str, PROMPT)), "--max-tokens", str(NEW), "--json", "--ignore-eos", "--logits-out", str(logits),
           "--tensor-parallel-size", str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=ENV)
    assert proc.returncode == 0, f"mpirun -np {n} failed ({proc.returncode}): {proc.stderr[-3000:]}"
    import json
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    raw = np.fromfile(logits, dtype=np.float32)
    return result, raw.reshape(len(PROMPT) + len(result["token_ids"]) - 1, -1)


def check_family(family: str, n: int, fuselm_bin, model_cache, tmp_path):
    model_dir = build(family, model_cache)
    one, one_logits = fuselm_runner.generate(fuselm_bin, model_dir, PROMPT, NEW, tmp_path, extra=[])
    many, many_logits = run_tp(fuselm_bin, model_dir, n, tmp_path / f"tp{n}")
    assert many["token_ids"] == one["token_ids"], f"{family}: TP={n} tokens differ from TP=1"
    scale = float(np.abs(one_logits).max())
    assert float(np.abs(many_logits - one_logits).max()) <= 1e-4 * scale, f"{family}: TP={n} logits differ from TP=1"
    parity.check_against_oracle(f"{family}-tp{n}", parity.hf_model(model_dir), PROMPT, many["token_ids"], many_logits)


def inspect_tp(fuselm_bin, model_dir: Path, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(fuselm_bin), "inspect", str(model_dir), "--tensor-parallel-size", str(n)],
                          capture_output=True, text=True, timeout=600, env=ENV)


@needs_mpirun
@pytest.mark.parametrize("family", ["llama", "gpt_bigcode_mqa", "qwen2", "qwen3", "phi3", "gemma2", "mixtral", "olmoe",
                                    "v3_style", "qwen2_moe", "deepseek_v3", "deepseek_v2"])
def test_tp2_matches_tp1_and_transformers(family, fuselm_bin, model_cache, tmp_path):
    check_family(family, 2, fuselm_bin, model_cache, tmp_path)


@needs_mpirun
@pytest.mark.parametrize("family", ["qwen3_5_text", "lfm2"])
def test_tp2_hybrid_keeps_recurrent_mixers_whole(family, fuselm_bin, model_cache, tmp_path):
    """Hybrids (gated delta rule, short convolutions): the MLPs and the vocabulary split, the
    recurrent mixers run whole on every rank with their whole state, and inspect says so; TP=2
    gives TP=1's tokens and logits and transformers' tokens."""
    check_family(family, 2, fuselm_bin, model_cache, tmp_path)
    proc = inspect_tp(fuselm_bin, build(family, model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    assert "tensor parallel: each op and its state whole on every rank (replicated)" in proc.stdout
    assert "down_proj.weight: row parallel" in proc.stdout or "w2.weight: row parallel" in proc.stdout, proc.stdout


@needs_mpirun
@pytest.mark.skipif(os.environ.get("FUSELM_LONG") != "1", reason="long mode: scripts/test.sh --long (FUSELM_LONG=1)")
@pytest.mark.parametrize("family", ["diffllama", "zamba2"])
def test_long_tp2_attention_called_twice_per_layer(family, fuselm_bin, model_cache, tmp_path):
    """Each attention call its own KV layer, sharded by heads on every rank: differential attention
    (two calls per layer over one K) and zamba2's shared transformer block (one module, a KV layer
    per call)."""
    check_family(family, 2, fuselm_bin, model_cache, tmp_path)


@needs_mpirun
@pytest.mark.parametrize("family", ["llama_kv4", "llama"])
def test_tp4(family, fuselm_bin, model_cache, tmp_path):
    """4 ranks: 4 KV heads split one per rank; 2 KV heads replicated over pairs of ranks."""
    check_family(family, 4, fuselm_bin, model_cache, tmp_path)


def test_plan_shards_attention_and_mlp(fuselm_bin, model_cache):
    proc = inspect_tp(fuselm_bin, build("llama", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "__fused_qkv.weight: column parallel (dim 0) q:4x16->32 k:2x16->16 v:2x16->16" in out
    assert "o_proj.weight: row parallel (input dim 1: 32 of 64 per rank)" in out
    assert "down_proj.weight: row parallel (input dim 1: 64 of 128 per rank)" in out
    # 6 after the row-parallel projections, 1 after the vocab-parallel embedding; the LM head's
    # logits are all-gathered.
    assert "7 all-reduces and 1 all-gathers per forward" in out
    assert "model.embed_tokens.weight: vocab parallel (dim 0: 256 of 512 rows per rank)" in out
    assert "lm_head.weight: vocab parallel (dim 0: 256 of 512 rows per rank)" in out


def test_plan_shards_each_experts_intermediate_size(fuselm_bin, model_cache):
    """Mixtral: every expert's gate/up halves column parallel and its down row parallel, one
    all-reduce after the experts op; the router stays whole."""
    proc = inspect_tp(fuselm_bin, build("mixtral", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert ("model.layers.0.mlp.experts.gate_up_proj: experts' gate/up, column parallel (dim 1): 64 of each "
            "expert's 128 intermediate columns per rank") in out
    assert ("model.layers.0.mlp.experts.down_proj: experts' down, row parallel (dim 2): 64 of each expert's 128 "
            "intermediate columns per rank, then all-reduce") in out
    assert "gate.weight" not in out  # the router is no seed: replicated
    # 3 layers x (o_proj, experts) + the embedding.
    assert "7 all-reduces and 1 all-gathers per forward" in out


def test_plan_shards_the_shared_expert(fuselm_bin, model_cache):
    """qwen2_moe: the gated shared expert is split with the routed ones (its sigmoid gate whole)."""
    proc = inspect_tp(fuselm_bin, build("qwen2_moe", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "experts' gate/up, column parallel (dim 1): 16 of each expert's 32 intermediate columns per rank" in out
    assert "shared expert's up, column parallel (dim 0): 24 of the shared expert's 48 intermediate columns per rank" in out
    assert "shared expert's down, row parallel (dim 1): 24 of the shared expert's 48 intermediate columns per rank" in out


def test_plan_shards_mla_heads(fuselm_bin, model_cache):
    """DeepSeek-V3-style MLA: the q up-projection and kv_b_proj split by heads, o_proj row parallel;
    the latent path (the fused q/kv down-projection) and the latent cache stay whole."""
    proc = inspect_tp(fuselm_bin, build("v3_style", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "model.layers.0.self_attn.q_b_proj.weight: column parallel (dim 0) q:4x24->48" in out
    assert "model.layers.0.self_attn.kv_b_proj.weight: column parallel (dim 0) kv_up:4x28->56" in out
    assert "model.layers.0.self_attn.o_proj.weight: row parallel (input dim 1: 24 of 48 per rank), then all-reduce" in out
    assert "replicated  model.layers.0.self_attn.__fused_q_kv_down.weight" in out
    assert "3 of them latent" in out


def test_plan_shards_a_tied_table_once(fuselm_bin, model_cache):
    """gemma2 ties its LM head to the embedding: one table, split by vocabulary rows for both uses."""
    proc = inspect_tp(fuselm_bin, build("gemma2", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "vocab parallel" in line]
    assert len(lines) == 1 and lines[0].endswith(".weight: vocab parallel (dim 0: 256 of 512 rows per rank)"), lines
    assert "1 all-gathers per forward" in proc.stdout


tiny_models.FAMILIES.setdefault("llama_v513", ("LlamaConfig", {"vocab_size": 513}))


def test_vocab_that_does_not_divide_stays_replicated(fuselm_bin, model_cache):
    """513 vocabulary rows over 2 ranks: the table and LM head stay whole on every rank (inspect
    says why)."""
    proc = inspect_tp(fuselm_bin, build("llama_v513", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    assert ("replicated  model.embed_tokens.weight: its 513 vocabulary rows do not divide among 2 ranks"
            in proc.stdout)
    assert "replicated  lm_head.weight: its 513 vocabulary rows do not divide among 2 ranks" in proc.stdout
    assert "0 all-gathers" in proc.stdout


@needs_mpirun
def test_replicated_vocab_runs_as_tp1(fuselm_bin, model_cache, tmp_path):
    """... and the model still runs as TP 1 and transformers do."""
    check_family("llama_v513", 2, fuselm_bin, model_cache, tmp_path)


def test_plan_replicates_mqa_kv(fuselm_bin, model_cache):
    """gpt_bigcode MQA: one packed c_attn, its single KV head kept whole on every rank."""
    proc = inspect_tp(fuselm_bin, build("gpt_bigcode_mqa", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    assert "c_attn.weight: column parallel (dim 0) q:4x16->32 k:1x16->16 v:1x16->16" in proc.stdout


def test_plan_shards_full_width_qk_norm(fuselm_bin, model_cache):
    """OLMoE normalizes q and k over their full widths: each rank holds its heads' columns of the
    norm weights and all-reduces the sum of squares, so the attention stays sharded."""
    proc = inspect_tp(fuselm_bin, build("olmoe", model_cache), 2)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "replicated  model.layers.0.self_attn.__fused_qkv.weight" not in out
    assert ("model.layers.0.self_attn.q_norm.weight: weight of an RMSNorm over a split width (32 of 64 per rank; "
            "its sum of squares is all-reduced)") in out
    assert ("model.layers.0.self_attn.k_norm.weight: weight of an RMSNorm over a split width (16 of 32 per rank; "
            "its sum of squares is all-reduced)") in out


def test_heads_that_do_not_divide_fail_in_one_line(fuselm_bin, model_cache):
    proc = inspect_tp(fuselm_bin, build("llama", model_cache), 3)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == ("fuselm: error: tensor parallel size 3: model.layers.0.self_attn.__fused_qkv.weight (q) has "
                         "4 heads x 16 = 64 columns, which do not divide among 3 ranks")


@needs_mpirun
def test_heads_that_do_not_divide_fail_under_mpirun(fuselm_bin, model_cache):
    """The same under mpirun, before any weight is read."""
    model_dir = build("llama", model_cache)
    proc = subprocess.run([MPIRUN, "--oversubscribe", "-np", "3", str(fuselm_bin), "generate", str(model_dir),
                           "--prompt-ids", "1,2", "--max-tokens", "1", "--tensor-parallel-size", "3"],
                          capture_output=True, text=True, timeout=600, env=ENV)
    assert proc.returncode != 0
    assert "4 heads x 16 = 64 columns, which do not divide among 3 ranks" in proc.stderr
    assert "loaded" not in proc.stderr


@needs_mpirun  # a build without MPI says so instead
def test_world_size_must_match(fuselm_bin, model_cache):
    proc = subprocess.run([str(fuselm_bin), "generate", str(build("llama", model_cache)), "--prompt-ids", "1,2",
                           "--max-tokens", "1", "--tensor-parallel-size", "2"],
                          capture_output=True, text=True, timeout=600, env=ENV)
    assert proc.returncode != 0
    assert "--tensor-parallel-size 2 but the MPI job has 1 processes" in proc.stderr


class MpiServer(Server):
    """fuselm_server.Server, started as `mpirun -np n fuselm serve ... --tensor-parallel-size n`."""

    def __init__(self, fuselm_bin: Path, model_dir: Path, n: int, log: Path):
        super().__init__(fuselm_bin, model_dir, ["--tensor-parallel-size", str(n)], log,
                         launcher=[MPIRUN, "--oversubscribe", "-np", str(n)], env=ENV)


def tiny_with_tokenizer(model_cache: Path, tokenizer_dir: Path) -> Path:
    """A tiny llama over SmolLM2's tokenizer (vocabulary 49152), so serve can take text."""
    out = model_cache / "llama_tok"
    if (out / "config.json").exists():
        return out
    tiny_models.FAMILIES.setdefault("llama_v49152", ("LlamaConfig", {"vocab_size": 49152, "bos_token_id": 1,
                                                                      "eos_token_id": 2}))
    tiny_models.build("llama_v49152", out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out


@needs_mpirun
def test_serve_under_mpirun_answers_as_tp1(fuselm_bin, model_cache, smollm2_dir, tmp_path):  # noqa: F811
    """`mpirun -np 2 fuselm serve --tensor-parallel-size 2` answers the openai client with the greedy
    text of `fuselm serve` alone, which is transformers' greedy text."""
    import openai
    from transformers import AutoTokenizer

    model_dir = tiny_with_tokenizer(model_cache, smollm2_dir)
    prompts = ["The capital of France is", "Once upon a time"]

    def answers(server):
        c = openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)
        return [c.completions.create(model="llama_tok", prompt=p, max_tokens=10, temperature=0).choices[0].text for p in prompts]

    alone = Server(fuselm_bin, model_dir, [], tmp_path / "tp1.log")
    try:
        want = answers(alone)
    finally:
        alone.stop()
    tp = MpiServer(fuselm_bin, model_dir, 2, tmp_path / "tp2.log")
    try:
        got = answers(tp)
    finally:
        tp.stop()
    assert "tensor parallel: 2 ranks" in tp.log_path.read_text()
    assert got == want
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = parity.hf_model(model_dir)
    for p, text in zip(prompts, got):
        ids = tok(p)["input_ids"]
        assert text == tok.decode(parity.hf_greedy(model, ids, 10)), p
