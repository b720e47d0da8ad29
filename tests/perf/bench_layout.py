"""Layout and picture benchmark (not a test; prints figures). Issue 23's target: a 2,000-node
graph lays out in at most 2 s.

    python tests/perf/bench_layout.py [--nodes 2000] [--runs 3]

For real grad_fn graphs of about ``--nodes`` nodes — a deep residual MLP (skip connections:
long edges), an RNN (one weight shared by every step: the longest edges there are) and a random
DAG — it prints, median of ``--runs``: the layout (``report/layout.py``), the SVG text, and the
whole HTML page (model + layout + SVG + page), with the crossings and long edges drawn direct.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import autodiag as ad
from autodiag.analysis.graph import GraphSnapshot
from autodiag.report import html, picture
from autodiag.report.graph import View, to_json
from autodiag.report.layout import layout


def residual_mlp(nodes: int):
    ad.manual_seed(0)
    x = ad.randn(4, 8)
    h = x
    blocks = []
    while True:
        w = ad.randn(8, 8, requires_grad=True)
        b = ad.randn(8, requires_grad=True)
        h = h + (h @ w + b).relu()  # 6 nodes a block, a skip edge each
        blocks.append((w, b))
        if 6 * len(blocks) >= nodes:
            break
    return h.sum()


def rnn(nodes: int):
    ad.manual_seed(0)
    w = ad.randn(8, 8, requires_grad=True)
    u = ad.randn(8, 8, requires_grad=True)
    h = ad.zeros(1, 8)
    xs = ad.randn(nodes // 4, 1, 8)
    for t in range(nodes // 4):
        h = (h @ w + xs[t] @ u).tanh()
    return h.sum()


def random_dag(nodes: int):
    rng = random.Random(0)
    sizes = [(rng.randint(60, 200), 40) for _ in range(nodes)]
    edges = []
    for i in range(1, nodes):
        edges.append((rng.randrange(max(0, i - 30), i), i))
        if rng.random() < 0.4:
            edges.append((rng.randrange(0, i), i))
    return sizes, edges


def median_time(fn, runs: int):
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(
        f"{'graph':<14}{'nodes':>7}{'edges':>7}{'layout':>10}{'svg':>9}{'page':>9}"
        f"{'crossings':>11}{'direct':>8}"
    )
    for name, make in (("residual MLP", residual_mlp), ("RNN", rnn)):
        root = make(a.nodes)
        snap = GraphSnapshot.capture([root.grad_fn], 1, "backward")
        view = View(max_nodes=None)
        model = to_json(snap, view)
        t_lay, (lay, lines) = median_time(lambda: picture.lay_out(model, "TB"), a.runs)
        t_svg, _ = median_time(lambda: picture.svg(model, lay, lines), a.runs)

        def whole():
            m = to_json(snap, view)
            g, svg = html.graph_section(m, "TB", "g0")
            return html.page(dict(g), [g], [svg], "bench")

        t_page, text = median_time(whole, a.runs)
        print(
            f"{name:<14}{len(model['nodes']):>7}{len(lay.edges):>7}{t_lay:>9.3f}s"
            f"{t_svg:>8.3f}s{t_page:>8.3f}s{lay.crossings:>11}{lay.direct:>8}"
            f"   page {len(text) / 1e6:.1f} MB"
        )
    sizes, edges = random_dag(a.nodes)
    t_lay, lay = median_time(lambda: layout(sizes, edges), a.runs)
    print(
        f"{'random DAG':<14}{len(sizes):>7}{len(edges):>7}{t_lay:>9.3f}s{'':>9}{'':>9}"
        f"{lay.crossings:>11}{lay.direct:>8}"
    )


if __name__ == "__main__":
    main()
