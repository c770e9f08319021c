#!/usr/bin/env bash
# fuselm vs llama.cpp vs transformers eager, one command, on a fresh clone:
#
#   bench/compare/run.sh              # SmolLM2-135M and a random 1.1 B TinyLlama-shaped Llama,
#                                     # F32 and BF16 (Q8_0/Q4_0 when fuselm runs them), 2 threads,
#                                     # 2 interleaved rounds x 3 repetitions
#   bench/compare/run.sh --quick      # 1 round x 2 repetitions
#   bench/compare/run.sh [--quick] -- --models default --types bf16 --threads 1 2 --depth 4096
#                                     # anything after -- goes to bench/compare/compare.py
#   bench/compare/run.sh -- --models qwen3_5-0.8b lfm2-700m --types bf16 q8_0
#                                     # random models of hybrid configs' shapes (bench/compare/shapes/)
#   bench/compare/run.sh -- --models real --engines llama.cpp fuselm
#                                     # the tests' real GGUF checkpoints (or FILE.gguf paths) as
#                                     # they are, both engines
#
# Steps (each skipped when its result is there): scripts/setup.sh (.venv and build/fuselm);
# bench/compare/llamacpp.sh (llama-bench, llama-server, llama-quantize from the pinned
# llama-cpp-python 0.3.36 sdist, into $FUSELM_BENCH_CACHE, default ~/.cache/fuselm-bench); the
# random model and the GGUF files (llama.cpp's own converter) in the same cache; then the runs.
# The table goes to stdout, progress to stderr. See bench/README.md for how to read it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export FUSELM_BENCH_CACHE="${FUSELM_BENCH_CACHE:-$HOME/.cache/fuselm-bench}"

args=()
if [ "${1:-}" = "--quick" ]; then
  args+=(--rounds 1 --reps 2)
  shift
fi
[ "${1:-}" = "--" ] && shift

scripts/setup.sh >&2
tree=$(bench/compare/llamacpp.sh)
exec .venv/bin/python bench/compare/compare.py --llamacpp "$tree" --cache "$FUSELM_BENCH_CACHE" "${args[@]}" "$@"
