#!/usr/bin/env bash
# The main job: install, build, prepare a real corpus, train the `small` FBT with the paper's
# pass schedule for about 10 minutes on CPU, then compare standard vs fused(1) validation loss
# and generate a sample in each decoding mode.
#
#   scripts/demo.sh [--corpus PATH] [--steps N] [--work DIR]
#
# Default corpus: Debian's `fortunes` text (installed by scripts/setup.sh), one fortune per
# document. Outputs go to DIR (default ./runs/demo): data/, run/, summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="" steps=300 work="runs/demo"
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) corpus="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
scripts/build.sh
fbt=build/fbt
mkdir -p "$work"

if [ -z "$corpus" ]; then
  # Fortune files separate entries with '%' lines; make them blank-line separated documents.
  src=/usr/share/games/fortunes
  corpus="$work/fortunes"
  mkdir -p "$corpus"
  for f in "$src"/*; do
    name=$(basename "$f")
    case "$name" in *.*) continue ;; esac
    [ -f "$f" ] && sed 's/^%$//' "$f" > "$corpus/$name.txt"
  done
  split=(--doc-split blank)
else
  [ -e "$corpus" ] || { echo "demo.sh: --corpus $corpus does not exist" >&2; exit 1; }
  split=()
fi

echo "== prepare: BPE 4096 on $corpus"
$fbt prepare --input "$corpus" --out "$work/data" --tokenizer bpe --vocab-size 4096 "${split[@]}" --force

echo "== train: small preset, pass schedule 75% K=1 then K=2/3 (0.88/0.12), $steps steps"
$fbt train --config small --data "$work/data" --out "$work/run" --steps "$steps" --force \
  --set train.batch_size=8 --set train.seq_len=128 --set train.eval_every=100 --set train.checkpoint_every=100

echo "== validation loss after 0..2 fused prefill passes"
$fbt eval-loss --checkpoint "$work/run" --data "$work/data" --passes 2 --max-tokens 32768 --json "$work/eval.json"

echo "== samples (temperature 0.8, seed 1) in every decoding mode"
$fbt generate --checkpoint "$work/run" --prompt "The meaning of life is" --max-new-tokens 60 \
  --temperature 0.8 --seed 1 --all-modes | tee "$work/samples.txt"
