"""Helpers of the differential tests: run a snippet under autodiag and PyTorch and compare
values, gradients, node names, exception types and message phrases.

``fn(m)`` takes the module (``autodiag`` or ``torch``) and returns what to compare."""

from __future__ import annotations

import numpy as np

import autodiag as ad


def _np(x):
    if hasattr(x, "detach"):
        # torch's efficient zero tensors (SgnBackward0's gradient) have no storage to view
        force = getattr(x, "_is_zerotensor", lambda: False)()
        return np.asarray(x.detach().numpy(force=True) if force else x.detach().numpy())
    return np.asarray(x)


def assert_same(a, b, path="result"):
    """Recursively compare an autodiag result ``a`` with a torch result ``b``."""
    if b is None or a is None:
        assert a is None and b is None, f"{path}: {a!r} vs {b!r}"
        return
    if isinstance(b, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
        return
    if isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in b:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
        return
    if isinstance(b, (bool, int, str)) and not hasattr(b, "shape"):
        assert a == b, f"{path}: {a!r} vs {b!r}"
        return
    an, bn = _np(a), _np(b)
    assert an.shape == bn.shape, f"{path}: shape {an.shape} vs {bn.shape}"
    assert an.dtype == bn.dtype, f"{path}: dtype {an.dtype} vs {bn.dtype}"
    # float32 results may differ in the last bits (summation order); float64 must agree closely
    tol = 1e-5 if an.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(an, bn, rtol=tol, atol=tol, err_msg=path)


def run_both(fn, torch):
    """fn(m) under autodiag and torch, compared; returns the autodiag result."""
    a = fn(ad)
    b = fn(torch)
    assert_same(a, b)
    return a


def catch(fn, m):
    try:
        fn(m)
    except Exception as e:  # noqa: BLE001 - we compare whatever both raise
        return e
    raise AssertionError(f"{m.__name__}: no exception")


def same_error(fn, torch, *phrases):
    """Both raise the same exception type; torch's and autodiag's messages share the phrases."""
    et = catch(fn, torch)
    ea = catch(fn, ad)
    assert type(ea) is type(et), f"autodiag raised {type(ea).__name__}: {ea}; torch {et!r}"
    for p in phrases:
        assert p in str(et), f"torch's message lacks {p!r}: {et}"
        assert p in str(ea), f"autodiag's message lacks {p!r}: {ea}"
    return ea, et


def names(fn):
    """grad_fn name and the names in next_functions (None for no edge)."""
    return fn.name(), tuple((None if n is None else n.name(), i) for n, i in fn.next_functions)
