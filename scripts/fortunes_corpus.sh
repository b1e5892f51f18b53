#!/usr/bin/env bash
# Debian's `fortunes` text as a corpus directory: one .txt per fortune file, entries separated
# by blank lines instead of '%' lines, so `fbt prepare --doc-split blank` reads one fortune per
# document. Index files (*.dat, *.u8) are skipped. Used by scripts/demo.sh and
# bench/repro/setting_b.sh.
#
#   scripts/fortunes_corpus.sh SRC_DIR OUT_DIR      (SRC_DIR: usually /usr/share/games/fortunes)
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: fortunes_corpus.sh SRC_DIR OUT_DIR" >&2; exit 2; }
src="$1" out="$2"
[ -d "$src" ] || { echo "fortunes_corpus.sh: $src not found (apt-get install fortunes)" >&2; exit 1; }
mkdir -p "$out"
for f in "$src"/*; do
  name=$(basename "$f")
  case "$name" in *.*) continue ;; esac
  [ -f "$f" ] && sed 's/^%$//' "$f" > "$out/$name.txt"
done
