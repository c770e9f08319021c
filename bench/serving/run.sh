#!/usr/bin/env bash
# The serving comparison, one command, on a fresh clone: fuselm serve and llama.cpp's llama-server
# side by side in one run, at 1, 4, 16 and 64 concurrent streaming clients, 128-token prompts and
# 128 output tokens each (ignore_eos), 2 requests per client, 2 threads for both servers:
#
#   bench/serving/run.sh              # BF16 (both from the model directory; llama-server's GGUF
#                                     # from llama.cpp's own converter), then the default model's
#                                     # Q4_1 GGUF (scripts/run.sh's file), the same for both engines
#   bench/serving/run.sh --bf16-only  # only the BF16 table
#   bench/serving/run.sh -- --threads 1 --concurrency 1 16   # more bench_serving.py options
#
# Steps (each skipped when its result is there): scripts/setup.sh (.venv and build/fuselm);
# bench/compare/llamacpp.sh (llama-server from the pinned llama-cpp-python 0.3.36 sdist, into
# $FUSELM_BENCH_CACHE, default ~/.cache/fuselm-bench); the default model. Each table ends with a
# summary: output tok/s per engine and its ratio to its own 1-stream figure, fuselm / llama-server,
# median/p99 TTFT and TPOT, the issue's goals (16 streams >= 4x 1 stream; >= 1.2x llama-server at
# 16 and 64 streams) met or not, and the load average. JSON rows go to $FUSELM_BENCH_CACHE/results.
# After the BF16 table, llama.cpp's llama-batched-bench on the same GGUF and threads (128 prompt and
# 128 generated tokens per sequence at 1, 4, 16 and 64 sequences, no server): llama.cpp's own
# batched throughput, the ceiling of llama-server's rows (docs/serving.md, "What llama-server can
# reach at all"). llama-server's flags and why: bench_serving.py's docstring.
#
# Run it on a quiet machine (under load two spinning threads per server collapse); it takes about
# 15 minutes there. FUSELM_SERVING_NO_BATCHED=1 skips llama-batched-bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
export FUSELM_BENCH_CACHE="${FUSELM_BENCH_CACHE:-$HOME/.cache/fuselm-bench}"

gguf_too=1
if [ "${1:-}" = "--bf16-only" ]; then
  gguf_too=0
  shift
fi
[ "${1:-}" = "--" ] && shift

scripts/setup.sh >&2
bench/compare/llamacpp.sh >/dev/null
results="$FUSELM_BENCH_CACHE/results"
mkdir -p "$results"
common=(--engines fuselm llama-server --threads 2 --concurrency 1 4 16 64 --prompt-len 128 --output-len 128
        --prompts-per-client 2)
stamp=$(date -u +%Y%m%dT%H%M%SZ)

echo "== BF16 weights (fuselm --dtype bf16; llama-server: convert_hf_to_gguf.py --outtype bf16) =="
.venv/bin/python bench/serving/bench_serving.py "${common[@]}" --dtype bf16 --label "BF16, 2 threads" \
  --json "$results/serving-bf16-$stamp.json" "$@"

if [ "${FUSELM_SERVING_NO_BATCHED:-0}" != 1 ]; then
  bf16_gguf=$(.venv/bin/python bench/serving/bench_serving.py --print-gguf bf16 | tail -n 1)
  echo
  echo "== llama.cpp without the server: llama-batched-bench on $bf16_gguf, 2 threads; B x 128 / T s is its output tok/s for a level's work without the server =="
  "$FUSELM_BENCH_CACHE/llama.cpp-0.3.36/build/bin/llama-batched-bench" -m "$bf16_gguf" -c 20480 -b 2048 -ub 2048 \
    -npp 128 -ntg 128 -npl 1,4,16,64 -t 2 -tb 2 2>/dev/null | grep -E '^\|' || echo "llama-batched-bench failed"
fi

if [ "$gguf_too" = 1 ]; then
  # llama-server runs it with --no-repack: this build (llama-cpp-python 0.3.36's llama.cpp) dies
  # with SIGSEGV right after its thread-pool start on any Q4_1 file (this one, or llama-quantize's)
  # when it repacks the weights for the CPU; without the repack it serves and answers correctly.
  gguf=$(scripts/prepare_default_model.sh --gguf | tail -n 1)
  echo
  echo "== the default model's Q4_1 GGUF, the same file for both engines (llama-server --no-repack): $gguf =="
  .venv/bin/python bench/serving/bench_serving.py "${common[@]}" --model-dir "$gguf" --gguf "$gguf" --llama-args=--no-repack \
    --label "Q4_1 GGUF, 2 threads" --json "$results/serving-q4_1-$stamp.json" "$@"
fi
