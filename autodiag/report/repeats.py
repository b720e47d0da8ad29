"""Repeated blocks of a graph, found and folded: a transformer's blocks, an RNN's time steps, the
layers of an MLP, a chain of 100,000 times the same op. The HTML page draws each run of repeats
as one box ``×N <signature>`` that expands on a click, and a graph too large to draw whole is
shown folded first.

How a repeat is found, deterministically and in near-linear time (every step a loop):

1. **Ranks**: longest path from the roots (``layout._ranks``, the picture's own ranks). A block
   that the forward pass runs N times in a row fills N consecutive windows of D ranks each.
2. **Signatures**: a node's is its op name (a leaf's: its shape and dtype) with its inputs'
   names; a rank's is the sorted list of its nodes' signatures, interned as a small integer.
   The graph becomes a sequence of integers, one a rank.
3. **Periods**: the gaps between a rank signature's consecutive occurrences propose periods D
   (the most frequent few); for each, one scan finds the maximal stretches where
   ``S[r] == S[r + D]``: a stretch of length L >= D is ``(L + D) // D`` repeats of D ranks.
4. **Choice**: the runs that fold the most nodes first, never two over the same ranks.

A shared input (an RNN's weight, used by every step) has a rank of its own below the run and
stays outside it: the folded box has one edge to it.

>>> chain = [{"id": i, "name": "MulBackward0", "next": [[i + 1, 0]] if i < 9 else [],
...           "variable": None} for i in range(10)]
>>> [(f.count, f.size) for f in find_repeats({"roots": [0], "nodes": chain}, min_nodes=0)]
[(9, 1)]

(The last ``MulBackward0`` has no input: its signature is not the others'.)
"""

from __future__ import annotations

import collections
import dataclasses

from autodiag.report.layout import _ranks

FOLD_FROM = 100  # a graph of fewer nodes is not folded: its picture reads whole
MIN_FOLDED = 8  # a run is folded when that saves at least this many boxes
PERIODS = 12  # candidate periods tried (the most frequent gaps)
# NOTE: a graph folded first carries every node in the page's data (search and the detail panel
# reach each one): about 200 bytes a node. Past this many nodes the page is cut at its limit.
FOLD_MAX_NODES = 250_000
EXPAND_NODES = 300  # an expanded run draws its first instances up to about this many nodes


@dataclasses.dataclass
class Fold:
    """A run of ``count`` repeats of ``ranks`` consecutive ranks, from rank ``start``; each
    instance's node ids in forward order (``instances[0]`` ran first: it is the farthest from
    the roots), ``size`` nodes each."""

    start: int
    ranks: int
    count: int
    instances: list

    @property
    def size(self) -> int:
        return len(self.instances[0])


def _label(node: dict) -> str:
    var = node.get("variable")
    if var is not None:
        return f"{node['name']}{var.get('shape')}{var.get('dtype')}"
    return node["name"]


def find_repeats(graph: dict, min_nodes: int = FOLD_FROM) -> list[Fold]:
    """The runs of repeated blocks of a graph JSON model, by rank; none for a graph of fewer
    than ``min_nodes`` nodes."""
    nodes = graph["nodes"]
    n = len(nodes)
    if n < max(min_nodes, 2):
        return []
    pos = {node["id"]: k for k, node in enumerate(nodes)}
    edges = []
    for k, node in enumerate(nodes):
        for e in node["next"]:
            if e is not None and e[0] in pos:
                edges.append((k, pos[e[0]]))
    rank = _ranks(n, edges)
    labels = [_label(node) for node in nodes]
    ins: list = [[] for _ in range(n)]
    for u, v in edges:
        ins[u].append(labels[v])
    intern: dict = {}
    node_sig = [
        intern.setdefault((labels[k], tuple(sorted(ins[k]))), len(intern)) for k in range(n)
    ]
    nranks = max(rank) + 1
    by_rank: list = [[] for _ in range(nranks)]
    for k in range(n):
        by_rank[rank[k]].append(k)
    rank_intern: dict = {}
    seq = [
        rank_intern.setdefault(tuple(sorted(node_sig[k] for k in ks)), len(rank_intern))
        for ks in by_rank
    ]
    # candidate periods: the gaps between a rank signature's consecutive occurrences
    last: dict = {}
    gaps: collections.Counter = collections.Counter()
    for r, s in enumerate(seq):
        if s in last:
            gaps[r - last[s]] += 1
        last[s] = r
    periods = sorted(gaps, key=lambda d: (-gaps[d], d))[:PERIODS]
    runs = []  # (nodes folded away, period, start, count)
    for d in periods:
        r = 0
        while r + d < nranks:
            if seq[r] != seq[r + d]:
                r += 1
                continue
            a = r
            while r + d < nranks and seq[r] == seq[r + d]:
                r += 1
            count = (r - a + d) // d
            if count >= 2:
                per = sum(len(by_rank[q]) for q in range(a, a + d))
                runs.append(((count - 1) * per, d, a, count))
    chosen: list = []
    taken = bytearray(nranks)
    for saved, d, a, count in sorted(runs, key=lambda t: (-t[0], t[1], t[2])):
        if saved < MIN_FOLDED:
            break
        # a run overlapping one chosen before keeps its repeats that lie outside it
        k = 0
        while k < count and any(taken[a + k * d : a + (k + 1) * d]):
            k += 1
        j = k
        while j < count and not any(taken[a + j * d : a + (j + 1) * d]):
            j += 1
        if j - k < 2 or (j - k - 1) * saved // (count - 1) < MIN_FOLDED:
            continue
        start, count = a + k * d, j - k
        taken[start : start + count * d] = b"\x01" * (count * d)
        instances = [
            [nodes[q]["id"] for r in range(start + i * d, start + (i + 1) * d) for q in by_rank[r]]
            for i in range(count - 1, -1, -1)
        ]
        chosen.append(Fold(start, d, count, instances))
    chosen.sort(key=lambda f: f.start)
    return chosen


def signature(graph_nodes: dict, fold: Fold) -> str:
    """A run's text: the op names of one instance in forward order (leaves left out), three at
    most: ``AddmmBackward0 → ReluBackward0``."""
    names: list = []
    for i in reversed(fold.instances[0]):  # from its inputs up
        node = graph_nodes[i]
        if node.get("variable") is None and node["name"] not in names:
            names.append(node["name"])
    if not names:
        names = [graph_nodes[fold.instances[0][0]]["name"]]
    text = " → ".join(names[:3])
    return text + (" → …" if len(names) > 3 else "")


def fold_graph(graph: dict, folds: list[Fold]) -> dict:
    """``graph`` with each run folded into one node ``{"id", "name": "×N <signature>",
    "repeat": {"count", "size", "ranks", "signature", "instances"}, "next"}`` (``instances``:
    each repeat's node ids, in forward order); edges into and out of a run point at its box,
    each once."""
    nodes = graph["nodes"]
    by_id = {n["id"]: n for n in nodes}
    base = max(by_id) + 1
    where: dict = {}
    boxes: dict = {}
    for k, f in enumerate(folds):
        fid = base + k
        sig = signature(by_id, f)
        boxes[fid] = {
            "id": fid,
            "name": f"×{f.count} {sig}",
            "repeat": {
                "count": f.count,
                "size": f.size,
                "ranks": f.ranks,
                "signature": sig,
                "instances": f.instances,
            },
            "next": [],
            "variable": None,
            "saved": [],
            "created_at": None,
        }
        for inst in f.instances:
            for i in inst:
                where[i] = fid
    out_nodes: list = []
    placed: set = set()
    for n in nodes:
        fid = where.get(n["id"])
        if fid is None:
            m = dict(n)
            m["next"] = _outside(n["next"], where, None)
            out_nodes.append(m)
            continue
        box = boxes[fid]
        if fid not in placed:
            placed.add(fid)
            out_nodes.append(box)
        box["next"] += _outside(n["next"], where, fid)
    for box in boxes.values():  # each outside input once
        seen: set = set()
        box["next"] = [e for e in box["next"] if not (e[0] in seen or seen.add(e[0]))]
    roots: list = []
    for r in graph["roots"]:
        if where.get(r, r) not in roots:
            roots.append(where.get(r, r))
    names = dict(zip(graph["roots"], graph.get("root_names") or ()))
    return {
        "roots": roots,
        "root_names": [names.get(r) for r in roots],
        "nodes": out_nodes,
    }


def _outside(nexts: list, where: dict, inside) -> list:
    """Edges with their folded ends pointing at their box; an edge within ``inside``'s run
    goes (and a run's edges lose their ``None`` slots: a box has no input order)."""
    out = []
    for e in nexts:
        if e is None:
            if inside is None:
                out.append(None)
            continue
        t = where.get(e[0], e[0])
        if t != inside:
            out.append([t, e[1]])
    return out


def folded_size(total: int, folds: list[Fold]) -> int:
    """How many nodes a graph of ``total`` nodes has with ``folds`` folded."""
    return total - sum(f.count * f.size for f in folds) + len(folds)


def note(total: int, folds: list[Fold]) -> str:
    """What the page says of a graph shown folded first: ``12,000 nodes: 40 repeated blocks of
    300 folded; click a block to expand``."""
    parts = []
    for f in folds:
        parts.append(f"{f.count:,} repeated blocks of {f.size:,}")
    if len(parts) > 3:
        parts = parts[:3] + [f"{len(folds) - 3} more runs"]
    return f"{total:,} nodes: {', '.join(parts)} folded; click a block to expand"


def expansion(graph_nodes: dict, fold: Fold) -> list:
    """The node ids an expanded run draws: its instances in forward order (the one that ran
    first from the inputs), as many as fit in ``EXPAND_NODES`` (at least one)."""
    keep = max(1, min(fold.count, EXPAND_NODES // max(1, fold.size)))
    return [i for inst in fold.instances[:keep] for i in inst]
