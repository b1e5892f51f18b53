#!/usr/bin/env bash
# The GPU check as a kit (issue 40): built and packed here, run on the lent GPU machine in one
# call, spending its minutes on what only a GPU can show.
#
#   scripts/gpu_check.sh --prepare [--kit DIR]  here (Debian 12): builds build-torch2/ against the
#       project venv's PyTorch 2.11 (the GPU machine's release) unless it is there, generates the
#       gtest discovery files, and packs into DIR (default gpu-kit/, ignored by git, ≤ ~40 MB):
#       the binaries, the shared libraries the GPU image lacks (ICU 72, cpp-httplib, brotli), the
#       prepared datasets of steps e and g, and a manifest. Prints the device call.
#   scripts/gpu_check.sh [--kit DIR]            on the GPU machine (carry gpu-kit): lays the
#       build-time paths onto this checkout, points the loader at the machine's PyTorch and the
#       carried libraries, and runs the steps below, each under its own time limit, the whole
#       under ~9 minutes, most important first. Writes summary.md, gpu_check.log and
#       results.tar.gz (every step's output) to $OUT (or gpu-check-out/).
#   scripts/gpu_check.sh --dry-run              prints the plan (steps, limits, commands); runs none
#   scripts/gpu_check.sh --rehearse             the whole kit on this machine's CPU at tiny sizes:
#       packs a kit from build-torch2/, copies the working tree elsewhere, hides the build-time
#       checkout (bubblewrap) so the kit must lay its paths as on the GPU machine, runs every
#       step with --device cpu, and fails unless every step passed. A CI test (GpuKitRehearsal).
#
# Steps (device): a environment and ldd; b fbt bench 1b (training K=1,2 at 8,192 tokens, prefill
# and decode at batch 1 and 64, eager and CUDA graph); c the PyTorch anchor (bench/gpu/anchor.py);
# then g (science, in the background: a ~46M-parameter byte-level model from scratch, the
# winning recipe K=2/3 glu_plus_token against K=1 on the same tokens, then eval-loss in every mode)
# beside d (ctest labels fast and cuda, FBT_TEST_DEVICE=cuda), e (train/eval-loss/generate/serve
# end to end on CUDA) and f (NCCL, one rank). b and c run alone: nothing shares the GPU with a
# benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=device kit=$root/gpu-kit tiny=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) mode=prepare; shift ;;
    --dry-run) mode=dry; shift ;;
    --rehearse) mode=rehearse; shift ;;
    --tiny) tiny=1; shift ;;  # the rehearsal's sizes (set by --rehearse)
    --kit) [ $# -ge 2 ] || { echo "scripts/gpu_check.sh: --kit needs a directory" >&2; exit 2; }
           kit=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "scripts/gpu_check.sh: unknown argument $1 (expected --prepare, --dry-run, --rehearse, --kit DIR)" >&2; exit 2 ;;
  esac
done

# The libraries the GPU image lacks (issue 40's reading of it): carried; everything else a kit
# binary needs must be the machine's own (its PyTorch, CUDA, glibc, libstdc++, OpenSSL, ...).
# Debian's sentencepiece goes too: fbt was built against it, and the tokenizer tests run its
# spm_train (carried in bin/), which needs the libraries of its own release.
carried_libs='libicu(uc|data|i18n)\.so\.72|libcpp-httplib\.so|libbrotli(common|dec|enc)\.so\.1|libsentencepiece(_train)?\.so\.0'

# ----------------------------------------------------------------------------------- prepare
torch_lib_of() {  # PYTHON -> the lib/ directory of its torch
  "$1" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))'
}

prepare_data() {  # OUTDIR: the prepared datasets of steps e (BPE 4096) and g (bytes)
  local out=$1 fbt=$root/build-torch2/fbt src=$1/src
  mkdir -p "$src/e2e" "$src/science"
  if [ $tiny = 1 ]; then  # the rehearsal: this repository's own text
    cat README.md docs/LOG.md > "$src/e2e/text.txt"
    cp "$src/e2e/text.txt" "$src/science/text.txt"
  else
    local shared=${FBT_SHARED_DATA:-$root/../shared/data}
    [ -f "$shared/tinyshakespeare/input.txt" ] || { echo "--prepare: no $shared (set FBT_SHARED_DATA)" >&2; return 1; }
    cp "$shared/tinyshakespeare/input.txt" "$src/e2e/"
    cp "$shared/tinyshakespeare/input.txt" "$shared/tinystories/train_prefix.txt" "$shared/wikitext2/valid.txt" \
       "$shared/wikitext2/test.txt" "$src/science/"
    [ -d /usr/share/games/fortunes ] && scripts/fortunes_corpus.sh /usr/share/games/fortunes "$src/science/fortunes"
  fi
  "$fbt" prepare --input "$src/e2e" --out "$out/e2e" --tokenizer bpe --vocab-size $([ $tiny = 1 ] && echo 512 || echo 4096) --force >/dev/null
  "$fbt" prepare --input "$src/science" --out "$out/science" --tokenizer byte --doc-split blank --val-fraction 0.02 --force >/dev/null
  rm -rf "$src"
}

prepare() {
  local py=${FBT_PYTHON:-${FBT_VENV:-$root/.venv}/bin/python}
  "$py" -c 'import torch' 2>/dev/null ||
    { echo "scripts/gpu_check.sh: $py has no torch (run scripts/setup.sh --torch2, or set FBT_VENV or FBT_PYTHON)" >&2; return 1; }
  if [ ! -x build-torch2/fbt ] || [ ! -x build-torch2/fbt_tests ]; then
    scripts/setup.sh --torch2
    scripts/build.sh --torch2
  fi
  local torch_lib; torch_lib=$(torch_lib_of "$py")
  # PRE_TEST discovery writes fbt_tests[N]_tests.cmake at the first ctest; run it here, where the
  # CMake module it includes exists, and carry the lists with include files that only read them.
  # (Not when the lists are newer than the binary: a ctest running the rehearsal made them, and a
  # second ctest in the same build folder would rewrite its log.)
  local f stale=0
  for f in build-torch2/fbt_tests\[*\]_tests.cmake; do [ -f "$f" ] && [ "$f" -nt build-torch2/fbt_tests ] || stale=1; done
  [ $stale = 0 ] || (cd build-torch2 && LD_LIBRARY_PATH="$torch_lib" ctest -N -L 'fast|cuda' >/dev/null)
  rm -rf "$kit" && mkdir -p "$kit/build-torch2" "$kit/lib" "$kit/data" "$kit/bin"
  local spm; spm=$(command -v spm_train) || { echo "--prepare: no spm_train (scripts/setup.sh installs sentencepiece)" >&2; return 1; }
  cp "$spm" "$kit/bin/"
  cp build-torch2/fbt build-torch2/fbt_tests build-torch2/CTestTestfile.cmake "$kit/build-torch2/"
  strip --strip-unneeded "$kit/build-torch2/fbt" "$kit/build-torch2/fbt_tests"
  for f in build-torch2/fbt_tests\[*\]_tests.cmake; do
    cp "$f" "$kit/build-torch2/"
    echo "include(\"$root/$f\")" > "$kit/build-torch2/$(basename "$f" _tests.cmake)_include.cmake"
  done
  LD_LIBRARY_PATH="$torch_lib" ldd build-torch2/fbt build-torch2/fbt_tests "$spm" | awk '$2 == "=>" {print $3}' |
    sort -u | grep -E "/($carried_libs)" | while read -r f; do cp -L "$f" "$kit/lib/"; done
  prepare_data "$kit/data"
  {
    echo "build_root=$root"
    echo "commit=$(git rev-parse HEAD)$(git diff --quiet HEAD -- src include tools tests CMakeLists.txt || echo +changes)"
    echo "torch=$("$py" -c 'import torch; print(torch.__version__)')"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } > "$kit/manifest.env"
  local libs; libs=$(ls "$kit/lib" | tr '\n' ' ')
  # One xz archive (ICU's data and the uint16 shards shrink 4-5x): the device tool carries at most
  # 64 MiB, the working tree included. The device run unpacks it beside the manifest.
  XZ_OPT="-T0 $([ $tiny = 1 ] && echo -0)" tar -cJf "$kit/kit.tar.xz" -C "$kit" build-torch2 lib data && rm -rf "$kit/build-torch2" "$kit/lib" "$kit/data"
  echo "kit: $kit ($(du -sh "$kit" | cut -f1); carried libraries: $libs)"
  echo "device call (from the checkout holding the kit): command scripts/gpu_check.sh, carry [\"$(realpath -m --relative-to="$root" "$kit")\"], timeout_s 600"
}

# ----------------------------------------------------------------------------------- device
# step NAME LIMIT_S -- COMMAND...: runs one step under `timeout`, its output in $work/NAME.log
# (and the log), and records ok / failed (exit) / timed out in the summary. A failing step never
# stops the check: one broken test must not cost the benchmarks.
step() {
  local name=$1 limit=$2; shift 3
  echo "== $name (limit ${limit} s): $*"
  [ $mode = dry ] && return 0
  local left=$(( deadline - SECONDS ))
  if [ $left -lt 10 ]; then
    echo "| $name | skipped: the check's time was spent | 0 |" >> "$work/steps.md"; echo "   $name: skipped (no time left)"; return 0
  fi
  [ "$limit" -le $left ] || limit=$left
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1 || rc=$?
  tail -n 40 "$work/$name.log"
  local verdict="ok"
  [ $rc = 0 ] || verdict="failed (exit $rc)"
  [ $rc = 124 ] || [ $rc = 137 ] && verdict="timed out"
  echo "| $name | $verdict | $(( SECONDS - t0 )) |" >> "$work/steps.md"
  echo "   $name: $verdict in $(( SECONDS - t0 )) s"
}

lay_paths() {  # the build-time checkout path -> this checkout; build-torch2 -> the kit's
  # shellcheck disable=SC1091
  build_root=$(sed -n 's/^build_root=//p' "$kit/manifest.env")
  if [ "$build_root" != "$root" ]; then
    if [ -e "$build_root" ] && ! [ "$build_root" -ef "$root" ]; then
      echo "gpu_check: the kit was built in $build_root, which exists here and is not this checkout" >&2; return 1
    fi
    [ -e "$build_root" ] || { mkdir -p "$(dirname "$build_root")" && ln -sfn "$root" "$build_root"; }
  fi
  if [ ! -e "$root/build-torch2/fbt" ] || ! [ "$root/build-torch2/fbt" -ef "$kit/build-torch2/fbt" ]; then
    [ -L "$root/build-torch2" ] || [ ! -e "$root/build-torch2" ] ||
      { echo "gpu_check: $root/build-torch2 exists and is not the kit's" >&2; return 1; }
    ln -sfn "$kit/build-torch2" "$root/build-torch2"
  fi
}

device_run() {
  local py=${FBT_PYTHON:-python3}
  results=${OUT:-$root/gpu-check-out}
  work=/tmp/fbt-gpu-check.XXXXXX
  [ $mode = dry ] || work=$(mktemp -d /tmp/fbt-gpu-check.XXXXXX)
  # The whole check ends by this many seconds (the device tool stops a command at 600).
  deadline=$(( SECONDS + ${FBT_GPU_CHECK_SECONDS:-560} ))
  if [ $mode != dry ]; then
    mkdir -p "$results"
    exec > >(tee "$results/gpu_check.log") 2>&1
    [ -f "$kit/manifest.env" ] || { echo "gpu_check: no kit in $kit (scripts/gpu_check.sh --prepare here first)" >&2; exit 1; }
    [ -d "$kit/build-torch2" ] || tar -xJf "$kit/kit.tar.xz" -C "$kit"
    lay_paths
    local torch_lib; torch_lib=$(torch_lib_of "$py")
    local nv; nv=$(ls -d "$(dirname "$(dirname "$torch_lib")")"/nvidia/*/lib 2>/dev/null | tr '\n' ':' || true)
    export LD_LIBRARY_PATH="$kit/lib:$torch_lib:$nv${LD_LIBRARY_PATH:-}"
    export PATH="$kit/bin:$(dirname "$(command -v "$py")"):$PATH" PYTHONUNBUFFERED=1  # spm_train; ctest beside that python (the GPU image's venv)
    echo "| step | result | seconds |" > "$work/steps.md"; echo "|---|---|---|" >> "$work/steps.md"
  fi
  local fbt=$root/build-torch2/fbt dev=cuda hw=h200 date; date=$(date -u +%Y-%m-%d)
  [ $tiny = 1 ] && dev=cpu hw=rehearsal
  if [ $mode != dry ] && [ $dev = cuda ] && command -v nvidia-smi >/dev/null; then  # "NVIDIA H200" -> h200
    hw=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/^nvidia //; s/[^a-z0-9]\+/-/g; s/-$//')
  fi
  local res=$work/results; [ $mode = dry ] || mkdir -p "$res"
  local bench=("$fbt" bench --device $dev --hardware "$hw" --results-dir "$res")
  local big=(--preset 1b --passes 1,2 --train-batch 1 --train-seq 8192 --batch-sizes 1,64 --contexts 1024 --new-tokens 32 --reps 3)
  local anchor=(--preset 1b --seq 8192 --passes 1,2 --modes eager,compile --compile-passes 1)
  local small_train=(--config small --steps 300 --set train.batch_size=16 --set train.seq_len=256)
  # g: ~46 M parameters, bytes, context 512; the same seed, data and steps for both arms.
  local sci_model=(--set model.d_model=640 --set model.n_layers=10 --set model.n_heads=10
                   --set model.n_kv_heads=5 --set model.d_ff=1728 --set model.context=512)
  local sci_train=(--steps 1500 --set train.batch_size=32 --set train.seq_len=512 --set train.eval_every=50
                   --set train.eval_tokens=65536 --set train.checkpoint_every=25 --set train.warmup_steps=100 --threads 2)
  local sci_limit eval_tokens=262144 nccl_steps=20
  if [ $tiny = 1 ]; then
    big=(--preset debug --passes 1,2 --train-batch 2 --train-seq 64 --batch-sizes 1,4 --contexts 16 --new-tokens 4 --reps 1 --warmup 0)
    anchor=(--preset debug --seq 64 --passes 1,2 --modes eager --reps 1 --warmup 1 --device cpu)
    small_train=(--config debug --steps 3 --set train.eval_tokens=1024)
    sci_model=(--set model.d_model=64 --set model.n_layers=2 --set model.n_heads=4 --set model.n_kv_heads=2
               --set model.d_ff=176 --set model.context=64 --set train.batch_size=2 --set train.seq_len=64); sci_train=(--steps 4 --set train.eval_every=2 --set train.eval_tokens=512 --set train.checkpoint_every=2)
    eval_tokens=1024 nccl_steps=3
    export OMP_NUM_THREADS=1  # the rehearsal's processes share two cores
  fi
  local k1='train.pass_schedule=[{"until_fraction":1,"passes_probabilities":{"1":1}}]'
  local k23='train.pass_schedule=[{"until_fraction":1,"passes_probabilities":{"2":0.88,"3":0.12}}]'

  step a-environment 60 -- bash -c "uname -a; nvidia-smi || true; cat '$kit/manifest.env'; '$py' -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available())';
    ldd '$fbt' '$root/build-torch2/fbt_tests' > '$work/ldd.txt'; grep -E 'not found|torch|c10|nccl|icu|httplib|brotli|sentencepiece|pcre' '$work/ldd.txt'; ! grep -q 'not found' '$work/ldd.txt'"
  # Training, then eager prefill/decode, then CUDA-graph decode: each under its own limit (on
  # 2026-12-04 all of the first two together outlasted 150 s and left nothing).
  step b-bench-1b-train 120 -- "${bench[@]}" "${big[@]}" --tests train
  step b-bench-1b-eager 90 -- "${bench[@]}" "${big[@]}" --tests prefill,decode
  if [ $dev = cuda ]; then
    step b-bench-1b-graph 90 -- "${bench[@]}" "${big[@]}" --tests decode --decoder graph
  else
    echo "== b-bench-1b-graph: CUDA graphs need CUDA (not rehearsed)"
  fi
  step c-anchor 170 -- "$py" "$root/bench/gpu/anchor.py" "${anchor[@]}" --out "$res/anchor_${hw}_${date}.json"

  # g in the background beside d, e, f (none of them is a benchmark).
  local sci=$work/science
  step g-science-launch 10 -- mkdir -p "$sci"
  if [ $mode != dry ]; then  # both arms end in time for their evaluations (2 × 60 s)
    sci_limit=$(( deadline - SECONDS - 130 )); [ $sci_limit -gt 10 ] || sci_limit=10
    ( timeout "$sci_limit" "$fbt" train --config small --device $dev --data "$kit/data/science" --out "$sci/k1" --force \
        "${sci_model[@]}" "${sci_train[@]}" --set "$k1" > "$sci/k1.log" 2>&1 ) &
    local pid_k1=$!
    ( timeout "$sci_limit" "$fbt" train --config small --device $dev --data "$kit/data/science" --out "$sci/k23" --force \
        "${sci_model[@]}" "${sci_train[@]}" --set "$k23" > "$sci/k23.log" 2>&1 ) &
    local pid_k23=$!
  fi
  step d-tests 180 -- bash -c "cd '$root/build-torch2' && FBT_TEST_DEVICE=$dev OMP_NUM_THREADS=1 ctest -L 'fast|cuda' -j 12 --output-on-failure --timeout 120 $([ $tiny = 1 ] && echo "-R 'ModelConfig|Precision'")"
  local e2e=$work/e2e
  step e-train 90 -- "$fbt" train "${small_train[@]}" --device $dev --data "$kit/data/e2e" --out "$e2e/run" --force
  step e-eval-loss 60 -- "$fbt" eval-loss --checkpoint "$e2e/run" --data "$kit/data/e2e" --passes 2 --device $dev --max-tokens 65536 --json "$res/e2e_eval_loss.json"
  step e-generate 60 -- "$fbt" generate --checkpoint "$e2e/run" --prompt "ROMEO:" --max-new-tokens 40 --temperature 0 --all-modes --device $dev
  step e-serve 60 -- bash -c "'$fbt' serve --checkpoint '$e2e/run' --port 0 --device $dev > '$e2e/serve.log' 2>&1 & pid=\$!;
    for i in \$(seq 100); do port=\$(grep -o 'http://[0-9.]*:[0-9]*' '$e2e/serve.log' | head -1 | sed 's/.*://'); [ -n \"\$port\" ] && break; sleep 0.3; done;
    '$py' -c \"import json, sys, urllib.request as u; r = u.urlopen(u.Request('http://127.0.0.1:\$port/v1/completions', json.dumps({'prompt': 'ROMEO:', 'max_tokens': 16, 'temperature': 0}).encode(), {'Content-Type': 'application/json'}), timeout=30); print(r.read().decode())\";
    rc=\$?; kill -TERM \$pid; wait \$pid; cat '$e2e/serve.log'; exit \$rc"
  step f-nccl-one-rank 60 -- env FBT_BIN="$fbt" scripts/launch.sh -n 1 -- --config debug --steps $nccl_steps --set train.eval_tokens=1024 --device $dev \
    --data "$kit/data/e2e" --out "$e2e/dist" --force

  echo "== g-science-train: two fbt train runs (K=1, K=2/3 glu_plus_token) in the background since c, until 130 s before the check's end"
  local arm common=""
  if [ $mode != dry ]; then
    local t0=$SECONDS rc_k1=0 rc_k23=0
    wait $pid_k1 || rc_k1=$?
    wait $pid_k23 || rc_k23=$?
    tail -n 4 "$sci/k1.log" "$sci/k23.log"
    # Both arms are scored at the last step both reached (a time limit may stop them apart).
    common=$(comm -12 <(cd "$sci/k1" 2>/dev/null && ls -d step-* | sort) <(cd "$sci/k23" 2>/dev/null && ls -d step-* | sort) | tail -n 1)
    echo "| g-science-train | K=1 exit $rc_k1, K=2/3 exit $rc_k23 (124: stopped at its limit); common step ${common:-none} | $(( SECONDS - t0 )) |" >> "$work/steps.md"
  fi
  for arm in k1 k23; do
    step "g-eval-$arm" 60 -- "$fbt" eval-loss --checkpoint "$sci/$arm/$common" --data "$kit/data/science" --passes 2 --sequential \
      --device $dev --batch 64 --max-tokens "$eval_tokens" --json "$res/science_${arm}_eval_loss.json"
  done
  [ $mode = dry ] && return 0

  cp "$sci"/*.log "$res/" 2>/dev/null || true
  for arm in k1 k23; do cp "$sci/$arm/metrics.jsonl" "$res/science_${arm}_metrics.jsonl" 2>/dev/null || true; done
  cp "$work"/*.log "$res/"
  tar -czf "$results/results.tar.gz" -C "$res" .
  {
    echo "# GPU check, $hw, $date (kit: $(tr '\n' ' ' < "$kit/manifest.env"))"
    echo; cat "$work/steps.md"; echo
    echo "total: $SECONDS s"
  } > "$results/summary.md"
  cat "$results/summary.md"
  ! grep -qE '\| (failed|timed out)' "$work/steps.md"
}

# ----------------------------------------------------------------------------------- rehearsal
rehearse() {
  local hidden; hidden=$(dirname "$root")  # hidden during the run: the build-time checkout's parent
  local base=/tmp; case /tmp/ in "$hidden"/*) base=/var/tmp ;; esac
  rehearsal_tmp=$(mktemp -d "$base/fbt-gpu-rehearse.XXXXXX")
  trap 'rm -rf "$rehearsal_tmp"' EXIT
  local tmp=$rehearsal_tmp
  tiny=1
  kit=$tmp/tree/gpu-kit
  mkdir -p "$tmp/tree"
  git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tmp/tree"  # what the device tool copies
  prepare
  local venv; venv=$("${FBT_PYTHON:-${FBT_VENV:-$root/.venv}/bin/python}" -c 'import sys; print(sys.prefix)')
  # The build-time checkout disappears (an empty directory over its parent) and the copy runs from
  # elsewhere, the venv reappears elsewhere: the kit must lay its paths and find PyTorch as on the
  # GPU machine. A checkout right under / (whose parent cannot be hidden) gets the copy mounted
  # over it instead: everything but the path link is rehearsed then.
  local view=(--tmpfs "$hidden") run_root=$tmp/tree
  [ "$hidden" != / ] || { view=(--bind "$tmp/tree" "$root"); run_root=$root; }
  bwrap --dev-bind / / "${view[@]}" --ro-bind "$venv" "$tmp/venv" --chdir "$run_root" -- \
    env OUT="$tmp/out" FBT_PYTHON="$tmp/venv/bin/python" bash scripts/gpu_check.sh --tiny --kit "$run_root/gpu-kit"
  echo "rehearsal: every step passed"
}

case $mode in
  prepare) prepare ;;
  rehearse) rehearse ;;
  dry|device) device_run ;;
esac
