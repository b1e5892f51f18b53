#!/usr/bin/env python3
"""The table of bench/warm_start_smollm2.sh (issue 38, item 2) from its eval JSONs.

    warm_start_table.py DIR [--bar 0.02]

DIR is the script's OUT (evals/, logs/) or its archive in docs/repro/runs/warm_start (the same
layout). Per arm and step: held-out nats/token in standard, fused(1), fused(2) (EVAL_TOKENS
tokens) and standard and sequential soft (SEQ_TOKENS tokens), and the worst mode's excess over the
import's standard on the same tokens; the bar of issue 38 is 0.02 nats at every point.
Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import re


def rows(path):
    with open(path) as f:
        d = json.load(f)
    return {r["name"]: (r["nats_per_token"], r["tokens"]) for r in d["results"]}


def metrics(d, run):
    """step -> the training record of that step, from OUT/runs/RUN/metrics.jsonl or the archive's metrics/RUN.jsonl"""
    for f in (os.path.join(d, "runs", run, "metrics.jsonl"), os.path.join(d, "metrics", run + ".jsonl")):
        if os.path.exists(f):
            out = {}
            with open(f) as fh:
                for line in fh:
                    r = json.loads(line)
                    if "tokens" in r and "step" in r:
                        out[r["step"]] = r
            return out
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--bar", type=float, default=0.02)
    a = ap.parse_args()
    ev = os.path.join(a.dir, "evals")
    p0, s0 = rows(os.path.join(ev, "s0-par.json")), rows(os.path.join(ev, "s0-seq.json"))
    base_p, base_s = p0["passes=0"][0], s0["passes=0"][0]
    points = []
    for f in glob.glob(os.path.join(ev, "*-par.json")):
        name = os.path.basename(f)[:-len("-par.json")]
        if not os.path.exists(os.path.join(ev, name + "-seq.json")):
            continue
        m = re.fullmatch(r"(k23|k1)-s(\d+)", name)
        if name == "s0":
            points.append(("import", 0, name))
        elif m:
            points.append((m.group(1), int(m.group(2)), name))
        elif name.startswith("sweep-"):
            points.append((name, -1, name))
    order = {"import": 0, "k23": 1, "k1": 2}
    points.sort(key=lambda p: (order.get(p[0], 3), p[0], p[1]))
    walls = {}
    for f in glob.glob(os.path.join(a.dir, "logs", "*.wall_s")):
        with open(f) as fh:
            walls[os.path.basename(f)[:-len(".wall_s")]] = int(fh.read().split()[0])
    ntok_p, ntok_s = p0["passes=0"][1], s0["passes=0"][1]
    print(f"Held-out WikiText-2 test, nats/token. standard, fused(1), fused(2): {ntok_p} tokens; "
          f"standard and sequential soft: {ntok_s} tokens (windows of 512 spread over the split). "
          f"feedback − own standard = the worst of fused(1), fused(2), soft minus the same model's standard on the same tokens; "
          f"worst Δ = the worst mode minus the import's standard on the same tokens (bar: +{a.bar}).\n")
    print("| arm | step | tokens trained (token-equiv.) | train wall s | standard | fused(1) | fused(2) "
          "| standard (seq tokens) | soft, sequential | feedback − own standard | worst Δ | bar |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    all_ok = True
    for arm, step, name in points:
        p, s = rows(os.path.join(ev, name + "-par.json")), rows(os.path.join(ev, name + "-seq.json"))
        worst = max(max(v[0] for v in p.values()) - base_p, max(v[0] for v in s.values()) - base_s)
        own = max(max(p["passes=1"][0], p["passes=2"][0]) - p["passes=0"][0], s["sequential"][0] - s["passes=0"][0])
        ok = worst <= a.bar
        all_ok &= ok or name.startswith("sweep-")
        label = {"import": "import (step 0, both arms)", "k23": "K=2/3 warm start", "k1": "K=1 control"}.get(arm, arm)
        run = name if name.startswith("sweep-") else arm
        m = metrics(a.dir, run)
        rec = m.get(max(m) if step < 0 and m else step) if m else None
        st = (str(rec["step"]) if rec else "end") if step < 0 else str(step)
        tok = f"{rec['tokens']:,} ({rec['token_equivalent']:,})" if rec else ("0" if step == 0 else "?")
        wall = f"{rec['elapsed_s']:.0f}" if rec else ("0" if step == 0 else "?")
        print(f"| {label} | {st} | {tok} | {wall} | {p['passes=0'][0]:.4f} | {p['passes=1'][0]:.4f} | {p['passes=2'][0]:.4f} "
              f"| {s['passes=0'][0]:.4f} | {s['sequential'][0]:.4f} | {own:+.4f} | {worst:+.4f} | {'holds' if ok else 'FAILS'} |")
    print()
    if walls:
        print("Training wall time (s): " + ", ".join(f"{k} {v}" for k, v in sorted(walls.items())))
    print(f"Bar held at every point of both arms: {'yes' if all_ok else 'no'}")


if __name__ == "__main__":
    main()
