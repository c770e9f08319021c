#!/usr/bin/env bash
# Every test: set up, prepare the default model, then the C++ unit tests (ctest) and the Python
# tests that compare fuselm with transformers and the tokenizers library (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/prepare_default_model.sh >/dev/null
echo "test: C++ unit tests"
ctest --test-dir build --output-on-failure -j2
echo "test: Python tests (parity with transformers, tokenizer, bad input)"
.venv/bin/python -m pytest -q tests/python "$@"
