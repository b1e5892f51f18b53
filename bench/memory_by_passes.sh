#!/usr/bin/env bash
# Peak memory and throughput of `fbt train` steps by number of passes K (issue 4's closing
# numbers): for K = 1, 2, 3 and K = 3 with per-pass activation checkpointing, runs STEPS steps
# of the given preset with a fixed K and prints the run summary's peak RSS (CPU) and the mean
# tokens/s of the steps after the first two.
#
#   bench/memory_by_passes.sh DATA_DIR [PRESET=small] [STEPS=6] [BATCH=8] [SEQ=256]
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:?usage: bench/memory_by_passes.sh DATA_DIR [PRESET] [STEPS] [BATCH] [SEQ]}"
preset="${2:-small}" steps="${3:-6}" batch="${4:-8}" seq="${5:-256}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| K | activation checkpointing | tokens/s | peak RSS |"
echo "|---|---|---|---|"
for case in "1 false" "2 false" "3 false" "3 true"; do
  set -- $case
  build/fbt train --config "$preset" --data "$data" --out "$out/run" --force --steps "$steps" \
    --set "train.pass_schedule=[{\"until_fraction\":1,\"passes_probabilities\":{\"$1\":1}}]" \
    --set train.batch_size="$batch" --set train.seq_len="$seq" --set train.activation_checkpointing="$2" \
    --set train.eval_every=0 --set train.eval_tokens=1024 --set train.checkpoint_every=0 > "$out/log" 2>&1
  rss=$(grep -o 'peak RSS: [0-9.]* GB' "$out/log" | grep -o '[0-9.]* GB')
  tps=$(python3 -c "
import json
L=[json.loads(l) for l in open('$out/run/metrics.jsonl') if '\"passes\"' in l][2:]
print(round(sum(l['tokens_per_s'] for l in L)/max(1,len(L))))")
  echo "| $1 | $2 | $tps | $rss |"
done
