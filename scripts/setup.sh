#!/usr/bin/env bash
# Installs what fuselm needs on a fresh Debian machine and builds it. Idempotent: each step is
# skipped when its result is already there.
#   Debian packages (apt-get): compiler, CMake, Ninja and the C++ libraries the engine uses
#   .venv/ at the repository root: pinned Python packages (requirements.txt)
#   build/: the fuselm binary, tests and benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."

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
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
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

echo "setup: building (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build >/dev/null
