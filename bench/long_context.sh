#!/bin/bash
# Long-context extension on the CPU (issue 18, docs/LOG.md 2026-12-02): `small` (context 256) on
# WikiText-2, then a warm start at context 1024 with K=3; val loss in windows of 256 and 1024 for
# the base, the base viewed at 1024 without training, and the extended model.
#   bench/long_context.sh [OUT]     env: BASE_STEPS (200), EXT_STEPS (30)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/fbt-long-context}
F=build/fbt D=$OUT/data R=$OUT/runs
mkdir -p "$OUT/logs"
$F prepare --input ../shared/data/wikitext2/valid.txt --input ../shared/data/wikitext2/test.txt --out "$D" \
  --vocab-size 4096 --val-fraction 0.5
$F train --config small --data "$D" --out "$R/base" --steps "${BASE_STEPS:-200}" --set train.eval_every=0 \
  --set train.eval_tokens=8192 --set train.checkpoint_every=0 --force
# The base copied into a context-1024 config (one step at lr 1e-12): positions past 256 never trained.
$F train --init-from "$R/base" --data "$D" --out "$R/view1024" --steps 1 --set model.context=1024 \
  --set train.seq_len=1024 --set train.lr=1e-12 --set train.fusion_lr=1e-12 --set train.batch_size=1 \
  --set train.eval_tokens=8192 --force
$F train --init-from "$R/base" --data "$D" --out "$R/ext" --steps "${EXT_STEPS:-30}" --set model.context=1024 \
  --set train.seq_len=1024 --set train.batch_size=2 \
  --set 'train.pass_schedule=[{"until_fraction":1,"passes_probabilities":{"3":1}}]' --set train.eval_every=0 \
  --set train.eval_tokens=8192 --set train.checkpoint_every=0 --set train.lr=3e-4 --set train.warmup_steps=3 --force
for run in base:256 view1024:256 view1024:1024 ext:256 ext:1024; do
  r=${run%%:*} c=${run##*:}
  $F eval-loss --checkpoint "$R/$r" --data "$D" --max-tokens 65536 --passes 1 --context "$c" \
    --out "$OUT/logs/$r-$c.json" | tee "$OUT/logs/$r-$c.md"
done
