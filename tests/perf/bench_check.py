"""Overhead of every command on autodiag's engine: the MLP training step under the tracers each
command installs, over the plain run (issue 22).

    python tests/perf/bench_check.py [--runs 11] [--steps 20] [--threads 1] [--only check,...]

Workload: MLP 784-256-256-10 with ReLU, batch 64, float32, ``nn.Linear`` + cross-entropy +
``optim.SGD(lr=0.01, momentum=0.9)``; one step = zero_grad + forward + backward + step.
Contestants, in blocks of ``--steps`` consecutive steps, interleaved over ``--runs`` rounds:
``plain``; ``tracer`` (a tracer that ignores every event: the price of tracing itself);
``health`` (``GradHealth``, the detector of gradient norms and update sizes); ``check`` (every
detector of ``analysis.check``, as ``autodiag check`` installs them); ``anomaly``, ``leaks``,
``inplace``, ``graph`` (the tracer each of those commands installs, with its defaults).
Reported: the machine's load, the median CPU time per step and the median of per-round ratios
to ``plain``. Target (issue 22): every command <= 1.2x the plain run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _early_threads() -> int:
    """``--threads`` read before numpy loads: BLAS reads its thread count once, at load."""
    n = 1
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            n = int(sys.argv[i + 1])
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    return n


_THREADS = _early_threads()

import numpy as np  # noqa: E402

import autodiag as ad  # noqa: E402
from autodiag.analysis import check  # noqa: E402
from autodiag.analysis.anomaly import AnomalyFinder  # noqa: E402
from autodiag.analysis.graph import GraphCapture  # noqa: E402
from autodiag.analysis.health import GradHealth  # noqa: E402
from autodiag.analysis.inplace import InplaceWatcher  # noqa: E402
from autodiag.analysis.leaks import LeakFinder  # noqa: E402
from autodiag.trace import Tracer, tracing  # noqa: E402


def mlp(steps: int):
    ad.manual_seed(0)
    model = ad.nn.Sequential(
        ad.nn.Linear(784, 256),
        ad.nn.ReLU(),
        ad.nn.Linear(256, 256),
        ad.nn.ReLU(),
        ad.nn.Linear(256, 10),
    )
    opt = ad.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    x = ad.tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = ad.tensor(rng.integers(0, 10, 64))

    def run():
        for _ in range(steps):
            opt.zero_grad()
            ad.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    return run


CONTESTANTS = {
    "plain": lambda: [],
    "tracer": lambda: [Tracer()],
    "health": lambda: [GradHealth()],
    "check": lambda: [d.make() for d in check.DETECTORS],
    # each command's tracer as the command builds it by default (cli/<command>.py)
    "anomaly": lambda: [AnomalyFinder(keep_going=False)],
    "leaks": lambda: [LeakFinder()],
    "inplace": lambda: [InplaceWatcher()],
    "graph": lambda: [GraphCapture()],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated contestants besides plain (default: all): "
        + ", ".join(n for n in CONTESTANTS if n != "plain"),
    )
    args = ap.parse_args()
    names = list(CONTESTANTS) if args.only is None else ["plain"] + args.only.split(",")
    for name in names:
        if name not in CONTESTANTS:
            raise SystemExit(f"unknown contestant {name!r}; choose from {', '.join(CONTESTANTS)}")
    times: dict = {name: [] for name in dict.fromkeys(names)}
    for _ in range(args.runs):
        for name in times:
            make = CONTESTANTS[name]
            work = mlp(args.steps)
            work()  # warm-up (first step allocates the optimizer's buffers)
            with tracing(*make()):
                t0 = time.process_time()
                work()
                times[name].append((time.process_time() - t0) / args.steps)
    load = os.getloadavg()[0]
    print(f"{args.threads} thread(s), {args.runs} rounds of {args.steps} steps, load {load:.2f}")
    for name, ts in times.items():
        ratios = [t / p for t, p in zip(ts, times["plain"])]
        print(
            f"{name:<8} {statistics.median(ts) * 1e3:7.2f} ms/step  "
            f"{statistics.median(ratios):5.2f}x plain"
        )


if __name__ == "__main__":
    main()
