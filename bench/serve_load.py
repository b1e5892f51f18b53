#!/usr/bin/env python3
"""Bounded load test of `fbt serve` on loopback (issue 19, item 6).

For each decoding mode and each number of concurrent clients, every client sends streamed
/v1/completions requests back to back (fixed prompts, greedy, at most `max_tokens` new tokens; a
sequence that samples the end-of-text token stops early and counts what it produced) until it has
sent `--requests` of them. Per request it records the time to first token (TTFT: request
sent -> first streamed token) and the gaps between later tokens (inter-token latency, ITL); per
level the total generated tokens over the wall time (throughput). Every token is one SSE event
(fbt serve streams token by token), so ITL is measured per token.

Uses only the standard library (http.client in threads), so the client's own cost stays small
next to the server's on a 2-core machine; the client's CPU time is printed too.

Usage: bench/serve_load.py --url http://127.0.0.1:8080 --clients 1 4 16 --modes standard soft
       [--requests 8] [--max-tokens 32] [--ignore-eos] [--out bench/results/serve_load_HOST_DATE.json]
Two servers against each other, alternating: bench/serve_compare.py.
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

PROMPTS = [
    "The history of the city begins",
    "Once upon a time, in a small village by the sea,",
    "In mathematics, a prime number is",
    "The committee met on Tuesday to discuss",
    "She opened the door and saw",
    "The recipe calls for two cups of flour and",
    "During the winter months the river",
    "According to the report, the company",
]


def percentile(values, p):
    """The p-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(url, body, headers):
    """Sends one streamed completion; returns (ttft_s, [itl_s...], tokens)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    times = []
    for raw in resp:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        if event.get("choices") and event["choices"][0].get("finish_reason") is None:  # a token event (the last one carries the reason)
            times.append(time.perf_counter())
    conn.close()
    if not times:
        return None, [], 0
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)


def run_level(args, mode, clients):
    """`clients` threads, each sending args.requests requests; returns the level's summary."""
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    ttft, itl, tokens, errors = [], [], [0], []
    lock = threading.Lock()

    def client(c):
        for i in range(args.requests):
            body = {"prompt": PROMPTS[(c + i) % len(PROMPTS)], "max_tokens": args.max_tokens,
                    "temperature": 0, "stream": True}
            if mode:
                body["fbt_mode"] = mode
            if getattr(args, "ignore_eos", False):
                body["ignore_eos"] = True
            try:
                first, gaps, n = one_request(args.url, body, headers)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                if first is not None:
                    ttft.append(first)
                itl.extend(gaps)
                tokens[0] += n

    cpu0, t0 = time.process_time(), time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "mode": mode, "clients": clients, "requests": clients * args.requests, "errors": len(errors),
        "first_error": errors[0] if errors else None, "tokens": tokens[0], "wall_s": wall,
        "tokens_per_s": tokens[0] / wall,
        "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
        "itl_p50_ms": 1e3 * percentile(itl, 50), "itl_p99_ms": 1e3 * percentile(itl, 99),
        "client_cpu_s": time.process_time() - cpu0,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--api-key", default="")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--modes", nargs="+", default=["standard", "soft"])
    p.add_argument("--requests", type=int, default=8, help="requests per client and level")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--ignore-eos", action="store_true",
                   help="send ignore_eos (fbt serve, vLLM, llama-server): every request runs to --max-tokens")
    p.add_argument("--out", default="")
    args = p.parse_args()
    rows = []
    # Alternate the modes at every concurrency level, so drift of the shared machine hits both.
    for clients in args.clients:
        for mode in args.modes:
            row = run_level(args, mode, clients)
            rows.append(row)
            print(f"{mode:9s} clients {clients:3d}: {row['tokens_per_s']:7.1f} tok/s  "
                  f"TTFT p50 {row['ttft_p50_ms']:7.1f} ms p99 {row['ttft_p99_ms']:7.1f} ms  "
                  f"ITL p50 {row['itl_p50_ms']:6.1f} ms p99 {row['itl_p99_ms']:6.1f} ms  "
                  f"errors {row['errors']}  client CPU {row['client_cpu_s']:.1f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"url": args.url, "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos,
                       "requests_per_client": args.requests,
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
