"""Random-number benchmark (not a test; prints figures): autodiag's draws against torch's.

    python tests/perf/bench_rng.py [--sizes 1000,100000,1000000] [--runs 7] [--only randn32,...]

For each sampler and size it times autodiag and torch in this one process (torch on one thread,
both seeded alike), alternating them, and prints the medians of ``--runs`` (CPU time of the
process, which the machine's load disturbs less than wall time) and our time / torch's.
The load average is printed first: quote it with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import autodiag as ad

CASES = {
    "randn32": lambda t, n: t.randn(n),
    "randn64": lambda t, n: t.randn(n, dtype=t.float64),
    "randn16": lambda t, n: t.randn(n, dtype=t.float16),
    "rand": lambda t, n: t.rand(n),
    "rand64": lambda t, n: t.rand(n, dtype=t.float64),
    "randint": lambda t, n: t.randint(0, 1000, (n,)),
    "normal_": lambda t, n: t.empty(n).normal_(1.0, 2.0),
    "uniform_": lambda t, n: t.empty(n).uniform_(-3.0, 2.0),
    "bernoulli": lambda t, n: t.bernoulli(t.full((n,), 0.3)),
    "dropout": lambda t, n: t.nn.functional.dropout(t.ones(n), 0.5, training=True),
    "randperm": lambda t, n: t.randperm(n),
    "multinomial": lambda t, n: t.multinomial(t.ones(100), n, replacement=True),
}


def cpu_time(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f}; CPU ms, median of {args.runs}")
    print(f"{'case':12} {'n':>9} {'autodiag':>10} {'torch':>9} {'ratio':>7}")
    for name in args.only.split(","):
        case = CASES[name]
        for n in sizes:
            ours, theirs = [], []
            ad.manual_seed(0)
            torch.manual_seed(0)
            case(ad, n), case(torch, n)  # warm-up
            reps = max(1, 100_000 // n)  # small sizes: several calls a sample
            for _ in range(args.runs):
                ours.append(cpu_time(lambda: [case(ad, n) for _ in range(reps)]) / reps)
                theirs.append(cpu_time(lambda: [case(torch, n) for _ in range(reps)]) / reps)
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{name:12} {n:>9} {a * 1e3:>10.3f} {b * 1e3:>9.3f} {a / max(b, 1e-9):>7.1f}")


if __name__ == "__main__":
    main()
