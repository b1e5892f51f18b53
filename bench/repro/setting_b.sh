#!/usr/bin/env bash
# Setting B of issue 7: BPE (vocabulary 4096) on TinyStories prefix + WikiText-2 valid+test +
# Debian's `fortunes` text, the `small` preset (6 layers, D=256, 5.5 M parameters at V=4096),
# sequences of 128 tokens, batch 8, 95/5 split by document (blank-line blocks).
#
#   bench/repro/setting_b.sh [--quick] [--steps N] [--seeds S] [--winner RECIPE]
#                            [--data-dir DIR] [--fortunes DIR] [--out DIR]
#
# Runs, seed by seed: the standard transformer at N, 1.5N, 2N, 3N steps; the winner of Setting A's
# sweep (RUNS/A/winner.txt, else --winner, else e23); it without its deepest pass; with detach;
# the paper's schedule. Default N = 300 steps (about 1.5 h for 2 seeds on one core of a quiet
# 2-core VM, estimated from docs/LOG.md throughput; not measured end to end).
# --quick: 10-step runs of batch 4 x 64 and small eval slices into runs/repro-quick/B (smoke test).
set -euo pipefail
source "$(dirname "$0")/common.sh"
quick=0 steps="" seeds=2 winner="" datadir="$REPO/../shared/data" fortunes=/usr/share/games/fortunes out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --steps) steps="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --winner) winner="$2"; shift 2 ;;
    --data-dir) datadir="$2"; shift 2 ;;
    --fortunes) fortunes="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setting_b.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
need_fbt
for f in tinystories/train_prefix.txt wikitext2/valid.txt wikitext2/test.txt; do
  [ -f "$datadir/$f" ] || { echo "error: $datadir/$f not found (--data-dir DIR must be laid out as ../shared/data; see its MANIFEST.md)" >&2; exit 1; }
done
[ -d "$fortunes" ] || { echo "error: $fortunes not found (apt-get install fortunes, or --fortunes DIR)" >&2; exit 1; }
if [ "$quick" = 1 ]; then
  out="${out:-$REPO/runs/repro-quick/B}"; steps="${steps:-10}"; seeds=1
  evalmax=4096 slice=1024 bs=4 sl=64
else
  out="${out:-$REPO/runs/repro/B}"; steps="${steps:-300}"
  evalmax=65536 slice=20000 bs=8 sl=128
fi
if [ -z "$winner" ]; then
  w="$(dirname "$out")/A/winner.txt"
  if [ -f "$w" ]; then winner=$(cat "$w"); else winner=e23; fi
fi
corpus="$out/corpus"
data="$out/data"
mkdir -p "$out"
# Prepared once: a second copy of this script (a second worker) waits here, then reuses it.
exec {prep_fd}>"$out/prepare.lock"
flock "$prep_fd"
if [ -f "$data/meta.json" ]; then
  echo "[repro] reuse $data"
else
  mkdir -p "$corpus"
  cp "$datadir/tinystories/train_prefix.txt" "$corpus/tinystories.txt"
  cp "$datadir/wikitext2/valid.txt" "$corpus/wikitext2-valid.txt"
  cp "$datadir/wikitext2/test.txt" "$corpus/wikitext2-test.txt"
  "$REPO/scripts/fortunes_corpus.sh" "$fortunes" "$corpus/fortunes"  # one fortune per document
  echo "[repro] $(date -u +%H:%M:%S) prepare $data (BPE 4096)"
  "${PIN[@]}" "$FBT" prepare --input "$corpus" --out "$data" --tokenizer bpe --vocab-size 4096 \
    --doc-split blank --val-fraction 0.05 > "$out/prepare.log" 2>&1 || { cat "$out/prepare.log" >&2; exit 1; }
fi
exec {prep_fd}>&-
echo "{\"steps\": $steps, \"eval_max_tokens\": $evalmax, \"slice_tokens\": $slice, \"quick\": $quick, \"winner_from\": \"$winner\"}" > "$out/setting.json"
echo "$winner" > "$out/winner.txt"
R="$REPO/bench/repro/recipes.py"
run() {
  local recipe="$1" seed="$2" n="$3" dir="${4:-$1-s$2}" contraction=1 sets
  case "$recipe" in std*) contraction=0 ;; esac
  mapfile -t sets < <("$PY" "$R" sets B "$recipe" "$seed" "$n")
  sets+=("train.batch_size=$bs" "train.seq_len=$sl" "train.warmup_steps=$(( n / 10 > 0 ? n / 10 : 1 ))")
  [ "$quick" = 1 ] && sets+=("train.warmup_steps=2")
  train_and_eval "$out/$dir" "$data" small "$n" "$evalmax" "$slice" "$contraction" -- "${sets[@]}"
  echo "$recipe" > "$out/$dir/recipe.txt"
}
mult() { awk "BEGIN{printf \"%d\", $1 * $2 + 0.5}"; }
for s in $(seq 1 "$seeds"); do
  for x in 1 1.5 2 3; do run std "$s" "$(mult "$steps" "$x")" "std-x$x-s$s"; done
  run "$winner" "$s" "$steps"
  run "$winner+nodeep" "$s" "$steps"
  run "$winner+detach" "$s" "$steps"
  run paper "$s" "$steps"
done
