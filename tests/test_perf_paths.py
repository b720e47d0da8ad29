"""Performance rewrites that must not change a single number or name (issue 22, issue 20)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from autodiag.ops import _erf
from autodiag.ops._core import OPS, _parameter_names


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_erf_in_blocks_is_erf_elementwise(dtype):
    # more than one block, a ragged last block, every interval of Cody's forms, NaN and ±inf
    rng = np.random.default_rng(0)
    n = 2 * _erf._BLOCK + 123
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[:6] = [0.0, np.nan, np.inf, -np.inf, 5.5, -4.5]
    got = _erf.erf_array(x.reshape(n // 1, 1))
    assert got.dtype == dtype and got.shape == (n, 1)
    want = np.array([math.erf(v) if not math.isnan(v) else v for v in x.astype(np.float64)])
    finite = ~np.isnan(want)
    assert np.isnan(got.ravel()[~finite]).all()
    # within 1 ulp of math.erf in float64, as erf_array promises; narrower dtypes round once
    ulp = 1 if dtype == np.float64 else 0
    np.testing.assert_array_max_ulp(got.ravel()[finite], want[finite].astype(dtype), ulp)
    # one block at a time gives the same array as the whole
    pieces = [_erf.erf_array(x[i : i + 1000]) for i in range(0, n, 1000)]
    np.testing.assert_array_equal(got.ravel(), np.concatenate(pieces))


def test_erf_0d_keeps_shape_and_dtype():
    got = _erf.erf_array(np.array(0.5, dtype=np.float32))
    assert got.shape == () and got.dtype == np.float32
    assert got == np.float32(math.erf(0.5))


def test_parameter_names_agree_with_inspect_for_every_op():
    for name, info in OPS.items():
        fn = inspect.unwrap(info.op)
        try:
            want = set(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            want = None
        got = _parameter_names(fn)
        assert (None if got is None else set(got)) == want, name


def test_parameter_names_of_odd_callables():
    def f(a, b=1, *rest, dim=None, **kw):
        c = a  # a local is not a parameter
        return c

    assert _parameter_names(f) == ("a", "b", "dim", "rest", "kw")
    assert "c" not in _parameter_names(f)
    assert _parameter_names(print) is None or "dim" not in _parameter_names(print)

    class Callable:
        def __call__(self, x, dim=0):
            return x

    assert set(_parameter_names(Callable())) == {"x", "dim"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_grad_in_place_is_the_formula(dtype):
    from autodiag.ops.pointwise import _gelu_grad_array

    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((2, 3000)).astype(dtype) for _ in range(2))
    e = _erf.erf_array(x / np.sqrt(2).astype(dtype))
    cdf = 0.5 * (1 + e)
    pdf = np.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
    want = g * (cdf + x * pdf)
    got = _gelu_grad_array(g, x, e)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_in_place_is_the_formula(dtype):
    from autodiag.ops.attention import _flash_backward, _safe_softmax_array

    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal((2, 3, 5, 4)).astype(dtype) for _ in range(4))
    bias = np.where(np.tril(np.ones((5, 5), dtype=bool)), 0, -np.inf).astype(dtype)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * 0.5 + bias
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_array_equal(_safe_softmax_array(s, 3), p)
    gp = np.matmul(g, np.swapaxes(v, -1, -2))
    gs = p * (gp - (gp * p).sum(axis=-1, keepdims=True))
    want = (np.matmul(gs, k) * 0.5, np.matmul(np.swapaxes(gs, -1, -2), q) * 0.5)
    got = _flash_backward(g, q, k, v, 0.5, bias)
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)
    # a dead row (every key masked) has zero weights, as before
    dead = s.copy()
    dead[0, 0, 0] = -np.inf
    out = _safe_softmax_array(dead, 3)
    assert (out[0, 0, 0] == 0).all() and np.array_equal(out[1], p[1])


def test_gelu_0d_keeps_the_formula():
    import autodiag

    x = autodiag.tensor(0.7, dtype=autodiag.float64, requires_grad=True)
    y = autodiag.nn.functional.gelu(x)
    y.backward()
    cdf = 0.5 * (1 + math.erf(0.7 / math.sqrt(2)))
    assert tuple(y.shape) == () and math.isclose(y.item(), 0.7 * cdf, rel_tol=1e-15)
    pdf = math.exp(-0.5 * 0.7 * 0.7) / math.sqrt(2 * math.pi)
    assert math.isclose(x.grad.item(), cdf + 0.7 * pdf, rel_tol=1e-15)
