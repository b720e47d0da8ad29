"""gradcheck benchmark against PyTorch in the same process (not a test; prints ratios).

    python tests/perf/bench_gradcheck.py [--runs 7] [--slow-n 1000] [--fast-n 10000]

f(x) = sin(x) * x**2 on a float64 vector x (vector output), checked by
``autograd.gradcheck`` in slow mode (n = 1,000: 2n forward calls and 2n backward calls) and in
fast mode (n = 10,000). Reports the median seconds (after a warm-up call; ``--runs`` runs, ten
times as many in fast mode) and autodiag/torch.
Targets: both ratios <= 1.0.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import autodiag as ad

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def f(lib):
    return lambda x: lib.sin(x) * x**2


def measure(lib, n: int, fast: bool, runs: int) -> float:
    x0 = np.random.default_rng(0).standard_normal(n)
    x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
    fn = f(lib)
    lib.autograd.gradcheck(fn, (x,), fast_mode=fast)  # warm-up: imports, caches
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ok = lib.autograd.gradcheck(fn, (x,), fast_mode=fast)
        times.append(time.perf_counter() - t0)
        assert ok
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--slow-n", type=int, default=1_000)
    p.add_argument("--fast-n", type=int, default=10_000)
    a = p.parse_args()
    if torch is not None:
        torch.set_num_threads(1)
    cases = [
        (f"slow mode, n={a.slow_n:,}", a.slow_n, False),
        (f"fast mode, n={a.fast_n:,}", a.fast_n, True),
    ]
    print(f"{'case':22s} {'autodiag s':>11s} {'torch s':>9s} {'ratio':>7s}")
    for name, n, fast in cases:
        runs = a.runs if not fast else a.runs * 10  # fast mode takes ~1 ms: more samples
        t_ad = measure(ad, n, fast, runs)
        if torch is None:
            print(f"{name:22s} {t_ad:11.4f}")
            continue
        t_torch = measure(torch, n, fast, runs)
        print(f"{name:22s} {t_ad:11.4f} {t_torch:9.4f} {t_ad / t_torch:6.2f}x")


if __name__ == "__main__":
    main()
