#!/usr/bin/env bash
# The GPU check of issue 8, for a machine with an NVIDIA GPU and PyTorch 2.x but no Debian dev
# packages (the device tool's H200 image): configure against PyTorch's bundled libtorch, build,
# run the test suite, and run `fbt bench` on CUDA for the `small` and `1b` shapes, writing the
# results to bench/results/ (or $OUT when set). Budget: about 8 minutes on 16 cores.
#
#   scripts/gpu_check.sh --fetch-deps   # on a Debian 12 machine with apt: downloads the .debs of
#                                       # the header/dev packages the image lacks into .deps/
#   scripts/gpu_check.sh                # on the GPU machine (carry .deps/ along)
set -euo pipefail
cd "$(dirname "$0")/.."
debs=(nlohmann-json3-dev libcli11-dev libgtest-dev googletest libssl-dev libssl3 zlib1g-dev zlib1g)
if [ "${1:-}" = --fetch-deps ]; then
  mkdir -p .deps && (cd .deps && apt-get download "${debs[@]}")
  exit 0
fi
results=${OUT:-bench/results}
mkdir -p "$results"
log="$results/gpu_check.log"
exec > >(tee "$log") 2>&1
started=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
prefix="$torch_prefix"
if [ -d .deps ]; then  # unpack the carried dev packages into a private root, never into /
  rm -rf .deps/root && mkdir -p .deps/root
  for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
  prefix="$prefix;$PWD/.deps/root/usr;$PWD/.deps/root/usr/lib/x86_64-linux-gnu/cmake"
  export OPENSSL_ROOT_DIR="$PWD/.deps/root/usr" ZLIB_ROOT="$PWD/.deps/root/usr"
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DFBT_SHARED_DATA="${FBT_SHARED_DATA:-$PWD/../shared/data}"
cmake --build build-gpu -j "$(nproc)"
echo "build: $(( $(date +%s) - started )) s"
# The suite (CPU code paths; the tests that read the shared datasets skip where they are absent).
(cd build-gpu && timeout 240 ctest -j 8 --output-on-failure) || true
# The device-parameterised model tests (tests/test_model_helpers.h) again, on the GPU.
(cd build-gpu && FBT_TEST_DEVICE=cuda timeout 120 ctest -j 4 --output-on-failure -R '^(Decode|Passes)\.') || true
echo "tests: $(( $(date +%s) - started )) s"
bench=(build-gpu/fbt bench --device cuda --reps 5 --results-dir "$results")
"${bench[@]}" --preset small --batch-sizes 1,64 --contexts 128
"${bench[@]}" --preset 1b --passes 1,2 --train-batch 1 --train-seq 8192 --batch-sizes 1,64 --contexts 1024 --new-tokens 32
echo "total: $(( $(date +%s) - started )) s"
