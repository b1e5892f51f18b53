#!/usr/bin/env bash
# The prepared GPU check (issue 16): run it once whenever a GPU machine is lent (the device tool's
# H200: PyTorch 2.11+cu130 in its python3, nvcc 13.0, no Debian dev packages). It builds fbt
# against that PyTorch with CUDA and NCCL (scripts/build.sh --torch2, into build-torch2/), runs
# the test suite with FBT_TEST_DEVICE=cuda (the device-parameterised model, decoding and
# CUDA-graph tests on the GPU; the rest as on the CPU), and runs `fbt bench` on CUDA for the
# `small` and `1b` shapes (bf16 training MFU; decode tokens/s at batch 1 and 64, eager and
# CUDA-graph; soft overhead; peak memory), writing bench/results/<preset>_<gpu>_<date>[_graph]
# .md/.json and gpu_check.log to $OUT (or bench/results). Budget: about 8 minutes on 16 cores.
#
#   scripts/gpu_check.sh --fetch-deps   # here (Debian 12 with apt): downloads the .debs of the
#                                       # header/dev packages the GPU image lacks into .deps/
#   scripts/gpu_check.sh                # on the GPU machine (carry .deps/ along)
#   scripts/gpu_check.sh --dry-run      # prints every step it would take, runs none, exits 0
set -euo pipefail
cd "$(dirname "$0")/.."
debs=(nlohmann-json3-dev libcli11-dev libgtest-dev googletest libssl-dev libssl3 zlib1g-dev zlib1g libgloo-dev
      bubblewrap)  # bwrap: the code sandbox the Sandbox/EvalGen tests need
dry=0
case "${1:-}" in
  --fetch-deps) mkdir -p .deps && (cd .deps && apt-get download "${debs[@]}"); exit 0 ;;
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "scripts/gpu_check.sh: unknown argument $1 (expected --fetch-deps or --dry-run)" >&2; exit 2 ;;
esac
# step DESCRIPTION -- COMMAND...: prints the step; runs it unless --dry-run. A failing step is
# reported and the check goes on (one broken test must not cost the benchmarks).
step() {
  local what=$1; shift; [ "$1" = -- ] && shift
  echo "== $what"
  echo "   \$ $*"
  [ $dry = 1 ] && return 0
  local t0=$SECONDS
  "$@" || echo "!! step failed (exit $?): $what"
  echo "   ($(( SECONDS - t0 )) s)"
}
results=${OUT:-bench/results}
py=${FBT_PYTHON:-python3}
if [ $dry = 0 ]; then
  mkdir -p "$results"
  exec > >(tee "$results/gpu_check.log") 2>&1
fi
gpu=h200
if [ $dry = 0 ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  # "NVIDIA H200" -> h200: the hardware label of the result files
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/^nvidia //; s/[^a-z0-9]\+/-/g; s/-$//')
fi
step "PyTorch and CUDA as this machine has them" -- "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
if [ -d .deps ]; then  # the carried dev packages, unpacked into a private root, never into /
  step "unpack the carried dev packages into .deps/root" -- bash -c 'rm -rf .deps/root && mkdir -p .deps/root && for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done'
  export FBT_CMAKE_PREFIX_EXTRA="$PWD/.deps/root/usr;$PWD/.deps/root/usr/lib/x86_64-linux-gnu/cmake"
  export OPENSSL_ROOT_DIR="$PWD/.deps/root/usr" ZLIB_ROOT="$PWD/.deps/root/usr"
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  command -v bwrap >/dev/null || export PATH="$PWD/.deps/root/usr/bin:$PATH"
fi
step "build against this PyTorch with CUDA (build-torch2/)" -- \
  env FBT_PYTHON="$py" scripts/build.sh --torch2 -DFBT_SHARED_DATA="${FBT_SHARED_DATA:-$PWD/../shared/data}"
step "what the CUDA build links" -- bash -c 'ldd build-torch2/fbt | grep -E "torch_cuda|c10_cuda|nccl|cudart" || true'
step "the test suite, model/decoding tests on the GPU" -- \
  bash -c 'cd build-torch2 && FBT_TEST_DEVICE=cuda timeout 300 ctest -j 8 --output-on-failure'
bench=(build-torch2/fbt bench --device cuda --reps 5 --hardware "$gpu" --results-dir "$results")
small=(--preset small --batch-sizes 1,64 --contexts 128)
big=(--preset 1b --batch-sizes 1,64 --contexts 1024 --new-tokens 32)
step "bench small: training, prefill, eager decode" -- "${bench[@]}" "${small[@]}"
step "bench small: CUDA-graph decode" -- "${bench[@]}" "${small[@]}" --tests decode --decoder graph
step "bench 1b: training K=1,2 (8192 tokens), prefill, eager decode" -- \
  "${bench[@]}" "${big[@]}" --passes 1,2 --train-batch 1 --train-seq 8192
step "bench 1b: CUDA-graph decode" -- "${bench[@]}" "${big[@]}" --tests decode --decoder graph
echo "total: $SECONDS s"
