"""Overhead of the leak detector over a plain run, in the same process (not a test; prints
ratios).

    python tests/perf/bench_leaks.py [--rounds 15]

Workloads, each run through autodiag's target runner as ``autodiag leaks`` runs it:

* train: ``samples/train.py`` (150 Adam steps of a 2-32-32-3 MLP on 300 points);
* small-steps: 400 SGD steps of a 4-16-1 MLP on 8 points (many tiny ops per step: the
  per-node bookkeeping dominates);
* leaky: ``samples/leaky_loop.py`` (30 steps that keep every graph: includes the census of a
  growing retained graph and the holder search).

Ratios are medians over interleaved rounds of CPU time: the ``LeakFinder`` run over the plain
run; for reference, a tracer that ignores every event over the plain run (the price of tracing
itself), and the plain run over the same script on PyTorch (``import torch``).

Target (issue 7): ``autodiag leaks`` at most 1.3x a plain run of train.py-like loops.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SMALL = """\
import {lib} as torch
import {lib}.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(400):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()

    from autodiag.analysis.leaks import LeakFinder
    from autodiag.target import Target, run
    from autodiag.trace import Tracer

    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None:
        torch.set_num_threads(1)

    print(
        f"{'workload':12s} {'plain ms':>9s} {'leaks / plain':>14s} {'empty tracer / plain':>21s}"
        f" {'plain / torch':>14s}"
    )
    with tempfile.TemporaryDirectory() as d:
        workloads = {}
        for name, src in (
            ("train", open(os.path.join(ROOT, "samples", "train.py")).read()),
            ("small-steps", SMALL.format(lib="autodiag")),
            ("leaky", open(os.path.join(ROOT, "samples", "leaky_loop.py")).read()),
        ):
            path = os.path.join(d, f"{name}.py")
            with open(path, "w") as f:
                f.write(src)
            t_path = os.path.join(d, f"{name}_torch.py")
            with open(t_path, "w") as f:
                f.write(
                    src.replace("import autodiag.nn as nn", "import torch.nn as nn")
                    .replace("import autodiag as torch", "import torch")
                    .replace("{lib}", "torch")
                )
            workloads[name] = (path, t_path)
        for name, (path, t_path) in workloads.items():
            variants = {
                "plain": lambda p=path: run(Target(path=p)),
                "empty tracer": lambda p=path: run(Target(path=p), [Tracer()]),
                "leaks": lambda p=path: run(Target(path=p), [LeakFinder()]),
            }
            if torch is not None:
                variants["torch"] = lambda p=t_path: run(Target(path=p))
            for v in variants.values():  # warm-up: imports, caches
                v()
            rounds = {k: [] for k in variants}
            for _ in range(a.rounds):
                for k, v in variants.items():
                    rounds[k].append(_cpu(v))
            ratio = statistics.median(x / y for x, y in zip(rounds["leaks"], rounds["plain"]))
            empty = statistics.median(
                x / y for x, y in zip(rounds["empty tracer"], rounds["plain"])
            )
            vs_torch = f"{'-':>14s}"
            if torch is not None:
                r = statistics.median(x / y for x, y in zip(rounds["plain"], rounds["torch"]))
                vs_torch = f"{r:13.2f}x"
            print(
                f"{name:12s} {statistics.median(rounds['plain']) * 1e3:9.1f} "
                f"{ratio:13.2f}x {empty:20.2f}x {vs_torch}"
            )


if __name__ == "__main__":
    main()
