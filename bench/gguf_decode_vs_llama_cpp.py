#!/usr/bin/env python3
"""Decode speed of one GGUF file (e.g. a Q4_K_M download) in fbt and in llama.cpp, alternating the
two programs in one run.

fbt imports the file once (`fbt import --from gguf`: K-blocks are dequantised at import) and decodes
it with `fbt generate --weights W` (W: int4 or int8, the CPU decoder's Q4_0 / Q8_0 blocks made at
load; default int4), or with W = gguf from a run that keeps the file's own blocks (`fbt quantize
--weights int8 --from-gguf FILE`: Q8_0, Q4_0, Q5_0, Q4_K and Q6_K read in place, the fusion Q8_0),
greedy, end-of-text suppressed, 128 new tokens after a short prompt: the tokens/s of its timing
line. llama.cpp decodes the file itself: `llama-bench -m FILE -p 0 -n 128`
(tg128), its avg_ts. Both pinned to the first `--threads` cores. Prints per-repetition numbers, the
medians and the fbt / llama.cpp ratio with its min–max over the repetitions.

Build llama-bench as bench/vs_llama_cpp.py says. Usage:
  bench/gguf_decode_vs_llama_cpp.py --gguf FILE --llama-cpp DIR [--llama-build DIR/build] [--fbt build/fbt]
                                    [--weights int4|int8|gguf]
                                    [--threads 1] [--reps 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NEW_TOKENS = 128


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"gguf_decode_vs_llama_cpp: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def pinned(cmd, threads):
    return ["taskset", "-c", ",".join(str(i) for i in range(threads))] + cmd


def fbt_tokens_per_s(a, run_dir):
    p = run(pinned([a.fbt, "generate", "--checkpoint", run_dir, "--prompt", "The capital of France is",
                    "--max-new-tokens", str(NEW_TOKENS), "--temperature", "0", "--ignore-eos",
                    *([] if a.weights == "gguf" else ["--weights", a.weights]), "--threads", str(a.threads)], a.threads))
    m = re.search(r"(\d+) tokens in [\d.]+ s: ([\d.]+) tokens/s", p.stderr)
    if not m or int(m.group(1)) != NEW_TOKENS:
        sys.exit(f"unexpected fbt generate timing line:\n{p.stderr[-1000:]}")
    return float(m.group(2))


def llama_tokens_per_s(a):
    bench = os.path.join(a.llama_build or os.path.join(a.llama_cpp, "build"), "bin", "llama-bench")
    p = run(pinned([bench, "-m", a.gguf, "-p", "0", "-n", str(NEW_TOKENS), "-t", str(a.threads), "-r", "1",
                    "-o", "json"], a.threads))
    return json.loads(p.stdout)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source dir, built into DIR/build")
    ap.add_argument("--llama-build", default="",
                    help="llama.cpp's build dir if not DIR/build (e.g. one built without AMX where the VM forbids it)")
    ap.add_argument("--fbt", default=os.path.join(HERE, "..", "build", "fbt"))
    ap.add_argument("--weights", default="int4", choices=["int4", "int8", "gguf"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        run([a.fbt, "import", "--from", "gguf", a.gguf, "--out", run_dir, "--context", "512"])
        if a.weights == "gguf":  # a run of the file's own blocks
            run([a.fbt, "quantize", "--checkpoint", run_dir, "--weights", "int8", "--from-gguf", a.gguf,
                 "--out", run_dir + "-gguf"])
            run_dir += "-gguf"
        fbt, llama = [], []
        for i in range(a.reps):  # alternate which program goes first
            order = [("fbt", lambda: fbt.append(fbt_tokens_per_s(a, run_dir))),
                     ("llama.cpp", lambda: llama.append(llama_tokens_per_s(a)))]
            for _, measure in (order if i % 2 == 0 else order[::-1]):
                measure()
            print(f"rep {i + 1}: fbt {fbt[-1]:.1f} tok/s, llama.cpp {llama[-1]:.1f} tok/s, ratio {fbt[-1] / llama[-1]:.2f}")
    ratios = [f / l for f, l in zip(fbt, llama)]
    print(f"| file | threads | fbt --weights {a.weights} tok/s | llama.cpp tok/s | ratio (min–max) |")
    print("|---|---|---|---|---|")
    print(f"| {os.path.basename(a.gguf)} | {a.threads} | {statistics.median(fbt):.1f} | {statistics.median(llama):.1f} | "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
