"""``autodiag.ops._libm``: libm's float64 results (the bits PyTorch's scalar sampling kernels
get from ``std::log`` and friends) on every CPU, numpy's AVX-512 loops included (NOTE
[libm-exact transcendentals])."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autodiag.ops import _libm

NAMES = ("log", "log1p", "exp", "sin", "cos", "tan")
SPECIAL = np.array([0.0, -0.0, -1.0, -2.0, np.inf, -np.inf, np.nan, 800.0, -800.0, 1e-310])


def _math(name, x):
    try:
        return getattr(math, name)(x)
    except (ValueError, OverflowError):
        return None


@pytest.mark.parametrize("path", ["as numpy is", "element by element"])
@pytest.mark.parametrize("name", NAMES)
def test_ordinary_inputs_give_libms_bits(monkeypatch, name, path):
    if path == "element by element":
        monkeypatch.setitem(_libm._numpy_agrees, name, False)
    lo, hi = _libm._RANGES[name]
    a = np.random.RandomState(3).uniform(lo, hi, (50, 41))
    got = getattr(_libm, name)(a)
    assert got.shape == a.shape and got.dtype == np.float64
    want = np.array([math.__dict__[name](v) for v in a.ravel().tolist()]).reshape(a.shape)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("name", NAMES)
def test_special_inputs_give_numpys_ieee_results(monkeypatch, name):
    with np.errstate(all="ignore"):
        want = getattr(np, name)(SPECIAL)
    monkeypatch.setitem(_libm._numpy_agrees, name, False)
    with np.errstate(all="ignore"):
        got = getattr(_libm, name)(SPECIAL)
    for x, g, w in zip(SPECIAL.tolist(), got.tolist(), want.tolist()):
        m = _math(name, x)
        expected = w if m is None or not math.isfinite(x) else m
        assert (math.isnan(g) and math.isnan(expected)) or (
            g == expected and math.copysign(1, g) == math.copysign(1, expected)
        ), (name, x, g, expected)


def test_scalars_and_0d_arrays_keep_their_shape(monkeypatch):
    monkeypatch.setitem(_libm._numpy_agrees, "log", False)
    assert _libm.log(0.5).shape == () and _libm.log(0.5) == math.log(0.5)
    assert _libm.log(np.array([])).shape == (0,)
