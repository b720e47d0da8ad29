"""Anomaly-detection overhead against PyTorch in the same process (not a test; prints ratios).

    python tests/perf/bench_anomaly.py [--rounds 15]

Each workload is a script run through autodiag's target runner (as ``autodiag anomaly`` runs
it), once written for autodiag and once for torch:

* chain: 10,000 elementwise ops (mul / add / sin cycling) on shape (4,) float32, one backward
* mlp: 20 training steps of a 32-128-10 MLP on a batch of 64 (float32, log_softmax + NLL,
  plain SGD)

Ratios (median over interleaved rounds of CPU time, so other processes matter less):

* ``autodiag anomaly``: the run with ``AnomalyFinder`` (NaN and Inf, forward and backward) over
  the plain run;
* ``autodiag detect_anomaly``: the library's ``set_detect_anomaly(True)`` over the plain run;
* ``torch detect_anomaly``: PyTorch's ``set_detect_anomaly(True)`` (backward NaN only) over
  plain torch.

Targets (issue 6): ``autodiag anomaly`` at most 1.5x on chain and 1.3x on mlp.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
import warnings

CHAIN = """\
import {lib} as torch
x = torch.ones(4, requires_grad=True)
c = torch.full((4,), 1.0001)
y = x
for i in range(10000):
    k = i % 3
    if k == 0:
        y = y * c
    elif k == 1:
        y = y + c
    else:
        y = y.sin()
y.sum().backward()
"""

MLP = """\
import {lib} as torch
torch.manual_seed(0)
x = torch.randn(64, 32)
target = torch.randint(0, 10, (64,))
w1 = (torch.randn(32, 128) * 0.1).requires_grad_()
b1 = torch.zeros(128, requires_grad=True)
w2 = (torch.randn(128, 10) * 0.1).requires_grad_()
b2 = torch.zeros(10, requires_grad=True)
params = [w1, b1, w2, b2]
for step in range(20):
    h = (x @ w1 + b1).relu()
    logits = h @ w2 + b2
    logp = logits.log_softmax(dim=1)
    loss = -logp.gather(1, target.unsqueeze(1)).mean()
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.1 * p.grad
            p.grad = None
"""


def _cpu(fn) -> float:
    gc.collect()  # each run starts with nothing pending: a full collection is its own cost
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    warnings.simplefilter("ignore")

    from autodiag.analysis.anomaly import AnomalyFinder
    from autodiag.autograd.anomaly import set_anomaly_enabled
    from autodiag.target import Target, run

    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None:
        torch.set_num_threads(1)

    def torch_anomaly(path):
        with torch.autograd.set_detect_anomaly(True):
            run(Target(path=path))

    def lib_anomaly(path):
        set_anomaly_enabled(True)
        try:
            run(Target(path=path))
        finally:
            set_anomaly_enabled(False)

    print(
        f"{'workload':10s} {'plain ms':>9s} {'autodiag anomaly':>17s} "
        f"{'autodiag detect_anomaly':>24s} {'torch detect_anomaly':>21s}"
    )
    with tempfile.TemporaryDirectory() as d:
        for name, src in (("chain", CHAIN), ("mlp", MLP)):
            paths = {}
            for lib in ("autodiag", "torch"):
                paths[lib] = os.path.join(d, f"{name}_{lib}.py")
                with open(paths[lib], "w") as f:
                    f.write(src.format(lib=lib))
            ad_path, t_path = paths["autodiag"], paths["torch"]
            variants = {
                "plain": lambda p=ad_path: run(Target(path=p)),
                "anomaly": lambda p=ad_path: run(Target(path=p), [AnomalyFinder(keep_going=True)]),
                "library": lambda p=ad_path: lib_anomaly(p),
            }
            if torch is not None:
                variants["torch plain"] = lambda p=t_path: run(Target(path=p))
                variants["torch anomaly"] = lambda p=t_path: torch_anomaly(p)
            for v in variants.values():  # warm-up: imports, caches
                v()
            ratios: dict = {k: [] for k in variants}
            plain = []
            for _ in range(a.rounds):
                t = {k: _cpu(v) for k, v in variants.items()}
                plain.append(t["plain"])
                for k in variants:
                    base = t["torch plain"] if k.startswith("torch") else t["plain"]
                    ratios[k].append(t[k] / base)
            med = {k: statistics.median(r) for k, r in ratios.items()}
            torch_col = f"{med['torch anomaly']:20.2f}x" if torch is not None else f"{'-':>21s}"
            print(
                f"{name:10s} {statistics.median(plain) * 1e3:9.1f} {med['anomaly']:16.2f}x "
                f"{med['library']:23.2f}x {torch_col}"
            )


if __name__ == "__main__":
    main()
