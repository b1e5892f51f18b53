#!/usr/bin/env bash
# Cross-checks one training step (K-pass forward, backward, NorMuon + Adam) of fbt against the
# reference. The data is one repeated byte, so every window fbt's random loader draws is the
# same constant batch and the reference can replay the step without fbt's sampler: fbt trains
# 3 steps (K=2, lr factor 1, no jitter/mixin/z-loss, a checkpoint per step); the reference
# loads step 2 (model + optimiser state), runs step 3 and compares with fbt's step 3.
# Environment: FBT (default build/fbt under the repo root), PYTHON (/usr/bin/python3), DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
FBT="${FBT:-$root/build/fbt}"
PYTHON="${PYTHON:-/usr/bin/python3}"
DIR="${DIR:-$(mktemp -d /tmp/fbt_step_check.XXXXXX)}"
mkdir -p "$DIR/src"
"$PYTHON" -c "
for n in 'ab': open('$DIR/src/' + n + '.txt', 'w').write('a' * 300000)"
"$FBT" prepare --input "$DIR/src" --out "$DIR/data" --tokenizer byte --doc-split file --val-fraction 0.5 --force >/dev/null
"$FBT" train --config debug --data "$DIR/data" --out "$DIR/run" --steps 3 --force \
  --set train.warmup_steps=0 --set train.cooldown_fraction=0 --set train.jitter=0 --set train.mixin_prob=0 \
  --set train.checkpoint_every=1 --set train.eval_every=0 --set train.eval_tokens=1024 \
  --set 'train.pass_schedule=[{"until_fraction":1,"passes_probabilities":{"2":1}}]' >"$DIR/train.log"
"$PYTHON" -c "
import sys, torch; sys.path.insert(0, '$here'); import fbt_ref
x = torch.full((8, 64), 97, dtype=torch.long)  # batch_size 8 x context 64 of byte 'a'
fbt_ref.save_safetensors('$DIR/tokens.safetensors', {'tokens': x, 'targets': x})"
echo "fbt step 3:       $(sed -n 3p "$DIR/run/metrics.jsonl" | grep -o '"grad_norm":[^,]*,\|"losses":\[[^]]*\]' | tr '\n' ' ')"
echo "reference step 3: $("$PYTHON" "$here/fbt_ref.py" step --step-dir "$DIR/run/step-0000002" \
  --tokens "$DIR/tokens.safetensors" --passes 2 --expect "$DIR/run/step-0000003/model.safetensors")"
