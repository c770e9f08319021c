#!/usr/bin/env bash
# Write the logits of a fixed set of runs, for proving a refactor bit-identical:
#
#   scripts/logits_snapshot.sh OUT_DIR [FUSELM_BINARY]      # default binary: build/fuselm
#   diff -r BEFORE_DIR AFTER_DIR                             # no output: bit-identical
#
# Runs (each: 4 prompt ids, 8 greedy tokens past EOS, every logits row as raw f32):
#   default model f32 / bf16 / q8_0 / q4_0 (at load), the real SmolLM2 Q4_1 GGUF when
#   scripts/fetch_real_checkpoints.sh fetched it, a tiny random MLA (deepseek_v3 v2_style) and MoE
#   (qwen3_moe, deepseek_v3) model, and a tiny random llama and qwen3_moe at TP=2 under mpirun when
#   it is installed (the default model's 9 heads do not split in two).
# Tiny models are built once into $FUSELM_CACHE/snapshot-models (tests/python's builders).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/logits_snapshot.sh OUT_DIR [FUSELM_BINARY]}
bin=$(realpath "${2:-build/fuselm}")
mkdir -p "$out"
cache=${FUSELM_CACHE:-$HOME/.cache/fuselm}/snapshot-models
mkdir -p "$cache"
py=.venv/bin/python
ids=1,2,3,4
keep() {  # the JSON result without timings, so two snapshots compare with diff -r
  "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({k: r[k] for k in ("token_ids", "text", "logprobs", "finish_reason") if k in r}))'
}
run() {  # NAME MODEL [extra args...]
  local name=$1 model=$2; shift 2
  "$bin" generate "$model" --prompt-ids "$ids" --max-tokens 8 --ignore-eos --json \
    --logits-out "$out/$name.f32" "$@" | keep > "$out/$name.json"
  echo "$name: $(sha256sum < "$out/$name.f32" | cut -c1-16)" >&2
}
build_tiny() {  # KIND FAMILY -> prints the model dir
  local dir=$cache/$2
  [ -f "$dir/config.json" ] || (cd tests/python && ../../$py -c "
import sys; from pathlib import Path; import ${1}_models as m; m.build('$2', Path('$dir'))" >&2)
  echo "$dir"
}
model=models/SmolLM2-135M-Instruct
for t in f32 bf16 q8_0 q4_0; do run "default-$t" "$model" --dtype "$t"; done
q41=$(ls "${FUSELM_CACHE:-$HOME/.cache/fuselm}"/real/SmolLM2-135M-Instruct.Q4_1.gguf 2>/dev/null || true)
[ -n "$q41" ] && run default-gguf-q4_1 "$q41"
run mla-v2_style "$(build_tiny mla v2_style)"
run moe-qwen3_moe "$(build_tiny moe qwen3_moe)"
run moe-deepseek_v3 "$(build_tiny moe deepseek_v3)"
tp2() {  # NAME MODEL
  mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" generate "$2" --tensor-parallel-size 2 \
    --prompt-ids "$ids" --max-tokens 8 --ignore-eos --json --logits-out "$out/$1.f32" | grep '^{' | keep > "$out/$1.json"
  echo "$1: $(sha256sum < "$out/$1.f32" | cut -c1-16)" >&2
}
if command -v mpirun >/dev/null; then
  tp2 llama-tp2 "$(build_tiny tiny llama)"
  tp2 moe-qwen3_moe-tp2 "$(build_tiny moe qwen3_moe)"
fi
