#!/usr/bin/env bash
# Every test: set up, prepare the default model, the function-size check (lizard: no function in
# src/ over 120 lines or cyclomatic complexity 40), then the C++ unit tests (ctest) and the Python tests that compare fuselm
# with transformers and the tokenizers library (pytest).
#   scripts/test.sh [PYTEST ARGS]   the tests, on the Release build (build/)
#   scripts/test.sh --sanitize      long mode: the C++ unit tests, then the bad-input tests against
#                                   the fuselm binary, built with AddressSanitizer and
#                                   UndefinedBehaviorSanitizer (build-asan/), then a short serving
#                                   test (request limits, streams, hang-ups, hostile clients) on
#                                   that binary; any report fails
#   scripts/test.sh --long [SECONDS] long mode: every case too slow for the default run (pytest ids
#                                   holding long_, tests/python/long_mode.py, FUSELM_LONG=1): `fuselm
#                                   verify` on the real checkpoints (Gemma 3 270M as its GGUF and as an
#                                   fp32 dir, Qwen2.5-Coder 0.5B, SmolLM2 Q4_1), the 1- and 300-token
#                                   prompts of every parity family, every tool template, every GGUF
#                                   architecture's file, every wrapper, hybrid and sweep family; then
#                                   the soak test
#                                   (tests/soak/soak.py, default 120 s of concurrent clients against
#                                   `fuselm serve` on build/fuselm)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/prepare_default_model.sh >/dev/null
if [ "${1:-}" = "--sanitize" ]; then
  shift
  echo "test: building with ASan and UBSan (build-asan/)"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUSELM_SANITIZE=ON -DFUSELM_UNITY=OFF "${launcher[@]}" >/dev/null
  ninja -C build-asan fuselm fuselm_tests >/dev/null
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  echo "test: C++ unit tests under ASan and UBSan"
  ctest --test-dir build-asan --output-on-failure -j2
  echo "test: bad-input tests against the sanitized fuselm"
  FUSELM_BIN="$PWD/build-asan/fuselm" .venv/bin/python -m pytest -q tests/python/test_bad_input.py "$@"
  echo "test: serving tests against the sanitized fuselm"
  FUSELM_BIN="$PWD/build-asan/fuselm" .venv/bin/python -m pytest -q tests/python/test_serve_limits.py \
    tests/python/test_serve.py -k "limit or deep or 413 or chunk or timeout or queue or streaming_equals or disconnect or errors_are or tokenize" "$@"
  echo "test: hostile-client tests against the sanitized fuselm"
  FUSELM_BIN="$PWD/build-asan/fuselm" .venv/bin/python -m pytest -q tests/python/test_serve_hostile.py "$@"
  echo "test: sanitized run clean"
  exit 0
fi
if [ "${1:-}" = "--long" ]; then
  echo "test: the long cases (pytest ids holding long_: real checkpoints, every prompt length, family, template and GGUF architecture)"
  scripts/fetch_real_checkpoints.sh >/dev/null
  FUSELM_LONG=1 .venv/bin/python -m pytest -q -n "${FUSELM_TEST_WORKERS:-2}" --dist loadfile tests/python -k long_
  echo "test: soak test (tests/soak/soak.py)"
  exec .venv/bin/python tests/soak/soak.py --seconds "${2:-120}"
fi
echo "test: function size (no function in src/ over 120 lines or over cyclomatic complexity 40)"
.venv/bin/python -m lizard -L 120 -C 40 -a 1000 -w src
echo "test: C++ unit tests"
ctest --test-dir build --output-on-failure -j2
echo "test: Python tests (parity with transformers, tokenizer, bad input)"
# Two workers, one test file each at a time (--dist loadfile keeps a file's module-scoped server
# or model in one process): capture is single-threaded Python, so two files overlap well on two
# cores. FUSELM_TEST_WORKERS=0 runs them in this process.
.venv/bin/python -m pytest -q --durations=15 -n "${FUSELM_TEST_WORKERS:-2}" --dist loadfile tests/python "$@"
