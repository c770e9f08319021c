"""`fuselm bench`: its md/json/jsonl/csv outputs parse, carry llama-bench's field names, and their
figures agree with each other and with the model (parameter counts from transformers). Timings
themselves are never asserted."""
from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from pathlib import Path

import pytest

import tiny_models

# llama-bench's fields (tools/llama-bench/llama-bench.cpp, test::get_fields) that fuselm fills.
LLAMA_BENCH_FIELDS = ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
                      "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k",
                      "type_v", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
                      "stddev_ts"]
ARGS = ["-p", "8", "-n", "4", "-d", "0,16", "-r", "2", "-t", "1", "--dtype", "f32,bf16", "--bandwidth-mib", "16"]
# (n_prompt, n_gen, n_depth) of each row, in llama-bench's order: per dtype, per depth, pp then tg.
TESTS = [(8, 0, 0), (0, 4, 0), (8, 0, 16), (0, 4, 16)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, int, int]:
    """A tiny llama (untied embeddings): (dir, parameters, parameters less all but one embedding row)."""
    d = tiny_models.build("llama", tmp_path_factory.mktemp("bench") / "llama")
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d)
    n = sum(p.numel() for p in model.parameters())  # tied parameters once
    emb = model.get_input_embeddings().weight
    assert emb is not model.get_output_embeddings().weight
    return d, n, n - emb.numel() + emb.shape[1]


def bench(fuselm_bin: Path, model: Path, *extra: str) -> str:
    proc = subprocess.run([str(fuselm_bin), "bench", str(model), *ARGS, *extra], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def rows(fuselm_bin, tiny) -> list[dict]:
    out = json.loads(bench(fuselm_bin, tiny[0], "-o", "json"))
    assert isinstance(out, list) and len(out) == 2 * len(TESTS)
    return out


def test_json_fields_and_tests(rows, tiny):
    for r in rows:
        for f in LLAMA_BENCH_FIELDS + ["weight_dtype", "samples_ns", "samples_ts", "mem_bw_gbs"]:
            assert f in r, f
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows] == TESTS * 2
    assert [r["weight_dtype"] for r in rows] == ["f32"] * 4 + ["bf16"] * 4
    assert all(r["n_threads"] == 1 and r["backends"] == "CPU" for r in rows)
    assert all(r["model_filename"] == str(tiny[0]) for r in rows)


def test_json_figures_consistent(rows):
    for r in rows:
        n_tok = r["n_prompt"] + r["n_gen"]
        assert len(r["samples_ns"]) == len(r["samples_ts"]) == 2
        for ns, ts in zip(r["samples_ns"], r["samples_ts"]):
            assert ns > 0 and ts == pytest.approx(1e9 * n_tok / ns, rel=1e-9)
        ts = r["samples_ts"]
        mean = sum(ts) / len(ts)
        sd = math.sqrt(sum((x - mean) ** 2 for x in ts) / (len(ts) - 1))  # llama-bench: n - 1
        assert r["avg_ts"] == pytest.approx(mean, rel=1e-9)
        assert r["stddev_ts"] == pytest.approx(sd, rel=1e-6, abs=1e-9)
        assert r["avg_ns"] == pytest.approx(sum(r["samples_ns"]) / 2, abs=1)
        assert r["mem_bw_gbs"] > 0 and "16 MiB" in r["mem_bw_method"]
        ceiling = r["mem_bw_gbs"] * 1e9 / (r["weight_bytes_per_token"] + r["kv_bytes_per_token"])
        assert r["decode_ceiling_ts"] == pytest.approx(ceiling, rel=1e-9)
        if r["n_gen"] > 0:
            assert r["pct_of_ceiling"] == pytest.approx(100 * r["avg_ts"] / ceiling, rel=1e-9)
        else:
            assert r["pct_of_ceiling"] == -1 and r["kv_bytes_per_token"] == 0


def test_bytes_per_token_from_the_model(rows, tiny):
    _, n_params, streamed = tiny
    cfg = tiny_models.make_config("llama")
    # KV elements per position: layers x (K and V) x kv heads x head dim.
    kv_per_pos = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    for r in rows:
        assert r["model_n_params"] == n_params
        if r["weight_dtype"] == "f32":  # every parameter in f32
            assert r["model_size"] == 4 * n_params
            assert r["weight_bytes_per_token"] == 4 * streamed
        # The cache follows the weights by default, as in generate and serve (--kv-cache-dtype auto).
        assert (r["type_k"], r["type_v"]) == ((r["weight_dtype"],) * 2), r
        if r["n_gen"] > 0:  # read at the test's mean depth
            elem = 4 if r["type_k"] == "f32" else 2
            assert r["kv_bytes_per_token"] == elem * kv_per_pos * (r["n_depth"] + r["n_gen"] // 2)
    f32 = [r for r in rows if r["weight_dtype"] == "f32"]
    bf16 = [r for r in rows if r["weight_dtype"] == "bf16"]
    assert bf16[0]["model_size"] < 0.6 * f32[0]["model_size"]


def test_jsonl_and_csv_have_the_same_fields(fuselm_bin, tiny, rows):
    lines = [json.loads(x) for x in bench(fuselm_bin, tiny[0], "-o", "jsonl").splitlines() if x.strip()]
    assert [list(x) for x in lines] == [list(r) for r in rows]
    table = list(csv.DictReader(io.StringIO(bench(fuselm_bin, tiny[0], "-o", "csv"))))
    assert len(table) == len(rows)
    assert list(table[0]) == [k for k in rows[0] if k not in ("samples_ns", "samples_ts")]
    for t, j in zip(table, lines):
        assert (int(t["n_prompt"]), int(t["n_gen"]), int(t["n_depth"])) == (j["n_prompt"], j["n_gen"], j["n_depth"])
        assert t["weight_dtype"] == j["weight_dtype"] and t["model_type"] == j["model_type"]
        assert float(t["avg_ts"]) > 0


def test_markdown_table(fuselm_bin, tiny):
    out = bench(fuselm_bin, tiny[0])
    table = [line for line in out.splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == ["model", "size", "params", "backend", "threads", "dtype", "test", "t/s", "% ceiling"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert [b[6] for b in body] == ["pp8", "tg4", "pp8 @ d16", "tg4 @ d16"] * 2
    for b in body:
        mean, sd = b[7].split(" ± ")
        assert float(mean) > 0 and float(sd) >= 0
        assert (b[8] == "") == b[6].startswith("pp")
    assert "memory bandwidth" in out and "decode ceiling" in out and "weights read per decoded token" in out


@pytest.mark.parametrize("args, needle", [(["-o", "xml"], "-o xml"), (["--dtype", "f99"], "f99"),
                                          (["-t", "0"], "-t 0")])
def test_bad_options_are_one_line_errors(fuselm_bin, tiny, args, needle):
    proc = subprocess.run([str(fuselm_bin), "bench", str(tiny[0]), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("kv", ["bf16", "q8_0"])
def test_kv_cache_dtype_sets_the_type_fields_and_the_kv_bytes(fuselm_bin, tiny, kv):
    cfg = tiny_models.make_config("llama")
    head = cfg.hidden_size // cfg.num_attention_heads
    # Bytes per position: bf16 2 per value; q8_0 34 per 32-block, each head padded to whole blocks.
    per_head = 2 * head if kv == "bf16" else -(-head // 32) * 34
    kv_per_pos = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * per_head
    out = json.loads(bench(fuselm_bin, tiny[0], "--kv-cache-dtype", kv, "-o", "json"))
    assert {(r["type_k"], r["type_v"]) for r in out} == {(kv, kv)}
    tg = [r for r in out if r["n_gen"] > 0]
    assert tg and all(r["kv_bytes_per_token"] == kv_per_pos * (r["n_depth"] + r["n_gen"] // 2) for r in tg)
