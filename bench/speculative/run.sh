#!/usr/bin/env bash
# Speculative decoding against plain greedy decoding, side by side in one process per row
# (bench/README.md, "Speculative decoding"). Usage: bench/speculative/run.sh [FUSELM] [THREADS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fuselm=${1:-$here/../../build/fuselm}
t=${2:-2}
lscpu | grep -m1 "Model name" || true
# 1. input-grounded: a ~300-token passage to repeat with one change; n-gram lookup
"$fuselm" bench --speculative-method ngram --num-speculative-tokens 5 --chat --prompt-file "$here/copy_prompt.txt" -n 256 -r 5 -t "$t" 2>/dev/null
# 2. free text with little repetition: n-gram must not slow it down (it backs off)
"$fuselm" bench --speculative-method ngram --num-speculative-tokens 5 --chat --prompt-file "$here/free_text.txt" -n 256 -r 5 -t "$t" 2>/dev/null | tail -1
# 3. free text, a BF16 target drafted by its own weights as Q4_0
"$fuselm" bench --speculative-method draft --speculative-model "${SPEC_MODEL:-$here/../../models/SmolLM2-135M-Instruct}" --speculative-dtype q4_0 --num-speculative-tokens 4 \
  --dtype bf16 --chat --prompt-file "$here/free_text.txt" -n 256 -r 5 -t "$t" 2>/dev/null | tail -1
# 4. the same with a Q8_0 self-draft, and (when given) a GGUF of the model as the draft
"$fuselm" bench --speculative-method draft --speculative-model "${SPEC_MODEL:-$here/../../models/SmolLM2-135M-Instruct}" --speculative-dtype q8_0 --num-speculative-tokens 4 \
  --dtype bf16 --chat --prompt-file "$here/free_text.txt" -n 256 -r 5 -t "$t" 2>/dev/null | tail -1
if [ -n "${SPEC_GGUF:-}" ]; then
  "$fuselm" bench --speculative-method draft --speculative-model "$SPEC_GGUF" --num-speculative-tokens 4 \
    --dtype bf16 --chat --prompt-file "$here/free_text.txt" -n 256 -r 5 -t "$t" 2>/dev/null | tail -1
fi
