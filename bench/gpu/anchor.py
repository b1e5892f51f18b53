"""The PyTorch anchor of fbt's training step (issue 40, step c of scripts/gpu_check.sh).

The same model as fbt (bench/reference/fbt_ref.py: sandwich norms, QK-norm, per-head output
gate, GQA, RoPE, SwiGLU, tied embeddings, the latent-feedback fusion), the same objective
(fbt_ref.forward_passes, jitter and mixin 0) and the same optimiser (NorMuon with Newton–Schulz 5
in bf16 on CUDA, as src/train/normuon.cpp, plus Adam), written the way a PyTorch user would run
it on a GPU: bf16 autocast, scaled_dot_product_attention (flash / memory-efficient kernels, GQA
without copying keys), eager and torch.compile. Tokens/s and MFU use fbt bench's FLOP count
(src/bench/throughput.cpp training_flops_per_token) and a matmul peak measured the same way
(best of `reps` bf16 n×n products), so the two tools' numbers compare one to one.

    python3 bench/gpu/anchor.py --preset 1b --seq 8192 --passes 1,2 --modes eager,compile --out a.json

Prints one line per measurement on stderr and the JSON report (or --out). On a machine without
CUDA it runs on the CPU in fp32 (the rehearsal of scripts/gpu_check.sh).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import fbt_ref  # noqa: E402


def sdpa_attention(self, x, rope, masks, cache=None, layer=0, slot=0):
    """fbt_ref.Attention.forward for training (no cache) on scaled_dot_product_attention:
    x [B,T,D] -> [B,T,D]. Full-attention layers use the kernels' own causal mask; sliding-window
    layers pass fbt_ref's additive mask [1,1,T,T], as fbt's attend() does on PyTorch 2.x."""
    if cache is not None:
        raise ValueError("the anchor times training only (no KV cache)")
    B, T, _ = x.shape
    H, Hkv, Dh = self.n_heads, self.n_kv_heads, self.head_dim
    q = self.q_norm(self.wq(x).view(B, T, H, Dh)).transpose(1, 2)       # [B,H,T,Dh]
    k = self.k_norm(self.wk(x).view(B, T, Hkv, Dh)).transpose(1, 2)     # [B,Hkv,T,Dh]
    v = self.wv(x).view(B, T, Hkv, Dh).transpose(1, 2)                  # [B,Hkv,T,Dh]
    q, k = fbt_ref.apply_rope(q, *rope).to(v.dtype), fbt_ref.apply_rope(k, *rope).to(v.dtype)
    if self.window > 0:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[self.window].to(q.dtype), enable_gqa=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    gate = torch.sigmoid(self.gate(x)).transpose(1, 2).unsqueeze(-1)    # [B,H,T,1]
    return self.wo((y * gate).transpose(1, 2).reshape(B, T, H * Dh))


def matmul_weights_per_token(c, fused):
    """src/bench/throughput.cpp matmul_weights_per_token (paper block)."""
    D, H, Hkv, Dh, Fd = c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff
    per_layer = D * H * Dh + 2 * D * Hkv * Dh + H * Dh * D + D * H + 3 * D * Fd
    return c.n_layers * per_layer + c.vocab_size * D + (2 * D * D if fused else 0)


def training_flops_per_token(c, seq, passes):
    """src/bench/throughput.cpp training_flops_per_token: per pass 6·N + 12·Σ_l D·T_l."""
    attention = sum(c.d_model * (min(c.layer_window(l), seq) if c.layer_window(l) > 0 else seq)
                    for l in range(c.n_layers))
    return sum(6.0 * matmul_weights_per_token(c, k > 1) + 12.0 * attention for k in range(1, passes + 1))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, dtype, n, reps):
    """Best of `reps` n×n·n×n products in FLOP/s (fbt's measure_matmul_peak)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="1b", choices=sorted(fbt_ref.PRESETS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=8192, help="capped at the model context")
    p.add_argument("--passes", default="1,2")
    p.add_argument("--modes", default="eager,compile", help="eager and/or compile (torch.compile)")
    p.add_argument("--compile-passes", default="1", help="K values timed under torch.compile (compiling costs minutes)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-size", type=int, default=0, help="n of the peak matmul (0: 8192 CUDA, 512 CPU)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    fbt_ref.Attention.forward = sdpa_attention
    c = fbt_ref.Config.preset(args.preset)
    seq = min(args.seq, c.context)
    peak = matmul_peak(device, dtype, args.peak_size or (8192 if cuda else 512), max(args.reps, 3))
    print(f"anchor: torch {torch.__version__} on {device} "
          f"({torch.cuda.get_device_name() if cuda else 'cpu'}), peak {peak / 1e12:.1f} TFLOP/s", file=sys.stderr)

    results = []
    runs = [(mode, int(K)) for mode in args.modes.split(",")
            for K in (args.compile_passes if mode == "compile" else args.passes).split(",")]
    for mode, K in runs:
        torch.manual_seed(args.seed)
        model = fbt_ref.FBT(c).to(device).train()
        opt = fbt_ref.TrainingOptimizer(model)
        gen = torch.Generator().manual_seed(args.seed + 1)
        rows = torch.randint(0, c.vocab_size, (args.batch, seq + 1), generator=gen).to(device)
        x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

        def loss_fn(x, y, K=K, model=model):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                return fbt_ref.forward_passes(model, x, y, K)[0]
        step_loss = torch.compile(loss_fn) if mode == "compile" else loss_fn

        def step():
            step_loss(x, y).backward()
            opt.step()
            for q in opt.params:
                q.grad = None

        t_first = time.perf_counter()
        for _ in range(args.warmup):
            step()
        sync(device)
        warm_s = time.perf_counter() - t_first
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            step()
            sync(device)
            times.append(time.perf_counter() - t0)
        tokens = args.batch * seq
        rates = [tokens / t for t in times]
        flops = training_flops_per_token(c, seq, K)
        r = {"test": "train", "mode": mode, "passes": K, "batch": args.batch, "seq": seq,
             "tokens_per_s": {"median": statistics.median(rates), "min": min(rates), "max": max(rates)},
             "mfu": statistics.median(rates) * flops / peak, "warmup_s": warm_s,
             "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else -1}
        print(f"anchor {mode} train K={K} {args.batch}x{seq}: {r['tokens_per_s']['median']:.0f} tokens/s, "
              f"MFU {100 * r['mfu']:.1f}% (warmup {warm_s:.1f} s)", file=sys.stderr, flush=True)
        results.append(r)
        if args.out:  # after every measurement: a run stopped by its time limit keeps what it measured
            write_report(args.out, args, device, peak, results)
        del model, opt, step_loss
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    if not args.out:
        print(write_report("", args, device, peak, results))


def write_report(path, args, device, peak, results):
    """The JSON report (to `path` through a renamed temporary file, or returned when path is "")."""
    cuda = device.type == "cuda"
    text = json.dumps({"tool": "pytorch-anchor", "preset": args.preset, "device": str(device),
                       "gpu": torch.cuda.get_device_name() if cuda else "", "torch_version": torch.__version__,
                       "peak_flops": peak, "reps": args.reps, "results": results}, indent=2)
    if path:
        with open(path + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(path + ".tmp", path)
    return text


if __name__ == "__main__":
    main()
