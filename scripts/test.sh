#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds and runs every test, in both
# supported builds: Debian's libtorch 1.13 (build/, CPU) and PyTorch 2.x with CUDA from PyPI
# (build-torch2/; on a machine without a GPU its CUDA-only tests are listed as skipped).
# FBT_TEST_BUILDS="default" or "torch2" runs one of them; extra args go to ctest (e.g. -L fast).
set -euo pipefail
cd "$(dirname "$0")/.."
for b in ${FBT_TEST_BUILDS:-default torch2}; do
  t0=$SECONDS
  case "$b" in
    default) scripts/setup.sh && scripts/build.sh && dir=build ;;
    torch2)
      if [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then  # PyPI's CUDA wheel needs it to configure
        echo "scripts/test.sh: skipping the PyTorch 2.x build: no CUDA toolkit (nvcc) in ${CUDA_HOME:-/usr/local/cuda}; install it or set CUDA_HOME" >&2
        continue
      fi
      scripts/setup.sh --torch2 && scripts/build.sh --torch2 && dir=build-torch2 ;;
    *) echo "scripts/test.sh: FBT_TEST_BUILDS: unknown build '$b' (expected default, torch2)" >&2; exit 2 ;;
  esac
  t1=$SECONDS
  (cd "$dir" && ctest --output-on-failure -j"$(nproc)" "$@")
  echo "scripts/test.sh: $b build: setup+build $(( t1 - t0 )) s, tests $(( SECONDS - t1 )) s"
done
