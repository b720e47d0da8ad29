"""autodiag's own graph layout (``autodiag/report/layout.py``): boxes never overlap, every edge
points the right way, the result is deterministic, crossings are counted exactly and reduced,
and every step is a loop (a long chain lays out at a low recursion limit)."""

from __future__ import annotations

import itertools
import random
import sys
import threading

import pytest

from autodiag.report import layout as lay
from autodiag.report.layout import layout


def random_dag(n: int, seed: int, extra: float = 0.4, window: int = 20):
    """A connected DAG whose node 0 is the root: each node hangs below an earlier one, some
    below a second one too (shared inputs, like a parameter used twice)."""
    rng = random.Random(seed)
    sizes = [(rng.randint(40, 180), rng.choice((24, 40))) for _ in range(n)]
    edges = []
    for i in range(1, n):
        edges.append((rng.randrange(max(0, i - window), i), i))
        if rng.random() < extra:
            edges.append((rng.randrange(0, i), i))
    return sizes, edges


def overlaps(a, b, gap: float = 0.0) -> bool:
    return (
        abs(a.x - b.x) * 2 < a.w + b.w + 2 * gap - 1e-6
        and abs(a.y - b.y) * 2 < a.h + b.h + 2 * gap - 1e-6
    )


def assert_no_overlap(result) -> None:
    boxes = sorted(result.boxes, key=lambda b: b.x - b.w / 2)
    # sweep along x: only boxes whose x ranges meet can overlap
    active: list = []
    for b in boxes:
        left = b.x - b.w / 2
        active = [a for a in active if a.x + a.w / 2 > left]
        for a in active:
            assert not overlaps(a, b), (a, b)
        active.append(b)


@pytest.mark.parametrize("direction", ["TB", "LR"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_overlaps_and_edges_point_the_right_way(direction, seed):
    sizes, edges = random_dag(300, seed)
    r = layout(sizes, edges, direction)
    assert len(r.boxes) == len(sizes) and len(r.edges) == len(edges)
    assert_no_overlap(r)
    for b, (w, h) in zip(r.boxes, sizes):
        assert (b.w, b.h) == (w, h)
        assert b.x - w / 2 >= 0 and b.x + w / 2 <= r.width
        assert b.y - h / 2 >= 0 and b.y + h / 2 <= r.height
    for k, (u, v) in enumerate(edges):
        e = r.edges[k]
        assert (e.k, e.u, e.v) == (k, u, v)
        bu, bv = r.boxes[u], r.boxes[v]
        assert r.ranks[u] < r.ranks[v]
        (x0, y0), (x1, y1) = e.points[0], e.points[-1]
        if direction == "TB":  # the consumer above its input; drawn from the input up
            assert bu.y < bv.y
            assert y0 == pytest.approx(bv.y - bv.h / 2, abs=0.1)
            assert y1 == pytest.approx(bu.y + bu.h / 2, abs=0.1)
            assert abs(x0 - bv.x) < 0.1 and abs(x1 - bu.x) <= bu.w / 2
            ys = [p[1] for p in e.points]
            assert ys == sorted(ys, reverse=True)  # monotone: never doubles back
        else:  # inputs on the left, consumers on the right
            assert bu.x > bv.x
            assert x0 == pytest.approx(bv.x + bv.w / 2, abs=0.1)
            assert x1 == pytest.approx(bu.x - bu.w / 2, abs=0.1)
            xs = [p[0] for p in e.points]
            assert xs == sorted(xs)


def test_ranks_are_longest_paths_from_the_sources():
    # 0 -> 1 -> 2 -> 3 and 0 -> 3: 3 sits below its deepest consumer, the long edge gets dummies
    r = layout([(50, 20)] * 4, [(0, 1), (1, 2), (2, 3), (0, 3)])
    assert r.ranks == [0, 1, 2, 3]
    long = r.edges[3]
    # its two ends and two points per rank it passes (2 and 1): it crosses each band vertically
    # (NOTE [Edges never pass through a box])
    assert len(long.points) == 6
    (_, _), (x2, y2), (x2b, _), (x1, _), (x1b, _), (_, _) = long.points
    assert x2 == x2b and x1 == x1b and y2 > long.points[-1][1]
    assert r.direct == 0


def test_deterministic():
    sizes, edges = random_dag(500, 7)
    a, b = layout(sizes, edges), layout(list(sizes), list(edges))
    assert a == b


def test_next_functions_order_is_kept_left_to_right():
    # a root with three inputs, each a leaf: no reason to reorder them
    r = layout([(60, 20)] * 4, [(0, 1), (0, 2), (0, 3)])
    xs = [r.boxes[i].x for i in (1, 2, 3)]
    assert xs == sorted(xs) and r.crossings == 0
    # the ends of the edges are spread along the consumer's side in input order
    ends = [r.edges[k].points[-1][0] for k in range(3)]
    assert ends == sorted(ends) and len(set(ends)) == 3


def test_crossings_are_counted_exactly():
    rng = random.Random(3)
    for _ in range(30):
        top, bottom = list(range(6)), list(range(6, 12))
        succ = [[] for _ in range(12)]
        for u in top:
            succ[u] = sorted(rng.sample(bottom, rng.randint(0, 3)))
        rng.shuffle(top)
        rng.shuffle(bottom)
        pos = [0] * 12
        for layer in (top, bottom):
            for k, u in enumerate(layer):
                pos[u] = k
        edges = [(u, v) for u in top for v in succ[u]]
        brute = sum(
            1
            for (a, b), (c, d) in itertools.combinations(edges, 2)
            if (pos[a] - pos[c]) * (pos[b] - pos[d]) < 0
        )
        assert lay._crossings([top, bottom], succ, pos) == brute


def test_crossing_reduction_untangles_what_breadth_first_order_tangles():
    # 1's long edge to 3 passes rank 2 right of 2; breadth-first order puts 3 left of 4 below
    # it, so that edge crosses 2 -> 4
    sizes = [(50, 20)] * 5
    edges = [(0, 1), (1, 2), (1, 3), (2, 3), (2, 4)]
    untouched = layout(sizes, edges, sweeps=0)
    assert untouched.crossings == 1
    r = layout(sizes, edges)
    assert r.crossings == 0
    assert r.boxes[4].x < r.boxes[3].x


def test_barycenter_sweeps_reduce_crossings_of_a_random_graph():
    sizes, edges = random_dag(400, 11)
    assert layout(sizes, edges).crossings < layout(sizes, edges, sweeps=0).crossings


def test_pack_keeps_order_and_gaps_closest_to_what_it_wants():
    breadth = [40.0, 40.0, 40.0]
    layer = [0, 1, 2]
    # everyone wants the same place: spread evenly around it
    xs = lay._pack(layer, [100.0, 100.0, 100.0], breadth)
    step = 40 + lay.NODE_GAP
    assert xs == pytest.approx([100 - step, 100, 100 + step])
    # far enough apart: each gets exactly what it wants
    assert lay._pack(layer, [0.0, 200.0, 400.0], breadth) == [0.0, 200.0, 400.0]


def test_long_edges_over_the_budget_are_drawn_direct():
    # an RNN's shared weight: node 50 is used by each of a chain's 50 nodes
    n = 51
    edges = [(i, i + 1) for i in range(49)] + [(i, 50) for i in range(50)]
    r = layout([(60, 20)] * n, edges, dummy_budget=100)
    assert r.ranks[50] == 50
    assert 0 < r.direct < 50
    assert_no_overlap(r)
    for e in r.edges:
        assert e.points[0][1] > e.points[-1][1]


def test_cycles_and_self_loops_do_not_hang():
    # never in a grad_fn graph, but the layout must not loop forever or fail
    r = layout([(40, 20)] * 3, [(0, 1), (1, 2), (2, 0), (1, 1)])
    assert len(r.edges) == 4
    assert_no_overlap(r)


def test_empty_and_single():
    assert layout([], []).boxes == []
    r = layout([(80, 30)], [])
    assert r.boxes[0].x == lay.MARGIN + 40 and r.ranks == [0]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="direction"):
        layout([(1, 1)], [], "BT")
    with pytest.raises(ValueError, match="outside"):
        layout([(1, 1)], [(0, 1)])


def test_a_long_chain_needs_no_recursion():
    n = 3000
    out = {}

    def run():
        out["r"] = layout([(60, 20)] * n, [(i, i + 1) for i in range(n - 1)])

    # a thread with a small stack and a recursion limit far below the chain's length
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        sys.setrecursionlimit(old)
    r = out["r"]
    assert r.ranks == list(range(n)) and r.crossings == 0


def assert_no_edge_through_a_box(result) -> int:
    """Every edge, segment by segment: the rectangle two consecutive points span (the drawn
    curve stays inside it) meets no box's interior. Returns how many segments were checked."""
    import numpy as np

    b = np.array(
        [(x.x - x.w / 2, x.x + x.w / 2, x.y - x.h / 2, x.y + x.h / 2) for x in result.boxes]
    )
    eps = 0.3  # rounding to 0.1 px; an end lies on its box's side
    checked = 0
    for e in result.edges:
        for (x0, y0), (x1, y1) in zip(e.points, e.points[1:]):
            hit = (
                (np.minimum(x0, x1) < b[:, 1] - eps)
                & (np.maximum(x0, x1) > b[:, 0] + eps)
                & (np.minimum(y0, y1) < b[:, 3] - eps)
                & (np.maximum(y0, y1) > b[:, 2] + eps)
            )
            assert not hit.any(), (e, [result.boxes[i] for i in np.flatnonzero(hit)])
            checked += 1
        # ends on their boxes' sides; the path inside the picture
        assert all(0 <= x <= result.width and 0 <= y <= result.height for x, y in e.points)
    return checked


@pytest.mark.parametrize("direction", ["TB", "LR"])
@pytest.mark.parametrize("budget", [0, 60, None])
def test_no_edge_passes_through_a_box(direction, budget):
    # a random DAG with far-reaching second inputs, and an RNN whose weight feeds every step:
    # over a small budget most long edges have no dummies, and go round the boxes in lanes
    sizes, edges = random_dag(250, 7, extra=0.5)
    r = layout(sizes, edges, direction, dummy_budget=budget)
    assert budget is None or r.direct > 20
    assert assert_no_edge_through_a_box(r) > len(edges)
    n = 60
    rnn = [(i, i + 1) for i in range(n - 1)] + [(i, n) for i in range(n)] + [(0, n + 1)]
    r = layout([(90, 40)] * n + [(120, 24), (60, 40)], rnn, direction, dummy_budget=budget)
    assert budget is None or r.direct > 0
    assert_no_edge_through_a_box(r)


def test_long_edges_of_one_input_share_a_lane_and_lanes_are_reused():
    # node 9 feeds 0..6 (one bus), node 10 feeds 0 and node 11 (below 10) feeds 8 only
    edges = [(i, i + 1) for i in range(9)] + [(i, 9) for i in range(7)]
    r = layout([(40, 20)] * 10, edges, dummy_budget=0)
    lanes = {max(x for x, _ in e.points) for e in r.edges if len(e.points) > 4}
    assert r.direct == 7 and len(lanes) == 1  # every long edge of node 9 up the same lane
    assert min(lanes) > max(b.x + b.w / 2 for b in r.boxes)
    ranks = list(range(10))
    apart, meet = [(0, 5), (6, 9)], [(0, 5), (3, 9)]  # ranks 0..5 and 6..9; 0..5 and 3..9
    assert lay._lanes(apart, [None] * 2, apart, ranks) == {5: 0, 9: 0}
    assert lay._lanes(meet, [None] * 2, meet, ranks) == {5: 0, 9: 1}
