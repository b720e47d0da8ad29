"""The sign of a zero where an efficient zero gradient meets an ordinary one (fuzz class
"abs.method+relu | grad2 value: 0 vs -0"; NOTE [Efficient zero gradients] in core/zeros.py)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) | np.isnan(a) & np.isnan(b)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_efficient_zero_arriving_first_keeps_a_negative_zero(dtype):
    # abs+relu, abs+reciprocal, abs+sigmoid_, mul+norm, ...: SgnBackward0's efficient zero
    # reaches x's buffer before the ordinary gradient -0.; PyTorch's InputBuffer then adds out
    # of place, zero + (-0.) = -0.
    outs = []
    for m in (torch, autodiag):
        x = m.tensor([-0.72, 0.5], dtype=getattr(m, dtype), requires_grad=True)
        (g,) = m.autograd.grad(m.relu(x.abs()).sum(), x, create_graph=True)
        (gg,) = m.autograd.grad(g.sum(), x)
        outs.append(np.asarray(gg.detach().numpy()))
    assert np.signbit(outs[0]).tolist() == [True, False]
    assert _same(outs[1], outs[0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape,dim", [((4,), 0), ((2, 3), 1), ((3, 2), 0), ((2, 1, 3), -1)])
def test_cumsum_never_gives_a_negative_zero(dtype, shape, dim):
    # fuzz class "cumsum | forward value: 0 vs -0": PyTorch's running sum starts at 0.
    rng = np.random.default_rng(0)
    a = np.where(rng.random(shape) < 0.6, -0.0, rng.choice([1.0, -1.0], shape))
    outs = []
    for m in (torch, autodiag):
        x = m.tensor(a, dtype=getattr(m, dtype), requires_grad=True)
        y = x.cumsum(dim)
        (g,) = m.autograd.grad(y, x, m.full_like(y, -0.0))
        outs.append((y.detach().numpy(), g.numpy()))
    (ty, tg), (ay, ag) = outs
    assert _same(ay, ty) and _same(ag, tg)


def test_cumsum_of_a_0d_tensor_keeps_its_sign():
    for m in (torch, autodiag):
        assert np.signbit(m.tensor(-0.0).cumsum(0).numpy())
