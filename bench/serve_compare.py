#!/usr/bin/env python3
"""Two or more OpenAI-compatible servers under the same load, alternating, in one run.

Starts each server command (its `{port}` replaced by a free port; pinned with taskset to --cpus),
waits for GET /health, then for each repetition and concurrency level runs bench/serve_load.py's
load (streamed /v1/completions, greedy, fixed prompts, `--requests` per client, every request
running to `--max-tokens` with ignore_eos) against every (server, mode) variant in turn, the order
reversed on odd repetitions so drift of a shared machine hits all of them. Only one server is
loaded at a time; the others sit idle. Prints and writes (--out-md / --out-json) the median
tokens/s and inter-token latency p50/p99 per level and variant over the repetitions, and each
variant's tokens/s ratio to --baseline's, as the median of the per-repetition ratios with their
min–max spread.

--modes NAME=standard,soft sends fbt_mode to server NAME (fbt serve); a server without --modes
gets no fbt_mode (llama-server, or one fbt mode only).

Usage (issue 41's serving comparison; 2 cores, SmolLM2-135M at Q8_0 / int8):
  bench/serve_compare.py --cpus 0,1 --clients 1 4 16 --max-tokens 128 --reps 2 \\
    --server 'llama=LLAMA/build/bin/llama-server -m smol-q8_0.gguf --port {port} -t 2 -c 4096 -np 16' \\
    --server 'fbt=build/fbt serve --checkpoint runs/smol-int8 --port {port} --threads 2 --max-batch 16' \\
    --modes fbt=standard,soft --baseline llama --out-md bench/results/serve_vs_llama_server_HOST_DATE.md
"""
import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402  (bench/serve_load.py: one level of load)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name, command, cpus, log_dir):
    """Starts `command` on a free port; returns (process, url) once GET /health answers 200."""
    port = free_port()
    argv = shlex.split(command.replace("{port}", str(port)))
    if cpus:
        argv = ["taskset", "-c", cpus] + argv
    log = open(os.path.join(log_dir, f"{name}.log"), "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"serve_compare: server {name} exited ({proc.returncode}); see {log.name}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"serve_compare: server {name} did not answer /health within 600 s; see {log.name}")


def spread(values):
    return statistics.median(values), min(values), max(values)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", action="append", required=True, help="NAME=COMMAND with {port}")
    p.add_argument("--modes", action="append", default=[], help="NAME=MODE,MODE: fbt_mode values for server NAME")
    p.add_argument("--baseline", required=True, help="the server whose (first) variant ratios divide by")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--requests", type=int, default=2, help="requests per client, level and repetition")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                   help="send ignore_eos so every request runs to --max-tokens (--no-ignore-eos for a server that "
                        "lacks it: greedy, fixed prompts, so each server still decodes the same tokens)")
    p.add_argument("--cpus", default="", help="taskset CPU list for the servers (e.g. 0,1)")
    p.add_argument("--label", default="", help="a line naming the machine and builds, for the results")
    p.add_argument("--out-md", default="")
    p.add_argument("--out-json", default="")
    a = p.parse_args()
    servers = dict(s.split("=", 1) for s in a.server)
    modes = {k: v.split(",") for k, v in (m.split("=", 1) for m in a.modes)}
    if a.baseline not in servers:
        sys.exit(f"serve_compare: --baseline {a.baseline}: no --server of that name")
    variants = [(name, mode) for name in servers for mode in modes.get(name, [""])]
    base = next(v for v in variants if v[0] == a.baseline)
    log_dir = tempfile.mkdtemp(prefix="serve_compare-")  # the servers' own output, never beside the results
    print(f"serve_compare: server logs in {log_dir}", file=sys.stderr)
    procs, urls = [], {}
    try:
        for name, command in servers.items():
            proc, urls[name] = start(name, command, a.cpus, log_dir)
            procs.append(proc)
        rows = []  # one per repetition, level and variant
        for rep in range(a.reps):
            for clients in a.clients:
                order = variants if rep % 2 == 0 else variants[::-1]
                for name, mode in order:
                    load = argparse.Namespace(url=urls[name], api_key="", requests=a.requests,
                                              max_tokens=a.max_tokens, ignore_eos=a.ignore_eos)
                    row = serve_load.run_level(load, mode, clients)
                    row.update(server=name, rep=rep)
                    rows.append(row)
                    print(f"rep {rep} {name:8s} {mode or '-':9s} clients {clients:3d}: {row['tokens_per_s']:7.1f} tok/s "
                          f"ITL p50 {row['itl_p50_ms']:6.1f} ms p99 {row['itl_p99_ms']:6.1f} ms errors {row['errors']}",
                          flush=True)
                    if row["errors"]:
                        sys.exit(f"serve_compare: {name} answered with errors: {row['first_error']}")
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def pick(name, mode, clients):
        return [r for r in rows if (r["server"], r["mode"], r["clients"]) == (name, mode, clients)]

    lines = [f"| clients | server | mode | tokens/s | ITL p50 / p99 (ms) | ratio to {a.baseline} (min–max) |",
             "|---:|---|---|---:|---|---|"]
    summary = []
    for clients in a.clients:
        for name, mode in variants:
            mine, theirs = pick(name, mode, clients), pick(*base, clients)
            ratio = spread([m["tokens_per_s"] / t["tokens_per_s"] for m, t in zip(mine, theirs)])
            tps = statistics.median(r["tokens_per_s"] for r in mine)
            p50 = statistics.median(r["itl_p50_ms"] for r in mine)
            p99 = statistics.median(r["itl_p99_ms"] for r in mine)
            summary.append(dict(clients=clients, server=name, mode=mode, tokens_per_s=tps, itl_p50_ms=p50,
                                itl_p99_ms=p99, ratio=ratio))
            cell = "" if (name, mode) == base else f"{ratio[0]:.2f} ({ratio[1]:.2f}–{ratio[2]:.2f})"
            lines.append(f"| {clients} | {name} | {mode or '-'} | {tps:.1f} | {p50:.1f} / {p99:.1f} | {cell} |")
    table = "\n".join(lines)
    print(table)
    header = (f"Servers: {'; '.join(f'{k}: `{v}`' for k, v in servers.items())}. Pinned to CPUs {a.cpus or 'any'}. "
              f"{a.reps} repetitions, each level {a.requests} streamed requests per client of "
              f"{'' if a.ignore_eos else 'up to '}{a.max_tokens} tokens "
              f"({'ignore_eos, ' if a.ignore_eos else ''}greedy); medians over repetitions; ratios: median of per-repetition ratios (min–max).")
    if a.out_md:
        with open(a.out_md, "w") as f:
            f.write(f"# serve_compare {a.label}\n\n{header}\n\n{table}\n")
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(dict(servers=servers, modes=modes, baseline=a.baseline, label=a.label, cpus=a.cpus,
                           reps=a.reps, requests=a.requests, max_tokens=a.max_tokens, ignore_eos=a.ignore_eos, rows=rows, summary=summary),
                      f, indent=2)


if __name__ == "__main__":
    main()
