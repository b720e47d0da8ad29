"""issue 17 (fuzz10): the differential fuzzer's remaining classes, each compared with PyTorch
bit for bit: log1p of subnormals, pow's multiplied-out exponents, and the second derivatives
that read them."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _same_bits(a: np.ndarray, t: np.ndarray) -> bool:
    a, t = np.asarray(a), np.asarray(t)
    if a.dtype != t.dtype or a.shape != t.shape:
        return False
    nan = np.isnan(a) & np.isnan(t)
    return bool(np.all(nan | ((a == t) & (np.signbit(a) == np.signbit(t)))))


def _w(lib, t):  # the fuzzer's grad_outputs weights
    n = t.numel()
    return lib.tensor([0.5 + 0.5 * (i % 3) for i in range(n)], dtype=t.dtype).reshape(
        tuple(t.shape)
    )


# --- log1p of subnormals (NOTE [log1p of tiny values]) ------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log1p_of_subnormals_rounds_as_pytorch(dtype):
    rng = np.random.default_rng(17)
    tiny = np.finfo(dtype).tiny
    d = (rng.uniform(0, 3, 4000) * tiny).astype(dtype)
    d = np.concatenate([d, -d, np.array([tiny, 2 * tiny, 0.0, -0.0], dtype=dtype)])
    d = np.concatenate([d, np.array([1e-310 if dtype == "float64" else 1e-45], dtype)])
    want = torch.log1p(torch.from_numpy(d)).numpy()
    got = ad.log1p(ad.tensor(d)).numpy()
    assert _same_bits(got, want)


def test_log1p_maximum_tie_second_derivative_as_pytorch():
    """fuzz class `log1p+maximum+tril | grad2 value: different finite values`: log1p(1e-310)
    is not 1e-310 in PyTorch, so maximum(log1p(x), x) is no tie and its gradient not split."""

    def run(lib):
        x0 = lib.tensor(
            [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1e-310, 1.0]], dtype=lib.float64, requires_grad=True
        )
        t0 = lib.tril(x0, 2)
        t1 = lib.log1p(t0)
        t3 = lib.maximum(t1, x0)
        outs = [t0, t1, t3]
        (g,) = lib.autograd.grad(outs, [x0], [_w(lib, o) for o in outs], create_graph=True)
        (g2,) = lib.autograd.grad([g], [x0], [_w(lib, g)])
        return [t.detach().numpy() for t in (t1, t3, g, g2)]

    for got, want in zip(run(ad), run(torch)):
        assert _same_bits(got, want)


# --- pow with the exponents 2, 3, -2 -------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("e", [2.0, 3.0, -2.0, 2, -2, -0.5, -1.0, -3.0])
def test_pow_scalar_exponent_rounds_as_pytorch(dtype, e):
    """(0.5 is left out: PyTorch 2.13 computes x ** 0.5 with SLEEF's pow, an ulp from sqrt.)"""
    rng = np.random.default_rng(3)
    d = (rng.standard_normal(3000) * 10 ** rng.uniform(-3, 3, 3000)).astype(dtype)
    d = np.concatenate([d, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40], dtype)])
    if e == -3.0:  # C's pow in both (SLEEF's in PyTorch): compare the exact cases only
        d = np.array([2.0, -0.5, 0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    with np.errstate(all="ignore"):
        want = torch.from_numpy(d).pow(e).numpy()
        got = ad.tensor(d).pow(e).numpy()
    assert _same_bits(got, want)


def test_pow_minus_two_of_softmax_second_derivative_as_pytorch():
    """fuzz class `pow.scalar_exponent+softmax | grad2 value: different finite values`:
    0.10650697 ** -2 is 1 / (x * x) = 88.15437 in PyTorch (powf: 88.15438), and the second
    derivative, ~1e-5 beside terms of 1e2, cancels to that last bit."""

    def run(lib):
        x0 = lib.tensor(
            [[[1.0, 1.0, 2.0]], [[1.0, 1.0, 0.0]], [[1.0, 1.0, 0.0]]],
            dtype=lib.float32,
            requires_grad=True,
        )
        t0 = lib.softmax(x0, dim=-3)
        t1 = t0**-2.0
        return t1.detach().numpy()

    assert _same_bits(run(ad), run(torch))
