#!/usr/bin/env bash
# Starts N local `fbt train` processes for data-parallel training, with torchrun's environment
# (MASTER_ADDR, MASTER_PORT on a free port, RANK, WORLD_SIZE, LOCAL_RANK).
#   scripts/launch.sh -n 2 -- --config debug --data data/ --out runs/dp
# Ctrl-C reaches every rank (they finish the step, rank 0 checkpoints). Exits with the first
# non-zero status of any rank. FBT_BIN overrides the binary (default build/fbt).
set -euo pipefail
usage() { echo "usage: $0 -n NPROC [-- fbt-train-args...]" >&2; exit 2; }
nproc_per_node=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || usage; nproc_per_node="$2"; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[[ "$nproc_per_node" =~ ^[1-9][0-9]*$ ]] || usage
bin="${FBT_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/fbt}"
[ -x "$bin" ] || { echo "$0: $bin not found; build first (scripts/build.sh)" >&2; exit 1; }

export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
free_port() {  # a random port nothing on this machine listens on
  local p
  while true; do
    p=$(( 20000 + RANDOM % 40000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
export MASTER_PORT="${MASTER_PORT:-$(free_port)}"
export WORLD_SIZE="$nproc_per_node"
# Share the cores: torchrun sets 1 thread; here cores / processes (at least 1).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / nproc_per_node > 0 ? $(nproc) / nproc_per_node : 1 ))}"

pids=()
trap 'kill -INT "${pids[@]}" 2>/dev/null || true' INT
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM
for ((r = 0; r < nproc_per_node; r++)); do
  RANK=$r LOCAL_RANK=$r "$bin" train "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  rc=0
  while true; do  # `wait` returns early when a trapped signal arrives; wait again
    wait "$pid" && rc=0 || rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  [ "$status" -ne 0 ] || status=$rc
done
exit "$status"
