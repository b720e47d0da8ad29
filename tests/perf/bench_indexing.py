"""Scatter/indexing benchmark (not a test; prints figures): autodiag's accumulating index ops
against torch's on 1e6 source elements, forward and forward + backward.

    python tests/perf/bench_indexing.py [--n 1000000] [--runs 7] [--only scatter_add,...]

Each case scatters ``n`` float32 source elements into 1,000 x 100 slots (index_add: 10,000
rows of 100 into 1,000 rows). Both libraries run in this one process (torch on one thread),
alternating; the medians of ``--runs`` (process CPU time) and our time / torch's are printed,
the load average first: quote it with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import autodiag as ad


def _data(t, n, grad):
    rng = np.random.default_rng(0)
    rows = n // 100
    src = t.tensor(rng.standard_normal((rows, 100)).astype(np.float32), requires_grad=grad)
    base = t.zeros(1000, 100, requires_grad=grad)
    idx = t.tensor(rng.integers(0, 1000, rows))
    return base, src, idx


def _scatter_add(t, base, src, idx):
    return base.scatter_add(0, idx[:, None].expand(-1, 100), src)


def _index_add(t, base, src, idx):
    return base.index_add(0, idx, src)


def _index_put_acc(t, base, src, idx):
    return base.index_put((idx,), src, accumulate=True)


CASES = {"scatter_add": _scatter_add, "index_add": _index_add, "index_put_acc": _index_put_acc}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    n = int(args.n)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f}; n = {n}; CPU ms, median of {args.runs}")
    print(f"{'case':22} {'autodiag':>10} {'torch':>9} {'ratio':>7}")
    for name in args.only.split(","):
        case = CASES[name]
        for mode in ("forward", "fwd+bwd"):
            grad = mode != "forward"

            def timed(t, case=case, grad=grad):
                """CPU time of the op (and its backward), the data built beforehand."""
                base, src, idx = _data(t, n, grad)
                t0 = time.process_time()
                out = case(t, base, src, idx)
                if grad:
                    out.sum().backward()
                return time.process_time() - t0

            ours, theirs = [], []
            for _ in range(args.runs):
                ours.append(timed(ad))
                theirs.append(timed(torch))
            a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
            print(f"{name + ' ' + mode:22} {a:10.2f} {b:9.2f} {a / b:7.2f}")


if __name__ == "__main__":
    main()
