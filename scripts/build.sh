#!/usr/bin/env bash
# Configures and builds fbt (Release). Extra args go to cmake's configure step; FBT_TARGET=fbt_cli
# builds only the command-line tool.
#   scripts/build.sh            Debian's libtorch 1.13 (CPU) into build/ (the default build)
#   scripts/build.sh --torch2   PyTorch 2.x's libtorch from the project venv (scripts/setup.sh
#                               --torch2; $FBT_VENV, default .venv) into build-torch2/, with CUDA
#                               (nvcc from $CUDA_HOME or /usr/local/cuda) and NCCL (the venv's
#                               nvidia-nccl headers). Needs the CUDA toolkit to configure, not a GPU.
#                               FBT_PYTHON: another python's torch instead of the venv's;
#                               FBT_CMAKE_PREFIX_EXTRA: more CMake prefixes (scripts/gpu_check.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build args=()
if [ "${1:-}" = --torch2 ]; then
  shift
  venv=${FBT_VENV:-.venv}
  py=${FBT_PYTHON:-$venv/bin/python}  # FBT_PYTHON: a python whose torch to build against (the GPU machine's)
  "$py" -c 'import torch' 2>/dev/null ||
    { echo "scripts/build.sh --torch2: $py has no torch (run scripts/setup.sh --torch2, or set FBT_PYTHON)" >&2; exit 1; }
  torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  # The torch root first, so its lib/ wins over Debian's /usr/lib libtorch when both are installed.
  args+=("-DCMAKE_PREFIX_PATH=$torch_dir;$torch_dir/share/cmake${FBT_CMAKE_PREFIX_EXTRA:+;$FBT_CMAKE_PREFIX_EXTRA}")
  cuda_home=${CUDA_HOME:-/usr/local/cuda}
  if [ -x "$cuda_home/bin/nvcc" ]; then
    args+=("-DCMAKE_CUDA_COMPILER=$cuda_home/bin/nvcc" "-DCUDAToolkit_ROOT=$cuda_home")
    nccl=$("$py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null || true)
    [ -f "$nccl/nccl.h" ] && args+=("-DFBT_NCCL_INCLUDE_DIR=$nccl")
  fi
  dir=build-torch2
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${args[@]}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" ${FBT_TARGET:+--target "$FBT_TARGET"}
