#!/usr/bin/env bash
# Tensor parallelism's closing figures (docs/tensor-parallel.md): per-rank weight memory, decode
# tokens/s and all-reduce time per token at TP 1 and TP N, one after the other in one run.
#   scripts/bench_tp.sh MODEL_DIR [N=2] [THREADS_PER_RANK=1] [DTYPE=f32]
# GEN (tokens per decode test, default 32) and REPS (default 3) override the test size; MPIRUN_ARGS
# adds mpirun options (a hostfile: MPIRUN_ARGS="--hostfile hosts").
set -euo pipefail
model=${1:?usage: scripts/bench_tp.sh MODEL_DIR [N] [THREADS_PER_RANK] [DTYPE]}
n=${2:-2}
t=${3:-1}
dtype=${4:-f32}
gen=${GEN:-32}
reps=${REPS:-3}
bin="$(cd "$(dirname "$0")/.." && pwd)/build/fuselm"
out=$(mktemp -d)
export OMP_NUM_THREADS=$t OMPI_MCA_mpi_yield_when_idle=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(bench "$model" -p 0 -n "$gen" -r "$reps" -t "$t" --dtype "$dtype" --no-bandwidth)

report() {  # $1: label, $2: stderr file, $3: stdout file
  echo "== $1"
  grep -E "loaded .* MB of weights" "$2" | sed 's/^fuselm: /  /'
  grep -E "^\|" "$3" | sed 's/^/  /'
  local per arline total count
  per=$(grep -oE "[0-9]+ all-reduces and [0-9]+ all-gathers per forward" "$2" | head -1 || true)
  arline=$(grep -E "spent .* in [0-9]+ all-reduces" "$2" || true)
  if [[ -n "$per" && -n "$arline" ]]; then
    local k total count
    k=${per%% all-reduces*}
    total=$(sed -E 's/.*spent ([0-9.]+) s in ([0-9]+) all-reduces.*/\1/' <<<"$arline")
    count=$(sed -E 's/.*spent ([0-9.]+) s in ([0-9]+) all-reduces.*/\2/' <<<"$arline")
    awk -v k="$k" -v s="$total" -v c="$count" 'BEGIN {
      f = c / k; printf "  %s per forward; %d forwards: %.2f ms of all-reduce per token (rank 0)\n", k " all-reduces", f, 1000 * s / f }'
    grep -E "all-gathers of logits" "$2" | sed 's/^fuselm: /  /' || true
  fi
}

"$bin" "${args[@]}" >"$out/tp1.out" 2>"$out/tp1.err" || { cat "$out/tp1.err"; exit 1; }
report "TP 1" "$out/tp1.err" "$out/tp1.out"
# shellcheck disable=SC2086
mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle ${MPIRUN_ARGS:-} \
  "$bin" "${args[@]}" --tensor-parallel-size "$n" >"$out/tpn.out" 2>"$out/tpn.err" || { cat "$out/tpn.err"; exit 1; }
report "TP $n (mpirun -np $n)" "$out/tpn.err" "$out/tpn.out"
rm -rf "$out"
