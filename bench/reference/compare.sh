#!/usr/bin/env bash
# Throughput of fbt vs the PyTorch reference on identical shapes: training (K=1, K=2, batch 8 ×
# seq 256) and cached decoding (standard, soft; batch 1 and 8; 64-token prompt, 64 new tokens).
# Prints a markdown table (fbt/ref ratio of median tokens/s) and writes it to $OUT_DIR/compare.md.
#
# Environment: FBT (default build/fbt under the repo root), PYTHON (default /usr/bin/python3,
# Debian's python3-torch), PRESET (small), THREADS (1), REPS (5), CPU (the core to pin to, 1;
# empty = no pinning), OUT_DIR (a fresh temporary directory), FBT_ARGS (extra flags for
# `fbt bench`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
FBT="${FBT:-$root/build/fbt}"
PYTHON="${PYTHON:-/usr/bin/python3}"
PRESET="${PRESET:-small}"
THREADS="${THREADS:-1}"
REPS="${REPS:-5}"
CPU="${CPU-1}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/fbt_compare.XXXXXX)}"
mkdir -p "$OUT_DIR"

[ -x "$FBT" ] || { echo "compare.sh: no fbt binary at $FBT (build it, or set FBT=...)" >&2; exit 1; }
"$PYTHON" -c "import torch" 2>/dev/null ||
  { echo "compare.sh: $PYTHON cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

pin=()
[ -n "$CPU" ] && command -v taskset >/dev/null && pin=(taskset -c "$CPU")
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"

echo "== fbt bench ($FBT)" >&2
# shellcheck disable=SC2086  # FBT_ARGS is a list of flags
"${pin[@]}" "$FBT" bench --preset "$PRESET" --tests train,decode --threads "$THREADS" --reps "$REPS" \
  --passes 1,2 --batch-sizes 1,8 --contexts 64 --new-tokens 64 ${FBT_ARGS:-} \
  --format json --out "$OUT_DIR/fbt.json"
echo "== reference bench ($PYTHON $here/fbt_ref.py)" >&2
# fbt keeps freed CPU blocks in the process (include/fbt/util/cpu_allocator.h); the reference gets the
# same glibc allocator settings, so the ratio measures the frameworks, not malloc's defaults.
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824 \
  "${pin[@]}" "$PYTHON" "$here/fbt_ref.py" bench --preset "$PRESET" --tests train,decode --threads "$THREADS" \
  --reps "$REPS" --format json --out "$OUT_DIR/reference.json"
"$PYTHON" "$here/compare.py" "$OUT_DIR/fbt.json" "$OUT_DIR/reference.json" --out "$OUT_DIR/compare.md"
echo "(results in $OUT_DIR)" >&2
