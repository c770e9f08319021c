#!/usr/bin/env bash
# Every test: set up, prepare the default model, the function-length check (lizard: no function in
# src/ over 120 lines), then the C++ unit tests (ctest) and the Python tests that compare fuselm
# with transformers and the tokenizers library (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/prepare_default_model.sh >/dev/null
echo "test: function length (no function in src/ over 120 lines)"
.venv/bin/python -m lizard -L 120 -C 100000 -a 1000 -w src
echo "test: C++ unit tests"
ctest --test-dir build --output-on-failure -j2
echo "test: Python tests (parity with transformers, tokenizer, bad input)"
.venv/bin/python -m pytest -q tests/python "$@"
