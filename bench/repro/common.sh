# Shared helpers for bench/repro/*.sh (sourced). Every run directory RUN gets:
#   run.json, metrics.jsonl (fbt train), wall.json (wall seconds of train and of each eval),
#   eval_val.json     eval-loss --passes 4 on the whole val split (standard, fused 1..4),
#   eval_slice.json   eval-loss --sequential [--contraction --max-passes 30] on SLICE_TOKENS val
#                     tokens in windows spread evenly over the split (the fixed slice for the
#                     sequential soft loss).
# A run whose eval files exist is skipped, so an interrupted script can be re-run; a run that
# another process is working on (it holds RUN.lock) is skipped too, so two scripts can share the
# work on a machine with two cores (re-run the stage afterwards to pick up what they skipped).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FBT="${FBT:-$REPO/build/fbt}"
PY="${PYTHON:-python3}"
# One thread on one core (the measurements in docs/results.md were made that way).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
PIN=()
if [ -n "${REPRO_CPU:-}" ] && command -v taskset >/dev/null; then PIN=(taskset -c "$REPRO_CPU"); fi

need_fbt() {
  [ -x "$FBT" ] || { echo "error: fbt binary not found at $FBT (run scripts/build.sh or set FBT=...)" >&2; exit 1; }
}

now_s() { date +%s.%N; }

# train_and_eval RUN_DIR DATA_DIR CONFIG STEPS EVAL_MAX_TOKENS SLICE_TOKENS CONTRACTION(0|1) -- SET_ARGS...
train_and_eval() {
  local run="$1" data="$2" config="$3" steps="$4" evalmax="$5" slice="$6" contraction="$7"
  shift 7; [ "${1:-}" = "--" ] && shift
  local sets=()
  for a in "$@"; do sets+=(--set "$a"); done
  local lock_fd
  mkdir -p "$run"  # before the lock, so the caller can write into it whoever runs it
  exec {lock_fd}>"$run.lock"
  flock -n "$lock_fd" || { echo "[repro] skip $run (another process is running it)"; exec {lock_fd}>&-; return 0; }
  if [ -f "$run/eval_slice.json" ] && [ -f "$run/eval_val.json" ] && [ -f "$run/wall.json" ]; then
    if "$PY" -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["steps"] != int(sys.argv[2]))' "$run/wall.json" "$steps"; then
      echo "[repro] skip $run (done)"; exec {lock_fd}>&-; return 0
    fi
    echo "[repro] $run was run with another step count: running it again"
    rm -f "$run/eval_slice.json" "$run/eval_val.json" "$run/wall.json" "$run/wall_train.txt"
  fi
  echo "[repro] $(date -u +%H:%M:%S) train $run ($steps steps)"
  local t0 t1 t2 t3
  t0=$(now_s)
  local done_steps=0
  [ -e "$run/latest" ] && [ -f "$run/metrics.jsonl" ] && done_steps=$("$PY" -c 'import json,sys; print(max([json.loads(l).get("step",0) for l in open(sys.argv[1]) if "tokens" in l] or [0]))' "$run/metrics.jsonl")
  if [ "$done_steps" = "$steps" ]; then
    # Training finished earlier (e.g. this script was restarted during its evaluation): keep it.
    # Without the wall time of that process, train_s falls back to the training loop's elapsed_s.
    [ -f "$run/wall_train.txt" ] || "$PY" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "tokens" in l][-1]["elapsed_s"])' "$run/metrics.jsonl" > "$run/wall_train.txt"
    echo "[repro] $run: training already finished, evaluating"
  else
  "${PIN[@]}" "$FBT" train --config "$config" --data "$data" --out "$run" --steps "$steps" --force "${sets[@]}" \
    > "$run/train.log" 2>&1 || { echo "error: training failed, see $run/train.log" >&2; tail -5 "$run/train.log" >&2; exit 1; }
  t1=$(now_s)
  # A run cut by SIGINT/SIGTERM exits 130/143 above; this also refuses a metrics file that stops short.
  local last
  last=$("$PY" -c 'import json,sys; print(max([json.loads(l).get("step",0) for l in open(sys.argv[1]) if "tokens" in l] or [0]))' "$run/metrics.jsonl")
  [ "$last" = "$steps" ] || { echo "error: $run stopped at step $last of $steps" >&2; exit 1; }
  awk "BEGIN{print $t1 - $t0}" > "$run/wall_train.txt"
  fi
  t1=$(now_s)
  "${PIN[@]}" "$FBT" eval-loss --checkpoint "$run" --data "$data" --passes 4 --max-tokens "$evalmax" \
    --out "$run/eval_val.json" > "$run/eval_val.log" 2>&1 || { echo "error: eval failed, see $run/eval_val.log" >&2; exit 1; }
  t2=$(now_s)
  local extra=()
  [ "$contraction" = 1 ] && extra=(--contraction --max-passes 30)
  "${PIN[@]}" "$FBT" eval-loss --checkpoint "$run" --data "$data" --passes 0 --sequential "${extra[@]}" \
    --max-tokens "$slice" --out "$run/eval_slice.json" > "$run/eval_slice.log" 2>&1 \
    || { echo "error: eval failed, see $run/eval_slice.log" >&2; exit 1; }
  t3=$(now_s)
  "$PY" - "$run/wall.json" "$(cat "$run/wall_train.txt")" "$t1" "$t2" "$t3" "$steps" "$@" <<'PYEOF'
import json, sys, platform, os
out, train_s, t1, t2, t3, steps = sys.argv[1], *map(float, sys.argv[2:6]), int(sys.argv[6])
json.dump({"train_s": train_s, "eval_val_s": t2 - t1, "eval_slice_s": t3 - t2, "steps": steps,
           "sets": sys.argv[7:], "host": platform.node(), "cpus": os.cpu_count(),
           "omp_threads": os.environ.get("OMP_NUM_THREADS")}, open(out, "w"), indent=1)
PYEOF
  echo "[repro] $(date -u +%H:%M:%S) done $run: train $(printf %.0f "$(cat "$run/wall_train.txt")") s"
  exec {lock_fd}>&-
}
