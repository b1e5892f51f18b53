#!/usr/bin/env python3
"""The state a decoder carries from one step to the next (KVCache's h_prev, last_token, next_pos;
include/fbt/model/cache.h) has one writer: KVCache::advance / advance_step. The members are private,
but libtorch tensors can be written through a const reference (copy_, fill_, add_, ...), so this
scans every source outside src/model/cache.cpp for an in-place operation, an assignment, a write
through data_ptr or a memcpy into the accessors, and for the private members' names.

Exit 0 when there is none; otherwise prints each offending line and exits 1.
Usage: carried_state.py [REPO_ROOT] (default: this file's repository)."""
import os
import re
import sys

ACCESSOR = r"\b(h_prev|last_token|next_pos)\(\)"
WRITES = re.compile(
    ACCESSOR + r"\s*(\.\s*(\w+_|mutable_data_ptr|set_data)\s*\(|=(?!=)"  # copy_(...), fill_(...), = ...
    r"|\.\s*data_ptr\s*<\w+>\s*\(\s*\)\s*(\[[^\]]*\]\s*)?=(?!=))"  # data_ptr<T>()[i] = ...
    r"|\b(memcpy|memset|memmove)\s*\(\s*[\w.>-]*" + ACCESSOR)  # as a raw copy's destination
MEMBERS = re.compile(r"\b(h_prev_|last_token_|next_pos_)\b")
HOME = {os.path.join("src", "model", "cache.cpp"), os.path.join("include", "fbt", "model", "cache.h")}


def violations(root):
    found = []
    for top in ("include", "src", "tools", "bench", "tests"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if rel in HOME:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        if WRITES.search(line) or MEMBERS.search(line):
                            found.append(f"{rel}:{number}: {line.strip()}")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = violations(root)
    for line in bad:
        print(line)
    print(f"{len(bad)} write(s) of the carried state outside KVCache::advance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
