#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds and runs every test, in both
# supported builds: Debian's libtorch 1.13 (build/, CPU) and PyTorch 2.x with CUDA from PyPI
# (build-torch2/; on a machine without a GPU its CUDA-only tests are listed as skipped).
# FBT_TEST_BUILDS="default" or "torch2" runs one of them; extra args go to ctest (e.g. -L fast).
# Every phase prints its start time and the one before it its duration, so a run stopped from
# outside still shows where the time went.
set -euo pipefail
cd "$(dirname "$0")/.."
t_phase=$SECONDS
phase() {  # phase NAME: ends the previous phase (its duration) and starts NAME
  echo "scripts/test.sh: $(date -u +%H:%M:%S) $1 (previous phase $(( SECONDS - t_phase )) s)" >&2
  t_phase=$SECONDS
}
for b in ${FBT_TEST_BUILDS:-default torch2}; do
  case "$b" in
    default) phase "default: setup"; scripts/setup.sh
             phase "default: build"; scripts/build.sh; dir=build ;;
    torch2)
      if [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then  # PyPI's CUDA wheel needs it to configure
        echo "scripts/test.sh: skipping the PyTorch 2.x build: no CUDA toolkit (nvcc) in ${CUDA_HOME:-/usr/local/cuda}; install it or set CUDA_HOME" >&2
        continue
      fi
      phase "torch2: setup"; scripts/setup.sh --torch2
      phase "torch2: build"; scripts/build.sh --torch2; dir=build-torch2 ;;
    *) echo "scripts/test.sh: FBT_TEST_BUILDS: unknown build '$b' (expected default, torch2)" >&2; exit 2 ;;
  esac
  phase "$b: tests"
  (cd "$dir" && ctest --output-on-failure -j"$(nproc)" "$@")
done
phase "done"
