#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-server and llama-quantize (CPU only, -DGGML_NATIVE=ON) from
# the llama.cpp tree vendored in the pinned PyPI sdist llama-cpp-python==0.3.36, into a cache
# outside the repository, and prints the cache's llama.cpp directory on stdout.
#
#   bench/compare/llamacpp.sh            # fetch (pip download), extract, build; reused when present
#
# Cache: $FUSELM_BENCH_CACHE (default ~/.cache/fuselm-bench), laid out as
#   sdist/llama_cpp_python-0.3.36.tar.gz   the sdist, checked against its pinned sha256
#   llama.cpp-0.3.36/src                   its vendor/llama.cpp tree (convert_hf_to_gguf.py, gguf-py)
#   llama.cpp-0.3.36/build/bin             llama-bench, llama-server, llama-quantize, llama-batched-bench
#                                          (bench/serving/run.sh: llama.cpp's batched forward alone)
#   llama.cpp-0.3.36/build-noamx/bin       AMX machines only: llama-bench without ggml's AMX kernels
#   tools-venv/                            scikit-build-core, which pip needs to read the sdist's
#                                          metadata under --no-build-isolation
# A step whose result is there is skipped, so a second run costs nothing. Progress goes to stderr;
# the build log to llama.cpp-0.3.36/build.log. FUSELM_BENCH_JOBS sets the build's parallelism
# (default: the number of cores); the build runs under nice.
set -euo pipefail

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
SKBUILD_CORE=scikit-build-core==0.11.6
CACHE="${FUSELM_BENCH_CACHE:-$HOME/.cache/fuselm-bench}"
TREE="$CACHE/llama.cpp-$VERSION"
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
BIN="$TREE/build/bin"
PY="${PYTHON:-python3}"

log() { echo "llamacpp: $*" >&2; }

# pip download of an sdist prepares its metadata; with --no-build-isolation that needs the build
# backend (scikit-build-core) importable, so it lives in a small venv of its own in the cache.
fetch_sdist() {
  [ -f "$SDIST" ] && return 0
  mkdir -p "$CACHE/sdist"
  if [ ! -x "$CACHE/tools-venv/bin/pip" ]; then
    log "creating $CACHE/tools-venv ($SKBUILD_CORE)"
    "$PY" -m venv "$CACHE/tools-venv"
    "$CACHE/tools-venv/bin/pip" install -q --disable-pip-version-check "$SKBUILD_CORE" >&2
  fi
  log "pip download llama-cpp-python==$VERSION (sdist)"
  "$CACHE/tools-venv/bin/pip" download -q --disable-pip-version-check --no-deps \
    --no-build-isolation --no-binary :all: -d "$CACHE/sdist" "llama-cpp-python==$VERSION" >&2
}

check_sdist() {
  local got
  got=$(sha256sum "$SDIST" | cut -d' ' -f1)
  if [ "$got" != "$SHA256" ]; then
    echo "llamacpp: error: $SDIST has sha256 $got, expected $SHA256" >&2
    exit 1
  fi
}

extract() {
  [ -f "$TREE/src/convert_hf_to_gguf.py" ] && [ -f "$TREE/src/CMakeLists.txt" ] && return 0
  log "extracting vendor/llama.cpp into $TREE/src"
  rm -rf "$TREE/src" "$TREE/src.tmp"
  mkdir -p "$TREE/src.tmp"
  tar -xzf "$SDIST" -C "$TREE/src.tmp" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp"
  mv "$TREE/src.tmp" "$TREE/src"
}

build() {
  if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] && [ -x "$BIN/llama-quantize" ] &&
     [ -x "$BIN/llama-batched-bench" ]; then
    return 0
  fi
  local jobs="${FUSELM_BENCH_JOBS:-$(nproc)}"
  log "building llama-bench, llama-server, llama-quantize, llama-batched-bench (-j$jobs, log: $TREE/build.log)"
  {
    cmake -S "$TREE/src" -B "$TREE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON
    # llama-bench first: the speed comparison needs only it, the serving benchmark llama-server.
    nice -n 10 cmake --build "$TREE/build" -j "$jobs" --target llama-bench
    nice -n 10 cmake --build "$TREE/build" -j "$jobs" --target llama-server llama-quantize llama-batched-bench
  } >"$TREE/build.log" 2>&1 || {
    tail -30 "$TREE/build.log" >&2
    echo "llamacpp: error: the llama.cpp build failed (log: $TREE/build.log)" >&2
    exit 1
  }
}

# On an AMX machine, a second llama-bench without ggml's AMX kernels (its AVX-512 repacking kept):
# they die by SIGSEGV in ggml_backend_amx_mul_mat on some such machines (ggml-org/llama.cpp#20824),
# and bench/compare/compare.py then reruns on this one instead of dropping all repacking.
build_noamx() {
  grep -qw amx_int8 /proc/cpuinfo 2>/dev/null || return 0
  [ -x "$TREE/build-noamx/bin/llama-bench" ] && return 0
  local jobs="${FUSELM_BENCH_JOBS:-$(nproc)}" noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  log "building llama-bench without AMX (-j$jobs, log: $TREE/build-noamx.log)"
  {
    cmake -S "$TREE/src" -B "$TREE/build-noamx" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx"
    nice -n 10 cmake --build "$TREE/build-noamx" -j "$jobs" --target llama-bench
  } >"$TREE/build-noamx.log" 2>&1 || {
    tail -30 "$TREE/build-noamx.log" >&2
    echo "llamacpp: error: the llama.cpp build without AMX failed (log: $TREE/build-noamx.log)" >&2
    exit 1
  }
}

fetch_sdist
check_sdist
extract
build
build_noamx
echo "$TREE"
