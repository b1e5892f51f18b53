#!/usr/bin/env python3
"""Tables of bench/repro/reasoning.sh (issue 23, item 4; issue 38, item 3), from its run directories only.

    reasoning_report.py --runs runs/repro/reasoning [--out FILE] [--pooled]

Reads RUNS/tasks/arithmetic/test.jsonl (each problem's number of operations) and
RUNS/sft-{fbt,win,res,std,std2,stdw}-sN/eval.samples.jsonl (fbt eval's per-sample records: mode, id,
correct, tokens). Prints, per model and decoding mode: accuracy (mean ± sd over seeds), accuracy by
number of operations and the median generated tokens (all seeds pooled); then paired exact McNemar
tests (two-sided binomial on the discordant pairs) per seed, between each feedback model's modes and
between each feedback mode and the standard models of the same seed (every seed scores the same
items, so pooling the seeds' pairs overstates the evidence; --pooled adds issue 23's pooled table).
Where the runs have them (issue 38): nats per assistant token on the SFT val conversations per mode
(RUN/eval_sft.json), losses on the pretraining val split incl. sequential soft (RUN/eval_pt.json),
the go/no-go gate after seed 1 (pt-*-s1/gate.json), the state-tracking probes of the pretrained
models (pt-*-sN/probes.json, item 4), and wall seconds (*.wall_s). Python 3 standard
library only; also used by analyze.py for docs/results.md.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics

MODELS = [("sft-fbt", "FBT (K=2 last third, SFT K=3)"),
          ("sft-win", "FBT winner (glu_plus_token, K=2/3 from step 0, SFT K=3)"),
          ("sft-res", "FBT residual fusion (winner's recipe, SFT K=3)"),
          ("sft-std", "standard, same tokens"),
          ("sft-std2", "standard, same compute"),
          ("sft-stdw", "standard, the winner's compute")]
FEEDBACK = ("sft-fbt", "sft-win", "sft-res")  # models evaluated in every mode
ARM_OF = {"fbt": "author", "win": "winner", "res": "residual", "std": "std", "std2": "std2", "stdw": "stdw"}


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


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs_by_kind(runs, prefix, name):
    """{kind: {seed: json}} of RUNS/PREFIX-KIND-sN/NAME."""
    out = {}
    for path in sorted(glob.glob(os.path.join(runs, prefix + "-*-s*", name))):
        m = re.fullmatch(prefix + r"-([a-z0-9]+)-s(\d+)", os.path.basename(os.path.dirname(path)))
        d = load_json(path)
        if m and d:
            out.setdefault(m.group(1), {})[int(m.group(2))] = d
    return out


def losses_part(runs):
    """Issue 38's loss tables (nothing when the runs have none of their files)."""
    md = []
    names = dict(MODELS)
    kinds = [m[len("sft-"):] for m, _ in MODELS]
    sft = runs_by_kind(runs, "sft", "eval_sft.json")
    if sft:
        md += ["", "Nats per assistant token on the SFT val conversations (`fbt eval-loss` on the SFT data; "
               "mean ± sd over seeds): standard = 0 fused passes, fused(k) = k fused passes over the whole "
               "conversation. Sequential soft is not scored on conversation data (see the pretraining-text "
               "table for it).", "",
               "| model | seeds | standard | fused(1) | fused(2) | fused(3) | fused(1) − standard |",
               "|---|---|---|---|---|---|---|"]
        for kind in [k for k in kinds if k in sft]:
            by = sft[kind]
            vals = {s: {x["name"]: x["nats_per_token"] for x in d["results"]} for s, d in by.items()}
            cells = [fmt_ms([v.get(f"passes={p}") for v in vals.values() if f"passes={p}" in v], 3, 1)
                     for p in range(4)]
            diff = [v["passes=1"] - v["passes=0"] for v in vals.values() if "passes=1" in v]
            md.append(f"| {names['sft-' + kind]} | {len(by)} | " + " | ".join(cells)
                      + f" | {fmt_ms(diff, 3, 1)} |")
    rows = []
    for prefix, what in (("pt", "pretrained"), ("sft", "after SFT")):
        pt = runs_by_kind(runs, prefix, "eval_pt.json")
        for kind in [k for k in kinds if k in pt]:
            by = pt[kind]
            vals = [{x["name"]: x["nats_per_token"] for x in d["results"]} for d in by.values()]
            get = lambda key: [v[key] for v in vals if key in v]  # noqa: E731
            d1 = [v["passes=1"] - v["passes=0"] for v in vals if "passes=1" in v]
            ds = [v["sequential"] - v["passes=0"] for v in vals if "sequential" in v]
            rows.append(f"| {ARM_OF.get(kind, kind)}, {what} | {len(by)} | {fmt_ms(get('passes=0'), 3, 1)} | "
                        f"{fmt_ms(get('passes=1'), 3, 1)} | {fmt_ms(get('sequential'), 3, 1)} | "
                        f"{fmt_ms(d1, 3, 1)} | {fmt_ms(ds, 3, 1)} |")
    if rows:
        md += ["", "Losses on the pretraining val split (TinyStories + worked problems; `fbt eval-loss --passes 1 "
               "--sequential`, nats/token, mean ± sd over seeds; negative differences = the feedback mode is better).",
               "", "| arm | seeds | standard | fused(1) | sequential soft | fused(1) − standard | soft − standard |",
               "|---|---|---|---|---|---|---|"] + rows
    gates = []
    for path in sorted(glob.glob(os.path.join(runs, "pt-*-s1", "gate.json"))):
        g = load_json(path)
        kind = os.path.basename(os.path.dirname(path))[len("pt-"):-len("-s1")]
        if g:
            gates.append(f"- {ARM_OF.get(kind, kind)}: **{'go' if g['go'] else 'no-go'}** (seed 1, pretraining val: "
                         f"standard {g['standard']:.3f}, fused(1) {g['fused(1)']:.3f}, sequential soft "
                         f"{g['sequential']:.3f} nats/token; rule: {g['rule']})")
    if gates:
        md += ["", "Go/no-go after seed 1:", ""] + gates
    walls = {}
    for path in glob.glob(os.path.join(runs, "*-s*.wall_s")) + glob.glob(os.path.join(runs, "*-s*", "eval.wall_s")):
        base = os.path.basename(path)
        run = base[:-len(".wall_s")] if base != "eval.wall_s" else os.path.basename(os.path.dirname(path)) + " eval"
        m = re.fullmatch(r"(pt|sft)-([a-z0-9]+)-s\d+( eval)?", run)
        try:
            w = float(open(path).read())
        except (OSError, ValueError):
            continue
        if m:
            walls.setdefault((ARM_OF.get(m.group(2), m.group(2)), m.group(1) + (m.group(3) or "")), []).append(w)
    if walls:
        arms = sorted({a for a, _ in walls}, key=lambda a: list(ARM_OF.values()).index(a) if a in ARM_OF.values() else 99)
        md += ["", "Wall seconds per run (mean over seeds; one thread on one core, on a machine shared with builds):",
               "", "| arm | pretraining | SFT | chat eval |", "|---|---|---|---|"]
        for a in arms:
            cells = [f"{statistics.mean(walls[(a, st)]):.0f} ({len(walls[(a, st)])})" if (a, st) in walls else "—"
                     for st in ("pt", "sft", "sft eval")]
            md.append(f"| {a} | " + " | ".join(cells) + " |")
    return md


def probes_part(runs):
    """Issue 38, item 4's probe table from RUNS/pt-*-sN/probes.json (nothing when there is none)."""
    probes = runs_by_kind(runs, "pt", "probes.json")
    if not probes:
        return []
    md = ["", "State-tracking probes on the pretrained models (`fbt eval-probe`, paper Fig. 7: `fbt synth` tasks with "
          "0, 4 and 16 distractors, an L2 logistic probe per layer on the residual at the query's colon, 4-fold "
          "grouped CV; accuracy %, mean ± sd over seeds). standard: standard prefill; recurrent: that position "
          "fused with the previous top state (one recurrent step). Layer 0 is the block input: only the "
          "recurrent step can put the answer there.", "",
          "| arm | task | seeds | majority | layer 0 standard | layer 0 recurrent | best layer standard | "
          "best layer recurrent |", "|---|---|---|---|---|---|---|---|"]
    kinds = [m[len("sft-"):] for m, _ in MODELS]
    for kind in [k for k in kinds if k in probes]:
        by = probes[kind]
        tasks = sorted({r["task"] for d in by.values() for r in d["results"]})
        for task in tasks:
            def acc(d, mode, layer=None):
                vals = {r["layer"]: r["value"] for r in d["results"]
                        if r["task"] == task and r["mode"] == mode and r["metric"] == "acc"}
                return vals.get(layer) if layer is not None else max(vals.values(), default=None)
            majority = [r["value"] for d in by.values() for r in d["results"]
                        if r["task"] == task and r["metric"] == "majority_acc"]
            cells = [fmt_ms([x for x in (acc(d, mode, layer) for d in by.values()) if x is not None])
                     for layer in (0, None) for mode in ("standard", "recurrent")]
            md.append(f"| {ARM_OF.get(kind, kind)} | {task} | {len(by)} | "
                      f"{fmt_ms(majority[:1]) if majority else '—'} | " + " | ".join(cells) + " |")
    return md


def report(runs, pooled_mcnemar=False):
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
    fbt_modes = [k for k in keys if k[0] in FEEDBACK]
    pairs = []
    for m in FEEDBACK:
        own = [k for k in fbt_modes if k[0] == m]
        pairs += [(a, b) for i, a in enumerate(own) for b in own[i + 1:]]
    pairs += [(a, b) for a in fbt_modes for b in keys if b[0] not in FEEDBACK]
    seeds = sorted({seed for k in keys for seed in results[k]})

    def counts(a, b, seed_list):
        bb = cc = n = 0
        for seed in seed_list:
            items, other = results[a].get(seed, {}), results[b].get(seed, {})
            for i, (ca, _) in items.items():
                if i in other:
                    n += 1
                    cb = other[i][0]
                    bb += ca and not cb
                    cc += cb and not ca
        return n, bb, cc

    md.append("Paired exact McNemar tests on the same items, per seed (every seed scores the same items, so "
              "the seeds are not pooled): b = items only the first gets right, c = only the second; "
              "cell: b / c, p (items).")
    md.append("")
    md.append("| first | second | " + " | ".join(f"seed {x}" for x in seeds) + " |")
    md.append("|---|---|" + "---|" * len(seeds))
    for a, b in pairs:
        cells = []
        for seed in seeds:
            n, bb, cc = counts(a, b, [seed])
            cells.append(f"{bb} / {cc}, p={mcnemar_p(bb, cc):.3g} ({n})" if n else "—")
        if any(c != "—" for c in cells):
            md.append(f"| {names[a[0]]} {a[1]} | {names[b[0]]} {b[1]} | " + " | ".join(cells) + " |")
    if pooled_mcnemar:
        md.append("")
        md.append("Pooled over seeds (issue 23's table; the same items repeat in every seed, so this overstates "
                  "the evidence):")
        md.append("")
        md.append("| first | second | pairs | b | c | p |")
        md.append("|---|---|---|---|---|---|")
        for a, b in pairs:
            n, bb, cc = counts(a, b, results[a].keys())
            if n:
                md.append(f"| {names[a[0]]} {a[1]} | {names[b[0]]} {b[1]} | {n} | {bb} | {cc} | {mcnemar_p(bb, cc):.3g} |")
    md += losses_part(runs)
    md += probes_part(runs)
    md.append("")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out")
    ap.add_argument("--pooled", action="store_true", help="also the McNemar table pooled over seeds (issue 23's)")
    a = ap.parse_args()
    text = "\n".join(report(a.runs, a.pooled)) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
