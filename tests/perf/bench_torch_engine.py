"""``--engine torch`` overhead: ``graph``, ``inplace``, ``anomaly``, ``leaks``, ``check`` and
``trace`` observers on real PyTorch, as ratios to the same workload on plain PyTorch in the same
process (issue 21).

    python tests/perf/bench_torch_engine.py [--runs 7] [--steps 20] [--chain 10000]

Workloads: a chain of ``--chain`` tiny ops (``y = y * 1.0001`` on a 1-element tensor) with its
backward, and the MLP 784-256-256-10 batch-64 training step (cross-entropy, SGD with momentum).
Each contestant runs the workload under what the command installs — ``graph``: the function
mode and ``GraphCapture`` (which copies the graph at every backward call); ``inplace``: the
function mode, the saved-tensor hooks and ``InplaceWatcher``; ``anomaly``: the function mode, a
finiteness test per float output and a hook per backward node (``TorchAnomalyFinder``);
``detect_anomaly``: PyTorch's own ``torch.autograd.detect_anomaly()``, for comparison;
``leaks``: the function mode and ``TorchLeakFinder`` — and the median CPU time over
``--runs`` runs is compared with plain PyTorch's ("empty mode": a TorchFunctionMode that only
calls the op, the floor of any observer of this kind). One intra-op thread, so that CPU time is
the work done. Targets (issue 21): graph <= 1.3x on the MLP, inplace <= 1.5x, anomaly <= 1.5x
(below detect_anomaly), leaks <= 1.3x, check <= 1.5x (``check``: the detectors ``check
--engine torch`` runs, ``analysis.check.on_torch()``: gradient health, in-place, leaks and
anomaly; ``trace``: the backward trace, which hooks
every node of each backward call). ``observe(...)``: the library API
(``autodiag.torch.observe``) with one observer each, and ``observe()`` with its default (every
detector, as ``check``); each block's analysis at its end is not timed.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings

import torch

from autodiag.analysis import backward_trace, check
from autodiag.analysis.backward_trace import BackwardTrace
from autodiag.analysis.graph import GraphCapture
from autodiag.analysis.inplace import InplaceWatcher
from autodiag.analysis.torch_anomaly import TorchAnomalyFinder
from autodiag.analysis.torch_leaks import TorchLeakFinder
from autodiag.engines.torch.observe import observing, register
from autodiag.trace import tracing


def chain(n: int):
    def run():
        x = torch.ones(1, requires_grad=True)
        y = x
        for _ in range(n):
            y = y * 1.0001
        y.sum().backward()

    return run


def mlp(steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))

    def run():
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    return run


@contextlib.contextmanager
def _observed(*tracers):
    with tracing(*tracers), observing():
        yield


class _EmptyMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


CONTESTANTS = {
    "plain": contextlib.nullcontext,
    "empty mode": _EmptyMode,  # the floor: what any TorchFunctionMode costs
    "graph": lambda: _observed(GraphCapture()),
    "inplace": lambda: _observed(InplaceWatcher()),
    "anomaly": lambda: _observed(TorchAnomalyFinder(keep_going=True)),
    "detect_anomaly": lambda: torch.autograd.detect_anomaly(),  # PyTorch's own, for comparison
    "leaks": lambda: _observed(TorchLeakFinder()),
    # exactly the tracers ``check --engine torch`` installs (analysis/check.on_torch): health,
    # in-place, leaks and anomaly
    "check": lambda: _observed(*[d.make() for d in check.on_torch()]),
    "trace": lambda: _observed(BackwardTrace()),
    # the library API (autodiag.torch.observe), one contestant per observer and the default
    # (every detector, as check); the findings are made at the block's end, outside the timing
    "observe(anomaly)": lambda: _library(anomaly=True),
    "observe(inplace)": lambda: _library(inplace=True),
    "observe(leaks)": lambda: _library(leaks=True),
    "observe(health)": lambda: _library(health=True),
    "observe(graph)": lambda: _library(graph=True),
    "observe()": lambda: _library(),
}


def _library(**observers):
    import autodiag.torch

    return autodiag.torch.observe(**observers)


def measure(work, runs: int, names) -> dict:
    """Per contestant: (median, min, max) CPU time over ``runs`` interleaved runs."""
    times: dict = {name: [] for name in names}
    work()  # warm-up
    for _ in range(runs):
        for name in names:  # interleaved: load drifts hit all alike
            with CONTESTANTS[name]():
                t0 = time.process_time()
                work()
                times[name].append(time.process_time() - t0)
    return {name: (statistics.median(ts), min(ts), max(ts)) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--chain", type=int, default=10_000)
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated contestants to run (plain always runs), e.g. graph,check",
    )
    ap.add_argument("--work", choices=("both", "chain", "mlp"), default="both")
    ap.add_argument("--spread", action="store_true", help="also print each one's min-max ms")
    args = ap.parse_args()
    names = list(CONTESTANTS)
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in CONTESTANTS]
        if unknown:
            ap.error(f"unknown contestant {unknown[0]!r}; known: {', '.join(CONTESTANTS)}")
        names = ["plain"] + [n for n in names if n in wanted and n != "plain"]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
    register()
    backward_trace.bind_seam()  # as cli/trace.py does for --engine torch
    print(f"torch {torch.__version__}, 1 thread, median CPU time of {args.runs} runs")
    works = []
    if args.work in ("both", "chain"):
        works.append((f"chain of {args.chain} tiny ops + backward", chain(args.chain)))
    if args.work in ("both", "mlp"):
        works.append((f"MLP 784-256-256-10 b64, {args.steps} steps", mlp(args.steps)))
    for label, work in works:
        t = measure(work, args.runs, names)
        base = t["plain"][0]
        cols = []
        for k, (med, lo, hi) in t.items():
            col = f"{k} {med * 1e3:8.1f} ms ({med / base:4.2f}x)"
            if args.spread:
                col += f" [{lo * 1e3:.1f}-{hi * 1e3:.1f}]"
            cols.append(col)
        print(f"{label:<40} {'  '.join(cols)}", flush=True)


if __name__ == "__main__":
    main()
