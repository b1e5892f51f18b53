#!/usr/bin/env python3
"""The include layering of fbt's folders (docs/ARCHITECTURE.md): a file includes headers of its own
folder or of a lower layer, never of a higher one or of a sibling on its own layer, so no folder
loop can form.

    util -> model -> data -> io -> dist -> train -> infer -> serve | eval | bench -> tools

Exit 0 when every include goes downwards; otherwise prints each offending include and exits 1.
Usage: layer_order.py [REPO_ROOT] (default: this file's repository)."""
import os
import re
import sys

LAYERS = [["util"], ["model"], ["data"], ["io"], ["dist"], ["train"], ["infer"], ["serve", "eval", "bench"], ["tools"]]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"fbt/(\w+)/([\w./]+)"', re.M)


def folder_of(root, path):
    """The layer folder of a source or header path, or None for files outside the layers."""
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "tools":
        return "tools"
    if rel[:2] == ["include", "fbt"] and len(rel) > 3:
        return rel[2]
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    return None


def violations(root):
    found = []
    for top in ("include/fbt", "src", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                folder = folder_of(root, path)
                if folder is None or not name.endswith((".h", ".cpp", ".in")):
                    continue
                if folder not in RANK:
                    found.append(f"{os.path.relpath(path, root)}: folder '{folder}' has no layer (add it to LAYERS)")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    target = m.group(1)
                    if target == folder:
                        continue
                    if target not in RANK or RANK[target] >= RANK[folder]:
                        found.append(f"{os.path.relpath(path, root)}: includes fbt/{target}/{m.group(2)}, "
                                     f"a {'sibling' if RANK.get(target) == RANK[folder] else 'higher'} layer than {folder}/")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = violations(root)
    for line in bad:
        print(line)
    print(f"{len(bad)} include(s) against the layer order " + " -> ".join("|".join(l) for l in LAYERS))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
