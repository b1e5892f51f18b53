#!/usr/bin/python3
"""fbt_ref.py — a plain PyTorch reference of the Full-Bandwidth Transformer (FBT).

The same model, K-pass training objective, NorMuon + Adam step and cached decoding as the
C++/libtorch implementation (src/model/model.cpp, src/model/passes.cpp, src/train/normuon.cpp,
src/train/optimizer.cpp, src/infer/decode.cpp, src/model/cache.cpp), written to be read next to
/work/shared/docs/SPEC.md. Two uses:

  * numerical cross-check: `loss` loads an fbt checkpoint (one safetensors file whose
    metadata "fbt" JSON holds the model config) and prints the per-pass losses, which must
    match `fbt::forward_passes` on the same weights within fp32 tolerance
    (tests/model/test_reference.cpp);
  * throughput baseline: `bench` times the training step (K = 1, 2) and cached decoding
    (standard, soft) with the same JSON schema as `fbt bench --format json`.

Needs torch only (Debian's python3-torch 1.13 = the kernels of our libtorch); run it with
/usr/bin/python3. No numpy, no safetensors package: the format is parsed here.

Shape legend: B batch, T tokens in a call, S key slots, D model width, H query heads,
Hkv key/value heads, Dh = D/H, F = d_ff, V vocabulary, L layers.
"""
import argparse
import ctypes
import hashlib
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- config

# The defaults are the `debug` preset (include/fbt/model/config.h).
DEFAULT_CONFIG = {
    "vocab_size": 259, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
    "d_ff": 176, "context": 64, "window": 0, "full_attention_every": 6,
    "rope_theta": 10000.0, "norm_eps": 1e-6, "init_std": 0.02, "fusion_gate_init_std": 0.02,
    "residual_scale": 0.0, "fusion": "glu", "feedback_state": "post_norm",
    "doc_separator_id": -1, "input_norm": "every_pass", "fusion_init": "identity",
}

# The keys of the Llama block family (issue 17): the reference implements the paper's block only,
# so it takes them at these values, which are the paper block's, and refuses any other.
PAPER_BLOCK_ONLY = {
    "block": "fbt", "head_dim": 0, "qk_norm": True, "attention_bias": False, "attention_out_bias": False,
    "tie_embeddings": True, "rope_scaling": "none", "rope_scaling_factor": 8.0, "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0, "rope_original_context": 8192,
}

PRESETS = {  # src/model/config.cpp ModelConfig::preset
    "debug": {},
    "small": {"vocab_size": 4096, "d_model": 256, "n_layers": 6, "n_heads": 4, "n_kv_heads": 2,
              "d_ff": 688, "context": 256},
    "1b": {"vocab_size": 100352, "d_model": 1536, "n_layers": 24, "n_heads": 16, "n_kv_heads": 8,
           "d_ff": 6656, "context": 8192, "window": 2048, "full_attention_every": 6},
}


class Config:
    def __init__(self, **overrides):
        for k in set(overrides) & set(PAPER_BLOCK_ONLY):
            if overrides.pop(k) != PAPER_BLOCK_ONLY[k]:
                raise ValueError(f"model config {k}: the reference implements only the paper's block "
                                 f"({k} = {PAPER_BLOCK_ONLY[k]!r})")
        unknown = set(overrides) - set(DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        for k, v in {**DEFAULT_CONFIG, **overrides}.items():
            setattr(self, k, v)
        assert self.d_model % self.n_heads == 0 and self.n_heads % self.n_kv_heads == 0
        assert self.fusion in ("glu", "glu_plus_token", "residual")
        # residual adds to the plain input of pass 1, which Listing 3 changes in later passes (issue 38)
        assert self.fusion != "residual" or self.input_norm == "every_pass"
        assert self.feedback_state in ("post_norm", "pre_norm")
        assert self.input_norm in ("every_pass", "listing3")
        assert self.fusion_init in ("identity", "uniform")

    @classmethod
    def preset(cls, name):
        return cls(**PRESETS[name])

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def branch_scale(self):  # residual_scale, or 1/sqrt(2L) when 0 (SPEC §3)
        return self.residual_scale if self.residual_scale > 0 else 1.0 / math.sqrt(2.0 * self.n_layers)

    def layer_window(self, layer):  # 0 = full attention; every n-th layer (1-based) is full
        if self.window <= 0 or self.window >= self.context:
            return 0
        return 0 if (layer + 1) % self.full_attention_every == 0 else self.window

    def to_json(self):
        return {k: getattr(self, k) for k in DEFAULT_CONFIG}


# ----------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) * g over the last dim, computed in fp32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).to(x.dtype)


def rope_tables(positions, head_dim, theta):
    """positions [B|1,T] int64 -> cos, sin [B|1,1,T,Dh/2]; angle = pos · θ^(-2i/Dh)."""
    inv_freq = torch.pow(theta, -torch.arange(0, head_dim, 2, dtype=torch.float32,
                                              device=positions.device) / head_dim)
    angles = (positions.float().unsqueeze(-1) * inv_freq).unsqueeze(1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate-half RoPE on x [B,h,T,Dh]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def additive_mask(q_pos, k_pos, window):
    """Causal (+ sliding window) additive mask [B|1,1,T,S] from query/key positions."""
    rel = q_pos.unsqueeze(-1) - k_pos.unsqueeze(-2)  # [B|1,T,S]
    allowed = rel >= 0
    if window > 0:
        allowed = allowed & (rel < window)
    mask = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return mask.masked_fill(~allowed, float("-inf")).unsqueeze(1)


class Attention(nn.Module):
    """GQA self-attention with RoPE, QK RMSNorm and a per-head sigmoid output gate."""

    def __init__(self, c, layer):
        super().__init__()
        D, Dh = c.d_model, c.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, Dh
        self.window = c.layer_window(layer)
        self.wq = nn.Linear(D, c.n_heads * Dh, bias=False)
        self.wk = nn.Linear(D, c.n_kv_heads * Dh, bias=False)
        self.wv = nn.Linear(D, c.n_kv_heads * Dh, bias=False)
        self.wo = nn.Linear(c.n_heads * Dh, D, bias=False)
        self.gate = nn.Linear(D, c.n_heads, bias=False)  # one gate per head
        self.q_norm = RMSNorm(Dh, c.norm_eps)
        self.k_norm = RMSNorm(Dh, c.norm_eps)

    def forward(self, x, rope, masks, cache=None, layer=0, slot=0):
        B, T, _ = x.shape
        H, Hkv, Dh = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.q_norm(self.wq(x).view(B, T, H, Dh)).transpose(1, 2)      # [B,H,T,Dh]
        k = self.k_norm(self.wk(x).view(B, T, Hkv, Dh)).transpose(1, 2)    # [B,Hkv,T,Dh]
        v = self.wv(x).view(B, T, Hkv, Dh).transpose(1, 2)                 # [B,Hkv,T,Dh]
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:  # write this call's keys/values, attend over every filled slot
            cache.k[layer][:, :, slot:slot + T] = k
            cache.v[layer][:, :, slot:slot + T] = v
            k = cache.k[layer][:, :, :slot + T]                             # [B,Hkv,S,Dh]
            v = cache.v[layer][:, :, :slot + T]
        mask = masks[self.window]  # [B|1,1,T,S] or None (a single query that may see every key)
        # GQA without copying keys: the G = H/Hkv query heads of a KV group are stacked along T.
        G, S = H // Hkv, k.shape[2]
        scores = torch.matmul(q.reshape(B, Hkv, G * T, Dh), k.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))
        scores = scores.view(B, Hkv, G, T, S)
        if mask is not None:
            scores = scores + mask.unsqueeze(1)
        probs = torch.softmax(scores, dim=-1).view(B, Hkv, G * T, S)
        y = torch.matmul(probs, v).view(B, H, T, Dh)
        gate = torch.sigmoid(self.gate(x)).transpose(1, 2).unsqueeze(-1)   # [B,H,T,1]
        return self.wo((y * gate).transpose(1, 2).reshape(B, T, H * Dh))


class MLP(nn.Module):
    """SwiGLU: W_down(silu(W_gate x) ⊙ W_up x)."""

    def __init__(self, c):
        super().__init__()
        self.w_gate = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.w_up = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.w_down = nn.Linear(c.d_ff, c.d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """Sandwich norms, depth-scaled branches: x += s·norm_out(branch(norm_in(x)))."""

    def __init__(self, c, layer):
        super().__init__()
        self.layer, self.scale = layer, c.branch_scale()
        self.attn_norm_in = RMSNorm(c.d_model, c.norm_eps)
        self.attn = Attention(c, layer)
        self.attn_norm_out = RMSNorm(c.d_model, c.norm_eps)
        self.mlp_norm_in = RMSNorm(c.d_model, c.norm_eps)
        self.mlp = MLP(c)
        self.mlp_norm_out = RMSNorm(c.d_model, c.norm_eps)

    def forward(self, x, rope, masks, cache=None, slot=0):
        h = x + self.scale * self.attn_norm_out(self.attn(self.attn_norm_in(x), rope, masks, cache, self.layer, slot))
        return h + self.scale * self.mlp_norm_out(self.mlp(self.mlp_norm_in(h)))


class LatentFusion(nn.Module):
    """Paper Eq. 4 before the input norm: g = (W_U h_prev) ⊙ sigmoid(W_G e_n). W_U = 0 at init
    for fusion residual (issue 38)."""

    def __init__(self, c):
        super().__init__()
        self.w_u = nn.Linear(c.d_model, c.d_model, bias=False)
        self.w_g = nn.Linear(c.d_model, c.d_model, bias=False)

    def forward(self, h_prev, e_normed):
        return self.w_u(h_prev) * torch.sigmoid(self.w_g(e_normed))  # state = value, token = gate


class FBT(nn.Module):
    """Modules are registered in the order (and with the names) of fbt's FBTImpl, so the
    state_dict keys are the checkpoint's tensor names."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.input_norm = RMSNorm(c.d_model, c.norm_eps)
        self.fusion = LatentFusion(c)
        self.blocks = nn.ModuleList([Block(c, l) for l in range(c.n_layers)])
        self.final_norm = RMSNorm(c.d_model, c.norm_eps)
        with torch.no_grad():  # init as fbt (values differ: another RNG)
            for name, p in self.named_parameters():
                if "norm" not in name:
                    p.normal_(0.0, c.init_std)
            if c.fusion_init == "identity":
                nn.init.eye_(self.fusion.w_u.weight)  # W_U = I
                self.fusion.w_g.weight.normal_(0.0, c.fusion_gate_init_std)
            else:  # uniform with std 1/sqrt(D) (the first author's nanochat init)
                a = (3.0 / c.d_model) ** 0.5
                self.fusion.w_u.weight.uniform_(-a, a)
                self.fusion.w_g.weight.uniform_(-a, a)
            if c.fusion == "residual":  # W_U = 0: every mode is the standard one at init (issue 38)
                self.fusion.w_u.weight.zero_()

    # -- pieces composed by the K-pass forward and the decoders
    def plain_input(self, tokens):  # pass 1: RMSNorm_in(Embed(x)), or Embed(x) for Listing 3 [B,T,D]
        e = self.embedding(tokens)
        return e if self.config.input_norm == "listing3" else self.input_norm(e)

    def fused_input(self, h_prev, e_plain):  # RMSNorm_in(g), RMSNorm_in(g + e_n) or e_plain + g
        e_n = self.input_norm(e_plain) if self.config.input_norm == "listing3" else e_plain
        g = self.fusion(h_prev, e_n)
        if self.config.fusion == "residual":  # x_plain + g, no norm around the sum (issue 38)
            return e_plain + g
        return self.input_norm(g if self.config.fusion == "glu" else g + e_n)

    def feedback_rows(self, h_prev, e_plain, plain):
        """A later pass's input: plain rows keep e_plain (Listing 3 normalises every row of a
        later pass, the plain ones too), the others are fused with h_prev."""
        kept = self.input_norm(e_plain) if self.config.input_norm == "listing3" else e_plain
        return torch.where(plain, kept, self.fused_input(h_prev, e_plain))

    def plain_positions(self, tokens):  # bool [B,T]: position 0 and document starts
        plain = torch.zeros_like(tokens, dtype=torch.bool)
        plain[:, 0] = True
        if self.config.doc_separator_id >= 0:
            plain[:, 1:] |= tokens[:, :-1] == self.config.doc_separator_id
        return plain

    def masks(self, q_pos, k_pos, need_mask=True):
        """Additive masks per window size used by a layer (0 = full)."""
        out = {}
        for w in {blk.attn.window for blk in self.blocks}:
            out[w] = additive_mask(q_pos, k_pos, w) if (need_mask or w > 0) else None
        return out

    def stack(self, u, positions=None, cache=None):
        """L blocks on inputs u [B,T,D]; returns the top residual x [B,T,D] (before the final
        norm). Without a cache: positions 0..T-1. With a cache: the T positions continue the
        cache (every row has the same length) and keys/values are appended."""
        T = u.shape[1]
        slot = cache.length if cache is not None else 0
        if cache is not None and slot + T > cache.capacity:
            raise ValueError(f"KV cache full: {slot} + {T} tokens exceed its capacity of {cache.capacity}")
        if positions is None:
            positions = torch.arange(slot, slot + T, device=u.device).unsqueeze(0)  # [1,T]
        rope = rope_tables(positions, self.config.head_dim, self.config.rope_theta)
        if cache is None:
            masks = self.masks(positions, positions)
        else:
            k_pos = torch.arange(0, slot + T, device=u.device).unsqueeze(0)
            masks = self.masks(positions, k_pos, need_mask=T > 1)  # one query sees all its keys
        x = u
        for block in self.blocks:
            x = block(x, rope, masks, cache, slot)
        if cache is not None:
            cache.length += T
        return x

    def feedback_state(self, x):  # what the next position is fused with
        return self.final_norm(x) if self.config.feedback_state == "post_norm" else x

    def head(self, x):  # tied LM head on FinalNorm(x): [B,T,V]
        return F.linear(self.final_norm(x), self.embedding.weight)


# ----------------------------------------------------------------------------- K-pass loss

def shift_right(h):
    """Position t gets the state of t-1; position 0 gets zeros (it is always plain)."""
    return torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)


def prefix_mask(B, T, mixin_prob, generator=None):
    """Prefix mixin (SPEC §5): per sequence with probability mixin_prob, positions t < p,
    p ~ Uniform{0..T-1}, stay plain. bool [B,T]."""
    if mixin_prob <= 0:
        return torch.zeros(B, T, dtype=torch.bool)
    p = torch.randint(0, T, (B,), generator=generator)
    on = torch.rand(B, generator=generator) < mixin_prob
    prefix = torch.where(on, p, torch.zeros_like(p))
    return torch.arange(T).unsqueeze(0) < prefix.unsqueeze(1)


def forward_passes(model, tokens, targets, passes, jitter=0.0, mixin_prob=0.0, z_loss=0.0,
                   later_weight=1.0, detach=False, generator=None):
    """The K-pass objective of src/model/passes.cpp (SPEC §5). Returns (total, [CE per pass],
    [z-loss per pass]); total = L1 + λ·mean(L2..LK), L_k = CE_k + z_k. targets [B,T] int64,
    -1 ignored; CE is the mean over scored positions, z_k = z_loss · mean over scored positions
    of logsumexp(logits)²."""
    B, T = tokens.shape
    e_n = model.plain_input(tokens)
    always_plain = model.plain_positions(tokens)
    flat_targets = targets.reshape(B * T)
    scored = flat_targets.ge(0).float()
    ces, zs, state = [], [], None
    for k in range(1, passes + 1):
        if k == 1:
            u = e_n  # pass 1 = standard teacher forcing
        else:
            h = state.detach() if detach else state
            if jitter > 0:
                h = h + (torch.rand(h.shape, generator=generator) * 2 - 1) * jitter
            plain = always_plain | prefix_mask(B, T, mixin_prob, generator).to(tokens.device)
            u = model.feedback_rows(shift_right(h), e_n, plain.unsqueeze(-1))
        x = model.stack(u)
        if k < passes:
            state = model.feedback_state(x)
        logits = model.head(x).reshape(B * T, -1).float()
        ces.append(F.cross_entropy(logits, flat_targets, ignore_index=-1))
        if z_loss > 0:
            lse = torch.logsumexp(logits, dim=-1)
            zs.append(z_loss * (lse.square() * scored).sum() / scored.sum().clamp_min(1))
    per_pass = [c + z for c, z in zip(ces, zs)] if z_loss > 0 else ces
    total = per_pass[0]
    if passes > 1:
        total = total + later_weight * torch.stack(per_pass[1:]).mean()
    return total, ces, zs


# ----------------------------------------------------------------------------- optimiser

def newton_schulz5(G, steps=5):
    """Quintic Newton–Schulz towards the orthogonal polar factor (fp32 on the CPU, bf16 on CUDA,
    as src/train/normuon.cpp)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.to(torch.bfloat16 if G.is_cuda else torch.float32)
    transpose = G.shape[0] > G.shape[1]
    if transpose:
        X = X.t()
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.t()
        X = a * X + (b * A + c * (A @ A)) @ X
    if transpose:
        X = X.t()
    return X.to(G.dtype)


class NorMuon:
    """src/train/normuon.cpp: momentum, Nesterov, NS5, per-row second moment, norm-preserving
    rescale, shape scale sqrt(max(1, m/n)), decoupled weight decay."""

    def __init__(self, params, lr=1e-2, weight_decay=0.01, momentum=0.95, beta2=0.95, eps=1e-10, ns_steps=5):
        self.params = list(params)
        self.lr, self.weight_decay, self.momentum, self.beta2, self.eps, self.ns_steps = \
            lr, weight_decay, momentum, beta2, eps, ns_steps
        self.state = {}

    @torch.no_grad()
    def step(self):
        for W in self.params:
            G = W.grad
            if G is None:
                continue
            if W not in self.state:
                self.state[W] = (torch.zeros_like(W), torch.zeros(W.shape[0], 1, device=W.device))
            M, v = self.state[W]
            M.lerp_(G, 1 - self.momentum)             # M ← β1 M + (1−β1) G
            U = torch.lerp(G, M, self.momentum)        # Nesterov
            O = newton_schulz5(U, self.ns_steps)
            v.lerp_(O.square().mean(1, keepdim=True), 1 - self.beta2)
            O_hat = O / (v.sqrt() + self.eps)
            O_hat.mul_(O.norm() / (O_hat.norm() + self.eps))
            shape_scale = math.sqrt(max(1.0, W.shape[0] / W.shape[1]))
            W.mul_(1 - self.lr * self.weight_decay)
            W.add_(O_hat, alpha=-self.lr * shape_scale)


class TrainingOptimizer:
    """src/train/optimizer.cpp, normuon recipe: NorMuon for every 2-D weight except the tied
    embedding; Adam (AdamW with wd 0) for the embedding and the RMSNorm gains."""

    def __init__(self, model, normuon_lr=1e-2, normuon_wd=0.01, lr=5e-4, betas=(0.9, 0.95), eps=1e-10):
        hidden = [p for n, p in model.named_parameters() if p.dim() == 2 and n != "embedding.weight"]
        rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n != "embedding.weight")]
        self.normuon = NorMuon(hidden, lr=normuon_lr, weight_decay=normuon_wd)
        self.adam = torch.optim.AdamW(rest, lr=lr, betas=betas, eps=eps, weight_decay=0.0)
        self.params = hidden + rest

    def step(self):
        self.normuon.step()
        self.adam.step()


def train_step(model, opt, tokens, targets, passes, jitter=0.02, mixin_prob=0.3, generator=None):
    """One step as src/train/trainer.cpp (one micro-batch, fp32): K-pass forward, backward, grad
    norm (clip_grad_norm_ with an infinite bound), optimiser step, grads set to none."""
    total, ces, _ = forward_passes(model, tokens, targets, passes, jitter, mixin_prob, generator=generator)
    total.backward()
    grads = [p.grad for p in opt.params if p.grad is not None]
    grad_norm = torch.norm(torch.stack([g.norm() for g in grads]))
    if math.isfinite(grad_norm.item()):
        opt.step()
    for p in opt.params:
        p.grad = None
    return total.item()


# ----------------------------------------------------------------------------- decoding

class KVCache:
    """Preallocated keys/values [B,Hkv,capacity,Dh] per layer, plus the feedback state
    h_prev [B,D] and the last token [B] carried beside the cache (SPEC §7)."""

    def __init__(self, c, batch, capacity, dtype=torch.float32):
        shape = (batch, c.n_kv_heads, capacity, c.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(c.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(c.n_layers)]
        self.capacity, self.length = capacity, 0
        self.h_prev = torch.zeros(batch, c.d_model, dtype=dtype)
        self.last_token = torch.full((batch,), -1, dtype=torch.long)


def prefill(model, tokens, cache):
    """Plain prefill of prompts tokens [B,T] (same length, no padding). Returns logits [B,V]."""
    x = model.stack(model.plain_input(tokens), cache=cache)
    last = x[:, -1:]
    cache.h_prev = model.feedback_state(last)[:, 0]
    cache.last_token = tokens[:, -1]
    return model.head(last)[:, 0]


def decode_step(model, tokens, mode, cache):
    """One cached step for tokens [B]. Standard: plain input. Soft: fused with h_prev, except
    after the document separator. Returns logits [B,V]."""
    e_n = model.plain_input(tokens.view(-1, 1))  # [B,1,D]
    if mode == "soft":
        sep = model.config.doc_separator_id
        plain = (cache.last_token == sep) if sep >= 0 else torch.zeros_like(cache.last_token, dtype=torch.bool)
        u = model.feedback_rows(cache.h_prev.unsqueeze(1), e_n, plain.view(-1, 1, 1))
    else:
        u = e_n
    x = model.stack(u, cache=cache)
    cache.h_prev = model.feedback_state(x)[:, 0]
    cache.last_token = tokens.view(-1)
    return model.head(x)[:, 0]


def generate_greedy(model, prompt, new_tokens, mode):
    """Greedy decoding of new_tokens after prompt [B,T]; returns [B,new_tokens]."""
    with torch.inference_mode():
        cache = KVCache(model.config, prompt.shape[0], prompt.shape[1] + new_tokens)
        logits = prefill(model, prompt, cache)
        out = []
        for _ in range(new_tokens):
            tok = logits.argmax(-1)
            out.append(tok)
            logits = decode_step(model, tok, mode, cache)
        return torch.stack(out, 1)


# ----------------------------------------------------------------------------- safetensors I/O

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
          "U8": torch.uint8, "BOOL": torch.bool}


def load_safetensors(path):
    """-> ({name: tensor}, metadata dict). 8-byte LE header length, JSON header, raw LE data."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        start, end = e["data_offsets"]
        buf = bytearray(data[base + start:base + end])
        dtype = DTYPES[e["dtype"]]
        t = torch.frombuffer(buf, dtype=dtype) if end > start else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(e["shape"]).clone()
    return tensors, meta


def save_safetensors(path, tensors, metadata=None):
    """Writes tensors {name: tensor} like fbt::save_tensors (sha256 of the data section in
    __metadata__, so `fbt` can read the file too)."""
    names = {v: k for k, v in DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        raw = _tensor_bytes(t)
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    body = b"".join(chunks)
    header["__metadata__"] = {"fbt": json.dumps(metadata if metadata is not None else {}),
                              "sha256": hashlib.sha256(body).hexdigest()}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def _tensor_bytes(t):
    """Raw (little-endian host) bytes of a contiguous CPU tensor, without numpy."""
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def load_model(path):
    """An FBT with the weights and config of an fbt checkpoint (model.safetensors), or of a
    step/run directory holding one (run dir: its `latest` step)."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "latest")):
            with open(os.path.join(path, "latest")) as f:
                path = os.path.join(path, f.read().strip())
        path = os.path.join(path, "model.safetensors")
    tensors, meta = load_safetensors(path)
    info = json.loads(meta["fbt"])
    model = FBT(Config(**info["model_config"]))
    expected = dict(model.named_parameters())
    if set(expected) != set(tensors):
        raise ValueError(f"{path}: tensor names differ from the model's: "
                         f"missing {sorted(set(expected) - set(tensors))}, extra {sorted(set(tensors) - set(expected))}")
    with torch.no_grad():
        for name, p in expected.items():
            p.copy_(tensors[name])
    model.eval()
    return model


# ----------------------------------------------------------------------------- CLI: loss

def cmd_loss(args):
    torch.set_num_threads(args.threads)
    model = load_model(args.checkpoint)
    tensors, _ = load_safetensors(args.tokens)
    tokens = tensors["tokens"].long()
    if "targets" in tensors:  # as fbt's loaders give them: the next token of a T+1 window
        targets = tensors["targets"].long()
    else:  # shifted left; the last position has no next token and is ignored (-1)
        targets = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -1)], dim=1)
    with torch.no_grad():
        total, ces, zs = forward_passes(model, tokens, targets, args.passes, z_loss=args.z_loss)
    out = {"losses": [c.item() for c in ces], "loss": total.item()}
    if zs:
        out["z_losses"] = [z.item() for z in zs]
    text = json.dumps(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


# ----------------------------------------------------------------------------- CLI: step

def load_optimizer_state(model, opt, path):
    """Loads fbt's optimizer.safetensors (Adam "<p>.exp_avg", ".exp_avg_sq", ".step"; NorMuon
    "<p>.momentum", ".row_second_moment") into a TrainingOptimizer."""
    st, _ = load_safetensors(path)
    names = {p: n for n, p in model.named_parameters()}
    for p in opt.normuon.params:
        n = names[p]
        if n + ".momentum" in st:
            opt.normuon.state[p] = (st[n + ".momentum"].clone(), st[n + ".row_second_moment"].clone())
    for p in opt.adam.param_groups[0]["params"]:
        n = names[p]
        if n + ".step" in st:
            opt.adam.state[p] = {"step": torch.tensor(float(st[n + ".step"].item())),
                                 "exp_avg": st[n + ".exp_avg"].clone(), "exp_avg_sq": st[n + ".exp_avg_sq"].clone()}


def cmd_step(args):
    """One training step from an fbt step directory (model + optimizer state), lr factor 1, no
    jitter/mixin/z-loss; prints the losses, the grad norm and, with --expect, the largest
    relative difference of every parameter from the expected checkpoint (fbt's next step)."""
    torch.set_num_threads(args.threads)
    model = load_model(os.path.join(args.step_dir, "model.safetensors"))
    model.train()
    opt = TrainingOptimizer(model)
    load_optimizer_state(model, opt, os.path.join(args.step_dir, "optimizer.safetensors"))
    tensors, _ = load_safetensors(args.tokens)
    tokens = tensors["tokens"].long()
    targets = tensors["targets"].long() if "targets" in tensors else \
        torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -1)], dim=1)
    total, ces, _ = forward_passes(model, tokens, targets, args.passes)
    total.backward()
    grad_norm = torch.norm(torch.stack([p.grad.norm() for p in opt.params if p.grad is not None]))
    opt.step()
    out = {"loss": total.item(), "losses": [c.item() for c in ces], "grad_norm": grad_norm.item()}
    if args.expect:
        expected, _ = load_safetensors(args.expect)
        diffs = {n: ((p.detach() - expected[n]).abs().max() / expected[n].abs().max().clamp_min(1e-30)).item()
                 for n, p in model.named_parameters()}
        out["max_rel_diff"] = max(diffs.values())
        out["worst_parameter"] = max(diffs, key=diffs.get)
    print(json.dumps(out))


# ----------------------------------------------------------------------------- CLI: generate

def cmd_generate(args):
    """Greedy decoding, for cross-checks against `fbt generate --temperature 0`. With the byte
    tokenizer (ids 0..255 are bytes, EOS 258), --prompt TEXT is preceded by EOS as fbt does."""
    torch.set_num_threads(args.threads)
    model = load_model(args.checkpoint)
    if args.prompt_ids:
        ids = [int(i) for i in args.prompt_ids.split(",")]
    else:
        ids = [model.config.doc_separator_id] + list(args.prompt.encode())
    n = min(args.max_new_tokens, model.config.context - len(ids))
    out = generate_greedy(model, torch.tensor([ids]), n, args.mode)[0].tolist()
    if args.ids:
        print(json.dumps(out))
    else:
        sep = model.config.doc_separator_id
        out = out[:out.index(sep)] if sep in out else out
        sys.stdout.write(bytes(i for i in out if i < 256).decode("utf-8", "replace"))


# ----------------------------------------------------------------------------- CLI: bench

def timed(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def rate_stats(work, times):
    rates = [work / t for t in times]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def cmd_bench(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    c = Config.preset(args.preset)
    tests = set(args.tests.split(","))
    results = []

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if "train" in tests:
        seq = min(args.seq, c.context)
        for K in [int(k) for k in args.passes.split(",")]:
            torch.manual_seed(args.seed)
            model = FBT(c)
            model.train()
            opt = TrainingOptimizer(model)
            gen = torch.Generator().manual_seed(args.seed + 1)
            rows = torch.randint(0, c.vocab_size, (args.batch, seq + 1), generator=gen)
            x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
            times = timed(lambda: train_step(model, opt, x, y, K, args.jitter, args.mixin, gen),
                          args.reps, args.warmup)
            r = {"test": "train", "passes": K, "batch": args.batch, "seq": seq,
                 "tokens_per_s": rate_stats(args.batch * seq, times)}
            log(f"train K={K} {args.batch}x{seq}: {r['tokens_per_s']['median']:.0f} tokens/s")
            results.append(r)

    if "decode" in tests:
        torch.manual_seed(args.seed)
        model = FBT(c).eval()
        ctx = min(args.context, c.context // 2)
        new = min(args.new_tokens, c.context - ctx)
        for B in [int(b) for b in args.decode_batch.split(",")]:
            prompt = torch.randint(0, c.vocab_size, (B, ctx), generator=torch.Generator().manual_seed(args.seed + 2))
            for mode in ("standard", "soft"):
                def run():
                    with torch.inference_mode():
                        cache = KVCache(c, B, ctx + new)
                        logits = prefill(model, prompt, cache)
                        t0 = time.perf_counter()  # only the decode steps are timed
                        for _ in range(new):
                            logits = decode_step(model, logits.argmax(-1), mode, cache)
                        return time.perf_counter() - t0
                for _ in range(args.warmup):
                    run()
                times = [run() for _ in range(args.reps)]
                r = {"test": "decode", "mode": mode, "batch": B, "context": ctx, "new_tokens": new,
                     "tokens_per_s": rate_stats(B * new, times)}
                log(f"decode {mode} batch {B} context {ctx} +{new}: {r['tokens_per_s']['median']:.0f} tokens/s")
                results.append(r)

    report = {"tool": "reference", "preset": args.preset, "device": "cpu", "threads": args.threads,
              "reps": args.reps, "torch_version": torch.__version__, "results": results}
    text = json.dumps(report, indent=2) if args.format == "json" else markdown(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


def markdown(report):
    lines = [f"reference (PyTorch {report['torch_version']}), preset {report['preset']}, "
             f"{report['threads']} thread(s), {report['reps']} reps", "",
             "| test | shape | tokens/s median | min | max |", "|---|---|---|---|---|"]
    for r in report["results"]:
        if r["test"] == "train":
            shape = f"K={r['passes']} {r['batch']}x{r['seq']}"
        else:
            shape = f"{r['mode']} b={r['batch']} ctx={r['context']} +{r['new_tokens']}"
        s = r["tokens_per_s"]
        lines.append(f"| {r['test']} | {shape} | {s['median']:.0f} | {s['min']:.0f} | {s['max']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("loss", help="per-pass losses of a checkpoint on a token file (JSON to stdout)")
    lp.add_argument("--checkpoint", required=True, help="model.safetensors, a step dir or a run dir")
    lp.add_argument("--tokens", required=True, help="safetensors file: 'tokens' int64 [B,T] (+ optional 'targets')")
    lp.add_argument("--passes", type=int, default=1)
    lp.add_argument("--z-loss", type=float, default=0.0)
    lp.add_argument("--threads", type=int, default=1)
    lp.add_argument("--out", default="", help="also write the JSON to this file")
    sp = sub.add_parser("step", help="one training step from an fbt step dir (model + optimizer state)")
    sp.add_argument("--step-dir", required=True)
    sp.add_argument("--tokens", required=True, help="safetensors: 'tokens' [B,T] (+ optional 'targets')")
    sp.add_argument("--passes", type=int, default=1)
    sp.add_argument("--expect", default="", help="model.safetensors of fbt's next step, to compare")
    sp.add_argument("--threads", type=int, default=1)
    gp = sub.add_parser("generate", help="greedy continuation (byte tokenizer text or token ids)")
    gp.add_argument("--checkpoint", required=True)
    gp.add_argument("--prompt", default="")
    gp.add_argument("--prompt-ids", default="", help="comma-separated token ids (used as given)")
    gp.add_argument("--mode", default="standard", choices=["standard", "soft"])
    gp.add_argument("--max-new-tokens", type=int, default=200)
    gp.add_argument("--ids", action="store_true", help="print the token ids as JSON")
    gp.add_argument("--threads", type=int, default=1)
    bp = sub.add_parser("bench", help="training and decoding throughput")
    bp.add_argument("--preset", default="small", choices=sorted(PRESETS))
    bp.add_argument("--tests", default="train,decode")
    bp.add_argument("--threads", type=int, default=1)
    bp.add_argument("--reps", type=int, default=5)
    bp.add_argument("--warmup", type=int, default=1)
    bp.add_argument("--format", default="md", choices=["md", "json"])
    bp.add_argument("--out", default="")
    bp.add_argument("--seed", type=int, default=1337)
    bp.add_argument("--passes", default="1,2", help="K values of the training test")
    bp.add_argument("--batch", type=int, default=8)
    bp.add_argument("--seq", type=int, default=256, help="capped at the model context")
    bp.add_argument("--jitter", type=float, default=0.02)
    bp.add_argument("--mixin", type=float, default=0.3)
    bp.add_argument("--decode-batch", default="1,8")
    bp.add_argument("--context", type=int, default=64, help="prompt tokens (capped at context/2)")
    bp.add_argument("--new-tokens", type=int, default=64)
    args = p.parse_args(argv)
    {"loss": cmd_loss, "step": cmd_step, "generate": cmd_generate, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
