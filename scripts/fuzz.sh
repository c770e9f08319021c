#!/usr/bin/env bash
# Fuzzes every parser of outside input with libFuzzer: scripts/fuzz.sh [SECONDS [TARGET...]]
# (default 60 s per target, every target of fuzz/, one after another). The targets (fuzz/*_fuzz.cc) are built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/ (apart from the g++ build/). Each runs from its seed
# corpus fuzz/corpus/<target>/ and keeps what it finds in build-fuzz/corpus/<target>/. A crash,
# leak, timeout or sanitizer report is saved as build-fuzz/artifacts/<target>-crash-* and fails
# the script; turn each into a regression test (tests/cpp/fuzz_regression_test.cc).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}

# clang, libFuzzer and clang's OpenMP come from Debian, for this script only.
FUZZ_APT_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${FUZZ_APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DFUSELM_FUZZ=ON "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
targets=("${@:2}")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi
ninja -C build-fuzz "${targets[@]}" >/dev/null

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p build-fuzz/artifacts
failed=()
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/$t.log"
  echo "fuzz: $t for ${seconds}s"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  if build-fuzz/"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="build-fuzz/artifacts/$t-" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    echo "fuzz: $t: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') executions, no crash"
  else
    failed+=("$t")
    echo "fuzz: $t: FOUND A CRASH (log $log; input in build-fuzz/artifacts/)" >&2
    grep -m3 -E "ERROR|runtime error|SUMMARY" "$log" >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: error: crashes in ${failed[*]}" >&2
  exit 1
fi
