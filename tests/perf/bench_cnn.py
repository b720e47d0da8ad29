"""CNN training-step benchmark: autodiag vs PyTorch in the same process (issue 20's target:
at most 1.5x torch).

    python tests/perf/bench_cnn.py [--runs 7] [--steps 10] [--threads N] [--profile]

Model: conv 1->32 3x3, relu, max-pool 2, conv 32->64 3x3, relu, max-pool 2, linear 1600->10;
batch 64 of 1x28x28, float32, cross-entropy, SGD(lr=0.01, momentum=0.9). One step = zero_grad +
forward + backward + optimizer step. Both engines start from the same weights and data (their
first losses are printed). Each run times ``--steps`` steps after a warm-up, runs interleaved;
the median over ``--runs`` runs is reported in ms/step.

Threads: without ``--threads`` the benchmark runs twice, in two processes: with 1 thread and
with the default (every core), because BLAS reads its thread count once, when numpy loads.
``--threads N`` sets torch's intra-op threads and OPENBLAS/OMP/MKL_NUM_THREADS for numpy.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time


def _early_threads() -> int | None:
    """``--threads`` read before numpy loads: BLAS reads its thread count once, at load."""
    n = None
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            n = int(sys.argv[i + 1])
        elif arg.startswith("--threads="):
            n = int(arg.split("=", 1)[1])
    if n is not None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(n)
    return n


_THREADS = _early_threads()

import numpy as np  # noqa: E402

import autodiag as ad  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

BATCH = 64
LR, MOMENTUM = 0.01, 0.9


def _state() -> dict:
    """The weights (PyTorch's default init bounds, drawn by numpy) and the data."""
    rng = np.random.default_rng(0)

    def uniform(shape, fan_in):
        b = 1 / np.sqrt(fan_in)
        return rng.uniform(-b, b, shape).astype(np.float32)

    return {
        "conv1.weight": uniform((32, 1, 3, 3), 9),
        "conv1.bias": uniform(32, 9),
        "conv2.weight": uniform((64, 32, 3, 3), 288),
        "conv2.bias": uniform(64, 288),
        "fc.weight": uniform((10, 1600), 1600),
        "fc.bias": uniform(10, 1600),
        "x": rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32),
        "y": rng.integers(0, 10, BATCH),
    }


def make_step(lib):
    """A step function for autodiag or torch (the same code: the API is the same)."""
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3)
            self.conv2 = nn.Conv2d(32, 64, 3)
            self.fc = nn.Linear(1600, 10)

        def forward(self, x):
            x = nn.functional.max_pool2d(nn.functional.relu(self.conv1(x)), 2)
            x = nn.functional.max_pool2d(nn.functional.relu(self.conv2(x)), 2)
            return self.fc(x.flatten(1))

    model = Net()
    st = _state()
    model.load_state_dict({k: lib.tensor(v) for k, v in st.items() if "." in k})
    opt = lib.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    X, Y = lib.tensor(st["x"]), lib.tensor(st["y"])

    def step():
        opt.zero_grad()
        loss = loss_fn(model(X), Y)
        loss.backward()
        opt.step()
        return loss

    return step


def measure(steps_by_name: dict, steps: int, runs: int, clock=time.perf_counter) -> dict:
    """Median ms/step per contestant, runs interleaved (a load change on a shared machine
    affects both alike)."""
    for step in steps_by_name.values():
        for _ in range(2):
            step()
    times: dict = {name: [] for name in steps_by_name}
    for _ in range(runs):
        for name, step in steps_by_name.items():
            t0 = clock()
            for _ in range(steps):
                step()
            times[name].append((clock() - t0) / steps * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process CPU clock (meaningful with 1 thread on a busy machine: "
        "time spent descheduled is not counted)",
    )
    a = p.parse_args()
    if a.threads is None:
        # one process per thread budget (see the module's docstring)
        for n in (1, os.cpu_count() or 1):
            args = [sys.executable, __file__, "--threads", str(n), "--runs", str(a.runs)]
            args += ["--steps", str(a.steps)] + (["--profile"] if a.profile else [])
            args += ["--cpu-time"] if a.cpu_time else []
            subprocess.run(args, check=True)
        return
    if torch is not None:
        torch.set_num_threads(a.threads)
    print(
        f"CNN conv(1->32,3x3)-relu-maxpool-conv(32->64,3x3)-relu-maxpool-linear(1600->10), "
        f"batch {BATCH}, float32, SGD momentum; {a.runs} runs x {a.steps} steps; threads "
        f"{a.threads} (torch {torch.get_num_threads() if torch is not None else '-'}, BLAS "
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}); load average {os.getloadavg()[0]:.2f}"
    )
    steps = {"autodiag": make_step(ad)}
    if torch is not None:
        steps["torch"] = make_step(torch)
    first = {k: float(s().detach()) for k, s in steps.items()}
    print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    res = measure(steps, a.steps, a.runs, time.process_time if a.cpu_time else time.perf_counter)
    print(f"clock: {'process CPU time' if a.cpu_time else 'wall time'}")
    for name, ms in res.items():
        print(f"  {name:9s} {ms:8.2f} ms/step")
    if "torch" in res:
        print(f"  ratio autodiag/torch: {res['autodiag'] / res['torch']:.2f}x")
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(20):
            steps["autodiag"]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
