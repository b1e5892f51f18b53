#!/usr/bin/env bash
# Issues 7 and 23 in one command: Setting A (sweep, final and paper-faithful runs), Setting B,
# the reasoning benchmark (reasoning.sh) and its latent-carry variant (--skip-fraction 1, issue 38),
# then docs/results.md and the SVG plots. Usage:
#   bench/repro/run_all.sh [--quick] [--data-dir DIR] [--skip-b] [--skip-reasoning]
# --quick: 20-step (A) / 10-step (B) smoke runs into runs/repro-quick, report runs/repro-quick/results.md
#          (about 10 min on 2 cores; what CI may run). The full version takes hours on a CPU (see
#          docs/results.md for the measured wall times) and writes docs/results.md + docs/repro/, and
#          the runs' summaries to docs/repro/runs/ (bench/repro/archive.py).
# Environment: FBT (default build/fbt), REPRO_CPU (pin to one CPU), OMP_NUM_THREADS (default 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
quick=() data=() skipb=0 skipr=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick); shift ;;
    --data-dir) data=(--data-dir "$2"); shift 2 ;;
    --skip-b) skipb=1; shift ;;
    --skip-reasoning) skipr=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
"$here/setting_a.sh" "${quick[@]}" "${data[@]}"
[ "$skipb" = 1 ] || "$here/setting_b.sh" "${quick[@]}" "${data[@]}"
if [ "$skipr" = 0 ]; then
  "$here/reasoning.sh" "${quick[@]}" "${data[@]}"
  "$here/reasoning.sh" "${quick[@]}" "${data[@]}" --skip-fraction 1 --arms std,winner,residual,stdw
fi
if [ ${#quick[@]} -gt 0 ]; then
  python3 "$here/analyze.py" --runs "$repo/runs/repro-quick" --out "$repo/runs/repro-quick/results.md"
else
  python3 "$here/archive.py" --runs "$repo/runs/repro" --out "$repo/docs/repro/runs"
  python3 "$here/analyze.py" --runs "$repo/runs/repro" --out "$repo/docs/results.md" \
    --svg-dir "$repo/docs/repro" --notes "$here/notes.md" --notes-issue23 "$here/notes_issue23.md"
fi
