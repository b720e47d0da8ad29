"""affine_grid + grid_sample (ops/grid.py) against PyTorch in the same process (not a test;
prints ratios).

    python tests/perf/bench_grid.py [--rounds 9]

The spatial transformer tutorial's step: theta (64, 2, 3) -> affine_grid (64, 1, 28, 28) ->
grid_sample of a (64, 1, 28, 28) batch (bilinear, zeros), then backward to the input and
theta; and a wider one, (16, 16, 64, 64). Ratio: autodiag's median CPU time over PyTorch's,
rounds interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np


def _step(lib, theta, x):
    F = lib.nn.functional
    t = lib.tensor(theta, requires_grad=True)
    xi = lib.tensor(x, requires_grad=True)
    g = F.affine_grid(t, xi.shape, align_corners=False)
    F.grid_sample(xi, g, align_corners=False).sum().backward()


def main() -> None:
    import torch

    import autodiag

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.RandomState(0)
    for n, c, h, w in ((64, 1, 28, 28), (16, 16, 64, 64)):
        theta = (np.eye(2, 3)[None] + 0.1 * rng.randn(n, 2, 3)).astype(np.float32)
        x = rng.randn(n, c, h, w).astype(np.float32)
        times = {"autodiag": [], "torch": []}
        for _ in range(args.rounds):
            for name, lib in (("autodiag", autodiag), ("torch", torch)):
                t0 = time.process_time()
                _step(lib, theta, x)
                times[name].append(time.process_time() - t0)
        a, t = statistics.median(times["autodiag"]), statistics.median(times["torch"])
        print(
            f"({n}, {c}, {h}, {w}): autodiag {a * 1e3:.1f} ms, torch {t * 1e3:.1f} ms, "
            f"ratio {a / t:.1f}x"
        )


if __name__ == "__main__":
    main()
