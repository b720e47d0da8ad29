"""NOTE [Flat nodes]: pointwise, shape and reduction nodes keep their edges and saved values in
slots, so the cyclic GC tracks fewer objects per op (issue 22), and read as every node does."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import autodiag as ad
from autodiag.core.graph import FlatNode, Node


def _chain(x, c, n):
    y = x
    for i in range(n):
        k = i % 3
        y = y * c if k == 0 else (y + c if k == 1 else y.sin())
    return y


def test_a_chain_of_pointwise_ops_leaves_few_tracked_objects_per_op():
    # gc.get_count()[0] counts allocations of GC-tracked objects minus their deallocations:
    # what brings the next gen-0 collection (every 700). The node, and the saved input tensor
    # of every third op (sin's), are all that stays: no tuple of edges, no tuple of saved values.
    x = ad.ones(4, requires_grad=True)
    c = ad.full((4,), 1.0001)
    _chain(x, c, 30)  # warm-up
    n = 3000
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        y = _chain(x, c, n)
        per_op = (gc.get_count()[0] - before) / n
    finally:
        gc.enable()
    assert per_op <= 1.5, per_op
    y.sum().backward()
    assert x.grad is not None


def test_flat_nodes_hold_no_tuples():
    x = ad.ones(2, 3, requires_grad=True)
    for y in (x * 2, x * x, x + x, x.sin(), x.exp(), x.view(3, 2), x.t(), x.sum(1), -x):
        node = y.grad_fn
        assert isinstance(node, FlatNode), type(node).__name__
        # (a shape tuple of ints may stay: the GC untracks it at its first pass)
        held = [r for r in gc.get_referents(node) if type(r) is tuple]
        assert not any(isinstance(e, (Node, ad.Tensor)) for t in held for e in t), node.name()


def test_flat_nodes_read_as_every_node():
    x = ad.ones(3, requires_grad=True)
    w = ad.full((3,), 2.0, requires_grad=True)
    y = x * w
    node = y.grad_fn
    acc_x, acc_w = x.grad_fn, w.grad_fn  # leaves: None
    assert acc_x is None and acc_w is None
    (ex, nx), (ew, nw) = node.next_functions
    assert (nx, nw) == (0, 0) and ex.variable is x and ew.variable is w
    assert node.needs_grad == node._next == (ex, ew)
    assert node._saved_self is x and node._saved_other is w
    s = y.sin()
    assert s.grad_fn.next_functions == ((node, 0),)
    assert s.grad_fn._saved_self is y
    e = y.exp()  # a saved output comes back as a tensor of that node
    assert e.grad_fn._saved_result.grad_fn is e.grad_fn


def test_a_freed_flat_node_raises_pytorchs_error_and_keeps_nothing():
    x = ad.ones(3, requires_grad=True)
    y = x.sin()
    y.sum().backward()
    node = y.grad_fn
    assert node._s0 is None and node._s1 is None  # the saved input is released
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        node._saved_self  # noqa: B018


def test_setting_edges_keeps_the_arity():
    x = ad.ones(3, requires_grad=True)
    node = (x * 2).grad_fn
    other = x.sin().grad_fn
    node.next_functions = ((other, 0), (None, 0))
    assert node.next_functions == ((other, 0), (None, 0))
    with pytest.raises(TypeError, match="takes 2 edge"):
        node.next_functions = ((other, 0),)


def test_flat_node_graphs_match_torch():
    torch = pytest.importorskip("torch")

    def build(lib):
        x = lib.ones(2, 3, dtype=lib.float64, requires_grad=True)
        w = lib.full((2, 3), 0.5, dtype=lib.float64, requires_grad=True)
        y = (x * w + 1.0).sin().exp().view(3, 2).t().sum(1) - x.sum(1)
        return x, w, y

    def shape(fn):
        out, stack, seen = [], [fn], set()
        while stack:
            n = stack.pop()
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            out.append(
                (n.name(), tuple((e.name() if e else None, nr) for e, nr in n.next_functions))
            )
            stack.extend(e for e, _ in reversed(n.next_functions))
        return out

    xa, wa, ya = build(ad)
    xt, wt, yt = build(torch)
    assert shape(ya.grad_fn) == shape(yt.grad_fn)
    ya.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(wa.grad.numpy(), wt.grad.numpy(), rtol=1e-12)
