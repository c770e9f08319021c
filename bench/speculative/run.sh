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
# 5. a real 0.5 B checkpoint (Qwen2.5-Coder-0.5B-Instruct, its Q4_K_M GGUF from scripts/fetch_real_checkpoints.sh)
#    as a BF16 target drafted by its own weights as Q4_0, K=4 and K=8, on a free-text answer long
#    enough to fill -n 256 (the 135 M rows above are bound by each forward's fixed cost, this one by bytes)
real=${SPEC_REAL:-$HOME/.cache/fuselm/real/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
if [ -f "$real" ]; then
  for k in 4 8; do
    "$fuselm" bench "$real" --speculative-method draft --speculative-model "$real" --speculative-dtype q4_0 --num-speculative-tokens "$k" \
      --dtype bf16 --chat --prompt-file "$here/free_text_long.txt" -n 256 -r 5 -t "$t" 2>/dev/null | tail -1
  done
else
  echo "(no $real: run scripts/fetch_real_checkpoints.sh for the 0.5 B self-draft rows)"
fi
