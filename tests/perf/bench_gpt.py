"""Tiny GPT training-step benchmark: autodiag vs PyTorch in the same process (issue 20).

    python tests/perf/bench_gpt.py [--runs 7] [--steps 10] [--threads N] [--profile]

The nanoGPT-style model of ``samples/tiny_gpt.py``: 2 layers, 4 heads, 64 dims, context 32,
vocab 65, batch 16, float32, causal ``scaled_dot_product_attention``, GELU MLP, LayerNorm, tied
head, cross-entropy, AdamW. One step = zero_grad + forward + backward + optimizer step. Both
engines get the same weights and batch (their first losses are printed: they agree). Each run
times ``--steps`` steps after a warm-up; the median over ``--runs`` interleaved runs is
reported in ms/step with the ratio autodiag/torch. Target (issue 20): <= 1.5x, with 1 thread
and with the default threads.

Threads: ``--threads N`` (default: all cores) sets torch's intra-op threads and, through
OPENBLAS_NUM_THREADS / OMP / MKL set before numpy is imported, numpy's BLAS threads.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_mlp import _THREADS, _value, measure  # noqa: E402 - sets the BLAS threads first

# isort: split

import numpy as np  # noqa: E402

import autodiag as ad  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

VOCAB, DIM, HEADS, BLOCK, LAYERS, BATCH = 65, 64, 4, 32, 2, 16


def make_model(lib):
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(DIM, 3 * DIM)
            self.c_proj = nn.Linear(DIM, DIM)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(DIM, dim=2)
            q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
            k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
            v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.attn = CausalSelfAttention()
            self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(BLOCK, DIM)
            self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(DIM)
            self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
            self.wte.weight = self.lm_head.weight

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(lib.arange(idx.size(1)))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))

    model = GPT()
    rng = np.random.default_rng(0)
    with lib.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.fill_(1.0)
            else:
                p.copy_(lib.tensor(rng.normal(0, 0.02, tuple(p.shape)).astype(np.float32)))
    return model


def make_step(lib):
    model = make_model(lib)
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
    x, y = lib.tensor(idx[:, :-1]), lib.tensor(idx[:, 1:])

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=_THREADS)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    if torch is not None:
        torch.set_num_threads(a.threads)
    print(
        f"tiny GPT: {LAYERS} layers, {HEADS} heads, {DIM} dims, block {BLOCK}, vocab {VOCAB}, "
        f"batch {BATCH}, AdamW; {a.runs} runs x {a.steps} steps"
    )
    print(
        f"cores: {os.cpu_count()}; torch threads: "
        f"{torch.get_num_threads() if torch is not None else '-'}; BLAS threads (numpy, "
        f"autodiag): OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; load "
        f"average: {os.getloadavg()[0]:.2f}"
    )
    steps = {"autodiag": make_step(ad)}
    if torch is not None:
        steps["torch"] = make_step(torch)
    first = {k: _value(s()) for k, s in steps.items()}
    print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    res = measure(steps, a.steps, a.runs)
    for name, ms in res.items():
        print(f"{name:9s} {ms:8.3f} ms/step")
    if "torch" in res:
        print(f"ratio autodiag/torch: {res['autodiag'] / res['torch']:.2f}x")
    if a.profile:
        step = steps["autodiag"]
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(30):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
