"""``--engine torch`` overhead: ``graph``, ``inplace``, ``anomaly`` and ``leaks`` observers on real
PyTorch, as ratios to the same workload on plain PyTorch in the same process (issue 21).

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
the work done. Targets (issue 21): graph <= 1.3x on the MLP, inplace <= 1.5x, anomaly <= 1.5x (below
detect_anomaly), leaks <= 1.3x.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings

import torch

from autodiag.analysis.graph import GraphCapture
from autodiag.analysis.inplace import InplaceWatcher
from autodiag.analysis.torch_anomaly import TorchAnomalyFinder
from autodiag.analysis.torch_leaks import TorchLeakFinder
from autodiag.engines.torch.observe import observing
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
def _observed(tracer):
    with tracing(tracer), observing():
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
}


def measure(work, runs: int) -> dict:
    times: dict = {name: [] for name in CONTESTANTS}
    work()  # warm-up
    for _ in range(runs):
        for name, make in CONTESTANTS.items():  # interleaved: load drifts hit all alike
            with make():
                t0 = time.process_time()
                work()
                times[name].append(time.process_time() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--chain", type=int, default=10_000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
    print(f"torch {torch.__version__}, 1 thread, median CPU time of {args.runs} runs")
    for label, work in (
        (f"chain of {args.chain} tiny ops + backward", chain(args.chain)),
        (f"MLP 784-256-256-10 b64, {args.steps} steps", mlp(args.steps)),
    ):
        t = measure(work, args.runs)
        base = t["plain"]
        cols = "  ".join(f"{k} {t[k] * 1e3:8.1f} ms ({t[k] / base:4.2f}x)" for k in t)
        print(f"{label:<40} {cols}")


if __name__ == "__main__":
    main()
