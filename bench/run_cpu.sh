#!/usr/bin/env bash
# The CPU benchmark set of issue 8, one thread, results in bench/results/:
#   small:      training K=1,2,3 (8×256), prefill, decode (batch 1 and 8, contexts 64 and 128)
#   llama-134m: prefill and decode, batch 1 (the llama.cpp comparison shape)
#   1b:         decode, batch 1, a few tokens (the soft-vs-standard overhead at the paper's shape)
# Usage: bench/run_cpu.sh [THREADS]   (FBT=path/to/fbt, default build/fbt; CPU=the cores to pin
# to, default 1 for one thread, empty = no pinning). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
FBT=${FBT:-build/fbt}
threads=${1:-1}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
pin=()
if [ "$threads" = 1 ]; then CPU=${CPU-1}; else CPU=${CPU-}; fi
[ -n "$CPU" ] && command -v taskset >/dev/null && pin=(taskset -c "$CPU")
bench=("${pin[@]}" "$FBT" bench --device cpu --threads "$threads" --results-dir bench/results)
"${bench[@]}" --preset small --reps 5
"${bench[@]}" --preset llama-134m --tests prefill,decode --batch-sizes 1 --contexts 64 --reps 3
"${bench[@]}" --preset 1b --tests decode --batch-sizes 1 --contexts 64 --new-tokens 8 --reps 3
