#!/usr/bin/env bash
# Issue 23, item 4: the first author's pipeline (SPEC §11) on a reasoning task a small model can
# learn on a CPU, `fbt synth --task arithmetic`.
#
#   bench/repro/reasoning.sh [--quick] [--seeds S] [--steps N] [--sft-steps M] [--limit L]
#                            [--config JSON] [--data-dir DIR] [--out DIR]
#
# Per seed, on bench/repro/reasoning.json (Setting A's 4 x 128 model with a BPE-4096 vocabulary,
# context 256, 1.3M parameters, NorMuon + WSD: the largest whose three pretraining runs, three
# SFTs and evaluations fit in about an hour of one core here) with the paper's fusion (`glu`) and
# the author's fusion init:
#   pt-std    pretrain a standard transformer N steps on TinyStories + worked arithmetic solutions;
#   pt-fbt    the same N steps, K=1 for the first 2/3 and K=2 for the last third (hard switch,
#             prefix mixin off, jitter 0.02: the author's warm start, in one run);
#   pt-std2   a standard transformer with the FBT run's compute: 4N/3 steps;
#   sft-*     SFT on other problems (chat template, loss on the answers): FBT with K=3 (the SFT
#             default), the standards with K=1; M steps, and 3M for the same-compute standard;
#             AdamW at lr 1e-3 (the SFT default 1e-4 is for pretrained models 100x larger);
#   eval      `fbt eval arithmetic --prompt-format chat --shots 0` greedy on L held-out problems:
#             the FBT model in standard / soft / fused, the standards in standard.
# bench/repro/reasoning_report.py turns RUNS into tables (accuracy by number of operations,
# median trace length, paired exact McNemar between modes and against the standards).
# Defaults: N = 600, M = 200, L = 300, 3 seeds.
# --quick: 12/6-step runs on small files, L = 12, one seed, into runs/repro-quick/reasoning.
# FBT=path/to/fbt (default build/fbt); REPRO_CPU=n pins every process to CPU n.
set -euo pipefail
source "$(dirname "$0")/common.sh"
quick=0 seeds=3 steps="" sft_steps="" limit="" datadir="$REPO/../shared/data" out=""
config="$REPO/bench/repro/reasoning.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --sft-steps) sft_steps="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --data-dir) datadir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "reasoning.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
need_fbt
stories="$datadir/tinystories/train_prefix.txt"
[ -f "$stories" ] || { echo "error: $stories not found (--data-dir DIR must be laid out as ../shared/data)" >&2; exit 1; }
if [ "$quick" = 1 ]; then
  out="${out:-$REPO/runs/repro-quick/reasoning}"; steps="${steps:-12}"; sft_steps="${sft_steps:-6}"
  limit="${limit:-12}"; seeds=1; n_pt=400 n_sft=200 n_test=40 max_new=64 batch=(train.batch_size=4)
else
  out="${out:-$REPO/runs/repro/reasoning}"; steps="${steps:-600}"; sft_steps="${sft_steps:-200}"
  limit="${limit:-300}"; n_pt=8000 n_sft=8000 n_test=1000 max_new=160 batch=()
fi
mkdir -p "$out"
run_fbt() { "${PIN[@]}" "$FBT" "$@"; }

# --- data: problems (pretraining mix, SFT and test drawn with different seeds), the corpus, SFT set
tasks="$out/tasks"
if [ ! -f "$tasks/arithmetic/test.jsonl" ]; then
  mkdir -p "$tasks/arithmetic" "$out/corpus"
  run_fbt synth --task arithmetic --n "$n_pt" --skip-fraction 0.3 --seed 11 --out "$out/pt_problems.jsonl" > /dev/null
  run_fbt synth --task arithmetic --n "$n_sft" --skip-fraction 0.3 --seed 12 --out "$tasks/arithmetic/train.jsonl" > /dev/null
  run_fbt synth --task arithmetic --n "$n_test" --seed 13 --out "$tasks/arithmetic/test.jsonl" > /dev/null
  # The pretraining corpus: TinyStories and the worked problems as plain text, one document per
  # blank-line block.
  cp "$stories" "$out/corpus/stories.txt"
  "$PY" - "$out/pt_problems.jsonl" "$out/corpus/arithmetic.txt" <<'PYEOF'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        p = json.loads(line)
        out.write(f"Question: {p['question']}\nAnswer: {p['answer']}\n\n")
PYEOF
fi
pt_data="$out/data-pt" sft_data="$out/data-sft"
[ -f "$pt_data/meta.json" ] || run_fbt prepare --input "$out/corpus" --out "$pt_data" --doc-split blank \
  --val-fraction 0.02 > "$out/prepare_pt.log" 2>&1 || { cat "$out/prepare_pt.log" >&2; exit 1; }
[ -f "$sft_data/meta.json" ] || run_fbt prepare --conversations gsm8k --input "$tasks/arithmetic/train.jsonl" \
  --tokenizer-model "$pt_data" --out "$sft_data" --val-fraction 0.02 > "$out/prepare_sft.log" 2>&1 \
  || { cat "$out/prepare_sft.log" >&2; exit 1; }

STD='[{"until_fraction":1,"passes_probabilities":{"1":1}}]'
AUTHOR='[{"until_fraction":0.6667,"passes_probabilities":{"1":1}},{"until_fraction":1,"passes_probabilities":{"2":1}}]'
MODEL=(--set model.fusion=glu --set model.fusion_init=uniform)

# train RUN STEPS ARGS... (skipped when RUN/latest exists with STEPS done)
train() {
  local run="$1" n="$2"; shift 2
  if [ -f "$run/done" ] && [ "$(cat "$run/done")" = "$n" ]; then echo "[reasoning] skip $run (done)"; return; fi
  echo "[reasoning] $(date -u +%H:%M:%S) train $run ($n steps)"
  local t0=$SECONDS
  run_fbt train --steps "$n" --out "$run" --force "$@" > "$run.log" 2>&1 \
    || { echo "error: training failed, see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
  echo "$(( SECONDS - t0 ))" > "$run.wall_s"
  echo "$n" > "$run/done"
}
# evaluate RUN MODE (skipped when RUN/eval.json exists)
evaluate() {
  local run="$1" mode="$2"
  [ -f "$run/eval.json" ] && { echo "[reasoning] skip eval of $run (done)"; return; }
  run_fbt eval arithmetic --checkpoint "$run" --data-dir "$tasks" --prompt-format chat --shots 0 \
    --mode "$mode" --limit "$limit" --max-new-tokens "$max_new" --out "$run/eval.json.tmp" \
    --samples "$run/eval.samples.jsonl" > "$run/eval.log" 2>&1 \
    || { echo "error: eval failed, see $run/eval.log" >&2; tail -5 "$run/eval.log" >&2; exit 1; }
  mv "$run/eval.json.tmp" "$run/eval.json"
}
same_compute=$(( (steps * 4 + 1) / 3 ))  # FBT pretraining: 2/3 of N at K=1, 1/3 at K=2
for s in $(seq 1 "$seeds"); do
  sets=(--set "train.seed=$s" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.warmup_steps=$(( steps / 20 + 1 )))
  for b in "${batch[@]}"; do sets+=(--set "$b"); done
  train "$out/pt-std-s$s" "$steps" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" --set "train.pass_schedule=$STD"
  train "$out/pt-fbt-s$s" "$steps" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" \
    --set "train.pass_schedule=$AUTHOR" --set train.mixin_prob=0
  train "$out/pt-std2-s$s" "$same_compute" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" --set "train.pass_schedule=$STD"
  sft_sets=(--set "train.seed=$s" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.lr=1e-3)
  for b in "${batch[@]}"; do sft_sets+=(--set "$b"); done
  train "$out/sft-fbt-s$s" "$sft_steps" --init-from "$out/pt-fbt-s$s" --data "$sft_data" "${sft_sets[@]}"
  train "$out/sft-std-s$s" "$sft_steps" --init-from "$out/pt-std-s$s" --data "$sft_data" "${sft_sets[@]}" \
    --set "train.pass_schedule=$STD"
  train "$out/sft-std2-s$s" "$(( sft_steps * 3 ))" --init-from "$out/pt-std2-s$s" --data "$sft_data" "${sft_sets[@]}" \
    --set "train.pass_schedule=$STD"
  evaluate "$out/sft-fbt-s$s" all
  evaluate "$out/sft-std-s$s" standard
  evaluate "$out/sft-std2-s$s" standard
done
"$PY" "$(dirname "$0")/reasoning_report.py" --runs "$out" --out "$out/results.md"
echo "[reasoning] report: $out/results.md"
