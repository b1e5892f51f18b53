#!/usr/bin/env python3
"""Tables of bench/repro/reasoning.sh (issue 23, item 4), from its run directories only.

    reasoning_report.py --runs runs/repro/reasoning [--out FILE]

Reads RUNS/tasks/arithmetic/test.jsonl (each problem's number of operations) and
RUNS/sft-{fbt,std,std2}-sN/eval.samples.jsonl (fbt eval's per-sample records: mode, id, correct,
tokens). Prints, per model and decoding mode: accuracy (mean ± sd over seeds), accuracy by number
of operations and the median generated tokens (all seeds pooled); then paired exact McNemar tests
(two-sided binomial on the discordant pairs, items × seeds pooled) between the FBT model's modes
and between each FBT mode and the standard models. Python 3 standard library only; also used by
analyze.py for docs/results.md.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics

MODELS = [("sft-fbt", "FBT (K=2 last third, SFT K=3)"),
          ("sft-std", "standard, same tokens"),
          ("sft-std2", "standard, same compute")]


def mcnemar_p(b, c):
    """Exact two-sided McNemar p-value: 2·P(X ≤ min(b, c)), X ~ Binomial(b + c, 1/2), capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def load(runs):
    """{(model, mode): {seed: {id: (correct, tokens)}}} and {id: operations}."""
    ops = {}
    with open(os.path.join(runs, "tasks", "arithmetic", "test.jsonl")) as f:
        for line in f:
            if line.strip():
                p = json.loads(line)
                ops[p["id"]] = p["operations"]
    out = {}
    for path in sorted(glob.glob(os.path.join(runs, "sft-*-s*", "eval.samples.jsonl"))):
        m = re.fullmatch(r"(sft-[a-z0-9]+)-s(\d+)", os.path.basename(os.path.dirname(path)))
        if not m or not os.path.exists(os.path.join(os.path.dirname(path), "eval.json")):
            continue  # an evaluation that did not finish
        model, seed = m.group(1), int(m.group(2))
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                out.setdefault((model, r["mode"]), {}).setdefault(seed, {})[r["id"]] = (bool(r["correct"]), r["tokens"])
    return out, ops


def fmt_ms(xs, digits=1, scale=100):
    xs = [x * scale for x in xs]
    if not xs:
        return "—"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def report(runs):
    results, ops = load(runs)
    md = []
    if not results:
        return ["No finished evaluations in " + runs + "."]
    op_counts = sorted(set(ops.values()))
    keys = [(m, mode) for m, _ in MODELS for (mm, mode) in sorted(results) if mm == m]
    md.append("Zero-shot chat-template greedy accuracy on held-out `fbt synth --task arithmetic` problems "
              "(% correct; mean ± sd over seeds), by number of operations (all seeds pooled), and the median "
              "number of generated tokens.")
    md.append("")
    md.append("| model | mode | seeds | items/seed | accuracy % | " + " | ".join(f"{k} ops" for k in op_counts)
              + " | median tokens |")
    md.append("|---|---|---|---|---|" + "---|" * len(op_counts) + "---|")
    names = dict(MODELS)
    for key in keys:
        by_seed = results[key]
        acc = [sum(c for c, _ in items.values()) / len(items) for items in by_seed.values()]
        pooled = [(ops.get(i), c, t) for items in by_seed.values() for i, (c, t) in items.items()]
        cells = []
        for k in op_counts:
            sel = [c for o, c, _ in pooled if o == k]
            cells.append(f"{100 * sum(sel) / len(sel):.1f} ({len(sel)})" if sel else "—")
        med = statistics.median(t for _, _, t in pooled)
        md.append(f"| {names[key[0]]} | {key[1]} | {len(by_seed)} | {len(next(iter(by_seed.values())))} | "
                  f"{fmt_ms(acc)} | " + " | ".join(cells) + f" | {med:g} |")
    md.append("")
    md.append("Paired exact McNemar tests on the same items (pairs pooled over the seeds both have): b = "
              "items only the first gets right, c = only the second.")
    md.append("")
    md.append("| first | second | pairs | b | c | p |")
    md.append("|---|---|---|---|---|---|")
    fbt_modes = [k for k in keys if k[0] == "sft-fbt"]
    pairs = [(a, b) for i, a in enumerate(fbt_modes) for b in fbt_modes[i + 1:]]
    pairs += [(a, b) for a in fbt_modes for b in keys if b[0] != "sft-fbt"]
    for a, b in pairs:
        bb = cc = n = 0
        for seed, items in results[a].items():
            other = results[b].get(seed, {})
            for i, (ca, _) in items.items():
                if i in other:
                    n += 1
                    cb = other[i][0]
                    bb += ca and not cb
                    cc += cb and not ca
        if n:
            md.append(f"| {names[a[0]]} {a[1]} | {names[b[0]]} {b[1]} | {n} | {bb} | {cc} | {mcnemar_p(bb, cc):.3g} |")
    md.append("")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    text = "\n".join(report(a.runs)) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
