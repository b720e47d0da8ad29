"""A layered (Sugiyama-style) layout of a directed acyclic graph, in pure Python.

The pictures of ``autodiag graph --format html|svg`` are drawn from it, so they need no
Graphviz. The steps are the classic ones, each a loop (no recursion: a graph of any depth is
only a longer loop):

1. **Ranks** by longest path from the sources: every edge ``(u, v)`` goes from a lower rank to a
   higher one (in a backward graph: a node above its inputs; leaves sit just below their deepest
   consumer). A cycle (never in a grad_fn graph) is broken by reversing the edges that close it.
2. **Dummy nodes** split an edge that spans several ranks, so crossing reduction and coordinates
   can route it between the boxes. Their number is bounded (``dummy_budget``): past it, the
   longest edges are drawn as one curve instead (an RNN's shared weight feeds every step).
3. **Order within ranks**: breadth-first from the sources, following each node's edges in their
   order (``next_functions`` order stays left to right), then barycenter sweeps down and up; the
   order with the fewest crossings (counted exactly, with a Fenwick tree) is kept.
4. **Coordinates**: each rank's nodes are pulled towards the mean position of their neighbours
   in the adjacent ranks, under the constraint that boxes keep their order and a gap — a
   least-squares problem that the pool-adjacent-violators algorithm solves exactly per rank.

Everything is deterministic: the same graph gives the same picture, byte for byte.

>>> lay = layout([(40, 20), (40, 20), (40, 20)], [(0, 1), (0, 2)])
>>> lay.ranks
[0, 1, 1]
>>> [e.points[0][1] > e.points[-1][1] for e in lay.edges]  # drawn from input up to consumer
[True, True]
"""

from __future__ import annotations

import dataclasses
import heapq

# Space between boxes: along a rank, and between ranks (top-down, left-right).
NODE_GAP = 18.0
RANK_GAP = {"TB": 46.0, "LR": 64.0}
MARGIN = 20.0
DUMMY_SIZE = 6.0  # the breadth a long edge takes where it passes a rank
SWEEPS = 8  # barycenter sweeps (alternately down and up)
COORD_ITERATIONS = 8  # passes of the coordinate assignment (alternately down and up)


@dataclasses.dataclass
class Box:
    """A node's box: centre ``x``, ``y`` and size ``w``, ``h`` (pixels)."""

    x: float
    y: float
    w: float
    h: float


@dataclasses.dataclass
class EdgePath:
    """Edge ``(u, v)`` of the input (``k``: its index in the ``edges`` list), drawn from ``v``
    (the input, lower in a backward graph) to ``u`` (its consumer): ``points`` starts on ``v``'s
    box and ends on ``u``'s, passing through its dummy nodes."""

    k: int
    u: int
    v: int
    points: list


@dataclasses.dataclass
class Layout:
    direction: str
    width: float
    height: float
    boxes: list  # per node: Box
    edges: list  # per input edge: EdgePath
    ranks: list  # per node: its rank (0 = a source: a root of the backward graph)
    crossings: int  # edge crossings between adjacent ranks, dummies included
    direct: int  # long edges drawn without dummy nodes (over the budget)


def layout(
    sizes: list,
    edges: list,
    direction: str = "TB",
    sweeps: int = SWEEPS,
    dummy_budget: int | None = None,
) -> Layout:
    """Lay out nodes ``0..len(sizes)-1`` with box sizes ``(w, h)`` and directed ``edges``
    ``(u, v)``: ``u`` is drawn above ``v`` (``TB``: sources at the top) or to the right of it
    (``LR``: sources at the right, so a forward computation reads left to right).

    ``dummy_budget``: at most this many dummy nodes (default ``max(4 n, 2000)``)."""
    if direction not in RANK_GAP:
        raise ValueError(f"layout direction must be 'TB' or 'LR', not {direction!r}")
    n = len(sizes)
    for u, v in edges:
        if not (0 <= u < n and 0 <= v < n):
            raise ValueError(f"edge ({u}, {v}) names a node outside 0..{n - 1}")
    # the breadth of a box along its rank, and its thickness across ranks
    if direction == "TB":
        breadth = [float(w) for w, _ in sizes]
        thick = [float(h) for _, h in sizes]
    else:
        breadth = [float(h) for _, h in sizes]
        thick = [float(w) for w, _ in sizes]
    ranks = _ranks(n, edges)
    budget = max(4 * n, 2000) if dummy_budget is None else dummy_budget
    succ, chains, direct = _split_long_edges(n, edges, ranks, budget)
    total = len(succ)  # real nodes then dummies
    rank_of = ranks + [0] * (total - n)
    for chain in chains:
        if chain is not None:
            for j, d in enumerate(chain[1:-1], 1):
                rank_of[d] = rank_of[chain[0]] + j
    breadth += [DUMMY_SIZE] * (total - n)
    pred: list = [[] for _ in range(total)]
    for u in range(total):
        for v in succ[u]:
            pred[v].append(u)
    layers = _initial_order(total, succ, pred, rank_of, direct)
    layers, crossings = _reduce_crossings(layers, succ, pred, sweeps)
    pos = _coordinates(layers, succ, pred, breadth)
    # --- ranks across: each rank as thick as its thickest box ----------------------------------
    nranks = len(layers)
    rank_thick = [0.0] * nranks
    for i in range(n):
        rank_thick[ranks[i]] = max(rank_thick[ranks[i]], thick[i])
    gap = RANK_GAP[direction]
    across = [0.0] * nranks
    at = MARGIN
    for r in range(nranks):
        across[r] = at + rank_thick[r] / 2
        at += rank_thick[r] + gap
    extent_across = at - gap + MARGIN if nranks else 2 * MARGIN
    left = min((pos[i] - breadth[i] / 2 for i in range(total)), default=0.0)
    shift = MARGIN - left
    along = [p + shift for p in pos]
    right = max((along[i] + breadth[i] / 2 for i in range(total)), default=0.0)
    lanes = _lanes(edges, chains, direct, ranks)
    # the long edges over the budget run up lanes right of every box
    extent_along = right + LANE_GAP * (max(lanes.values(), default=-1) + 1) + MARGIN
    band = [(across[r] - rank_thick[r] / 2, across[r] + rank_thick[r] / 2) for r in range(nranks)]

    if direction == "TB":

        def xy(a: float, c: float) -> tuple:
            return (round(a, 1), round(c, 1))

        width, height = extent_along, extent_across
    else:

        def xy(a: float, c: float) -> tuple:
            return (round(extent_across - c, 1), round(a, 1))

        width, height = extent_across, extent_along
    boxes = []
    for i in range(n):
        x, y = xy(along[i], across[ranks[i]])
        boxes.append(Box(x, y, float(sizes[i][0]), float(sizes[i][1])))
    geometry = _Geometry(along, breadth, thick, rank_of, band, across, right, xy)
    paths = _edge_paths(edges, chains, lanes, boxes, geometry)
    return Layout(
        direction, round(width, 1), round(height, 1), boxes, paths, ranks, crossings, len(direct)
    )


# --- 1. ranks -----------------------------------------------------------------------------------


def _ranks(n: int, edges: list) -> list:
    """Longest path from the sources (Kahn's order); the edges closing a cycle are ignored."""
    succ: list = [[] for _ in range(n)]
    indeg = [0] * n
    for u, v in edges:
        if u != v:
            succ[u].append(v)
            indeg[v] += 1
    rank = [0] * n
    done = [False] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    start = 0
    while True:
        while ready:
            u = ready.pop()
            done[u] = True
            for v in succ[u]:
                if rank[v] < rank[u] + 1:
                    rank[v] = rank[u] + 1
                indeg[v] -= 1
                if indeg[v] == 0:
                    ready.append(v)
        # a cycle: restart from its first node not placed yet, as if its in-edges were gone
        while start < n and done[start]:
            start += 1
        if start == n:
            return rank
        indeg[start] = 0
        ready.append(start)


# --- 2. long edges --------------------------------------------------------------------------------


def _split_long_edges(n: int, edges: list, ranks: list, budget: int):
    """(successors in the next rank, dummy nodes included; per edge its chain of nodes from u
    to v — None for a self-loop or an edge against the ranks —; the long edges left without
    dummies, as ``(u, v)``)."""
    succ: list = [[] for _ in range(n)]
    chains: list = [None] * len(edges)
    spans = sorted(
        (ranks[v] - ranks[u], k) for k, (u, v) in enumerate(edges) if ranks[v] > ranks[u]
    )
    used = 0
    direct: list = []
    count = n
    for span, k in spans:
        u, v = edges[k]
        if span > 1 and used + span - 1 <= budget:
            chain = [u] + list(range(count, count + span - 1)) + [v]
            count += span - 1
            used += span - 1
            succ.extend([] for _ in range(span - 1))
        elif span > 1:  # drawn as one curve: not part of any rank's crossings
            direct.append((u, v))
            chains[k] = [u, v]
            continue
        else:
            chain = [u, v]
        for a, b in zip(chain, chain[1:]):
            succ[a].append(b)
        chains[k] = chain
    return succ, chains, direct


# --- 3. order within ranks ------------------------------------------------------------------------


def _initial_order(total: int, succ: list, pred: list, rank_of: list, direct: list) -> list:
    """Each rank's nodes in breadth-first order from the sources (edges in their order; a long
    edge without dummies after the others)."""
    far: dict = {}
    for u, v in direct:
        far.setdefault(u, []).append(v)
    nranks = max(rank_of, default=-1) + 1
    layers: list = [[] for _ in range(nranks)]
    seen = [False] * total
    reached = bytearray(total)
    for _u, v in direct:
        reached[v] = 1
    for s in range(total):
        if seen[s] or pred[s] or reached[s]:
            continue
        seen[s] = True
        queue = [s]
        for u in queue:  # grows while it is walked: a queue without popping
            layers[rank_of[u]].append(u)
            for v in succ[u] + far.get(u, []):
                if not seen[v]:
                    seen[v] = True
                    queue.append(v)
    for s in range(total):  # nodes only a cycle reaches (never in a grad_fn graph)
        if not seen[s]:
            seen[s] = True
            layers[rank_of[s]].append(s)
    return layers


def _reduce_crossings(layers: list, succ: list, pred: list, sweeps: int):
    """Barycenter sweeps; the order with the fewest crossings seen is kept."""
    pos = [0] * len(succ)
    for layer in layers:
        for k, u in enumerate(layer):
            pos[u] = k
    best = [list(layer) for layer in layers]
    best_cross = _crossings(layers, succ, pos)
    for sweep in range(sweeps):
        if best_cross == 0:
            break
        down = sweep % 2 == 0
        order = range(1, len(layers)) if down else range(len(layers) - 2, -1, -1)
        near = pred if down else succ
        for r in order:
            layer = layers[r]
            keys = []
            for k, u in enumerate(layer):
                nb = near[u]
                # no neighbour on that side: the node keeps its place
                key = sum(pos[w] for w in nb) / len(nb) if nb else float(k)
                keys.append((key, k, u))
            keys.sort()
            layers[r] = layer = [u for _, _, u in keys]
            for k, u in enumerate(layer):
                pos[u] = k
        c = _crossings(layers, succ, pos)
        if c < best_cross:
            best_cross = c
            best = [list(layer) for layer in layers]
    return best, best_cross


def _crossings(layers: list, succ: list, pos: list) -> int:
    """Edge crossings between adjacent ranks: inversions of the lower ends when the edges are
    sorted by their upper ends (a Fenwick tree: O(E log V) per pair of ranks)."""
    total = 0
    for r in range(len(layers) - 1):
        ends = sorted((pos[u], pos[v]) for u in layers[r] for v in succ[u])
        size = len(layers[r + 1])
        tree = [0] * (size + 1)
        seen = 0
        for _, b in ends:
            # edges seen so far whose lower end is to the right of b: each crosses this one
            i, below = b + 1, 0
            while i > 0:
                below += tree[i]
                i -= i & -i
            total += seen - below
            seen += 1
            i = b + 1
            while i <= size:
                tree[i] += 1
                i += i & -i
    return total


# --- 4. coordinates ------------------------------------------------------------------------------


def _coordinates(layers: list, succ: list, pred: list, breadth: list) -> list:
    """Each node's centre along its rank."""
    pos = [0.0] * len(succ)
    for layer in layers:
        at = 0.0
        for u in layer:
            pos[u] = at + breadth[u] / 2
            at += breadth[u] + NODE_GAP
    for it in range(COORD_ITERATIONS):
        down = it % 2 == 0
        order = range(len(layers)) if down else range(len(layers) - 1, -1, -1)
        for r in order:
            layer = layers[r]
            want = []
            for u in layer:
                # towards the rank just placed first; both neighbours' sides on later passes
                nb = (pred[u] if down else succ[u]) if it < 2 else pred[u] + succ[u]
                want.append(sum(pos[w] for w in nb) / len(nb) if nb else pos[u])
            for u, x in zip(layer, _pack(layer, want, breadth)):
                pos[u] = x
    return pos


def _pack(layer: list, want: list, breadth: list) -> list:
    """Positions as close as possible (least squares) to ``want`` that keep the order and the
    gaps: with offsets ``o``, ``y = x - o`` must be non-decreasing, which is isotonic regression
    of ``want - o`` (pool adjacent violators)."""
    offsets = []
    at = 0.0
    for k, u in enumerate(layer):
        if k:
            at += (breadth[layer[k - 1]] + breadth[u]) / 2 + NODE_GAP
        offsets.append(at)
    blocks: list = []  # [sum of targets, count]
    for t in (w - o for w, o in zip(want, offsets)):
        s, c = t, 1
        while blocks and blocks[-1][0] / blocks[-1][1] > s / c:
            ps, pc = blocks.pop()
            s, c = s + ps, c + pc
        blocks.append([s, c])
    out = []
    for s, c in blocks:
        out.extend([s / c] * c)
    return [y + o for y, o in zip(out, offsets)]


# --- edges ---------------------------------------------------------------------------------------

# NOTE [Edges never pass through a box]: a box spans at most its rank's band (the band is as
# thick as the rank's thickest box), and nothing but edges lies between two bands. So an edge
# crosses a band only vertically, at a place kept free for it: its own end's column, or its
# dummy node's slot (DUMMY_SIZE, with NODE_GAP on either side); it changes its place along the
# ranks only in the gap between two bands. A long edge without dummies (over the budget) leaves
# its input's band into the gap above it, runs along that gap to a lane right of every box, up
# the lane, and back along the gap below its consumer's band. Consecutive points thus span a
# rectangle that lies in a gap, or is a vertical line in a free column or lane: the drawn curve
# (picture._curve: monotone between its points) stays inside it.

LANE_GAP = 8.0  # between the lanes of long edges over the budget


@dataclasses.dataclass
class _Geometry:
    along: list  # per node (dummies included): its centre along the ranks
    breadth: list
    thick: list  # per real node: its thickness across the ranks
    rank_of: list
    band: list  # per rank: its (near-the-sources, far) edge across the ranks
    across: list  # per rank: its centre across the ranks
    right: float  # along: where the lanes end (they start right of every box)
    xy: object  # (along, across) -> (x, y)


def _lanes(edges: list, chains: list, direct: list, ranks: list) -> dict:
    """Input node -> lane of its long edges over the budget: one lane per input (an RNN's shared
    weight: one lane up the picture, its edges leaving it at each step), lanes reused by inputs
    whose rank spans do not overlap (greedy interval colouring, by span start)."""
    if not direct:
        return {}
    span: dict = {}
    for u, v in direct:
        lo, _ = span.get(v, (ranks[u], ranks[v]))
        span[v] = (min(lo, ranks[u]), ranks[v])
    free: list = []  # (rank where the lane is free again, lane)
    lane: dict = {}
    count = 0
    for v, (lo, hi) in sorted(span.items(), key=lambda t: (t[1], t[0])):
        if free and free[0][0] < lo:
            _, k = heapq.heappop(free)
        else:
            k, count = count, count + 1
        lane[v] = k
        heapq.heappush(free, (hi, k))
    return lane


def _edge_paths(edges: list, chains: list, lanes: dict, boxes: list, geo: _Geometry) -> list:
    """Each edge from its input's box side to its consumer's, through its dummies or up its
    lane (NOTE [Edges never pass through a box]). A node's incoming ends are spread along its
    side in edge order (``next_functions`` order)."""
    ins: dict = {}
    for k, (u, _v) in enumerate(edges):
        ins.setdefault(u, []).append(k)
    slot = {}
    for ks in ins.values():
        for j, k in enumerate(ks):
            slot[k] = (j + 1) / (len(ks) + 1)
    along, band, rank_of, xy = geo.along, geo.band, geo.rank_of, geo.xy
    out = []
    for k, (u, v) in enumerate(edges):
        bu, bv = boxes[u], boxes[v]
        chain = chains[k]
        if chain is None:  # a self-loop or an edge closing a cycle: a plain line
            out.append(EdgePath(k, u, v, [(bv.x, bv.y), (bu.x, bu.y)]))
            continue
        ru, rv = rank_of[u], rank_of[v]
        end = along[u] - geo.breadth[u] / 2 + geo.breadth[u] * slot[k]
        # (along, across) from the input's side up to its band's edge
        pts = [(along[v], geo.across[rv] - geo.thick[v] / 2), (along[v], band[rv][0])]
        if len(chain) == 2 and rv - ru > 1:  # over the budget: along the gaps and up a lane
            lane = lanes[v]
            at = geo.right + LANE_GAP * (lane + 0.5)
            nudge = ((lane % 5) - 2) * 3.0  # buses along one gap apart
            g_v = (band[rv - 1][1] + band[rv][0]) / 2 + nudge
            g_u = (band[ru][1] + band[ru + 1][0]) / 2 + nudge
            pts += [(along[v], g_v), (at, g_v), (at, g_u), (end, g_u)]
        else:
            for d in reversed(chain[1:-1]):  # through each rank it passes, vertically
                r = rank_of[d]
                pts += [(along[d], band[r][1]), (along[d], band[r][0])]
        pts += [(end, band[ru][1]), (end, geo.across[ru] + geo.thick[u] / 2)]
        path = []
        for a, c in pts:
            p = xy(a, c)
            if not path or path[-1] != p:
                path.append(p)
        out.append(EdgePath(k, u, v, path))
    return out
