"""Special-function benchmark (not a test; prints figures): autodiag's ``lgamma``, ``digamma``,
``polygamma`` and ``sinc`` against torch's, forward on ``n`` values in this one process (torch
on one thread), alternating them; medians of ``--runs`` CPU times and our time / torch's.

    python tests/perf/bench_special.py [--sizes 1000,100000] [--runs 7]

``lgamma`` is per element (NOTE [Gamma family values]: CPython's math.lgamma, not numpy), so
its ratio grows with the size; ``digamma`` and ``polygamma(1)`` are vectorised ports of ATen's
algorithms; ``polygamma(n >= 2)`` runs Cephes' zeta per element.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import autodiag as ad

CASES = {
    "lgamma64": (lambda t, x: t.lgamma(x), "float64"),
    "lgamma32": (lambda t, x: t.lgamma(x), "float32"),
    "digamma64": (lambda t, x: t.digamma(x), "float64"),
    "digamma32": (lambda t, x: t.digamma(x), "float32"),
    "trigamma64": (lambda t, x: t.polygamma(1, x), "float64"),
    "polygamma3_64": (lambda t, x: t.polygamma(3, x), "float64"),
    "sinc32": (lambda t, x: t.sinc(x), "float32"),
}


def cpu_time(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    import torch

    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1000,100000")
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    print(f"load average: {os.getloadavg()}")
    for n in map(int, args.sizes.split(",")):
        data = np.random.default_rng(0).uniform(-20, 20, n)
        for name, (fn, dt) in CASES.items():
            a = ad.tensor(data.astype(dt))
            t = torch.tensor(data.astype(dt))
            ours, theirs = [], []
            for _ in range(args.runs):
                ours.append(cpu_time(lambda: fn(ad, a)))
                theirs.append(cpu_time(lambda: fn(torch, t)))
            mo, mt = statistics.median(ours), statistics.median(theirs)
            print(
                f"{name:>14} n={n:>7}: autodiag {mo * 1e3:8.3f} ms  torch {mt * 1e3:8.3f} ms  "
                f"ratio {mo / mt:7.1f}"
            )


if __name__ == "__main__":
    main()
