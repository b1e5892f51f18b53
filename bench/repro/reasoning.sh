#!/usr/bin/env bash
# Issue 23, item 4, and issue 38, item 3: the first author's pipeline (SPEC §11), and fbt's
# from-scratch winner, on a reasoning task a small model can learn on a CPU, `fbt synth --task arithmetic`.
#
#   bench/repro/reasoning.sh [--quick] [--arms LIST] [--seeds S] [--steps N] [--sft-steps M] [--limit L]
#                            [--no-gate] [--skip-fraction F] [--config JSON] [--data-dir DIR] [--out DIR]
#
# Per seed, on bench/repro/reasoning.json (Setting A's 4 x 128 model with a BPE-4096 vocabulary,
# context 256, 1.3M parameters, NorMuon + WSD), the arms of --arms, in the order given
# (default std,std2,author,winner,residual,stdw; a finished run is skipped, so a new arm never redoes an old one):
#   std      pt-std    a standard transformer, N steps on TinyStories + worked arithmetic solutions;
#            sft-std   SFT with K=1, M steps. The same-tokens baseline.
#   std2     pt-std2   a standard transformer with the author arm's compute: 4N/3 steps;
#            sft-std2  SFT K=1, 3M steps (the K=3 SFT's compute).
#   author   pt-fbt    the first author's warm start in one run (issue 23): fusion `glu`, fusion init
#                      uniform, K=1 for the first 2/3 and K=2 for the last third (hard switch), prefix
#                      mixin off, jitter 0.02;  sft-fbt  SFT with K=3 (the SFT default), M steps.
#   winner   pt-win    fbt's from-scratch winner (issue 38; the `small` preset's recipe, Setting A's
#                      e23-tok.wg0.1): fusion glu_plus_token, W_G init std 0.1, fusion init identity,
#                      K=2 (0.88) / K=3 (0.12) from step 0, prefix mixin 0.3 and jitter 0.02 (train
#                      defaults);  sft-win  SFT with K=3, M steps.
#   residual pt-res    the winner's recipe with issue 38's residual fusion (model.fusion=residual:
#                      u = x_plain + sigmoid(W_G RMSNorm_in(e)) * (W_U h), W_U = 0 at init);
#                      sft-res  SFT with K=3, M steps.
#   stdw     pt-stdw   a standard transformer with the winner's (and residual's) compute: round(2.12 N)
#                      steps (0.88*2 + 0.12*3 = 2.12 passes a step);  sft-stdw  SFT K=1, 3M steps.
# SFT for every arm: other problems (chat template, loss on the answers), AdamW at lr 1e-3 (the SFT
# default 1e-4 is for pretrained models 100x larger).
# Evaluation per SFT run:
#   eval.json      `fbt eval arithmetic --prompt-format chat --shots 0` greedy on L held-out problems:
#                  the feedback models (author, winner, residual) in standard / soft / fused(1), the standards
#                  in standard (eval.json records L; a different --limit evaluates again);
#   eval_sft.json  `fbt eval-loss` on the SFT val conversations: nats per assistant token after 0..3
#                  fused passes (standards: 0). Sequential soft is not available on conversation data
#                  (fbt eval-loss refuses --sequential there), so soft's NLL is the pretraining-text one:
#   eval_pt.json   `fbt eval-loss --passes 1 --sequential` on the pretraining val split (standard,
#                  fused(1), sequential soft), for pt-* and sft-* runs of the feedback arms; the
#                  standards' pt-* runs get the standard loss alone (--passes 0).
# Go/no-go (issue 38): after seed 1 a feedback arm continues to seeds 2.. only if its pretrained
# model's fused(1) and sequential-soft losses on the pretraining val split are both below its own
# standard mode (pt-ARM-s1/gate.json); --no-gate runs every seed anyway. When no feedback arm is
# left, the standards stop too.
# State-tracking probes (issue 38, item 4; paper Fig. 7): every pretrained model gets
#   probes.json   `fbt eval-probe` on `fbt synth` memory, registers and completion tasks (0, 4 and 16
#                 distractors, made once into OUT/probes): per-layer linear-probe accuracy at the
#                 query's colon under standard prefill and with that position fused with the previous
#                 top state (one recurrent step).
# bench/repro/reasoning_report.py turns RUNS into tables (accuracy by number of operations,
# median trace length, exact McNemar per seed between modes and against the standards, NLL per mode).
# Defaults: N = 600, M = 200, L = 1000 (the whole test file), 3 seeds.
# --skip-fraction F (default 0.3): the share of the pretraining and SFT problems' worked solutions that
#   leave out intermediate lines (`fbt synth --skip-fraction`: each intermediate line of such a solution is
#   dropped with probability 1/2, at least one). Issue 38, item 4's latent-carry variant is F = 1 (every
#   multi-step solution omits some; 56% of all intermediate results), in its own --out
#   (default runs/repro/latent_carry); the test problems are the same. OUT/skip_fraction records F, and
#   a directory made with another F is refused.
# --quick: 12/6-step runs on small files, L = 12, one seed (unless --seeds), into runs/repro-quick/reasoning.
# FBT=path/to/fbt (default build/fbt); REPRO_CPU=n pins every process to CPU n.
set -euo pipefail
source "$(dirname "$0")/common.sh"
quick=0 seeds="" gate=1 skip=0.3 arms="std,std2,author,winner,residual,stdw" steps="" sft_steps="" limit="" datadir="$REPO/../shared/data" out=""
config="$REPO/bench/repro/reasoning.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --seeds) seeds="$2"; shift 2 ;;
    --arms) arms="$2"; shift 2 ;;
    --no-gate) gate=0; shift ;;
    --skip-fraction) skip="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --sft-steps) sft_steps="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --data-dir) datadir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,58p' "$0"; exit 0 ;;
    *) echo "reasoning.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
need_fbt
stories="$datadir/tinystories/train_prefix.txt"
[ -f "$stories" ] || { echo "error: $stories not found (--data-dir DIR must be laid out as ../shared/data)" >&2; exit 1; }
name=reasoning
"$PY" -c 'import sys; f = float(sys.argv[1]); sys.exit(not 0 <= f <= 1)' "$skip" 2>/dev/null \
  || { echo "reasoning.sh: --skip-fraction must be a number in [0, 1] (got '$skip')" >&2; exit 2; }
"$PY" -c 'import sys; sys.exit(float(sys.argv[1]) == 0.3)' "$skip" && name=latent_carry
if [ "$quick" = 1 ]; then
  out="${out:-$REPO/runs/repro-quick/$name}"; steps="${steps:-12}"; sft_steps="${sft_steps:-6}"
  limit="${limit:-12}"; seeds="${seeds:-1}"; n_pt=400 n_sft=200 n_test=40 max_new=64 batch=(train.batch_size=4)
  pt_eval_tokens=2048 n_probe=20
else
  out="${out:-$REPO/runs/repro/$name}"; steps="${steps:-600}"; sft_steps="${sft_steps:-200}"
  limit="${limit:-1000}"; seeds="${seeds:-3}"; n_pt=8000 n_sft=8000 n_test=1000 max_new=160 batch=()
  pt_eval_tokens=32768 n_probe=100
fi
IFS=, read -r -a arm_list <<< "$arms"
for a in "${arm_list[@]}"; do
  case "$a" in std|std2|author|winner|residual|stdw) ;;
    *) echo "reasoning.sh: unknown arm '$a' (arms: std, std2, author, winner, residual, stdw)" >&2; exit 2 ;; esac
done
mkdir -p "$out"
if [ -f "$out/skip_fraction" ] && [ "$(cat "$out/skip_fraction")" != "$skip" ]; then
  echo "error: $out was made with --skip-fraction $(cat "$out/skip_fraction"), not $skip (use another --out)" >&2; exit 1
fi
echo "$skip" > "$out/skip_fraction"
run_fbt() { "${PIN[@]}" "$FBT" "$@"; }

# --- data: problems (pretraining mix, SFT and test drawn with different seeds), the corpus, SFT set
tasks="$out/tasks"
if [ ! -f "$tasks/arithmetic/test.jsonl" ]; then
  mkdir -p "$tasks/arithmetic" "$out/corpus"
  run_fbt synth --task arithmetic --n "$n_pt" --skip-fraction "$skip" --seed 11 --out "$out/pt_problems.jsonl" > /dev/null
  run_fbt synth --task arithmetic --n "$n_sft" --skip-fraction "$skip" --seed 12 --out "$tasks/arithmetic/train.jsonl" > /dev/null
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

probes="$out/probes"
if [ ! -f "$probes/completion.jsonl" ]; then
  mkdir -p "$probes"
  for t in memory registers completion; do
    run_fbt synth --task "$t" --n "$n_probe" --distractors 0,4,16 --seed 21 --out "$probes/$t.jsonl" > /dev/null
  done
fi

STD='[{"until_fraction":1,"passes_probabilities":{"1":1}}]'
AUTHOR='[{"until_fraction":0.6667,"passes_probabilities":{"1":1}},{"until_fraction":1,"passes_probabilities":{"2":1}}]'
E23='[{"until_fraction":1,"passes_probabilities":{"2":0.88,"3":0.12}}]'
MODEL=(--set model.fusion=glu --set model.fusion_init=uniform)
# The winner: the `small` preset's fusion (src/model/config.cpp) and pass schedule (train_config.cpp).
WINNER=(--set model.fusion=glu_plus_token --set model.fusion_gate_init_std=0.1 --set model.fusion_init=identity
        --set "train.pass_schedule=$E23")

# train RUN STEPS ARGS... (skipped when RUN/done records STEPS)
train() {
  local run="$1" n="$2"; shift 2
  if [ -f "$run/done" ] && [ "$(cat "$run/done")" = "$n" ]; then echo "[reasoning] skip $run (done)"; return; fi
  echo "[reasoning] $(date -u +%H:%M:%S) train $run ($n steps)"
  local t0=$SECONDS
  run_fbt train --steps "$n" --out "$run" --force "$@" > "$run.log" 2>&1 \
    || { echo "error: training failed, see $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
  echo "$(( SECONDS - t0 ))" > "$run.wall_s"
  echo "$n" > "$run/done"
  echo "[reasoning] $(date -u +%H:%M:%S) done $run: $(cat "$run.wall_s") s"
}
# evaluate RUN MODE (skipped when RUN/eval.json exists with the same --limit)
evaluate() {
  local run="$1" mode="$2"
  if [ -f "$run/eval.json" ] && "$PY" -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("limit") != int(sys.argv[2]))' \
       "$run/eval.json" "$limit"; then
    echo "[reasoning] skip eval of $run (done)"; return
  fi
  echo "[reasoning] $(date -u +%H:%M:%S) eval $run ($mode, $limit items)"
  local t0=$SECONDS
  run_fbt eval arithmetic --checkpoint "$run" --data-dir "$tasks" --prompt-format chat --shots 0 \
    --mode "$mode" --limit "$limit" --max-new-tokens "$max_new" --out "$run/eval.json.tmp" \
    --samples "$run/eval.samples.jsonl" > "$run/eval.log" 2>&1 \
    || { echo "error: eval failed, see $run/eval.log" >&2; tail -5 "$run/eval.log" >&2; exit 1; }
  mv "$run/eval.json.tmp" "$run/eval.json"
  echo "$(( SECONDS - t0 ))" > "$run/eval.wall_s"
  echo "[reasoning] $(date -u +%H:%M:%S) done eval of $run: $(cat "$run/eval.wall_s") s"
}
# eval_loss RUN NAME DATA ARGS... -> RUN/NAME.json (skipped when it exists)
eval_loss() {
  local run="$1" name="$2" data="$3"; shift 3
  [ -f "$run/$name.json" ] && return
  run_fbt eval-loss --checkpoint "$run" --data "$data" --out "$run/$name.json.tmp" "$@" > "$run/$name.log" 2>&1 \
    || { echo "error: eval-loss failed, see $run/$name.log" >&2; tail -5 "$run/$name.log" >&2; exit 1; }
  mv "$run/$name.json.tmp" "$run/$name.json"
}
# probe RUN -> RUN/probes.json (skipped when it exists)
probe() {
  local run="$1"
  [ -f "$run/probes.json" ] && return
  run_fbt eval-probe --checkpoint "$run" --threads 1 --out "$run/probes.json.tmp" \
    "$probes/memory.jsonl" "$probes/registers.jsonl" "$probes/completion.jsonl" > "$run/probes.log" 2>&1 \
    || { echo "error: eval-probe failed, see $run/probes.log" >&2; tail -5 "$run/probes.log" >&2; exit 1; }
  mv "$run/probes.json.tmp" "$run/probes.json"
}
pt_loss() { eval_loss "$1" eval_pt "$pt_data" --passes 1 --sequential --max-tokens "$pt_eval_tokens"; }
# gate ARM: pt-ARM-s1's go/no-go (issue 38) into pt-ARM-s1/gate.json; prints go or no-go
gate_of() {
  local run="$out/pt-$1-s1"
  [ -f "$run/gate.json" ] || "$PY" - "$run/eval_pt.json" "$run/gate.json" <<'PYEOF'
import json, sys
r = {x["name"]: x["nats_per_token"] for x in json.load(open(sys.argv[1]))["results"]}
std, f1, soft = r["passes=0"], r["passes=1"], r["sequential"]
go = f1 < std and soft < std
json.dump({"standard": std, "fused(1)": f1, "sequential": soft, "go": go,
           "rule": "fused(1) and sequential soft below standard on the pretraining val split (issue 38)"},
          open(sys.argv[2], "w"), indent=1)
PYEOF
  "$PY" -c 'import json,sys; print("go" if json.load(open(sys.argv[1]))["go"] else "no-go")' "$run/gate.json"
}
same_compute=$(( (steps * 4 + 1) / 3 ))      # author pretraining: 2/3 of N at K=1, 1/3 at K=2
win_compute=$(( (steps * 212 + 50) / 100 ))  # winner pretraining: 0.88 x K=2 + 0.12 x K=3 = 2.12 passes a step
# pt name of each arm, its pretraining and SFT arguments, its eval modes
pt_name() { case "$1" in author) echo fbt ;; winner) echo win ;; residual) echo res ;; *) echo "$1" ;; esac; }
feedback_arm() { [ "$1" = author ] || [ "$1" = winner ] || [ "$1" = residual ]; }
for s in $(seq 1 "$seeds"); do
  sets=(--set "train.seed=$s" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.warmup_steps=$(( steps / 20 + 1 )))
  for b in "${batch[@]}"; do sets+=(--set "$b"); done
  sft_sets=(--set "train.seed=$s" --set train.eval_every=0 --set train.checkpoint_every=0 --set train.lr=1e-3)
  for b in "${batch[@]}"; do sft_sets+=(--set "$b"); done
  # After seed 1, the feedback arms that failed the gate drop out (and the standards with the last of them).
  run_arms=()
  for a in "${arm_list[@]}"; do
    if [ "$s" -gt 1 ] && [ "$gate" = 1 ] && feedback_arm "$a" && [ "$(gate_of "$(pt_name "$a")")" != go ]; then
      echo "[reasoning] seed $s: arm $a skipped (no-go after seed 1: $out/pt-$(pt_name "$a")-s1/gate.json)"; continue
    fi
    run_arms+=("$a")
  done
  any_feedback=0
  for a in "${arm_list[@]}"; do feedback_arm "$a" && any_feedback=1; done
  if [ "$s" -gt 1 ] && [ "$gate" = 1 ] && [ "$any_feedback" = 1 ]; then
    left=0; for a in "${run_arms[@]}"; do feedback_arm "$a" && left=1; done
    [ "$left" = 1 ] || { echo "[reasoning] seed $s: no feedback arm passed the gate; stopping"; break; }
  fi
  for a in "${run_arms[@]}"; do
    p="$(pt_name "$a")" pt="$out/pt-$(pt_name "$a")-s$s" sft="$out/sft-$(pt_name "$a")-s$s"
    case "$a" in
      std)    train "$pt" "$steps" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" --set "train.pass_schedule=$STD"
              train "$sft" "$sft_steps" --init-from "$pt" --data "$sft_data" "${sft_sets[@]}" --set "train.pass_schedule=$STD" ;;
      std2)   train "$pt" "$same_compute" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" --set "train.pass_schedule=$STD"
              train "$sft" "$(( sft_steps * 3 ))" --init-from "$pt" --data "$sft_data" "${sft_sets[@]}" --set "train.pass_schedule=$STD" ;;
      stdw)   train "$pt" "$win_compute" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" --set "train.pass_schedule=$STD"
              train "$sft" "$(( sft_steps * 3 ))" --init-from "$pt" --data "$sft_data" "${sft_sets[@]}" --set "train.pass_schedule=$STD" ;;
      author) train "$pt" "$steps" --config "$config" --data "$pt_data" "${MODEL[@]}" "${sets[@]}" \
                --set "train.pass_schedule=$AUTHOR" --set train.mixin_prob=0 ;;
      winner) train "$pt" "$steps" --config "$config" --data "$pt_data" "${WINNER[@]}" "${sets[@]}" ;;
      residual) train "$pt" "$steps" --config "$config" --data "$pt_data" "${WINNER[@]}" --set model.fusion=residual "${sets[@]}" ;;
    esac
    probe "$pt"
    if feedback_arm "$a"; then
      pt_loss "$pt"
      [ "$s" = 1 ] && echo "[reasoning] gate of arm $a (seed 1, pretraining val): $(gate_of "$p") ($pt/gate.json)"
      train "$sft" "$sft_steps" --init-from "$pt" --data "$sft_data" "${sft_sets[@]}"
      evaluate "$sft" all
      eval_loss "$sft" eval_sft "$sft_data" --passes 3 --max-tokens -1
      pt_loss "$sft"
    else
      eval_loss "$pt" eval_pt "$pt_data" --passes 0 --max-tokens "$pt_eval_tokens"
      evaluate "$sft" standard
      eval_loss "$sft" eval_sft "$sft_data" --passes 0 --max-tokens -1
    fi
  done
  "$PY" "$(dirname "$0")/reasoning_report.py" --runs "$out" --out "$out/results.md"
done
"$PY" "$(dirname "$0")/reasoning_report.py" --runs "$out" --out "$out/results.md"
echo "[reasoning] report: $out/results.md"
