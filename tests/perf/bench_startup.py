"""Start-up benchmark: ``import autodiag`` with its engine loaded against ``import numpy``,
``autodiag --help`` against the same (not a test; prints ratios).

    python tests/perf/bench_startup.py [--rounds 21] [--clock cpu|wall] [--no-bytecode-cache]

Each round runs every command once as a fresh ``python`` process (same interpreter, same
environment), in turn, so that a busy stretch of the machine falls on all of them. Reported:
the median and IQR of each command's time over the rounds, and the ratios as the median of the
per-round ratios. ``--clock cpu`` (the default) counts the child's user + system CPU time,
which a machine shared with other work disturbs far less than wall time.

Bytecode: the children may write and read ``__pycache__`` (``PYTHONDONTWRITEBYTECODE`` is
dropped from their environment; the warm-up round writes it), as an installed package has its
``.pyc`` files. With ``PYTHONDONTWRITEBYTECODE=1`` and no cache every start compiles autodiag's
sources (numpy's are precompiled): ``--no-bytecode-cache`` keeps the variable, to see that cost.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python": [sys.executable, "-c", "pass"],
    "import numpy": [sys.executable, "-c", "import numpy"],
    "import autodiag": [sys.executable, "-c", "import autodiag"],
    # the engine loads on first use (NOTE [Lazy engine] in autodiag/__init__.py): this is what
    # a program that computes anything pays
    "engine loaded": [sys.executable, "-c", "import autodiag; autodiag.tensor(1.0)"],
    "autodiag --help": [sys.executable, "-m", "autodiag", "--help"],
}
RATIOS = (("engine loaded", "import numpy"), ("autodiag --help", "engine loaded"))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd: list, clock: str, env: dict) -> float:
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return (_cpu() - c0) if clock == "cpu" else (time.perf_counter() - t0)


def _iqr(xs) -> float:
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--no-bytecode-cache", action="store_true")
    a = p.parse_args()
    env = os.environ.copy()
    if not a.no_bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    for cmd in COMMANDS.values():  # warm the page cache and the bytecode caches
        run_once(cmd, a.clock, env)
    times: dict = {name: [] for name in COMMANDS}
    for _ in range(a.rounds):
        for name, cmd in COMMANDS.items():
            times[name].append(run_once(cmd, a.clock, env))
    cache = "no bytecode cache" if "PYTHONDONTWRITEBYTECODE" in env else "bytecode cached"
    print(f"{a.rounds} rounds, {a.clock} time, {cache}; load average {os.getloadavg()[0]:.2f}")
    for name, ts in times.items():
        print(f"  {name:16s} {statistics.median(ts) * 1e3:7.0f} ms (IQR {_iqr(ts) * 1e3:.0f})")
    for x, y in RATIOS:
        rs = [a_ / b_ for a_, b_ in zip(times[x], times[y])]
        print(f"  {x} / {y}: {statistics.median(rs):.2f}x (IQR {_iqr(rs):.2f})")


if __name__ == "__main__":
    main()
