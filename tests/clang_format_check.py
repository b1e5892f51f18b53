#!/usr/bin/env python3
"""The C++ sources follow the repository's .clang-format (Google style, 120 columns): runs
`clang-format-14 --dry-run --Werror` over every .cpp/.h under bench/, include/, src/, tests/ and tools/
and exits 1 naming each file it would change (fix with: clang-format-14 -i FILE).

The formatter is pinned to clang-format 14 (Debian 12's, installed by scripts/setup.sh) because
other versions break lines differently; where it is absent the check exits 77 (skipped).
Usage: clang_format_check.py [REPO_ROOT] (default: this file's repository)."""
import os
import shutil
import subprocess
import sys

FOLDERS = ["bench", "include", "src", "tests", "tools"]


def sources(root):
    """Every C++ source and header under the checked folders, sorted."""
    found = []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            found += [os.path.join(dirpath, n) for n in names if n.endswith((".cpp", ".h"))]
    return sorted(found)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    exe = shutil.which("clang-format-14")
    if exe is None:
        print("clang_format_check: skipped: clang-format-14 not found (scripts/setup.sh installs it)")
        return 77
    files = sources(root)
    bad = []
    for i in range(0, len(files), 64):
        chunk = files[i:i + 64]
        p = subprocess.run([exe, "--dry-run", "--Werror", "--style=file"] + chunk, cwd=root,
                           capture_output=True, text=True)
        if p.returncode != 0:
            bad += sorted({line.split(":", 1)[0] for line in p.stderr.splitlines() if ": error:" in line})
    for path in bad:
        print(f"{os.path.relpath(path, root)}: not formatted as .clang-format says (clang-format-14 -i {os.path.relpath(path, root)})")
    print(f"clang_format_check: {len(files)} files, {len(bad)} to reformat")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
