#!/usr/bin/env bash
# Installs what fuselm needs on a fresh Debian machine and builds it. Idempotent: each step is
# skipped when its result is already there.
#   Debian packages (apt-get): compiler, CMake, Ninja and the C++ libraries the engine uses
#   .venv/ at the repository root: pinned Python packages (requirements.txt)
#   ~/.cache/fuselm-deps/xgrammar-<version>/: the pinned xgrammar sdist (scripts/xgrammar-version),
#     whose C++ library the build compiles (constrained decoding, src/grammar/)
#   build/: the fuselm binary, tests and benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."

# A compiler launcher named in the environment (CMake and the pip builds below read it) must exist,
# or every compile fails deep inside a build log.
launcher="${CMAKE_CXX_COMPILER_LAUNCHER:-}"
if [ -n "$launcher" ] && ! command -v "$launcher" >/dev/null; then
  echo "setup: error: CMAKE_CXX_COMPILER_LAUNCHER=$launcher is set but $launcher is not installed (apt-get install $launcher, or unset the variable)" >&2
  exit 1
fi

APT_PACKAGES=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev libcli11-dev libgtest-dev libcpp-httplib-dev
              libfmt-dev libutf8proc-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/pip ]; then  # none, or one whose creation was cut short
  echo "setup: creating .venv"
  "$PY" -m venv --clear .venv
fi

# xgrammar's C++ sources come from its PyPI sdist (the version pinned in scripts/xgrammar-version),
# fetched once into a per-user cache, unpacked, and named to CMake.
XGRAMMAR_VERSION=$(head -n1 scripts/xgrammar-version)
DEPS_CACHE="${FUSELM_DEPS_CACHE:-$HOME/.cache/fuselm-deps}"
XGRAMMAR_DIR="$DEPS_CACHE/xgrammar-$XGRAMMAR_VERSION"
if [ ! -f "$XGRAMMAR_DIR/include/xgrammar/xgrammar.h" ]; then
  echo "setup: fetching the xgrammar $XGRAMMAR_VERSION sdist into $DEPS_CACHE"
  mkdir -p "$DEPS_CACHE"
  if ! .venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
       "xgrammar==$XGRAMMAR_VERSION" -d "$DEPS_CACHE" >"$DEPS_CACHE/pip.log" 2>&1; then
    tail -20 "$DEPS_CACHE/pip.log" >&2
    echo "setup: error: pip could not download the xgrammar $XGRAMMAR_VERSION sdist" >&2
    exit 1
  fi
  tar -xzf "$DEPS_CACHE/xgrammar-$XGRAMMAR_VERSION.tar.gz" -C "$DEPS_CACHE"
fi

# The build needs none of the Python packages: it runs while pip installs them (on a fresh 2-core
# machine the two together take the longer one's time, not the sum).
echo "setup: building (build/; log: build/ninja.log)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSELM_XGRAMMAR_DIR="$XGRAMMAR_DIR" >/dev/null
ninja -C build >build/ninja.log 2>&1 &
build_pid=$!
trap 'kill $build_pid 2>/dev/null || true' EXIT

stamp=.venv/.fuselm-requirements
if ! cmp -s requirements.txt "$stamp" 2>/dev/null; then
  echo "setup: installing Python packages into .venv (pinned, requirements.txt)"
  if ! .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt >.venv/pip.log 2>&1; then
    grep -v "^WARNING: Location" .venv/pip.log | tail -20 >&2
    echo "setup: error: pip could not install requirements.txt (log: .venv/pip.log)" >&2
    exit 1
  fi
  cp requirements.txt "$stamp"
fi

if ! wait $build_pid; then
  grep -v "^\[" build/ninja.log | tail -40 >&2
  echo "setup: error: the build failed (log: build/ninja.log)" >&2
  exit 1
fi
trap - EXIT
