"""The memory layout of accumulated gradients, against PyTorch 2.13.

PyTorch's AccumulateGrad gives a new ``.grad`` the leaf's own strides when the leaf is dense
(``obeys_layout_contract`` / ``clone_obey_contract``), else contiguous strides; ``mm`` computes
a column-major input's gradient transposed (``mm_mat1_backward`` / ``mm_mat2_backward``) so that
``x @ w.T`` hands ``w`` a gradient laid out like ``w``. A gradient in another layout than its
parameter makes every later update (``p -= lr * p.grad``) several times slower.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _leaf(m, make):
    rng = np.random.RandomState(0)
    return make(m, lambda *shape: m.tensor(rng.standard_normal(shape))).detach().requires_grad_()


# (name, leaf maker, loss of the leaf)
CASES = [
    (
        "linear_weight",
        lambda m, r: r(5, 7),
        lambda m, w: (m.ones(3, 7, dtype=m.float64) @ w.T).sin().sum(),
    ),
    (
        "linear_input_and_weight",
        lambda m, r: r(5, 7),
        lambda m, w: (((m.ones(3, 5, dtype=m.float64) @ w).relu() + 1) @ w.T).sin().sum(),
    ),
    (
        "mm_t_self",
        lambda m, r: r(7, 3),
        lambda m, w: (w.T @ m.ones(7, 4, dtype=m.float64)).sin().sum(),
    ),
    ("transposed_leaf", lambda m, r: r(6, 4).T, lambda m, w: (w * w).sum()),
    ("transposed_leaf_contiguous", lambda m, r: r(6, 4).T, lambda m, w: w.contiguous().sum()),
    ("permuted_leaf", lambda m, r: r(2, 3, 4).permute(2, 0, 1), lambda m, w: w.sin().sum()),
    ("strided_leaf", lambda m, r: r(4, 6)[:, ::2], lambda m, w: (w.sin() * 2).sum()),
    ("expanded_grad", lambda m, r: r(4, 6), lambda m, w: w.sum()),
    (
        "transposed_grad",
        lambda m, r: r(4, 6),
        lambda m, w: (w.T * m.ones(6, 4, dtype=m.float64)).sum(),
    ),
]


@pytest.mark.parametrize("name,make,loss", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("twice", [False, True], ids=["new", "accumulated"])
def test_grad_strides_match_torch(name, make, loss, twice):
    got = []
    for m in (ad, torch):
        w = _leaf(m, make)
        loss(m, w).backward()
        if twice:
            loss(m, w).backward()
        got.append((tuple(w.stride()), tuple(w.grad.stride()), w.grad.is_contiguous()))
        if m is ad:
            ref = w.grad.detach().numpy().copy()
        else:
            np.testing.assert_allclose(ref, w.grad.detach().numpy(), rtol=1e-12)
    assert got[0] == got[1]


def test_mm_column_major_gradients_match_torch():
    """The transposed formula gives the same numbers as the plain one, for both inputs."""
    out = []
    for m in (ad, torch):
        rng = np.random.RandomState(1)
        a = m.tensor(rng.standard_normal((7, 5)), requires_grad=True)
        b = m.tensor(rng.standard_normal((3, 7)), requires_grad=True)
        (a.T @ b.T).pow(2).sum().backward()
        out.append((a.grad.numpy().copy(), b.grad.numpy().copy(), a.grad.stride(), b.grad.stride()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12)
    assert out[0][2:] == out[1][2:]


def test_grad_of_inputs_keeps_layout_of_create_graph_path():
    """Double backward through the column-major mm takes the differentiable formula."""
    res = []
    for m in (ad, torch):
        rng = np.random.RandomState(2)
        w = m.tensor(rng.standard_normal((4, 6)), requires_grad=True)
        x = m.tensor(rng.standard_normal((3, 6)), requires_grad=True)
        (gw,) = m.autograd.grad((x @ w.T).sin().sum(), w, create_graph=True)
        gw.pow(2).sum().backward()
        res.append((gw.detach().numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10)
