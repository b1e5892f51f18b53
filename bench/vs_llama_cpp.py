#!/usr/bin/env python3
"""fbt against llama.cpp on the same Llama shapes, alternating the two programs in one run.

For each repetition and shape (`small`, `llama-134m`), runs `fbt bench` and `llama-bench` (order
alternating between repetitions, one thread pinned to one core by default) on random weights of
the same shape: decode of 128 tokens after a 64-token context at batch 1, and a 64-token prefill,
in f32, and fbt's int8 / int4 decode against llama.cpp's Q8_0 / Q4_0. Where every matrix row is a
whole number of 256-value super-blocks (`llama-134m`) and the llama.cpp build has llama-quantize,
also a Q4_K_M file (llama-quantize of the f32 one: Q4_K, with Q6_K for half of attn_v and ffn_down
and the tied embedding) that both decode from its own blocks: fbt imports it and keeps them
(`fbt import --from gguf`, `fbt quantize --from-gguf`), then `fbt bench --checkpoint`. Prints medians and fbt / llama.cpp ratios
(a markdown table: each ratio is the median of the per-repetition ratios, with their min–max spread,
and a row is called "ahead" only when the whole spread lies above 1.0, "behind" when it lies
below, else "within noise") and the read bandwidth `fbt bench --tests memory` measured in each repetition;
writes the table and the raw numbers to --results-dir. Peak RSS is the whole process's (fbt's
includes the libtorch runtime, ~180 MB resident), so fbt's row also gives the private (anonymous)
memory decoding holds beyond the runtime's (after start-up and fbt bench's matmul-peak measurement,
which touches BLAS's buffers), against the bytes of the model and its KV cache.

llama.cpp is not part of fbt: build it yourself (any checkout; the results name its commit) with
  cmake -S $LLAMA_CPP_DIR -B $LLAMA_CPP_DIR/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \\
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
  cmake --build $LLAMA_CPP_DIR/build --target llama-bench -j
The GGUFs come from bench/llama_gguf.py with llama.cpp's own gguf-py.

--busy runs the whole comparison beside a competing load, because users' machines are busy too:
a memory-streaming loop (numpy copies of 64 MB arrays) on the cores the benchmark is not pinned
to, or, when it uses them all, on every core (then it competes for the same cores as well).

Usage: bench/vs_llama_cpp.py --llama-cpp DIR [--llama-build DIR/build] [--fbt build/fbt] [--threads 1] [--reps 3] [--busy]
       [--shapes small,llama-134m] [--results-dir bench/results] [--label TEXT] [--llama-commit SHA]
Results go to DIR/vs_llama_cpp_<label>_<date>.{md,json}, with _2, _3, ... for later runs of the same day.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONTEXT, NEW_TOKENS, PROMPT = 64, 128, 64
KQUANT_SHAPES = ("llama-134m",)  # every matrix row whole 256-value super-blocks (small's d_ff 688 is not)


def run(cmd, **kw):
    """Runs cmd; returns stdout. Exits with its stderr on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"vs_llama_cpp: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def pinned(cmd, threads):
    return (["taskset", "-c", ",".join(str(i) for i in range(threads))] if threads <= os.cpu_count() else []) + cmd


BUSY_LOOP = "import numpy as n\na = n.ones(1 << 24, n.float32)\nb = n.empty_like(a)\nwhile True: n.copyto(b, a)"


def start_busy_load(threads):
    """The --busy load: one memory-streaming process per core the benchmark leaves free (on every
    core when it leaves none). Returns (processes, description)."""
    cores = list(range(threads, os.cpu_count())) or list(range(os.cpu_count()))
    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", BUSY_LOOP]) for c in cores]
    where = "the other core(s)" if threads < os.cpu_count() else "the benchmark's own cores"
    return procs, f"busy: a numpy 64 MB copy loop on core(s) {','.join(map(str, cores))} ({where})"


def spread(ratios):
    """(median, min, max, verdict) of per-repetition fbt / llama.cpp ratios."""
    lo, hi = min(ratios), max(ratios)
    verdict = "ahead" if lo > 1.0 else "behind" if hi < 1.0 else "within noise"
    return statistics.median(ratios), lo, hi, verdict


def fbt_run(a, shape, weights, reps, checkpoint=None):
    """decode tokens/s (standard, soft), soft overhead, prefill tokens/s, peak RSS bytes, GB/s: of the
    shape's random model with `weights`, or of the run `checkpoint` (its own weights)."""
    tests = "decode,prefill" if weights == "fp32" and not checkpoint else "decode"
    model = ["--checkpoint", checkpoint, "--device", "cpu"] if checkpoint else ["--preset", shape, "--weights", weights]
    out = run(pinned([a.fbt, "bench", *model, "--tests", tests, "--batch-sizes", "1",
                      "--contexts", str(CONTEXT), "--new-tokens", str(NEW_TOKENS), "--threads", str(a.threads),
                      "--reps", str(reps), "--warmup", "1", "--format", "json"], a.threads))
    rec = json.loads(out)
    r = {}
    for row in rec["results"]:
        if row["test"] == "decode":
            r["decode_" + row["mode"]] = row["tokens_per_s"]["median"]
            r["decode_peak_rss_" + row["mode"]] = row["peak_memory_bytes"]
            if "anonymous_rss_bytes" in row:  # the data decoding holds beyond the runtime's, against model + KV
                r["decode_memory_ratio_" + row["mode"]] = ((row["anonymous_rss_bytes"] - rec["startup_anonymous_rss_bytes"]) /
                                                           (row["model_bytes"] + row["kv_cache_bytes"]))
            if "weight_bytes_per_s" in row:
                r["weight_bytes_per_s_" + row["mode"]] = row["weight_bytes_per_s"]
                r["weight_bytes_per_step_" + row["mode"]] = row["weight_bytes_per_step"]
            if "overhead_vs_standard" in row:
                r["soft_overhead"] = row["overhead_vs_standard"]["median"]
        elif row["test"] == "prefill" and row["mode"] == "standard":
            r["prefill"] = row["tokens_per_s"]["median"]
    r["git_sha"] = rec["git_sha"]
    r["startup_rss"] = rec["startup_anonymous_rss_bytes"]
    return r


def llama_run(a, gguf, reps, prefill):
    """tokens/s of llama-bench's tg128 after 64 tokens of context (or pp64), and its peak RSS."""
    args = ["-p", str(PROMPT), "-n", "0"] if prefill else ["-p", "0", "-n", str(NEW_TOKENS), "-d", str(CONTEXT)]
    with tempfile.NamedTemporaryFile(suffix=".time") as t:
        out = run(["/usr/bin/time", "-f", "%M", "-o", t.name] +
                  pinned([a.llama_bench, "-m", gguf, "-t", str(a.threads), "-r", str(reps), "-o", "json"] + args, a.threads))
        peak_kib = int(open(t.name).read().split()[-1])
    rows = json.loads(out)
    return rows[0]["avg_ts"], peak_kib * 1024, rows[0].get("build_commit", "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source dir, built into DIR/build")
    ap.add_argument("--llama-build", default="",
                    help="llama.cpp's build dir if not DIR/build (e.g. one built without AMX where the VM forbids it)")
    ap.add_argument("--fbt", default=os.path.join(HERE, "..", "build", "fbt"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="alternating repetitions (each runs 3 timed reps per program)")
    ap.add_argument("--shapes", default="small,llama-134m")
    ap.add_argument("--results-dir", default="")
    ap.add_argument("--label", default="", help="hardware label of the result files (default: fbt bench's)")
    ap.add_argument("--busy", action="store_true", help="run beside a competing memory-streaming load (see above)")
    ap.add_argument("--llama-commit", default="",
                    help="llama.cpp commit to name in the results when llama-bench reports none (a checkout without .git)")
    a = ap.parse_args()
    a.llama_bench = os.path.join(a.llama_build or os.path.join(a.llama_cpp, "build"), "bin", "llama-bench")
    for path, what in ((a.llama_bench, "llama-bench (build it: see --help)"), (a.fbt, "fbt (scripts/build.sh)")):
        if not os.access(path, os.X_OK):
            sys.exit(f"vs_llama_cpp: {path}: not found or not executable: {what}")
    if a.results_dir:  # made (or found unwritable) now, not after the minutes of measuring
        try:
            os.makedirs(a.results_dir, exist_ok=True)
        except OSError as e:
            sys.exit(f"vs_llama_cpp: --results-dir {a.results_dir}: {e.strerror}")
    work = tempfile.mkdtemp(prefix="fbt-vs-llama-")
    env = dict(os.environ, PYTHONPATH=os.path.join(a.llama_cpp, "gguf-py"))
    shapes = a.shapes.split(",")
    ggufs = {}
    for shape in shapes:
        for kind in ("f32", "q8_0", "q4_0"):
            ggufs[shape, kind] = os.path.join(work, f"{shape}-{kind}.gguf")
            run([sys.executable, os.path.join(HERE, "llama_gguf.py"), shape, kind, ggufs[shape, kind]], env=env)
    quantize = os.path.join(os.path.dirname(a.llama_bench), "llama-quantize")
    k_runs = {}  # shape -> the fbt run keeping the Q4_K_M file's blocks
    for shape in (s for s in shapes if s in KQUANT_SHAPES and os.access(quantize, os.X_OK)):
        ggufs[shape, "q4_k_m"] = os.path.join(work, f"{shape}-q4_k_m.gguf")
        run([quantize, ggufs[shape, "f32"], ggufs[shape, "q4_k_m"], "Q4_K_M"])
        imported = os.path.join(work, f"{shape}-q4_k_m-import")
        run([a.fbt, "import", "--from", "gguf", ggufs[shape, "q4_k_m"], "--out", imported])
        k_runs[shape] = os.path.join(work, f"{shape}-q4_k_m-run")
        run([a.fbt, "quantize", "--checkpoint", imported, "--weights", "int8", "--from-gguf", ggufs[shape, "q4_k_m"],
             "--out", k_runs[shape]])

    def bandwidth():
        return json.loads(run(pinned([a.fbt, "bench", "--tests", "memory", "--threads", str(a.threads), "--reps", "3",
                                      "--format", "json"], a.threads)))

    samples = {}  # (shape, what) -> list of values
    hardware = "?"
    commit = "?"
    fbt_sha = "?"

    def add(shape, what, value):
        samples.setdefault((shape, what), []).append(value)

    def repetitions():
        nonlocal hardware, commit, fbt_sha
        for rep in range(a.reps):
            bw = bandwidth()  # in every repetition: a shared machine's bandwidth drifts too
            hardware = bw["hardware"]
            add("machine", "read bandwidth", bw["read_bandwidth"])
            for shape in shapes:
                def fbt_side():
                    nonlocal fbt_sha
                    f = fbt_run(a, shape, "fp32", 7)  # 7 repetitions of 128 step pairs: the soft overhead is a few percent
                    q = fbt_run(a, shape, "int8", 3)
                    q4 = fbt_run(a, shape, "int4", 3)
                    fbt_sha = f["git_sha"]
                    add(shape, "fbt decode f32", f["decode_standard"])
                    add(shape, "fbt decode f32 soft", f["decode_soft"])
                    add(shape, "fbt soft overhead", f["soft_overhead"])
                    add(shape, "fbt prefill f32", f["prefill"])
                    add(shape, "fbt decode int8", q["decode_standard"])
                    add(shape, "fbt decode int4", q4["decode_standard"])
                    add(shape, "fbt decode int4 GB/s", q4["weight_bytes_per_s_standard"])
                    add(shape, "fbt weight bytes int4", q4["weight_bytes_per_step_standard"])
                    add(shape, "fbt decode f32 GB/s", f["weight_bytes_per_s_standard"])
                    add(shape, "fbt decode int8 GB/s", q["weight_bytes_per_s_standard"])
                    add(shape, "fbt weight bytes f32", f["weight_bytes_per_step_standard"])
                    add(shape, "fbt weight bytes int8", q["weight_bytes_per_step_standard"])
                    add(shape, "fbt peak RSS f32", f["decode_peak_rss_standard"])
                    add(shape, "fbt memory ratio f32", f["decode_memory_ratio_standard"])
                    add(shape, "fbt startup RSS", f["startup_rss"])
                    if shape in k_runs:
                        add(shape, "fbt decode q4_k_m", fbt_run(a, shape, "gguf", 3, k_runs[shape])["decode_standard"])

                def llama_side():
                    nonlocal commit
                    ts, rss, commit = llama_run(a, ggufs[shape, "f32"], 3, prefill=False)
                    add(shape, "llama decode f32", ts)
                    add(shape, "llama peak RSS f32", rss)
                    add(shape, "llama prefill f32", llama_run(a, ggufs[shape, "f32"], 3, prefill=True)[0])
                    add(shape, "llama decode q8_0", llama_run(a, ggufs[shape, "q8_0"], 3, prefill=False)[0])
                    add(shape, "llama decode q4_0", llama_run(a, ggufs[shape, "q4_0"], 3, prefill=False)[0])
                    if shape in k_runs:
                        add(shape, "llama decode q4_k_m", llama_run(a, ggufs[shape, "q4_k_m"], 3, prefill=False)[0])

                sides = (fbt_side, llama_side) if rep % 2 == 0 else (llama_side, fbt_side)
                for side in sides:
                    side()
                print(f"rep {rep + 1}/{a.reps} {shape} done", file=sys.stderr)

    busy, load = start_busy_load(a.threads) if a.busy else ([], "quiet: no competing load started")
    try:
        repetitions()
    finally:
        for p in busy:
            p.kill()

    if commit in ("?", "unknown") and a.llama_commit:
        commit = a.llama_commit
    med = {k: statistics.median(v) for k, v in samples.items()}
    read_bw = med["machine", "read bandwidth"]
    lines = [f"# fbt vs llama.cpp, {a.threads} thread(s), {datetime.date.today().isoformat()}", "",
             f"fbt {fbt_sha}, llama.cpp {commit} (`{a.llama_bench}`), random weights, batch 1; decode: {NEW_TOKENS} tokens "
             f"after {CONTEXT} of context; prefill: {PROMPT} tokens. Medians of {a.reps} alternating repetitions, "
             f"each the median (fbt) or mean (llama-bench) of 3 timed runs. Read bandwidth (`fbt bench --tests "
             f"memory`, once per repetition, median): {read_bw / 1e9:.1f} GB/s on {a.threads} thread(s).", "",
             f"Load: {load}. Ratios: the median of the {a.reps} per-repetition ratios (min–max); \"ahead\" "
             "only when the whole spread lies above 1.0.", "",
             "| shape | what | fbt | llama.cpp | fbt / llama.cpp (min–max) | verdict |", "|---|---|---|---|---|---|"]
    verdicts = {}
    for shape in shapes:
        def row(what, f, l, unit="tok/s"):
            fv, lv = med[shape, f], med[shape, l]
            r, lo, hi, verdict = spread([x / y for x, y in zip(samples[shape, f], samples[shape, l])])
            verdicts[f"{shape}|{what}"] = {"ratio": r, "min": lo, "max": hi, "verdict": verdict}
            lines.append(f"| {shape} | {what} | {fv:.1f} {unit} | {lv:.1f} {unit} | **{r:.2f}×** ({lo:.2f}–{hi:.2f}) "
                         f"| {verdict} |")
        row("decode f32", "fbt decode f32", "llama decode f32")
        row("decode int8 vs Q8_0", "fbt decode int8", "llama decode q8_0")
        row("decode int4 vs Q4_0 (heads Q8_0)", "fbt decode int4", "llama decode q4_0")
        if shape in k_runs:
            row("decode Q4_K_M file (its own blocks)", "fbt decode q4_k_m", "llama decode q4_k_m")
        row("prefill f32", "fbt prefill f32", "llama prefill f32")
        fr, lr = med[shape, "fbt peak RSS f32"], med[shape, "llama peak RSS f32"]
        lines.append(f"| {shape} | peak RSS, f32 decode | {fr / 1e6:.0f} MB | {lr / 1e6:.0f} MB | {fr / lr:.2f}× | |")
        lines.append(f"| {shape} | fbt f32 decode: (anonymous RSS − the runtime's {med[shape, 'fbt startup RSS'] / 1e6:.0f} MB)"
                     f" / (model + KV cache) | {med[shape, 'fbt memory ratio f32']:.2f}× | | | |")
        for kind in ("f32", "int8", "int4"):
            gbs = med[shape, f"fbt decode {kind} GB/s"]
            lines.append(f"| {shape} | fbt decode {kind}: weights read | {gbs / 1e9:.1f} GB/s "
                         f"({med[shape, f'fbt weight bytes {kind}'] / 1e6:.1f} MB/token) | | "
                         f"{100 * gbs / read_bw:.0f}% of read bandwidth | |")
        lines.append(f"| {shape} | fbt soft-decode overhead vs standard | {100 * med[shape, 'fbt soft overhead']:+.1f}% | | | |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.results_dir:
        label = a.label or hardware
        base = os.path.join(a.results_dir, f"vs_llama_cpp_{label}_{datetime.date.today().isoformat()}")
        stem, n = base, 1  # a later run of the same day adds _2, _3, ... (never overwrites a result)
        while os.path.exists(stem + ".md") or os.path.exists(stem + ".json"):
            n += 1
            stem = f"{base}_{n}"
        with open(stem + ".md", "w") as f:
            f.write(text)
        with open(stem + ".json", "w") as f:
            json.dump({"llama_cpp_commit": commit, "fbt_git_sha": fbt_sha, "threads": a.threads, "load": load,
                       "ratios": verdicts,
                       "read_bandwidth": read_bw, "medians": {f"{s}|{w}": v for (s, w), v in med.items()},
                       "samples": {f"{s}|{w}": v for (s, w), v in samples.items()}}, f, indent=2)
        print(f"wrote {stem}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
