#!/usr/bin/env bash
# Configures and builds fbt (Release) into ./build. Extra args go to cmake's configure step;
# FBT_TARGET=fbt_cli builds only the command-line tool.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)" ${FBT_TARGET:+--target "$FBT_TARGET"}
