#!/usr/bin/env bash
# Setting A of issue 7: char-level TinyShakespeare (byte tokenizer, nanoGPT's 90/10 split),
# 4 layers, D=128, 4 heads, context 64, batch 12 (bench/repro/setting_a.json).
#
#   bench/repro/setting_a.sh [--quick] [--stage anchor|sweep1|sweep2|final|faithful|length|all]
#                            [--steps N] [--seeds S] [--winner RECIPE] [--lengths "M..."]
#                            [--data-dir DIR] [--out DIR]
#
# Stages (default all, in this order):
#   anchor  the standard transformer with nanoGPT's AdamW recipe for 2000 iterations (the
#           external anchor: nanoGPT reports val 1.88 here);
#   sweep1  one seed at budget N: pass mixture (2/3, 2/3/4) x fusion (glu, glu_plus_token) and
#           the paper's schedule (feedback onset 0.75);
#   sweep2  one seed, on top of sweep1's winner: prefix-mixin 0.1 / 1.0, feedback_state pre_norm,
#           feedback onset 0.5, cosine LR, jitter 0.1, W_G init std 0.1, then the rest of the
#           onset (0, 0.5, 0.75) x schedule (WSD, cosine) grid and W_G std 0.005 / 0.3;
#           --sweep2-axes selects and orders them (default "mix0.1 prenorm mix1.0 onset0.5 cosine
#           jit0.1 wg0.1 onset0.75 onset0.5.cosine onset0.75.cosine wg0.005 wg0.3"; AXIS.AXIS
#           combines two; names in recipes.py);
#   final   the issue's runs in priority order (see do_final): standard at N, 1.5N, 2N, 3N;
#           winner; winner without its deepest pass; winner with detach; paper schedule; the
#           stage-1 winner with every seed (when stage 2 replaced it).
#   faithful  issue 23: the paper's schedule and `glu` with Listing 3's input norm (l3) and/or
#           the author's fusion init (uinit), one prefix draw per sequence (seqmix), and the
#           author's variant (K=1 for 2/3, then K=2, mixin off), each with every seed, next to
#           the standard transformer at N (recipes.py FAITHFUL_A).
#   length  issue 23: how long must the feedback phase be? The paper-schedule recipe of `faithful`
#           with the lowest mean fused(1) − standard (recipes.py faithful_best, picked once and
#           kept in length_recipe.txt), the author's variant and the standard transformer at M·N
#           steps for each M of --lengths (default "2 4 8"; M = 1 is the faithful stage): seed 1
#           at every length, seed 2 at the longest, the author's variant (seed 1), then seeds 3..S
#           at the longest.
#           Run directories RECIPE@xM-sS (std: std-xM-sS).
# The winner is picked by recipes.py: the lowest worst-mode loss (max of fused(1), sequential
# soft and fused(k<=30)) minus the standard loss of a standard transformer trained with the same
# optimiser recipe (std at N; std.cosine for the cosine variant); --winner overrides. Runs
# already finished are skipped.
# --quick: 20-step runs and small eval slices into runs/repro-quick (a smoke test, minutes).
# FBT=path/to/fbt (default build/fbt); REPRO_CPU=n pins every process to CPU n with taskset.
set -euo pipefail
source "$(dirname "$0")/common.sh"
quick=0 stage=all steps="" seeds=3 winner="" datadir="$REPO/../shared/data" out="" lengths="2 4 8"
axes="mix0.1 prenorm mix1.0 onset0.5 cosine jit0.1 wg0.1 onset0.75 onset0.5.cosine onset0.75.cosine wg0.005 wg0.3"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --stage) stage="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --winner) winner="$2"; shift 2 ;;
    --lengths) lengths="$2"; shift 2 ;;
    --sweep2-axes) axes="$2"; shift 2 ;;
    --data-dir) datadir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "setting_a.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
need_fbt
src="$datadir/tinyshakespeare/input.txt"
[ -f "$src" ] || { echo "error: $src not found (--data-dir DIR must hold tinyshakespeare/input.txt; see ../shared/data/MANIFEST.md)" >&2; exit 1; }
if [ "$quick" = 1 ]; then
  out="${out:-$REPO/runs/repro-quick/A}"; steps="${steps:-20}"; anchor_steps=20
  evalmax=4096 slice=2048; seeds=1
else
  out="${out:-$REPO/runs/repro/A}"; steps="${steps:-800}"; anchor_steps=2000
  evalmax=-1 slice=20000
fi
cfg="$REPO/bench/repro/setting_a.json"
data="$out/data"
mkdir -p "$out"
"${PIN[@]}" "$FBT" prepare --input "$src" --out "$data" --tokenizer byte --val-fraction 0.1 > "$out/prepare.log" 2>&1 \
  || { cat "$out/prepare.log" >&2; exit 1; }
echo "{\"steps\": $steps, \"anchor_steps\": $anchor_steps, \"eval_max_tokens\": $evalmax, \"slice_tokens\": $slice, \"quick\": $quick}" > "$out/setting.json"
R="$REPO/bench/repro/recipes.py"

# run RECIPE SEED STEPS [DIRNAME]
run() {
  local recipe="$1" seed="$2" n="$3" dir="${4:-$1-s$2}" contraction=1 sets
  case "$recipe" in std*|anchor*) contraction=0 ;; esac
  mapfile -t sets < <("$PY" "$R" sets A "$recipe" "$seed" "$n")
  train_and_eval "$out/$dir" "$data" "$cfg" "$n" "$evalmax" "$slice" "$contraction" -- "${sets[@]}"
  echo "$recipe" > "$out/$dir/recipe.txt"
}
mult() { awk "BEGIN{printf \"%d\", $1 * $2 + 0.5}"; }
SWEEP1="e23 e234 e23-tok e234-tok paper"

do_anchor() { run anchor-adamw 1 "$anchor_steps"; }
# The standard transformers the sweep's recipes are scored against (recipes.py baseline_of).
do_baselines() {
  local b
  for b in $("$PY" "$R" baselines A "$(echo "$@" | tr ' ' ,)"); do
    if [ "$b" = std-x1 ]; then run std 1 "$steps" std-x1-s1; else run "$b" 1 "$steps"; fi
  done
}
do_sweep1() { for r in $SWEEP1; do run "$r" 1 "$steps"; done; do_baselines $SWEEP1; }
winner1() { "$PY" "$R" winner "$out" "$(echo $SWEEP1 | tr ' ' ,)"; }
sweep2_names() { local w a; w=$(winner1); for a in $axes; do echo "$w.$a"; done; }
do_sweep2() {
  local w; w=$(winner1); echo "$w" > "$out/winner_sweep1.txt"
  for r in $(sweep2_names); do run "$r" 1 "$steps"; done
  do_baselines $(sweep2_names)
}
final_winner() {
  if [ -n "$winner" ]; then echo "$winner"; return; fi
  "$PY" "$R" winner "$out" "$(echo $SWEEP1 $(sweep2_names) | tr ' ' ,)"
}
do_final() {
  local w; w=$(final_winner); echo "$w" > "$out/winner.txt"
  echo "[repro] setting A winner: $w ($("$PY" "$R" describe A "$w"))"
  # Priority order, so that a run cut short by time still leaves the key comparisons with the
  # most seeds: the seed-1 baseline curve; winner vs standard at N with seed 2; the Fig. 3 and
  # detach ablations with seed 1; the seed-2 curve and paper schedule; then the same for seed 3+.
  std_at() { run std "$1" "$(mult "$steps" "$2")" "std-x$2-s$1"; }
  for x in 1 1.5 2 3; do std_at 1 "$x"; done
  run "$w" 1 "$steps"
  [ "$seeds" -ge 2 ] && { std_at 2 1; run "$w" 2 "$steps"; }
  run "$w+nodeep" 1 "$steps"
  run "$w+detach" 1 "$steps"
  run paper 1 "$steps"
  for s in $(seq 2 "$seeds"); do
    [ "$s" -ge 3 ] && { std_at "$s" 1; run "$w" "$s" "$steps"; }
    for x in 2 3 1.5; do std_at "$s" "$x"; done
    run paper "$s" "$steps"
    run "$w+nodeep" "$s" "$steps"
    run "$w+detach" "$s" "$steps"
  done
  # The stage-1 winner with every seed too, when stage 2 replaced it: is the margin between the
  # top two recipes larger than their seed-to-seed spread?
  local w1; w1=$(cat "$out/winner_sweep1.txt" 2>/dev/null || true)
  if [ -n "$w1" ] && [ "$w1" != "$w" ]; then
    for s in $(seq 1 "$seeds"); do run "$w1" "$s" "$steps"; done
  fi
}
do_faithful() {
  local s r
  for s in $(seq 1 "$seeds"); do
    run std "$s" "$steps" "std-x1-s$s"
    for r in $("$PY" "$R" faithful); do run "$r" "$s" "$steps"; done
  done
}
do_length() {
  local best m s last
  [ -f "$out/length_recipe.txt" ] || "$PY" "$R" faithful_best "$out" > "$out/length_recipe.txt"
  best=$(cat "$out/length_recipe.txt")
  echo "[repro] feedback-length curve: $best and author at M x $steps steps, M in $lengths"
  for m in $lengths; do
    run std 1 "$(mult "$steps" "$m")" "std-x$m-s1"
    run "$best" 1 "$(mult "$steps" "$m")" "$best@x$m-s1"
  done
  last=${lengths##* }
  longest() { run std "$1" "$(mult "$steps" "$last")" "std-x$last-s$1"; run "$best" "$1" "$(mult "$steps" "$last")" "$best@x$last-s$1"; }
  [ "$seeds" -ge 2 ] && longest 2
  for m in $lengths; do run author 1 "$(mult "$steps" "$m")" "author@x$m-s1"; done
  for s in $(seq 3 "$seeds"); do longest "$s"; done
}
case "$stage" in
  anchor) do_anchor ;;
  sweep1) do_sweep1 ;;
  sweep2) do_sweep2 ;;
  final) do_final ;;
  faithful) do_faithful ;;
  length) do_length ;;
  all) do_anchor; do_sweep1; do_sweep2; do_final; do_faithful; do_length ;;
  *) echo "setting_a.sh: unknown stage $stage" >&2; exit 2 ;;
esac
