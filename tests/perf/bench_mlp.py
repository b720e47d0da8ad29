"""MLP training-step benchmark: autodiag vs PyTorch (same process) vs hand-written numpy.

    python tests/perf/bench_mlp.py [--runs 7] [--steps 50] [--threads N] [--profile]

Model 784-256-256-10 with ReLU, batch 64, float32, cross-entropy. Two workloads:

* ``nn.Linear`` + ``nn.CrossEntropyLoss`` + ``optim.SGD(lr=0.01, momentum=0.9)``; one step =
  zero_grad + forward + backward + optimizer step (and the same step in hand-written numpy);
* the same model with raw tensors, as the tutorials write it: ``h @ w.T + b``, ``relu``,
  ``cross_entropy``, then ``p -= lr * p.grad; p.grad.zero_()`` under ``no_grad``.

Each run times ``--steps`` consecutive steps of one contestant after a warm-up; the median and
IQR over ``--runs`` runs are reported in ms/step, with the ratios (median of per-run ratios).
``--profile`` prints the cProfile top functions of each autodiag step.

Threads: the same budget for every contestant. ``--threads N`` (default: all cores, as a user
would run it) sets torch's intra-op threads and, through OPENBLAS_NUM_THREADS / OMP / MKL set
before numpy is imported, the BLAS threads that numpy (hence autodiag) uses. Unless the variables
are already set in the environment.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time


def _early_threads() -> int:
    """``--threads`` read before numpy loads: BLAS reads its thread count once, at load."""
    n = os.cpu_count() or 1
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            n = int(sys.argv[i + 1])
        elif arg.startswith("--threads="):
            n = int(arg.split("=", 1)[1])
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    return n


_THREADS = _early_threads()

import numpy as np  # noqa: E402

import autodiag as ad  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

SIZES = (784, 256, 256, 10)
BATCH = 64
LR, MOMENTUM = 0.01, 0.9


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    return x, y


def _weights():
    rng = np.random.default_rng(1)
    ws = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        ws.append(
            (
                rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                rng.uniform(-bound, bound, fan_out).astype(np.float32),
            )
        )
    return ws


def make_lib_step(lib):
    """A step function for autodiag or torch (the same code: the API is the same)."""
    nn = lib.nn
    layers = []
    for w, b in _weights():
        lin = nn.Linear(w.shape[1], w.shape[0])
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(w))
            lin.bias.copy_(lib.tensor(b))
        layers += [lin, nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    opt = lib.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    x, y = _data()
    X, Y = lib.tensor(x), lib.tensor(y)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(X), Y)
        loss.backward()
        opt.step()
        return loss

    return step


def make_raw_step(lib):
    """The same model written with raw tensors, as the tutorials write it: ``h @ w.T + b``,
    ``relu``, ``cross_entropy`` and a manual SGD step (no momentum) under ``no_grad``."""
    F = lib.nn.functional
    params = []
    for w, b in _weights():
        params.append((lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)))
    flat = [p for wb in params for p in wb]
    x, y = _data()
    X, Y = lib.tensor(x), lib.tensor(y)
    n = len(params)

    def step():
        h = X
        for i, (w, b) in enumerate(params):
            h = h @ w.T + b
            if i < n - 1:
                h = F.relu(h)
        loss = F.cross_entropy(h, Y)
        loss.backward()
        with lib.no_grad():
            for p in flat:
                p -= LR * p.grad
                p.grad.zero_()
        return loss

    return step


def make_numpy_step():
    """The same step written by hand with numpy (the floor for a numpy-backed engine)."""
    params = [(w.copy(), b.copy()) for w, b in _weights()]
    bufs = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
    first = [True]
    x, y = _data()
    n = len(params)

    def step():
        acts = [x]
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w.T + b
            if i < n - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        m = h.max(axis=1, keepdims=True)
        z = h - m
        lse = np.log(np.exp(z).sum(axis=1, keepdims=True))
        logp = z - lse
        loss = -logp[np.arange(BATCH), y].mean()
        g = np.exp(logp)
        g[np.arange(BATCH), y] -= 1
        g /= BATCH
        grads = []
        for i in range(n - 1, -1, -1):
            w, _ = params[i]
            grads.append((g.T @ acts[i], g.sum(axis=0)))
            if i:
                g = (g @ w) * (acts[i] > 0)
        grads.reverse()
        for (w, b), (gw, gb), (bw, bb) in zip(params, grads, bufs):
            for p, gp, buf in ((w, gw, bw), (b, gb, bb)):
                if first[0]:
                    buf[...] = gp
                else:
                    buf *= MOMENTUM
                    buf += gp
                p -= LR * buf
        first[0] = False
        return loss

    return step


def measure(steps_by_name: dict, steps: int, runs: int, clock=time.perf_counter) -> dict:
    """Median ms/step per contestant (see ``measure_runs``)."""
    times = measure_runs(steps_by_name, steps, runs, clock)
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure_runs(steps_by_name: dict, steps: int, runs: int, clock=time.perf_counter) -> dict:
    """Per contestant, the ms/step of each run (a block of ``steps`` consecutive steps). Runs
    are interleaved (a, b, c, a, b, c, ...) so that a load change on a shared machine affects
    every contestant alike."""
    for step in steps_by_name.values():
        for _ in range(5):
            step()
    times: dict = {name: [] for name in steps_by_name}
    for _ in range(runs):
        for name, step in steps_by_name.items():
            t0 = clock()
            for _ in range(steps):
                step()
            times[name].append((clock() - t0) / steps * 1e3)
    return times


def _iqr(xs) -> float:
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def _report(title: str, times: dict) -> None:
    """Medians with IQR, and the autodiag/torch ratio as the median of per-round ratios."""
    print(title)
    for name, ts in times.items():
        print(f"  {name:9s} {statistics.median(ts):8.3f} ms/step (IQR {_iqr(ts):.3f})")
    for a, b in (("autodiag", "torch"), ("autodiag", "numpy"), ("numpy", "torch")):
        if a in times and b in times:
            rs = [x / y for x, y in zip(times[a], times[b])]
            print(f"  ratio {a}/{b}: {statistics.median(rs):.2f}x (IQR {_iqr(rs):.2f})")


def _value(loss) -> float:
    return float(loss.detach()) if hasattr(loss, "detach") else float(loss)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--threads", type=int, default=_THREADS)
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process CPU clock (meaningful with --threads 1 on a busy "
        "machine: time spent descheduled is not counted)",
    )
    a = p.parse_args()
    if torch is not None:
        torch.set_num_threads(a.threads)
    print(
        f"MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, float32, ReLU, cross-entropy, SGD "
        f"momentum; {a.runs} runs x {a.steps} steps"
    )
    print(
        f"cores: {os.cpu_count()}; torch threads: "
        f"{torch.get_num_threads() if torch is not None else '-'}; BLAS threads (numpy, "
        f"autodiag): OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; load "
        f"average: {os.getloadavg()[0]:.2f}"
    )
    clock = time.process_time if a.cpu_time else time.perf_counter
    print(f"clock: {'process CPU time' if a.cpu_time else 'wall time'}")
    # the losses agree (same weights, same data): a benchmark of the same computation
    workloads = {
        "nn.Linear + optim.SGD(momentum)": (make_lib_step, make_numpy_step()),
        "raw tensors (h @ w.T + b), manual SGD": (make_raw_step, None),
    }
    profiled = {}
    for title, (make, numpy_step) in workloads.items():
        steps = {"autodiag": make(ad)}
        if numpy_step is not None:
            steps["numpy"] = numpy_step
        if torch is not None:
            steps["torch"] = make(torch)
        first = {k: _value(s()) for k, s in steps.items()}
        print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
        _report(title, measure_runs(steps, a.steps, a.runs, clock))
        profiled[title] = steps["autodiag"]
    if a.profile:
        for title, step in profiled.items():
            print(f"profile: {title}")
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                step()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
