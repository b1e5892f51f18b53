#!/usr/bin/env python3
"""Keeps the summaries of bench/repro's finished runs in the repository (issue 23).

    archive.py [--runs runs/repro] [--out docs/repro/runs]

The run directories (checkpoints, logs, hundreds of MB) stay on the machine that made them; what
analyze.py reads from them is small and goes to OUT, in the same layout:
  A/, B/           setting.json, winner.txt, winner_sweep1.txt, length_recipe.txt, data/meta.json;
                   per finished run (eval_val.json, eval_slice.json and wall.json present): those
                   three, run.json, recipe.txt and the last training record of metrics.jsonl.
  reasoning/       tasks/arithmetic/test.jsonl reduced to each problem's id and operations;
                   per evaluated SFT run: eval.json and eval.samples.jsonl reduced to mode, id,
                   correct, tokens and status; the wall seconds of every training run (NAME.wall_s);
                   per run where present (issue 38): eval_pt.json, eval_sft.json, gate.json, eval.wall_s,
                   probes.json.
  latent_carry/    the same for reasoning.sh --skip-fraction 1 (issue 38, item 4).
Then `analyze.py --runs OUT` regenerates the tables on any machine, and copying OUT/A into
runs/repro/A lets setting_a.sh skip the archived runs (its skip test reads the same three files).
Existing archived runs are kept; a run present in both is replaced by the newer copy.
Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import shutil

SETTING_FILES = ["setting.json", "winner.txt", "winner_sweep1.txt", "length_recipe.txt",
                 os.path.join("data", "meta.json")]
RUN_FILES = ["eval_val.json", "eval_slice.json", "wall.json", "run.json", "recipe.txt"]


def copy(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)


def write_jsonl(path, records):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def archive_setting(src, dst):
    n = 0
    for name in SETTING_FILES:
        if os.path.exists(os.path.join(src, name)):
            copy(os.path.join(src, name), os.path.join(dst, name))
    for run in sorted(glob.glob(os.path.join(src, "*"))):
        if not os.path.isdir(run) or not all(os.path.exists(os.path.join(run, f)) for f in RUN_FILES[:3]):
            continue
        out = os.path.join(dst, os.path.basename(run))
        for name in RUN_FILES:
            if os.path.exists(os.path.join(run, name)):
                copy(os.path.join(run, name), os.path.join(out, name))
        last = None
        with open(os.path.join(run, "metrics.jsonl")) as f:
            for line in f:
                if '"tokens"' in line:
                    last = json.loads(line)
        write_jsonl(os.path.join(out, "metrics.jsonl"), [last])
        n += 1
    return n


def archive_reasoning(src, dst):
    test = os.path.join(src, "tasks", "arithmetic", "test.jsonl")
    if not os.path.exists(test):
        return 0
    with open(test) as f:
        write_jsonl(os.path.join(dst, "tasks", "arithmetic", "test.jsonl"),
                    [{"id": p["id"], "operations": p["operations"]} for p in map(json.loads, f) if p])
    for w in glob.glob(os.path.join(src, "*.wall_s")):
        copy(w, os.path.join(dst, os.path.basename(w)))
    # issue 38: the loss evaluations, the go/no-go gate, the chat evaluation's wall seconds and the
    # state-tracking probes
    for name in ("eval_pt.json", "eval_sft.json", "gate.json", "eval.wall_s", "probes.json"):
        for f in glob.glob(os.path.join(src, "*-s*", name)):
            copy(f, os.path.join(dst, os.path.basename(os.path.dirname(f)), name))
    n = 0
    for ev in sorted(glob.glob(os.path.join(src, "sft-*", "eval.json"))):
        run = os.path.dirname(ev)
        out = os.path.join(dst, os.path.basename(run))
        copy(ev, os.path.join(out, "eval.json"))
        with open(os.path.join(run, "eval.samples.jsonl")) as f:
            write_jsonl(os.path.join(out, "eval.samples.jsonl"),
                        [{k: r[k] for k in ("mode", "id", "correct", "tokens", "status")} for r in map(json.loads, f)])
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="runs/repro")
    ap.add_argument("--out", default="docs/repro/runs")
    a = ap.parse_args()
    if not os.path.isdir(a.runs):
        raise SystemExit(f"archive.py: --runs {a.runs} is not a directory")
    for setting in ("A", "B"):
        if os.path.isdir(os.path.join(a.runs, setting)):
            n = archive_setting(os.path.join(a.runs, setting), os.path.join(a.out, setting))
            print(f"Setting {setting}: {n} finished runs archived in {os.path.join(a.out, setting)}")
    for name in ("reasoning", "latent_carry"):  # latent_carry: reasoning.sh --skip-fraction 1 (issue 38, item 4)
        if os.path.isdir(os.path.join(a.runs, name)):
            n = archive_reasoning(os.path.join(a.runs, name), os.path.join(a.out, name))
            print(f"{name}: {n} evaluated SFT runs archived in {os.path.join(a.out, name)}")


if __name__ == "__main__":
    main()
