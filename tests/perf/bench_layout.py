"""Layout and picture benchmark (not a test; prints figures). Issue 23's target: a 2,000-node
graph lays out in at most 2 s.

    python tests/perf/bench_layout.py [--nodes 2000] [--runs 3] [--chain 100000]

For real grad_fn graphs of about ``--nodes`` nodes — a deep residual MLP (skip connections:
long edges), an RNN (one weight shared by every step: the longest edges there are) and a random
DAG — it prints, median of ``--runs``: the layout (``report/layout.py``), the SVG text, and the
whole HTML page (model + layout + SVG + page), with the crossings and long edges drawn direct.

Then repeated blocks (``report/repeats.py``), on a chain of ``--chain`` ops, a 50-layer MLP,
``samples/tiny_gpt.py`` and ``samples/lstm.py``: the runs found, the time to find them, to lay
out the folded graph, and the whole page (folded first when the graph is beyond the page's
2,000 nodes, every node in its data), with its size.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import autodiag as ad
from autodiag.analysis.graph import GraphSnapshot
from autodiag.report import html, picture, repeats
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
    ap.add_argument("--chain", type=int, default=100_000)
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
    print()
    print(
        f"{'repeats':<14}{'nodes':>8}  {'runs (count x size)':<22}{'find':>8}"
        f"{'layout':>9}{'page':>9}"
    )
    for name, snap in folded_graphs(a.chain):
        view = View(max_nodes=2000)
        model, _, folds, _ = html.folded_first(snap, view)
        t_find, folds = median_time(lambda: repeats.find_repeats(model), a.runs)
        folded = repeats.fold_graph(model, folds) if folds else model
        t_lay, _ = median_time(lambda: picture.lay_out(folded, "TB"), a.runs)

        def whole():
            m, draw, fs, note = html.folded_first(snap, view)
            g, svg = html.graph_section(m, "TB", "g0", None, draw, fs, bool(note))
            return html.page(dict(g), [g], [svg], "bench", note)

        t_page, text = median_time(whole, 1)
        runs = ", ".join(f"{f.count}x{f.size}" for f in folds) or "-"
        print(
            f"{name:<14}{len(snap):>8}  {runs:<22}{t_find:>7.3f}s{t_lay:>8.3f}s{t_page:>8.2f}s"
            f"   page {len(text.encode()) / 1e6:.2f} MB"
        )


def folded_graphs(chain: int):
    """(name, GraphSnapshot) of graphs made of repeated blocks."""
    import contextlib
    import io
    import os
    import runpy

    import autodiag.nn as nn
    from autodiag.analysis.graph import GraphCapture
    from autodiag.trace import tracing

    x = ad.ones(3, requires_grad=True)
    h = x
    for _ in range(chain):
        h = h * 1.0001
    yield f"chain {chain // 1000}k", GraphSnapshot.capture([h.sum().grad_fn], 1, "backward")
    ad.manual_seed(0)
    mods = []
    for _ in range(50):
        mods += [nn.Linear(16, 16), nn.ReLU()]
    loss = nn.Sequential(*mods, nn.Linear(16, 1))(ad.randn(8, 16)).pow(2).mean()
    yield "MLP 50 layers", GraphSnapshot.capture([loss.grad_fn], 1, "backward")
    samples = os.path.join(os.path.dirname(__file__), "..", "..", "samples")
    for sample in ("tiny_gpt", "lstm"):
        cap = GraphCapture()
        with tracing(cap), contextlib.redirect_stdout(io.StringIO()):  # its loss lines
            runpy.run_path(os.path.join(samples, f"{sample}.py"), run_name="__main__")
        yield f"{sample}.py", cap.snapshots[-1]


if __name__ == "__main__":
    main()
