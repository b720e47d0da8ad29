"""The graph is freed by reference counting alone, and nothing recurses on graph depth."""

from __future__ import annotations

import gc
import math
import sys
import weakref

import pytest

import autodiag as ad


@pytest.fixture
def no_gc():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was:
        gc.enable()


def _graph(x):
    a = x.exp()
    b = a * x + x.sin()
    c = b.reshape(-1)[1:] ** 2
    parts = c.split(1)
    d = ad.cat([parts[0] * 2, parts[1].tanh()]).softmax(0)
    return (d * d.log()).sum()


def test_dropping_the_root_frees_every_node_without_gc(no_gc):
    x = ad.randn(3, requires_grad=True)
    loss = _graph(x)
    refs = []
    stack = [loss.grad_fn]
    while stack:
        n = stack.pop()
        refs.append(weakref.ref(n))
        stack.extend(c for c, _ in n.next_functions if c is not None)
    del loss, n, stack
    alive = [r() for r in refs if r() is not None and type(r()).__name__ != "AccumulateGrad"]
    assert alive == []


def test_backward_then_drop_frees_graph_and_saved_outputs(no_gc):
    x = ad.randn(3, requires_grad=True)
    loss = _graph(x)
    root = weakref.ref(loss.grad_fn)
    loss.backward()
    del loss
    assert root() is None
    assert x.grad is not None


def test_create_graph_grads_free_without_gc(no_gc):
    x = ad.randn(3, requires_grad=True)
    y = (x.sigmoid() ** 2).sum()
    (g,) = ad.autograd.grad(y, x, create_graph=True)
    refs = [weakref.ref(y.grad_fn), weakref.ref(g.grad_fn)]
    del y, g
    assert all(r() is None for r in refs)


def test_retain_grad_and_hooks_do_not_create_cycles(no_gc):
    x = ad.randn(3, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g)
    r = weakref.ref(y.grad_fn)
    y.sum().backward()
    del y
    assert r() is None


def test_leaf_accumulator_is_shared_and_not_kept_alive(no_gc):
    x = ad.ones(2, requires_grad=True)
    a, b = x * 2, x * 3
    acc_a = a.grad_fn.next_functions[0][0]
    assert acc_a is b.grad_fn.next_functions[0][0]
    assert acc_a.variable is x
    ref = weakref.ref(acc_a)
    del a, b, acc_a
    assert ref() is None


@pytest.mark.slow
def test_million_op_chain_backward_with_default_recursion_limit():
    limit = sys.getrecursionlimit()
    x = ad.tensor(1.0, dtype=ad.float64, requires_grad=True)
    y = x
    for i in range(1_000_000):
        y = y * 1.0000001 if i % 2 else y + 0.5
    r = weakref.ref(y.grad_fn)
    y.backward()
    assert sys.getrecursionlimit() == limit
    assert abs(x.grad.item() - 1.0000001**500_000) < 1e-9
    del y
    assert r() is None


def test_deep_chain_create_graph_iterative():
    x = ad.tensor(0.5, dtype=ad.float64, requires_grad=True)
    y = x
    for _ in range(5_000):
        y = y.sin()
    (g,) = ad.autograd.grad(y, x, create_graph=True)
    (g2,) = ad.autograd.grad(g, x)
    # the chain rule by hand: y_k = sin(y_{k-1}), y'_k = cos(y_{k-1}) y'_{k-1},
    # y''_k = cos(y_{k-1}) y''_{k-1} - sin(y_{k-1}) y'_{k-1}**2
    v, d1, d2 = 0.5, 1.0, 0.0
    for _ in range(5_000):
        v, d1, d2 = math.sin(v), math.cos(v) * d1, math.cos(v) * d2 - math.sin(v) * d1**2
    assert g.item() == pytest.approx(d1, rel=1e-9)
    assert g2.item() == pytest.approx(d2, rel=1e-9) and g2.item() != 0.0


def test_gradient_stealing_never_aliases_what_someone_else_holds():
    # NOTE [Gradient stealing] in engine.py: .grad may take the engine's array, never another's
    a = ad.ones(3, requires_grad=True)
    b = ad.ones(3, requires_grad=True)
    (a + b).sum().backward()  # one gradient array reaches both leaves
    assert a.grad._data is not b.grad._data
    a.grad.add_(1)
    assert b.grad.tolist() == [1.0, 1.0, 1.0]

    x = ad.ones(2, requires_grad=True)
    g = ad.tensor([3.0, 4.0])
    x.backward(gradient=g)  # the user's tensor must not become x.grad
    assert x.grad._data is not g._data
    g.mul_(0)
    assert x.grad.tolist() == [3.0, 4.0]

    kept = []
    w = ad.ones(2, requires_grad=True)
    w.register_hook(lambda t: kept.append(t))
    (w * 2).sum().backward()
    assert kept[0]._data is not w.grad._data

    w2 = ad.ones(2, requires_grad=True)
    y = w2 * 5
    (y.sum()).backward()
    assert w2.grad.tolist() == [5.0, 5.0]


def _pymalloc_class(basicsize: int, gc_tracked: bool) -> int:
    """The pymalloc size class of an object: a tracked one carries a 16-byte GC header, and
    sizes round up to 16 bytes."""
    return (basicsize + (16 if gc_tracked else 0) + 15) // 16 * 16


def test_nodes_keep_a_size_class_of_their_own():
    """NOTE [Node layout]: a node is allocated in a size class that numpy's arrays and our
    tensors do not use (sharing ndarray's made full collections of a 1e6-op graph ~30% slower)."""
    import numpy as np

    import autodiag as ad
    from autodiag.core.graph import Node
    from autodiag.ops.pointwise import AddBackward0, MulBackward0, SinBackward0
    from autodiag.tensor import Tensor

    # the layout holds on every Python version: slots all the way down, no __dict__ (not the
    # byte count, which is CPython 3.11's)
    x = ad.ones(2, requires_grad=True)
    for fn in (
        (x * 2).grad_fn,
        (x + 1).grad_fn,
        x.sin().grad_fn,
        x.sin().grad_fn.next_functions[0][0],
    ):
        assert not hasattr(fn, "__dict__"), type(fn).__name__
        assert all("__slots__" in k.__dict__ for k in type(fn).__mro__[:-1]), type(fn).__name__
    node = _pymalloc_class(Node.__basicsize__, True)
    assert {cls.__basicsize__ for cls in (AddBackward0, MulBackward0, SinBackward0)} == {
        Node.__basicsize__
    }
    assert node != _pymalloc_class(np.ndarray.__basicsize__, False)
    assert node != _pymalloc_class(Tensor.__basicsize__, True)
