#!/usr/bin/python3
"""Joins `fbt bench --format json` and `fbt_ref.py bench --format json` results and prints a
markdown table: test, shape, fbt tokens/s, reference tokens/s, ratio fbt/ref (medians).

Rows are joined on test + shape keys (train: passes, batch, seq; decode: mode, batch,
context, new_tokens where both have it). Rows present on one side only are listed with "—".
Standard library only.

usage: compare.py FBT.json REF.json [--out FILE.md]
"""
import argparse
import json
import sys

KEYS = {"train": ("passes", "batch", "seq"), "decode": ("mode", "batch", "context", "new_tokens")}


def key(r):
    return (r.get("test"),) + tuple(r.get(k) for k in KEYS.get(r.get("test"), ()))


def shape(r):
    if r.get("test") == "train":
        return f"K={r.get('passes')}, {r.get('batch')}×{r.get('seq')}"
    if r.get("test") == "decode":
        new = r.get("new_tokens")
        return f"{r.get('mode')}, batch {r.get('batch')}, context {r.get('context')}" + (f", +{new}" if new else "")
    return ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("test", "tokens_per_s"))


def median(r):
    tps = r.get("tokens_per_s")
    return tps.get("median") if isinstance(tps, dict) else tps


def relaxed(k):  # decode rows joined without new_tokens when one side lacks it
    return k[:4] if k[0] == "decode" else k


def table(fbt, ref):
    ref_rows = {key(r): r for r in ref["results"]}
    ref_relaxed = {relaxed(key(r)): r for r in ref["results"]}
    used = set()
    lines = [f"fbt: preset {fbt.get('preset')}, {fbt.get('threads')} thread(s), {fbt.get('reps')} reps · "
             f"reference: preset {ref.get('preset')}, {ref.get('threads')} thread(s), {ref.get('reps')} reps "
             f"(tokens/s medians; decode counts batch × new tokens)", "",
             "| test | shape | fbt tokens/s | reference tokens/s | fbt/ref |",
             "|---|---|---:|---:|---:|"]

    def fmt(x):
        return "—" if x is None else f"{x:.0f}"

    for r in fbt["results"]:
        if r.get("test") not in KEYS:
            continue
        other = ref_rows.get(key(r)) or ref_relaxed.get(relaxed(key(r)))
        a, b = median(r), (median(other) if other else None)
        if other:
            used.add(id(other))
        ratio = f"{a / b:.2f}×" if a and b else "—"
        lines.append(f"| {r['test']} | {shape(r)} | {fmt(a)} | {fmt(b)} | {ratio} |")
    for r in ref["results"]:
        if id(r) not in used:
            lines.append(f"| {r['test']} | {shape(r)} | — | {fmt(median(r))} | — |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("fbt_json")
    p.add_argument("ref_json")
    p.add_argument("--out", default="")
    a = p.parse_args()
    with open(a.fbt_json) as f:
        fbt = json.load(f)
    with open(a.ref_json) as f:
        ref = json.load(f)
    text = table(fbt, ref)
    for k in ("preset", "threads", "device"):
        if fbt.get(k) != ref.get(k):
            text += f"\n\nwarning: {k} differs: fbt {fbt.get(k)!r}, reference {ref.get(k)!r}"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
