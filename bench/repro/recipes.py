#!/usr/bin/env python3
"""Recipes of the issue-7 reproduction (bench/repro): one place that names every run.

Usage:
  recipes.py sets SETTING RECIPE SEED STEPS   # the --set arguments of a run, one per line
  recipes.py winner RUNS_DIR NAMES              # the sweep winner by the rule in pick_winner()
  recipes.py baselines SETTING NAMES            # the standard-transformer controls NAMES need
  recipes.py describe SETTING RECIPE            # one-line description
  recipes.py faithful                           # issue 23's paper-faithful recipes (Setting A)
  recipes.py faithful_best RUNS_DIR             # the paper-schedule recipe of those with the lowest
                                                # mean fused(1) − standard transformer (same seed)

A recipe name is a base recipe, optionally with suffixes:
  +nodeep   the deepest K of every phase removed, its probability moved to the next deepest K
            (e.g. K=2/3/4 0.6/0.3/0.1 -> K=2/3 0.6/0.4; K=2/3 0.88/0.12 -> K=2)
  +detach   stop gradients between passes (train.detach=true)
Everything here is plain data so that docs/results.md can print the exact settings.
"""
import json
import os
import sys

# Pass schedules (train.pass_schedule phases).
STD = [{"until_fraction": 1, "passes_probabilities": {"1": 1}}]
PAPER = [{"until_fraction": 0.75, "passes_probabilities": {"1": 1}},
         {"until_fraction": 1, "passes_probabilities": {"2": 0.88, "3": 0.12}}]
E23 = [{"until_fraction": 1, "passes_probabilities": {"2": 0.88, "3": 0.12}}]
E234 = [{"until_fraction": 1, "passes_probabilities": {"2": 0.6, "3": 0.3, "4": 0.1}}]
# The first author's reproduction (SPEC §11): a standard model, then K=2 on every step for the
# last third (40k of 60k steps), prefix mixin off.
AUTHOR = [{"until_fraction": 2 / 3, "passes_probabilities": {"1": 1}},
          {"until_fraction": 1, "passes_probabilities": {"2": 1}}]

# Setting A: the paper's optimiser recipe (NorMuon 1e-2 + Adam, WSD) with the small-model Adam
# lr 3e-3 of docs/LOG.md and a 100-step warmup; everything else at fbt's defaults
# (mixin 0.3, jitter 0.02, fusion glu, feedback post_norm, z-loss + AdamC in the cooldown).
BASE_A = {"optimizer": "normuon", "schedule": "wsd", "lr": 3e-3, "normuon_lr": 1e-2,
          "warmup_steps": 100}
# nanoGPT's shakespeare_char recipe (config/train_shakespeare_char.py + train.py defaults).
NANOGPT = {"optimizer": "adamw", "schedule": "cosine", "lr": 1e-3, "min_lr_fraction": 0.1,
           "warmup_steps": 100, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1,
           "grad_clip": 1.0}

# name -> (description, train overrides, model overrides)
RECIPES_A = {
    "anchor-adamw": ("standard transformer, nanoGPT's AdamW recipe (lr 1e-3 cosine to 1e-4, "
                     "warmup 100, betas 0.9/0.99, wd 0.1, clip 1.0)",
                     dict(NANOGPT, pass_schedule=STD), {}),
    "std": ("standard transformer (K=1 every step)", dict(BASE_A, pass_schedule=STD), {}),
    "paper": ("FBT, paper schedule: K=1 for 75%, then K=2/3 at 0.88/0.12",
              dict(BASE_A, pass_schedule=PAPER), {}),
    "e23": ("FBT, K=2/3 (0.88/0.12) from step 0", dict(BASE_A, pass_schedule=E23), {}),
    "e234": ("FBT, K=2/3/4 (0.6/0.3/0.1) from step 0", dict(BASE_A, pass_schedule=E234), {}),
    "e23-tok": ("FBT, K=2/3 from step 0, fusion glu_plus_token",
                dict(BASE_A, pass_schedule=E23), {"fusion": "glu_plus_token"}),
    "e234-tok": ("FBT, K=2/3/4 from step 0, fusion glu_plus_token",
                 dict(BASE_A, pass_schedule=E234), {"fusion": "glu_plus_token"}),
    "author": ("FBT, the first author's variant: K=1 for 2/3, then K=2 (hard switch), mixin off, "
               "fusion init uniform std 1/sqrt(D)",
               dict(BASE_A, pass_schedule=AUTHOR, mixin_prob=0.0), {"fusion_init": "uniform"}),
}
# Issue 23's paper-faithful runs (stage `faithful` of setting_a.sh): the paper's schedule and
# `glu` with Listing 3's input norm and/or the author's fusion init, and the author's variant.
FAITHFUL_A = ["paper", "paper.l3", "paper.uinit", "paper.l3.uinit", "paper.l3.uinit.seqmix",
              "author", "author.l3"]
# Stage-2 sweep axes, applied on top of the stage-1 winner (see stage2_variants()). An axis in
# SHARED_AXES changes the optimiser recipe that the standard transformer shares (the LR
# schedule), not the feedback: its variants are scored against a standard transformer trained
# with the same change (`std.AXIS`, see baseline_of()), so a schedule that helps every model
# does not pass for a better FBT recipe.
STAGE2_A = {
    "mix0.1": ("prefix mixin probability 0.1", {"mixin_prob": 0.1}, {}),
    "mix1.0": ("prefix mixin probability 1.0", {"mixin_prob": 1.0}, {}),
    "prenorm": ("feedback state = residual stream before the final norm",
                {}, {"feedback_state": "pre_norm"}),
    "onset0.5": ("feedback onset at 50% of training (K=1 before)", {"feedback_onset": 0.5}, {}),
    "onset0.75": ("feedback onset at 75% of training (K=1 before; the paper's onset)",
                  {"feedback_onset": 0.75}, {}),
    "cosine": ("cosine LR schedule (to 0.1x) instead of WSD", {"schedule": "cosine"}, {}),
    "jit0.1": ("state jitter sigma 0.1", {"jitter": 0.1}, {}),
    "wg0.1": ("W_G init std 0.1 (default 0.02)", {}, {"fusion_gate_init_std": 0.1}),
    "wg0.005": ("W_G init std 0.005 (default 0.02)", {}, {"fusion_gate_init_std": 0.005}),
    "wg0.3": ("W_G init std 0.3 (default 0.02)", {}, {"fusion_gate_init_std": 0.3}),
    "l3": ("input norm of the paper's Listing 3 (raw e in pass 1, every row of later passes normalised)",
           {}, {"input_norm": "listing3"}),
    "uinit": ("fusion init uniform std 1/sqrt(D) (the author's; default W_U = I)", {}, {"fusion_init": "uniform"}),
    "seqmix": ("one prefix-mixin draw per sequence for all passes", {"mixin_draw": "per_sequence"}, {}),
}
SHARED_AXES = {"cosine"}

# Setting B uses the same recipe names on the `small` preset (see setting_b.sh). That preset's
# fusion defaults are the Setting-A winner's (glu_plus_token, W_G std 0.1), so Setting B states
# the paper's fusion explicitly and each recipe changes it only as it does in Setting A.
PAPER_FUSION = {"fusion": "glu", "fusion_gate_init_std": 0.02}
RECIPES_B = {k: (d, tr, dict(PAPER_FUSION, **mo)) for k, (d, tr, mo) in RECIPES_A.items()
             if k in ("std", "paper", "e23", "e234", "e23-tok", "e234-tok")}


def split_axes(base):
    """'e23-tok.onset0.5.cosine' -> ('e23-tok', ['onset0.5', 'cosine']). Axis names contain dots
    themselves, so they are matched against STAGE2_A, longest first."""
    b, _, rest = base.partition(".")
    axes = []
    while rest:
        axis = next((a for a in sorted(STAGE2_A, key=len, reverse=True)
                     if rest == a or rest.startswith(a + ".")), None)
        if axis is None:
            raise SystemExit(f"recipes.py: unknown sweep axis in '{base}' at '{rest}' (known: {', '.join(STAGE2_A)})")
        axes.append(axis)
        rest = rest[len(axis) + 1:]
    return b, axes


def baseline_of(name):
    """The standard-transformer run a recipe is scored against: std at N, with the recipe's
    shared axes (e.g. std.cosine for X.cosine)."""
    base = name.split("+")[0]
    axes = split_axes(base)[1] if "." in base else []
    shared = [a for a in axes if a in SHARED_AXES]
    return "std." + ".".join(shared) if shared else "std-x1"


def stage2_variants(stage1_winner):
    return [stage1_winner + "." + axis for axis in STAGE2_A]


def drop_deepest(schedule):
    out = []
    for ph in schedule:
        p = {int(k): v for k, v in ph["passes_probabilities"].items()}
        if len(p) > 1:
            deepest = max(p)
            rest = sorted(k for k in p if k != deepest)
            p[rest[-1]] += p.pop(deepest)
        out.append({"until_fraction": ph["until_fraction"],
                    "passes_probabilities": {str(k): round(v, 6) for k, v in sorted(p.items())}})
    return out


def resolve(setting, name):
    """(description, train overrides, model overrides) of a recipe name with suffixes."""
    table = RECIPES_A if setting == "A" else RECIPES_B
    base, *suffixes = name.split("+")
    if "." in base:  # stage-2 variant: BASE.AXIS[.AXIS...], the axes applied in order
        b, axes = split_axes(base)
        desc, tr, mo = table[b]
        tr, mo = dict(tr), dict(mo)
        for axis in axes:
            d2, tr2, mo2 = STAGE2_A[axis]
            desc, tr, mo = desc + "; " + d2, dict(tr, **tr2), dict(mo, **mo2)
        onset = tr.pop("feedback_onset", None)
        if onset is not None:  # K=1 until `onset`, then the base schedule's phases after it
            desc = desc.replace(" from step 0", "")
            tr["pass_schedule"] = ([{"until_fraction": onset, "passes_probabilities": {"1": 1}}] +
                                   [ph for ph in tr["pass_schedule"] if ph["until_fraction"] > onset])
    else:
        desc, tr, mo = table[base]
        tr, mo = dict(tr), dict(mo)
    for s in suffixes:
        if s == "nodeep":
            tr["pass_schedule"] = drop_deepest(tr["pass_schedule"])
            desc += "; without its deepest pass"
        elif s == "detach":
            tr["detach"] = True
            desc += "; detach between passes"
        else:
            raise SystemExit(f"recipes.py: unknown suffix +{s}")
    return desc, tr, mo


def sets(setting, name, seed, steps):
    _, tr, mo = resolve(setting, name)
    out = []
    for k, v in tr.items():
        out.append(f"train.{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}")
    for k, v in mo.items():
        out.append(f"model.{k}={v}")
    out += [f"train.seed={seed}", f"train.eval_every={max(1, steps // 4)}",
            "train.eval_tokens=8192", "train.checkpoint_every=0"]
    return out


def load_run(run):
    """Metrics of a finished run directory (None if unfinished)."""
    try:
        val = json.load(open(os.path.join(run, "eval_val.json")))
        sl = json.load(open(os.path.join(run, "eval_slice.json")))
    except (OSError, ValueError):
        return None
    r = {}
    for x in val["results"]:
        r[x["name"]] = (x["nats_per_token"], x["bits_per_byte"])
    for x in sl["results"]:
        r["slice:" + x["name"]] = (x["nats_per_token"], x["bits_per_byte"])
    if "contraction" in sl:
        r["contraction"] = [(c["passes"], c["nats_per_token"], c["relative_change"]) for c in sl["contraction"]]
    return r


def worst_decode_loss(r):
    """The rule of the sweep (issue 7's target): every decoding mode should beat standard.
    Score = max(fused(1), sequential soft − slice standard + standard, worst fused(k≤30) on the
    slice − slice standard + standard), i.e. the worst mode, on the full-val scale."""
    std = r["passes=0"][0]
    f1 = r["passes=1"][0]
    sstd = r["slice:passes=0"][0]
    seq = r["slice:sequential"][0] - sstd + std
    worst = max([c[1] for c in r.get("contraction", [])[1:]] or [sstd]) - sstd + std
    return max(f1, seq, worst)


def pick_winner(runs_dir, names, seed=1):
    """The recipe with the lowest score − (val standard loss of its baseline_of() run): the
    worst decoding mode's margin over a standard transformer trained the same way."""
    best = None
    for n in names:
        r = load_run(os.path.join(runs_dir, f"{n}-s{seed}"))
        if r is None:
            continue
        b = load_run(os.path.join(runs_dir, f"{baseline_of(n)}-s{seed}"))
        if b is None:
            raise SystemExit(f"recipes.py: {n} needs its baseline {baseline_of(n)}-s{seed} in {runs_dir}")
        s = worst_decode_loss(r) - b["passes=0"][0]
        if best is None or s < best[0]:
            best = (s, n)
    if best is None:
        raise SystemExit("recipes.py: no finished sweep runs in " + runs_dir)
    return best[1]


def faithful_best(runs_dir):
    """Of FAITHFUL_A's paper-schedule recipes (`paper*`), the one whose fused(1) loss minus the
    standard loss of the standard transformer of the same seed (`std-x1-sS`), averaged over the
    seeds both have finished, is lowest: the paper's headline mode against the model it replaces."""
    best = None
    for n in FAITHFUL_A:
        if not n.startswith("paper"):
            continue
        gaps = []
        for seed in range(1, 100):
            r = load_run(os.path.join(runs_dir, f"{n}-s{seed}"))
            b = load_run(os.path.join(runs_dir, f"std-x1-s{seed}"))
            if r is not None and b is not None:
                gaps.append(r["passes=1"][0] - b["passes=0"][0])
        if gaps and (best is None or sum(gaps) / len(gaps) < best[0]):
            best = (sum(gaps) / len(gaps), n)
    if best is None:
        raise SystemExit("recipes.py: no finished paper-faithful run with its std-x1 run in " + runs_dir)
    return best[1]


def main(argv):
    if len(argv) >= 5 and argv[0] == "sets":
        print("\n".join(sets(argv[1], argv[2], int(argv[3]), int(argv[4]))))
    elif len(argv) >= 3 and argv[0] == "describe":
        print(resolve(argv[1], argv[2])[0])
    elif len(argv) >= 3 and argv[0] == "winner":
        names = argv[2].split(",")
        print(pick_winner(argv[1], names))
    elif len(argv) >= 1 and argv[0] == "faithful":
        print("\n".join(FAITHFUL_A))
    elif len(argv) >= 2 and argv[0] == "faithful_best":
        print(faithful_best(argv[1]))
    elif len(argv) >= 3 and argv[0] == "baselines":
        print("\n".join(sorted({baseline_of(n) for n in argv[2].split(",")})))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
