"""Graph inspector benchmark (not a test; prints figures and ratios).

    python tests/perf/bench_graph.py [--runs 5] [--chain 1000000] [--script samples/train.py]

* traversal: capture of a chain's graph and each order, µs per node (in process, median)
* cli-json: ``autodiag graph CHAIN --order topo --format json`` on a script building the chain
  (a subprocess at the default recursion limit; wall time)
* text: ``autodiag graph`` text output of a 100,000-node graph (truncated by default; wall time)
* overhead: ``autodiag graph SCRIPT`` versus ``python SCRIPT`` (wall time ratio, median of runs)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

import autodiag as ad
from autodiag.analysis.graph import GraphSnapshot
from autodiag.report.graph import View, tree_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHAIN = """\
import autodiag as torch
x = torch.tensor(1.0, requires_grad=True)
y = x
for i in range({n}):
    y = y * 1.0001 if i % 2 else y.sin()
y.backward()
"""


def _median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def traversal(n: int, runs: int) -> None:
    x = ad.tensor(1.0, requires_grad=True)
    y = x
    for i in range(n):
        y = y * 1.0001 if i % 2 else y.sin()
    snaps = []
    t_cap = _median_time(lambda: snaps.append(GraphSnapshot.capture([y.grad_fn], 1, "b")), runs)
    s = snaps[-1]
    print(f"traversal, {n:,}-node chain (median of {runs}):")
    print(f"  capture (walk + copy)   {t_cap / n * 1e6:6.2f} µs/node")
    for name in ("bfs", "dfs", "topo"):
        t = _median_time(lambda name=name: s.order(name), runs)
        print(f"  order {name:<5}             {t / n * 1e6:6.2f} µs/node")
    t = _median_time(lambda: sum(1 for _ in s.tree_lines()), runs)
    print(f"  tree walk               {t / n * 1e6:6.2f} µs/node")
    t = _median_time(lambda: tree_text(s, View(max_nodes=500)), runs)
    print(f"  text render, 500 shown  {t * 1e3:6.1f} ms")
    gc.collect()


def _run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return dt


def cli_figures(n: int, runs: int, script: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "chain.py")
        with open(big, "w") as f:
            f.write(CHAIN.format(n=n))
        out = os.path.join(tmp, "g.json")
        ad_cmd = [sys.executable, "-m", "autodiag"]
        t = _run(ad_cmd + ["graph", big, "--order", "topo", "--format", "json", "-o", out])
        size = os.path.getsize(out) / 1e6
        plain = _run([sys.executable, big])
        print(
            f"cli-json, {n:,}-node chain: autodiag graph --order topo -f json {t:.1f} s "
            f"({size:.0f} MB of JSON); the script alone {plain:.1f} s"
        )
        mid = os.path.join(tmp, "chain100k.py")
        with open(mid, "w") as f:
            f.write(CHAIN.format(n=100_000))
        t = statistics.median(_run(ad_cmd + ["graph", mid]) for _ in range(runs))
        plain = statistics.median(_run([sys.executable, mid]) for _ in range(runs))
        print(f"text, 100,000-node chain: autodiag graph {t:.2f} s (script alone {plain:.2f} s)")
    if not os.path.exists(script):
        print(f"overhead: {script} not found, skipped")
        return
    plain = statistics.median(_run([sys.executable, script]) for _ in range(runs))
    traced = statistics.median(_run(ad_cmd + ["graph", script]) for _ in range(runs))
    print(
        f"overhead, {os.path.relpath(script, ROOT)}: python {plain:.2f} s, autodiag graph "
        f"{traced:.2f} s, ratio {traced / plain:.2f}x (median of {runs})"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--chain", type=int, default=1_000_000)
    p.add_argument("--script", default=os.path.join(ROOT, "samples", "train.py"))
    p.add_argument("--skip-cli", action="store_true")
    a = p.parse_args()
    traversal(min(a.chain, 1_000_000), max(1, min(a.runs, 3)))
    if not a.skip_cli:
        cli_figures(a.chain, a.runs, a.script)


if __name__ == "__main__":
    main()
