#!/usr/bin/env python3
"""Turns the run directories of bench/repro into docs/results.md and SVG plots (issue 7).

    analyze.py [--runs runs/repro] [--out docs/results.md] [--svg-dir docs/repro]

Reads RUNS/{A,B}/*/ (run.json, metrics.jsonl, wall.json, eval_val.json, eval_slice.json,
recipe.txt) written by setting_a.sh / setting_b.sh. Every number in the output comes from
those files; nothing is typed in by hand except the reference values quoted from the paper,
nanoGPT and SPEC §10 (marked as such). Python 3 standard library only.
"""
import argparse
import datetime
import glob
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reasoning_report  # noqa: E402
import recipes  # noqa: E402

NANOGPT_VAL = 1.88  # nanoGPT README, CPU shakespeare_char config after 2000 iterations


# ----------------------------------------------------------------------------- loading
def load_dir(d):
    r = recipes.load_run(d)
    if r is None:
        return None
    run = {"dir": os.path.basename(d), "m": r}
    try:
        run["recipe"] = open(os.path.join(d, "recipe.txt")).read().strip()
    except OSError:
        run["recipe"] = re.sub(r"-s\d+$", "", run["dir"])
    m = re.search(r"-s(\d+)$", run["dir"])
    run["seed"] = int(m.group(1)) if m else 1
    m = re.match(r"std-x([\d.]+)-s\d+$", run["dir"])
    run["budget_x"] = float(m.group(1)) if m else None
    m = re.match(r".+@x([\d.]+)-s\d+$", run["dir"])  # setting_a.sh --stage length: RECIPE@xM-sS
    run["curve_x"] = float(m.group(1)) if m else None
    wall = json.load(open(os.path.join(d, "wall.json")))
    run["wall"] = wall
    rj = json.load(open(os.path.join(d, "run.json")))
    run["runjson"] = rj
    last = None
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "tokens" in j:
                last = j
    run["steps"] = last["step"]
    run["tokens"] = last["tokens"]
    run["te"] = last["token_equivalent"]
    run["te_ratio"] = last["token_equivalent_ratio"]
    run["train_elapsed"] = last["elapsed_s"]
    run["pass_fractions"] = last.get("pass_fractions", {})
    return run


def load_setting(path):
    runs = {}
    for d in sorted(glob.glob(os.path.join(path, "*"))):
        if os.path.isdir(d) and d != os.path.join(path, "data"):
            r = load_dir(d)
            if r is not None:
                runs[r["dir"]] = r
    info = {}
    for name in ("setting.json",):
        try:
            info = json.load(open(os.path.join(path, name)))
        except OSError:
            pass
    for name in ("winner.txt", "winner_sweep1.txt", "length_recipe.txt"):
        try:
            info[name] = open(os.path.join(path, name)).read().strip()
        except OSError:
            pass
    try:
        info["meta"] = json.load(open(os.path.join(path, "data", "meta.json")))
    except OSError:
        pass
    return runs, info


# ----------------------------------------------------------------------------- stats
def mean_std(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, 0
    if len(xs) == 1:
        return xs[0], None, 1
    return statistics.mean(xs), statistics.stdev(xs), len(xs)


def fmt(ms, digits=3, signed=False):
    m, s, n = ms
    if m is None:
        return "—"
    v = f"{m:+.{digits}f}" if signed else f"{m:.{digits}f}"
    return v if s is None else f"{v} ± {s:.{digits}f}"


def metric(run, key):
    m = run["m"]
    if key == "std":
        return m["passes=0"][0]
    if key == "std_bpb":
        return m["passes=0"][1]
    if key.startswith("f") and key[1:].isdigit():
        return m[f"passes={key[1:]}"][0]
    if key.startswith("bpb_f"):
        return m[f"passes={key[5:]}"][1]
    if key == "slice_std":
        return m["slice:passes=0"][0]
    if key == "seq":
        return m["slice:sequential"][0]
    if key == "seq_bpb":
        return m["slice:sequential"][1]
    c = m.get("contraction")
    if key == "c30":
        return c[-1][1] if c else None
    if key == "c_worst":
        return max(x[1] for x in c[1:]) if c else None
    if key == "c_rel30":
        return c[-1][2] if c else None
    if key == "score":
        return recipes.worst_decode_loss(m)
    if key == "wall":
        return run["wall"]["train_s"]
    if key == "te_ratio":
        return run["te_ratio"]
    if key == "tokens":
        return run["tokens"]
    if key == "te":
        return run["te"]
    raise KeyError(key)


def key_of(r):
    """A run's group: `std xM` for the standard transformer at M·N, `RECIPE@xM` for a recipe of the
    feedback-length curve at M·N, else the recipe (at N)."""
    if r["budget_x"] is not None:
        return f"std x{r['budget_x']:g}"
    if r["curve_x"] is not None:
        return f"{r['recipe']}@x{r['curve_x']:g}"
    return r["recipe"]


def group(runs, pred):
    g = {}
    for r in runs.values():
        if pred(r):
            g.setdefault(key_of(r), []).append(r)
    return g


# ----------------------------------------------------------------------------- interpolation
def interp_log_tokens(curve, loss):
    """curve: [(tokens, loss)] sorted by tokens with loss decreasing. The budget (tokens) at
    which the standard transformer reaches `loss`, linear in log(tokens) between budgets;
    outside the measured range the end segment is extrapolated and flagged."""
    pts = sorted(curve)
    if len(pts) < 2:
        return None, "n/a"
    for (t0, l0), (t1, l1) in zip(pts, pts[1:]):
        if (l0 - loss) * (l1 - loss) <= 0 and l0 != l1:
            f = (l0 - loss) / (l0 - l1)
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0))), ""
    if loss > pts[0][1]:
        (t0, l0), (t1, l1) = pts[0], pts[1]
        tag = "below N (extrapolated)"
    else:
        (t0, l0), (t1, l1) = pts[-2], pts[-1]
        tag = "beyond 3N (extrapolated)"
    if l0 == l1:
        return None, tag
    f = (l0 - loss) / (l0 - l1)
    return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0))), tag


# ----------------------------------------------------------------------------- SVG
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=mag * 10)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-12:
        out.append(round(t, 10))
        t += step
    return out


def svg_plot(path, title, xlabel, ylabel, series, xlog=False, ylog=False, hlines=(), w=640, h=420):
    """series: [{name, pts: [(x, y, err)], color, line(bool), marker}]"""
    L, R, T, B = 70, 190, 40, 55
    xs = [p[0] for s in series for p in s["pts"]]
    ys = [p[1] + (p[2] or 0) for s in series for p in s["pts"]] + \
         [p[1] - (p[2] or 0) for s in series for p in s["pts"]] + [hl[0] for hl in hlines]
    if not xs:
        return False
    fx = (lambda v: math.log10(v)) if xlog else (lambda v: v)
    fy = (lambda v: math.log10(max(v, 1e-12))) if ylog else (lambda v: v)
    x0, x1 = min(map(fx, xs)), max(map(fx, xs))
    y0, y1 = min(map(fy, ys)), max(map(fy, ys))
    padx = (x1 - x0) * 0.08 or 0.5
    pady = (y1 - y0) * 0.08 or 0.05
    x0, x1, y0, y1 = x0 - padx, x1 + padx, y0 - pady, y1 + pady
    px = lambda v: L + (fx(v) - x0) / (x1 - x0) * (w - L - R)
    py = lambda v: h - B - (fy(v) - y0) / (y1 - y0) * (h - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{(L + w - R) / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
         f'<rect x="{L}" y="{T}" width="{w - L - R}" height="{h - T - B}" fill="none" stroke="black"/>',
         f'<text x="{(L + w - R) / 2}" y="{h - 12}" text-anchor="middle">{xlabel}</text>',
         f'<text transform="translate(16,{(T + h - B) / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>']
    def ticks(lo, hi, log):
        if log:
            vals = []
            for e in range(math.floor(lo), math.ceil(hi) + 1):
                for m in (1, 2, 5):
                    v = m * 10 ** e
                    if lo <= math.log10(v) <= hi:
                        vals.append(v)
            if len(vals) > 10:
                vals = [v for v in vals if f"{v:.0e}".startswith("1")]
            if len(vals) < 3:
                vals = [v for v in nice_ticks(10 ** lo, 10 ** hi) if v > 0 and lo <= math.log10(v) <= hi]
            return vals
        return nice_ticks(lo, hi)
    for v in ticks(x0, x1, xlog):
        X = px(v)
        lab = f"{v:.3g}" if not xlog or v < 1e4 else f"{v / 1e6:.3g}M"
        o.append(f'<line x1="{X:.1f}" y1="{h - B}" x2="{X:.1f}" y2="{h - B + 5}" stroke="black"/>'
                 f'<line x1="{X:.1f}" y1="{T}" x2="{X:.1f}" y2="{h - B}" stroke="#eee"/>'
                 f'<text x="{X:.1f}" y="{h - B + 18}" text-anchor="middle">{lab}</text>')
    for v in ticks(y0, y1, ylog):
        Y = py(v)
        o.append(f'<line x1="{L - 5}" y1="{Y:.1f}" x2="{L}" y2="{Y:.1f}" stroke="black"/>'
                 f'<line x1="{L}" y1="{Y:.1f}" x2="{w - R}" y2="{Y:.1f}" stroke="#eee"/>'
                 f'<text x="{L - 8}" y="{Y + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    ly = T + 10
    for val, name, color in hlines:
        Y = py(val)
        o.append(f'<line x1="{L}" y1="{Y:.1f}" x2="{w - R}" y2="{Y:.1f}" stroke="{color}" stroke-dasharray="6,4"/>')
        o.append(f'<line x1="{w - R + 10}" y1="{ly}" x2="{w - R + 30}" y2="{ly}" stroke="{color}" stroke-dasharray="6,4"/>'
                 f'<text x="{w - R + 35}" y="{ly + 4}">{name}</text>')
        ly += 18
    for i, s in enumerate(series):
        c = s.get("color", COLORS[i % len(COLORS)])
        pts = sorted(s["pts"])
        if s.get("line", True) and len(pts) > 1:
            d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in pts)
            o.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        for x, y, e in pts:
            X, Y = px(x), py(y)
            if e:
                ya, yb = py(y - e), py(y + e)
                o.append(f'<line x1="{X:.1f}" y1="{ya:.1f}" x2="{X:.1f}" y2="{yb:.1f}" stroke="{c}"/>'
                         f'<line x1="{X - 4:.1f}" y1="{ya:.1f}" x2="{X + 4:.1f}" y2="{ya:.1f}" stroke="{c}"/>'
                         f'<line x1="{X - 4:.1f}" y1="{yb:.1f}" x2="{X + 4:.1f}" y2="{yb:.1f}" stroke="{c}"/>')
            if s.get("marker", "o") == "s":
                o.append(f'<rect x="{X - 4:.1f}" y="{Y - 4:.1f}" width="8" height="8" fill="{c}"/>')
            elif s.get("marker", "o") != "none":
                o.append(f'<circle cx="{X:.1f}" cy="{Y:.1f}" r="3.5" fill="{c}"/>')
        o.append(f'<line x1="{w - R + 10}" y1="{ly}" x2="{w - R + 30}" y2="{ly}" stroke="{c}" stroke-width="2"/>'
                 f'<text x="{w - R + 35}" y="{ly + 4}">{s["name"]}</text>')
        ly += 18
    o.append("</svg>")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


# ----------------------------------------------------------------------------- report
COLS = [("std", "standard"), ("f1", "fused(1)"), ("f2", "fused(2)"), ("f4", "fused(4)"),
        ("slice_std", "slice std"), ("seq", "slice seq. soft"), ("c30", "slice fused(30)"),
        ("c_rel30", "rel. Δh @30")]
BPB = [("std_bpb", "standard"), ("bpb_f1", "fused(1)"), ("bpb_f2", "fused(2)"), ("bpb_f4", "fused(4)"),
       ("seq_bpb", "slice seq. soft")]


def final_table(md, groups, order, setting):
    md.append("| run | seeds | " + " | ".join(c[1] for c in COLS) + " | train wall s | tokens | token-equiv. compute |")
    md.append("|---|---|" + "---|" * len(COLS) + "---|---|---|")
    for name in order:
        g = groups.get(name)
        if not g:
            continue
        cells = []
        for k, _ in COLS:
            vals = [metric(r, k) for r in g]
            if all(v is None for v in vals):
                cells.append("—")
            elif k == "c_rel30":
                m_, s_, _ = mean_std(vals)
                cells.append(f"{m_:.1e}" + (f" ± {s_:.1e}" if s_ is not None else ""))
            else:
                cells.append(fmt(mean_std(vals), 3))
        te = mean_std([metric(r, "te_ratio") for r in g])
        md.append(f"| {label(name)} | {len(g)} (s{','.join(str(r['seed']) for r in sorted(g, key=lambda r: r['seed']))}) | "
                  + " | ".join(cells) + f" | {fmt(mean_std([metric(r, 'wall') for r in g]), 0)} | "
                  f"{g[0]['tokens'] / 1e6:.3f}M | {fmt(te, 2)}× |")
    md.append("")
    md.append("Bits per byte (same runs, same order; byte = UTF-8 byte of the decoded text):")
    md.append("")
    md.append("| run | " + " | ".join(c[1] for c in BPB) + " |")
    md.append("|---|" + "---|" * len(BPB))
    for name in order:
        g = groups.get(name)
        if not g:
            continue
        md.append(f"| {label(name)} | " + " | ".join(fmt(mean_std([metric(r, k) for r in g]), 3) for k, _ in BPB) + " |")
    md.append("")


def label(name):
    return name.replace("+", " + ")


def mult_str(m, flag):
    """A multiplier; extrapolations are starred, and far below N only reported as < 0.5×."""
    if m is None:
        return "—"
    if flag and m < 0.5:
        return "< 0.5×*"
    return f"{m:.2f}×{'*' if flag else ''}"


def multiplier_section(md, runs, groups, winner, setting, N_tokens, svg_dir, svg_rel, tag):
    std_runs = [r for r in runs.values() if r["budget_x"] is not None]
    if not std_runs:
        md.append("No standard-budget runs: no token multiplier.\n")
        return {}
    # mean curve
    by_x = {}
    for r in std_runs:
        by_x.setdefault(r["tokens"], []).append(metric(r, "std"))
    curve = sorted((t, statistics.mean(v)) for t, v in by_x.items())
    out = {}
    md.append("| FBT run (at N) | mode | loss (mean) | baseline budget reaching it | token multiplier (mean curve) | per-seed multipliers | compute multiplier |")
    md.append("|---|---|---|---|---|---|---|")
    for rec in [winner, "paper"]:
        g = groups.get(rec)
        if not g:
            continue
        for key, mode in (("std", "standard prefill"), ("f1", "fused(1)"), ("f2", "fused(2)")):
            lm = statistics.mean(metric(r, key) for r in g)
            t, flag = interp_log_tokens(curve, lm)
            per = []
            for r in sorted(g, key=lambda r: r["seed"]):
                c = sorted((x["tokens"], metric(x, "std")) for x in std_runs if x["seed"] == r["seed"])
                if len(c) >= 2:
                    ts, fl = interp_log_tokens(c, metric(r, key))
                    per.append((r["seed"], ts / r["tokens"] if ts else None, fl))
            mult = t / g[0]["tokens"] if t else None
            out[(rec, key)] = (mult, flag)
            te = statistics.mean(metric(r, "te_ratio") for r in g)
            ps = ", ".join(f"s{s}: {mult_str(m, f)}" for s, m, f in per if m is not None) or "—"
            md.append(f"| {label(rec)} | {mode} | {lm:.4f} | "
                      f"{(f'{t / 1e6:.3f}M tokens' + (' — ' + flag if flag else '')) if t and (not flag or t / g[0]['tokens'] >= 0.5) else ('—' if not t else flag)} | "
                      f"{mult_str(mult, flag) if mult else '—'} | {ps} | {te:.2f}× |")
    md.append("")
    md.append("(* = outside the measured N..3N range, extrapolated linearly in log tokens from the end segment; '< 0.5×*' = worse than the extrapolated standard at N/2, not quantified.) "
              "The paper (SPEC §9): ≈2× with two fused passes at 1.28× compute (1B, 100B–400B tokens).")
    md.append("")
    # plot
    series = [{"name": "standard (mean ± sd)", "pts": []}]
    for t in sorted(by_x):
        m, s, n = mean_std(by_x[t])
        series[0]["pts"].append((t, m, s))
    colors = {"std": "#2ca02c", "f1": "#d62728", "f2": "#9467bd"}
    for rec, mk in ((winner, "o"), ("paper", "s")):
        g = groups.get(rec)
        if not g:
            continue
        for key, mode in (("std", "std prefill"), ("f1", "fused(1)"), ("f2", "fused(2)")):
            m, s, n = mean_std([metric(r, key) for r in g])
            series.append({"name": f"{'winner' if rec == winner else 'paper sched.'} {mode}",
                           "pts": [(g[0]["tokens"] * (1.0 if mk == "o" else 1.04), m, s)],
                           "color": colors[key], "line": False, "marker": mk})
    fn = f"{tag}_loss_vs_budget.svg"
    if svg_plot(os.path.join(svg_dir, fn), f"Setting {setting}: val loss vs baseline budget",
                "training tokens (log scale)", "val loss, nats/token", series, xlog=True):
        md.append(f"![val loss vs budget]({svg_rel}/{fn})")
        md.append("")
    return out


def contraction_plot(md, groups, names, setting, svg_dir, svg_rel, tag, what=""):
    s_loss, s_rel, hl = [], [], []
    for i, n in enumerate(names):
        g = groups.get(n)
        if not g or not g[0]["m"].get("contraction"):
            continue
        K = len(g[0]["m"]["contraction"])
        pl, pr = [], []
        for k in range(K):
            ls = [r["m"]["contraction"][k][1] for r in g if len(r["m"].get("contraction", [])) > k]
            m, s, _ = mean_std(ls)
            pl.append((k, m, s))
            if k >= 1:
                rs = [r["m"]["contraction"][k][2] for r in g if len(r["m"].get("contraction", [])) > k]
                m, s, _ = mean_std(rs)
                pr.append((k, m, s))
        c = COLORS[i % len(COLORS)]
        s_loss.append({"name": label(n), "pts": pl, "color": c, "marker": "none"})
        s_rel.append({"name": label(n), "pts": pr, "color": c, "marker": "none"})
        sm = statistics.mean(metric(r, "slice_std") for r in g)
        hl.append((sm, f"{label(n)[:14]} std", c))
    if not s_loss:
        return
    f1, f2 = f"{tag}_contraction{what}_loss.svg", f"{tag}_contraction{what}_rel.svg"
    svg_plot(os.path.join(svg_dir, f1), f"Setting {setting}: loss after k fused passes (val slice)",
             "fused passes k", "loss, nats/token", s_loss, hlines=hl)
    svg_plot(os.path.join(svg_dir, f2), f"Setting {setting}: relative state change per pass",
             "fused passes k", "‖h(k) − h(k−1)‖ / ‖h(k−1)‖", s_rel, ylog=True)
    md.append(f"![contraction loss]({svg_rel}/{f1}) ![contraction rel]({svg_rel}/{f2})")
    md.append("")
    md.append("Error bars: ± one standard deviation over seeds; dashed lines: each run's standard loss on the slice.")
    md.append("")


def setting_report(md, setting, runs, info, svg_dir, svg_rel, quick):
    tag = setting.lower() + ("_quick" if quick else "")
    groups = group(runs, lambda r: True)
    winner = info.get("winner.txt")
    steps = info.get("steps")
    # --- anchor
    anchor = groups.get("anchor-adamw")
    if anchor:
        r = anchor[0]
        md.append(f"### Anchor: nanoGPT's recipe, {r['steps']} iterations of batch 12 × 64")
        md.append("")
        md.append(f"Our val loss (standard): **{metric(r, 'std'):.4f}** nats/char "
                  f"({metric(r, 'std_bpb'):.3f} bits/byte); nanoGPT reports ≈{NANOGPT_VAL} after 2000 iterations "
                  f"(its val estimate is 200 random batches; ours is every 64-char window of the val split). "
                  f"Train wall {metric(r, 'wall'):.0f} s, seed {r['seed']}, 1 run.")
        md.append("")
    # --- sweep
    sweep = [n for n in groups if n not in ("anchor-adamw",) and not n.startswith("std x")
             and "+" not in n and "@x" not in n
             and (n == "paper" or n not in recipes.FAITHFUL_A)]  # FBT recipes and the std.AXIS controls
    if setting == "B" and winner:  # no sweep on B: the recipe comes from Setting A
        md.append(f"Recipe under test: Setting A's winner **{winner}** — {recipes.resolve(setting, winner)[0]}; "
                  "carried over with only the warmup changed (N/10 steps, as for every Setting B run; Setting B has no "
                  "sweep of its own). Every other recipe states the "
                  "paper's fusion (`glu`, W_G std 0.02) explicitly, since the `small` preset now defaults to the "
                  "winner's (`recipes.py PAPER_FUSION`).")
        md.append("")
    elif sweep:
        md.append(f"### Sweep (seed 1, budget N = {steps} steps)")
        md.append("")
        base = [r for r in groups.get("std x1", []) if r["seed"] == 1]
        base = metric(base[0], "std") if base else None
        md.append("Standard transformer at N, seed 1 (`std x1`, for reference): "
                  + (f"{base:.4f}." if base is not None else "not run yet."))
        md.append("")
        md.append("Score = the worst decoding mode: max(fused(1), sequential soft, worst fused(k ≤ 30)), "
                  "the last two shifted by (val standard − slice standard) so all are on the val scale. "
                  "Lower is better; the issue's target is score ≤ standard with fused(1) clearly below. "
                  "The winner is the lowest score − standard loss of a standard transformer trained with the same "
                  "optimiser recipe (`std x1`, or `std.cosine` for the cosine variant: `recipes.py baseline_of`); "
                  "`std.*` rows are those controls. Every sweep run is listed, failures included.")
        md.append("")
        md.append("| recipe | what | standard | fused(1) | fused(2) | fused(4) | slice std | seq. soft | worst fused(k≤30) | rel. Δh @30 | score | score − own standard | score − std transformer (same recipe) | compute × | train wall s |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        rows = []
        for n in sweep:
            g = [r for r in groups[n] if r["seed"] == 1]
            if not g:
                continue
            r = g[0]
            rows.append((metric(r, "score"), n, r))
        def matched_base(n):  # val standard loss of the recipe's baseline_of() run, seed 1
            b = recipes.baseline_of(n)
            g = groups.get("std x1" if b == "std-x1" else b, [])
            g = [x for x in g if x["seed"] == 1]
            return metric(g[0], "std") if g else None
        for sc, n, r in sorted(rows, key=lambda t: (t[1].startswith("std"), t[0])):
            mb = None if n.startswith("std") else matched_base(n)
            desc = recipes.resolve(setting, n)[0]
            def cell(key, spec=".4f"):  # "—" where a run has no such metric (std controls: no contraction)
                v = metric(r, key)
                return "—" if v is None else format(v, spec)
            md.append(f"| {'**' + n + '**' if n == winner else n} | {desc} | {cell('std')} | {cell('f1')} | "
                      f"{cell('f2')} | {cell('f4')} | {cell('slice_std')} | {cell('seq')} | "
                      f"{cell('c_worst')} | {cell('c_rel30', '.3g')} | {sc:.4f} | {sc - metric(r, 'std'):+.4f} | {'—' if mb is None else f'{sc - mb:+.4f}'} | "
                      f"{cell('te_ratio', '.2f')} | {cell('wall', '.0f')} |")
        md.append("")
        if winner:
            md.append(f"Winner (by the rule above, `bench/repro/recipes.py winner`): **{winner}** — "
                      f"{recipes.resolve(setting, winner)[0]}. Stage-1 winner: {info.get('winner_sweep1.txt', '—')}.")
            md.append("")
    # --- finals
    order = [f"std x{x:g}" for x in sorted({r['budget_x'] for r in runs.values() if r['budget_x'] is not None})]
    if winner:
        order += [winner, winner + "+nodeep", winner + "+detach"]
        stage1 = info.get("winner_sweep1.txt")
        if stage1 and stage1 != winner:
            order += [stage1]  # the stage-1 winner, for the seed-to-seed spread of the top recipes
    order += ["paper"]
    md.append(f"### Final runs at budget N = {steps} steps (mean ± sd over seeds)")
    md.append("")
    md.append("Val loss in nats/token on the whole val split (standard and after k fused passes); "
              "the sequential soft loss (what Soft decoding sees), fused(30) and the relative state "
              "change at pass 30 are on the fixed slice (val windows spread evenly over the split); `std xM` = the standard "
              "transformer at M·N steps." + (" Sweep runs with seed 1 count as seed 1 here." if setting == "A" else ""))
    md.append("")
    final_table(md, groups, order, setting)
    mult = {}
    if winner:
        md.append("### Token multiplier")
        md.append("")
        mult = multiplier_section(md, runs, groups, winner, setting, None, svg_dir, svg_rel, tag)
        md.append("### Contraction (paper Fig. 3): winner vs winner without its deepest pass")
        md.append("")
        contraction_plot(md, groups, [winner, winner + "+nodeep", winner + "+detach"], setting,
                         svg_dir, svg_rel, tag)
        md.append("The paper's schedule (feedback only in the last 25% of steps) next to the winner:")
        md.append("")
        contraction_plot(md, groups, [winner, "paper"], setting, svg_dir, svg_rel, tag, "_paper")
    return groups, winner, mult


def faithful_section(md, groups, setting):
    """Issue 23: the paper-faithful recipes (recipes.FAITHFUL_A) next to the standard transformer,
    and each one's gap to the standard transformer of the same seed."""
    names = [n for n in recipes.FAITHFUL_A if groups.get(n)]
    if not names:
        return
    names += [n for n in SHIPPED_L3 if groups.get(n)]
    md.append("### Paper-faithful runs (issue 23; mean ± sd over seeds)")
    md.append("")
    md.append("The paper's schedule and `glu` fusion with the paper's Listing-3 input norm (`l3`), the first "
              "author's uniform fusion init (`uinit`), one prefix draw per sequence (`seqmix`); and the "
              "author's variant; as a check, Listing 3 on the recipe the `small` preset ships (issue 7's winner, "
              "`e23-tok.wg0.1`), where run. " + "; ".join(f"`{n}`: {recipes.resolve(setting, n)[0]}" for n in names) + ".")
    md.append("")
    final_table(md, groups, ["std x1"] + names, setting)
    std = {r["seed"]: metric(r, "std") for r in groups.get("std x1", [])}
    md.append("Gap to the standard transformer of the same seed at the same N (negative = FBT better), "
              "nats/token: fused(1) and standard on the whole val split, sequential soft on the slice "
              "(minus the slice's standard loss of the same run, plus its val standard loss).")
    md.append("")
    md.append("| run | seeds | standard − std | fused(1) − std | soft − std |")
    md.append("|---|---|---|---|---|")
    for n in names:
        g = [r for r in groups[n] if r["seed"] in std]
        if not g:
            continue
        gap = lambda k: fmt(mean_std([mode_loss(r, k) - std[r["seed"]] for r in g]), 3, signed=True)  # noqa: E731
        md.append(f"| {label(n)} | {len(g)} | {gap('std')} | {gap('f1')} | {gap('seq')} |")
    md.append("")
    knob_section(md, groups)


# Knob effects of the faithful stage: (label, recipe, recipe it differs from by that one choice).
KNOB_PAIRS = [("Listing 3's input norm (our fusion init)", "paper.l3", "paper"),
              ("Listing 3's input norm (author's fusion init)", "paper.l3.uinit", "paper.uinit"),
              ("author's fusion init (our input norm)", "paper.uinit", "paper"),
              ("author's fusion init (Listing 3's input norm)", "paper.l3.uinit", "paper.l3"),
              ("one prefix draw per sequence", "paper.l3.uinit.seqmix", "paper.l3.uinit"),
              ("Listing 3's input norm in the author's variant", "author.l3", "author"),
              ("Listing 3's input norm in the shipped `small` recipe", "e23-tok.wg0.1.l3", "e23-tok.wg0.1")]
# Issue 23's check of Listing 3 on the recipe the `small` preset ships (issue 7's Setting-A winner),
# shown next to the faithful runs when they were run.
SHIPPED_L3 = ["e23-tok.wg0.1", "e23-tok.wg0.1.l3"]


def mode_loss(r, key):
    """A run's val loss in one mode: fused(k) (`fK`) and its own standard prefill (`std`) on the whole
    val split; the sequential soft loss (`seq`) on the slice, moved to the val scale (minus the
    run's slice standard loss, plus its val standard loss)."""
    if key == "seq":
        return metric(r, "seq") - metric(r, "slice_std") + metric(r, "std")
    return metric(r, key)


def gap_to_std(r, key, std_run):
    """mode_loss(r, key) minus the val loss of the standard transformer `std_run` (same seed, steps)."""
    return mode_loss(r, key) - metric(std_run, "std")


def knob_section(md, groups):
    """Issue 23, item 2: which of the paper's and the author's choices matters, as paired
    per-seed differences between recipes that differ in one choice."""
    rows = []
    for what, a, b in KNOB_PAIRS:
        for key, mode in (("f1", "fused(1)"), ("seq", "sequential soft"), ("std", "standard prefill")):
            ga, gb = groups.get(a, []), {r["seed"]: r for r in groups.get(b, [])}
            d = [mode_loss(r, key) - mode_loss(gb[r["seed"]], key) for r in ga if r["seed"] in gb]
            if d:
                rows.append((what, a, b, mode, d))
    if not rows:
        return
    md.append("Which choice matters: paired per-seed differences (same seed) between two recipes that differ in "
              "that one choice, in nats/token; negative = the choice lowers the loss.")
    md.append("")
    md.append("| choice | runs compared | mode | difference (mean ± sd) | seeds | same sign in every seed |")
    md.append("|---|---|---|---|---|---|")
    for what, a, b, mode, d in rows:
        same = len(d) > 1 and (all(x < 0 for x in d) or all(x > 0 for x in d))
        md.append(f"| {what} | {a} − {b} | {mode} | {fmt(mean_std(d), 3, signed=True)} | {len(d)} | {'yes' if same else ('—' if len(d) == 1 else 'no')} |")
    md.append("")


def feedback_onset(setting, name):
    """The fraction of training before the first phase with K > 1 (0 when feedback starts at step 0)."""
    phases = recipes.resolve(setting, name)[1]["pass_schedule"]
    first = phases[0]
    return first["until_fraction"] if set(first["passes_probabilities"]) == {"1"} else 0.0


def log2_fit(pts):
    """Least-squares (a, b) of y = a + b·log2(x) through [(x, y)]; None with fewer than 3 distinct x."""
    pts = [(math.log2(x), y) for x, y in pts if x > 0 and y is not None]
    if len({x for x, _ in pts}) < 3:
        return None
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - b * mx, b


def length_section(md, groups, setting, info, svg_dir, svg_rel, tag):
    """Issue 23, item 3: the gap of fused(1), fused(2) and sequential soft to the standard transformer
    of the same seed and steps, against the number of steps with feedback (K > 1)."""
    best = info.get("length_recipe.txt")
    steps = info.get("steps")
    xs = sorted({float(k.split("@x")[1]) for k in groups if "@x" in k})
    if not best or not xs or not steps:
        return
    md.append("### How long must the feedback phase be? (issue 23; gaps to the standard transformer of the same seed and steps)")
    md.append("")
    md.append(f"The paper-schedule recipe of the faithful runs with the lowest mean fused(1) − standard (`recipes.py faithful_best`): "
              f"**{best}** — {recipes.resolve(setting, best)[0]}; and the author's variant (`author`). Each at M·N steps "
              f"(N = {steps}) with the standard transformer at M·N steps and the same seed (`std xM`); M = 1 is the faithful "
              "stage's run. Gap = loss − the standard transformer's val loss, nats/token (negative = FBT better); sequential "
              "soft on the slice, moved to the val scale. The WSD schedule, warmup and batch are the same at every M.")
    md.append("")
    md.append("| recipe | M | steps | feedback steps | seeds | std transformer | standard − std | fused(1) − std | fused(2) − std | soft − std |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    series = {}
    for rec in (best, "author"):
        onset = feedback_onset(setting, rec)
        for x in [1.0] + xs:
            g = groups.get(rec if x == 1.0 else f"{rec}@x{x:g}", [])
            std = {r["seed"]: r for r in groups.get(f"std x{x:g}", [])}
            g = [r for r in g if r["seed"] in std]
            if not g:
                continue
            n = g[0]["steps"]
            fb = round(n * (1 - onset))
            cells = {}
            for key in ("std", "f1", "f2", "seq"):
                cells[key] = mean_std([gap_to_std(r, key, std[r["seed"]]) for r in g])
            md.append(f"| {rec} | {x:g} | {n} | {fb} | {len(g)} (s{','.join(str(r['seed']) for r in sorted(g, key=lambda r: r['seed']))}) | "
                      f"{fmt(mean_std([metric(std[r['seed']], 'std') for r in g]), 3)} | "
                      + " | ".join(fmt(cells[k], 3, signed=True) for k in ("std", "f1", "f2", "seq")) + " |")
            for key in ("f1", "f2", "seq"):
                m_, s_, _ = cells[key]
                series.setdefault((rec, key), []).append((fb, m_, s_))
    md.append("")
    names = {"f1": "fused(1)", "f2": "fused(2)", "seq": "seq. soft"}
    trend = []
    for (rec, key), pts in sorted(series.items(), key=lambda t: (t[0][0] != best, t[0][1])):
        fit = log2_fit([(fb, m_) for fb, m_, _ in pts])
        if fit is None:
            continue
        a, b = fit
        longest = max(fb for fb, _, _ in pts)
        if b >= 0:
            cross = "never (the gap does not shrink)"
        elif -a / b > math.log2(100 * longest):
            cross = "more than 100× the longest feedback phase measured (not quantified)"
        else:
            cross = f"{2 ** (-a / b):,.0f} feedback steps ({2 ** (-a / b) / (1 - feedback_onset(setting, rec)):,.0f} steps)"
        trend.append(f"- {rec} {names[key]}: the gap changes by {b:+.3f} nats per doubling of the feedback steps "
                     f"(least squares on {len(pts)} lengths, seed means); extrapolated to 0 at {cross}.")
    if trend:
        md.append("Trend (a straight line in log₂ feedback steps through the points above; an extrapolation, "
                  "not a measurement):")
        md.append("")
        md += trend
        md.append("")
    plot = []
    for i, ((rec, key), pts) in enumerate(sorted(series.items(), key=lambda t: (t[0][0] != best, t[0][1]))):
        plot.append({"name": f"{'author' if rec == 'author' else rec} {names[key]}", "pts": pts,
                     "color": COLORS[("f1", "f2", "seq").index(key) + (3 if rec == "author" else 0)],
                     "marker": "o" if rec == best else "s"})
    fn = f"{tag}_feedback_length.svg"
    if svg_plot(os.path.join(svg_dir, fn), f"Setting {setting}: FBT minus standard transformer vs feedback steps",
                "steps with feedback (log scale)", "loss − standard, nats/token", plot, xlog=True,
                hlines=[(0.0, "standard", "#7f7f7f")]):
        md.append(f"![gap vs feedback steps]({svg_rel}/{fn})")
        md.append("")
        md.append("Error bars: ± one standard deviation over seeds (points with one seed have none).")
        md.append("")


def diff_stats(groups, a, ka, b, kb):
    """Per-seed paired difference a.ka − b.kb (matched seeds): (mean, sd, n, all same sign)."""
    ga, gb = groups.get(a, []), groups.get(b, [])
    sb = {r["seed"]: r for r in gb}
    d = [metric(r, ka) - metric(sb[r["seed"]], kb) for r in ga if r["seed"] in sb]
    return mean_std(d) + (bool(d) and (all(x < 0 for x in d) or all(x > 0 for x in d)),)


def conclusion(md, groups, winner, mult, setting):
    if not winner or winner not in groups or "std x1" not in groups:
        md.append("Not enough finished runs for a conclusion.\n")
        return
    def line(label_, ms, neg_good=True):
        m, s, n, same = ms
        if m is None:
            return f"- {label_}: no matched seeds."
        if s is not None and n >= 2:
            se = s / math.sqrt(n)
            verdict = (f" — |mean| = {abs(m) / se:.1f} s.e.; "
                       + (f"same sign in all {n} seeds" if same else "the seeds disagree in sign")
                       + " (with so few seeds a rough guide, not a test)")
        else:
            verdict = " — one seed, no error bar"
        return f"- {label_}: {m:+.4f} nats (sd {'—' if s is None else f'{s:.4f}'}, {n} paired seed(s)){verdict}."
    md.append(f"Paired per-seed differences, winner ({winner}) minus the standard transformer at N "
              "(negative = FBT better):")
    md.append("")
    md.append(line("standard prefill of the FBT model", diff_stats(groups, winner, "std", "std x1", "std")))
    md.append(line("fused(1)", diff_stats(groups, winner, "f1", "std x1", "std")))
    md.append(line("fused(2)", diff_stats(groups, winner, "f2", "std x1", "std")))
    md.append(line("fused(4)", diff_stats(groups, winner, "f4", "std x1", "std")))
    md.append(line("sequential soft (slice) vs standard (slice)", diff_stats(groups, winner, "seq", "std x1", "slice_std")))
    md.append(line("fused(30) (slice) vs standard (slice)", diff_stats(groups, winner, "c30", "std x1", "slice_std")))
    if "paper" in groups:
        md.append(line("paper schedule, fused(1)", diff_stats(groups, "paper", "f1", "std x1", "std")))
        md.append(line("paper schedule, fused(2)", diff_stats(groups, "paper", "f2", "std x1", "std")))
    nd = winner + "+nodeep"
    if nd in groups:
        md.append(line("without the deepest pass, fused(30) (slice) vs standard (slice)",
                       diff_stats(groups, nd, "c30", "std x1", "slice_std")))
    dt = winner + "+detach"
    if dt in groups:
        md.append(line("detach ablation minus winner, fused(1)", diff_stats(groups, dt, "f1", winner, "f1")))
    md.append("")
    for key, mode in (("f1", "fused(1)"), ("f2", "fused(2)")):
        m, flag = mult.get((winner, key), (None, ""))
        if m:
            md.append(f"- Token multiplier of the winner, {mode}: {mult_str(m, flag)} at "
                      f"{statistics.mean(metric(r, 'te_ratio') for r in groups[winner]):.2f}× compute.")
    m, flag = mult.get(("paper", "f2"), (None, ""))
    if m:
        md.append(f"- Token multiplier of the paper schedule, fused(2): {mult_str(m, flag)} at "
                  f"{statistics.mean(metric(r, 'te_ratio') for r in groups['paper']):.2f}× compute.")
    md.append("")


def setting_header(md, runs, info):
    """The model, data, evaluation and software of a setting's runs; the runs done and their wall time."""
    first = next(iter(runs.values()))
    rj = first["runjson"]
    mc = rj["config"]["model"]
    meta = info.get("meta", {})
    sp = meta.get("splits", {})
    md.append(f"Model: {mc['n_layers']} layers, D={mc['d_model']}, {mc['n_heads']} heads "
              f"({mc['n_kv_heads']} kv), d_ff={mc['d_ff']}, context {mc['context']}, vocab {mc['vocab_size']}, "
              f"{rj['parameters']:,} parameters. Tokenizer {meta.get('tokenizer', {}).get('type', '?')}; "
              f"train {sp.get('train', {}).get('tokens', 0):,} / val {sp.get('val', {}).get('tokens', 0):,} tokens. "
              f"Batch {rj['config']['train']['batch_size']} × {rj['config']['train']['seq_len'] or mc['context']} tokens. "
              f"Eval: val loss on {'the whole val split' if info.get('eval_max_tokens', -1) == -1 else str(info.get('eval_max_tokens')) + ' val tokens'}, "
              f"sequential soft loss and contraction on {info.get('slice_tokens')} val tokens (windows spread evenly over the split). "
              f"fbt {rj.get('git_sha')}, libtorch {rj.get('torch_version')}, {rj.get('threads')} thread(s), "
              f"{first['wall'].get('cpus')}-CPU machine.")
    md.append("")
    seeds = {}
    for r in runs.values():
        seeds.setdefault(key_of(r), []).append(r["seed"])
    md.append("Runs done (recipe: seeds): " + "; ".join(f"{k}: {sorted(v)}" for k, v in sorted(seeds.items())) + ".")
    tw = sum(r["wall"]["train_s"] + r["wall"]["eval_val_s"] + r["wall"]["eval_slice_s"] for r in runs.values())
    md.append(f"Total wall time of these runs (train + eval): {tw / 60:.1f} min.")
    md.append("")


SPLICE_BEGIN = "<!-- issue 23: generated by bench/repro/analyze.py --splice; begin -->"
SPLICE_END = "<!-- issue 23: end -->"


REASONING_SECTIONS = [
    ("reasoning", "## Reasoning benchmark: the first author's pipeline on `fbt synth --task arithmetic` (issue 23)",
     "`bench/repro/reasoning.sh` (setup in its header): pretraining on TinyStories + worked problems, "
     "FBT with K=2 for the last third, SFT (FBT K=3), zero-shot chat evaluation."),
    ("latent_carry", "## Latent carry: the reasoning benchmark with most intermediate results left out (issue 38, item 4)",
     "`bench/repro/reasoning.sh --skip-fraction 1`: the same models, schedules and test problems, but every "
     "multi-step worked solution in the pretraining mix and the SFT set leaves out intermediate lines (each "
     "with probability 1/2, at least one: 56% of all intermediate results), so a model must carry them "
     "internally; the test problems are unchanged and only the final answer is scored."),
]


def reasoning_part(md, runs_dir):
    """The sections of reasoning.sh's run directories (RUNS/reasoning, RUNS/latent_carry) that exist."""
    for name, heading, intro in REASONING_SECTIONS:
        path = os.path.join(runs_dir, name)
        if os.path.isdir(path):
            md += [heading, "", intro, ""] + reasoning_report.report(path)


def issue23_part(runs_dir, svg_dir, svg_rel, notes):
    """Issue 23's sections alone (Setting A's paper-faithful runs and feedback-length curve, the
    reasoning benchmark, the notes), for --splice."""
    md = [SPLICE_BEGIN, "",
          "## Issue 23: the paper's normalisation and initialisation, the feedback-phase length, a reasoning task",
          "",
          f"Generated by `bench/repro/analyze.py --runs {runs_dir}` (`--splice FILE`: these sections alone) on "
          f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from the run directories "
          "(their summaries are kept in `docs/repro/runs/`, `bench/repro/archive.py`); no number here is typed by hand.",
          ""]
    path = os.path.join(runs_dir, "A")
    runs, info = load_setting(path) if os.path.isdir(path) else ({}, {})
    if runs:
        md.append("### Setting A runs of issue 23")
        md.append("")
        setting_header(md, runs, info)
        groups = group(runs, lambda r: True)
        faithful_section(md, groups, "A")
        length_section(md, groups, "A", info, svg_dir, svg_rel, "a" + ("_quick" if info.get("quick") else ""))
    reasoning_part(md, runs_dir)
    if notes and os.path.exists(notes):
        md.append(open(notes).read())
    md.append(SPLICE_END)
    return md


def splice(path, block):
    """Replaces the text between SPLICE_BEGIN and SPLICE_END of `path` with `block` (appends it when
    the markers are absent); the rest of the file is kept byte for byte. Written to a temporary file
    and renamed."""
    text = open(path).read() if os.path.exists(path) else ""
    new = "\n".join(block)
    if SPLICE_BEGIN in text and SPLICE_END in text:
        a, b = text.index(SPLICE_BEGIN), text.index(SPLICE_END) + len(SPLICE_END)
        text = text[:a] + new + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="runs/repro")
    ap.add_argument("--out", default="docs/results.md")
    ap.add_argument("--svg-dir", default=None, help="default: DIR(out)/repro")
    ap.add_argument("--notes", default=None, help="markdown file appended verbatim (plain-words reading)")
    ap.add_argument("--notes-issue23", default=None, help="markdown file appended verbatim to issue 23's sections")
    ap.add_argument("--splice", metavar="FILE", default=None,
                    help="write only issue 23's sections (Setting A's paper-faithful runs and feedback-length "
                         "curve, the reasoning benchmark, --notes-issue23) into FILE between its issue-23 markers, "
                         "keeping the rest of FILE (whose runs need not exist here)")
    a = ap.parse_args()
    out = a.splice or a.out
    svg_dir = a.svg_dir or os.path.join(os.path.dirname(out) or ".", "repro")
    svg_rel = os.path.relpath(svg_dir, os.path.dirname(os.path.abspath(out)) if os.path.dirname(out) else ".")
    if a.splice:
        os.makedirs(svg_dir, exist_ok=True)
        splice(a.splice, issue23_part(a.runs, svg_dir, svg_rel, a.notes_issue23))
        print(f"spliced issue 23's sections into {a.splice}; SVGs in {svg_dir}")
        return 0
    md = ["# Issue 7: small-scale reproduction of the FBT headline claims",
          "",
          f"Generated by `bench/repro/analyze.py --runs {a.runs}` on "
          f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from the run directories; "
          "no number below is typed by hand except the quoted reference values (nanoGPT 1.88, the paper's ≈2× at 1.28×). "
          "Regenerate everything with `bench/repro/run_all.sh` (smoke version: `--quick`).",
          ""]
    any_runs = False
    for setting in ("A", "B"):
        path = os.path.join(a.runs, setting)
        if not os.path.isdir(path):
            md.append(f"## Setting {setting}: not run\n")
            continue
        runs, info = load_setting(path)
        quick = bool(info.get("quick"))
        if not runs:
            md.append(f"## Setting {setting}: no finished runs\n")
            continue
        any_runs = True
        md.append(f"## Setting {setting}{' (QUICK smoke run — not a measurement)' if quick else ''}")
        md.append("")
        setting_header(md, runs, info)
        groups, winner, mult = setting_report(md, setting, runs, info, svg_dir, svg_rel, quick)
        md.append(f"### Setting {setting}: what the numbers say")
        md.append("")
        conclusion(md, groups, winner, mult, setting)
    if a.notes and os.path.exists(a.notes):
        md.append(open(a.notes).read())
    md += issue23_part(a.runs, svg_dir, svg_rel, a.notes_issue23)
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {a.out} and SVGs in {svg_dir}")
    return 0 if any_runs else 1


if __name__ == "__main__":
    sys.exit(main())
