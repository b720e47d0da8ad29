"""What the cyclic GC sees of a graph: tracked objects per node, by type, and collections.

    python tests/perf/gc_census.py [--steps 20] [--types 12]

Deterministic (counts, not times), for A/B of the graph's layout (issue 22). Per workload:

* chain: the 10k-op chain of bench_engine.py (mul / add / sin on a (4,) float32 tensor);
* mlp: one forward of bench_mlp.py's ``nn`` MLP step (784-256-256-10, batch 64) up to the loss;
* gpt: one forward of bench_gpt.py's tiny GPT up to the loss.

it prints, for the forward that builds the graph (the cyclic GC disabled while it runs):

* ``tracked/node``: the net number of objects that became GC-tracked (``gc.get_count()[0]``,
  which counts every allocation of a tracked object minus every deallocation: what triggers a
  gen-0 collection every 700), divided by the graph's nodes (AccumulateGrad excluded);
* ``after gc/node``: the same objects still tracked after a collection (a collection untracks
  tuples and dicts of atoms only), counted by ``gc.get_objects()``;
* the types of the tracked objects that the forward left (after the collection), per node;

then, with the cyclic GC enabled as usual, the collections per generation that ``--steps`` whole
steps (forward + backward; chain: 10k ops + backward) trigger (``gc.get_stats()``), per 10k
nodes made.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autodiag as ad  # noqa: E402
from autodiag.core.graph import AccumulateGrad, children  # noqa: E402


def count_nodes(root) -> int:
    """Nodes reachable from ``root`` (AccumulateGrad excluded), walked iteratively."""
    seen, stack = {id(root)}, [root]
    n = 0
    while stack:
        node = stack.pop()
        if not isinstance(node, AccumulateGrad):
            n += 1
        for c in children(node):
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return n


def chain_forward(n: int = 10_000):
    x = ad.ones(4, requires_grad=True)
    c = ad.full((4,), 1.0001)
    y = x
    for i in range(n):
        k = i % 3
        y = y * c if k == 0 else (y + c if k == 1 else y.sin())
    return y.sum()


def chain_step():
    chain_forward().backward()


def mlp_parts():
    from bench_mlp import _data, _weights

    nn = ad.nn
    layers = []
    for w, b in _weights():
        lin = nn.Linear(w.shape[1], w.shape[0])
        with ad.no_grad():
            lin.weight.copy_(ad.tensor(w))
            lin.bias.copy_(ad.tensor(b))
        layers += [lin, nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    opt = ad.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x, y = _data()
    X, Y = ad.tensor(x), ad.tensor(y)

    def forward():
        opt.zero_grad()
        return loss_fn(model(X), Y)

    def step():
        forward().backward()
        opt.step()

    return forward, step


def gpt_parts():
    import numpy as np
    from bench_gpt import BLOCK, VOCAB, make_model

    model = make_model(ad)
    opt = ad.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    idx = np.random.default_rng(1).integers(0, VOCAB, (16, BLOCK + 1))
    x, y = ad.tensor(idx[:, :-1]), ad.tensor(idx[:, 1:])

    def forward():
        opt.zero_grad(set_to_none=True)
        return model(x, y)

    def step():
        forward().backward()
        opt.step()

    return forward, step


def census(forward, types: int) -> None:
    forward()  # warm-up: lazy imports, caches, optimizer state
    gc.collect()
    gc.disable()
    try:
        before_ids = {id(o) for o in gc.get_objects()}
        c0 = gc.get_count()[0]
        loss = forward()
        made = gc.get_count()[0] - c0
        nodes = count_nodes(loss.grad_fn)
        gc.collect()
        new = [o for o in gc.get_objects() if id(o) not in before_ids]
        del before_ids
        kinds = collections.Counter(
            type(o).__name__ if not isinstance(o, ad.autograd.graph.Node) else "Node" for o in new
        )
        left = len(new) / nodes
        print(f"  nodes {nodes}; tracked/node {made / nodes:.3f}; after gc/node {left:.3f}")
        print(
            "  left tracked, per node: "
            + ", ".join(f"{k} {v / nodes:.3f}" for k, v in kinds.most_common(types))
        )
        del new, loss
    finally:
        gc.enable()


def collections_per_10k(step, nodes_per_step: int, steps: int) -> None:
    step()
    gc.collect()
    before = [s["collections"] for s in gc.get_stats()]
    for _ in range(steps):
        step()
    after = [s["collections"] for s in gc.get_stats()]
    per = 10_000 / (nodes_per_step * steps)
    print(
        "  collections per 10k nodes (gen0, gen1, gen2): "
        + ", ".join(f"{(a - b) * per:.1f}" for a, b in zip(after, before))
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--types", type=int, default=12)
    a = p.parse_args()
    print(f"python {sys.version.split()[0]}; gc thresholds {gc.get_threshold()}")
    workloads = [
        ("chain 10k ops", chain_forward, chain_step),
        ("mlp nn step", *mlp_parts()),
        ("gpt step", *gpt_parts()),
    ]
    for name, forward, step in workloads:
        print(name)
        census(forward, a.types)
        gc.collect()
        nodes = count_nodes(forward().grad_fn)
        collections_per_10k(step, nodes, max(1, a.steps if name != "chain 10k ops" else 3))


if __name__ == "__main__":
    main()
