"""Differential tests of the Tensor methods and torch functions public programs used and
autodiag lacked (issue 20): inverse and hyperbolic trig, frac, logit, atan2, hypot,
addcmul/addcdiv, diag/diag_embed/diagflat/trace/ger/cross, count_nonzero, nansum/nanmean,
median/nanmedian/kthvalue, cummax/cummin, logcumsumexp and the trapezoid rule.

Each differentiable row goes through ``test_ops_torch.check_case`` (values and dtypes in
float32 and float64, node names and ``next_functions`` to the leaves, first and second
derivatives); ``test_ops_torch.test_registry_is_covered`` counts these rows too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from test_cli import cli
from test_ops_torch import Case, I, _np, check_case

import autodiag as ad


def _u(shape, lo, hi, seed=0):
    """Fixed data in [lo, hi) (the ops' domains: acosh > 1, atanh in (-1, 1) ...)."""
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _sid(shape) -> str:
    return "x".join(map(str, shape)) or "0d"


SHAPES = [(), (5,), (3, 4), (0,), (2, 0)]

UNARY = [
    # (id, fn, lo, hi, registry names)
    ("acos", lambda T, x: T.acos(x), -0.9, 0.9, ("acos",)),
    ("arccos", lambda T, x: x.arccos(), -0.9, 0.9, ("arccos",)),
    ("asin", lambda T, x: x.asin(), -0.9, 0.9, ("asin",)),
    ("arcsin", lambda T, x: T.arcsin(x), -0.9, 0.9, ("arcsin",)),
    ("atan", lambda T, x: T.atan(x), -3.0, 3.0, ("atan",)),
    ("arctan", lambda T, x: x.arctan(), -3.0, 3.0, ("arctan",)),
    ("sinh", lambda T, x: T.sinh(x), -2.0, 2.0, ("sinh",)),
    ("cosh", lambda T, x: x.cosh(), -2.0, 2.0, ("cosh",)),
    ("asinh", lambda T, x: T.asinh(x), -3.0, 3.0, ("asinh",)),
    ("arcsinh", lambda T, x: x.arcsinh(), -3.0, 3.0, ("arcsinh",)),
    ("acosh", lambda T, x: T.acosh(x), 1.2, 4.0, ("acosh",)),
    ("arccosh", lambda T, x: x.arccosh(), 1.2, 4.0, ("arccosh",)),
    ("atanh", lambda T, x: x.atanh(), -0.9, 0.9, ("atanh",)),
    ("arctanh", lambda T, x: T.arctanh(x), -0.9, 0.9, ("arctanh",)),
    ("frac", lambda T, x: T.frac(x), -3.3, 3.3, ("frac",)),
    ("logit", lambda T, x: T.logit(x), 0.05, 0.95, ("logit",)),
    ("logit_eps", lambda T, x: x.logit(eps=0.2), 0.05, 0.95, ("logit",)),
    ("logcumsumexp0", lambda T, x: x.logcumsumexp(0), -3.0, 3.0, ("logcumsumexp",)),
    ("logcumsumexp-1", lambda T, x: T.logcumsumexp(x, -1), -3.0, 3.0, ("logcumsumexp",)),
    ("nansum", lambda T, x: x.nansum(), -2.0, 2.0, ("nansum",)),
    ("nansum0", lambda T, x: T.nansum(x, 0), -2.0, 2.0, ("nansum",)),
    ("nansum_keep", lambda T, x: x.nansum(-1, keepdim=True), -2.0, 2.0, ("nansum",)),
    ("nanmean0", lambda T, x: x.nanmean(0), -2.0, 2.0, ("nanmean",)),
    ("median", lambda T, x: x.median(), -2.0, 2.0, ("median",)),
    ("nanmedian", lambda T, x: T.nanmedian(x), -2.0, 2.0, ("nanmedian",)),
    ("chain", lambda T, x: (x.sinh() * 0.3).asinh().cosh().atan(), -2.0, 2.0, ()),
]

CASES = [
    Case(f"c15-{name}-{_sid(s)}", fn, (I(data=_u(s, lo, hi)),), op=ops)
    for name, fn, lo, hi, ops in UNARY
    for s in SHAPES
    # full medians of nothing are NaN with no element to share the gradient with
    if not (s and 0 in s and name in ("median", "nanmedian"))
]

# reductions and selections along a dim: no size-0 dim reduced (PyTorch raises: ERRORS)
ALONG = [
    ("nanmean", lambda T, x: x.nanmean(), ("nanmean",)),
    ("median_dim", lambda T, x: x.median(1)[0], ("median",)),
    ("median_dim_keep", lambda T, x: T.median(x, -1, keepdim=True).values, ("median",)),
    ("nanmedian_dim", lambda T, x: x.nanmedian(0).values, ("nanmedian",)),
    ("kthvalue", lambda T, x: x.kthvalue(2)[0], ("kthvalue",)),
    ("kthvalue_dim0", lambda T, x: T.kthvalue(x, 3, 0, True).values, ("kthvalue",)),
    ("cummax", lambda T, x: x.cummax(1)[0], ("cummax",)),
    ("cummin", lambda T, x: T.cummin(x, 0).values, ("cummin",)),
    ("trace", lambda T, x: x.trace(), ("trace",)),
    ("diag_of_matrix", lambda T, x: T.diag(x), ("diag",)),
    ("diag_of_matrix_k", lambda T, x: x.diag(1), ("diag",)),
    ("diag_of_matrix_-k", lambda T, x: x.diag(-2), ("diag",)),
    ("diagflat", lambda T, x: T.diagflat(x), ("diagflat",)),
    ("diagflat_k", lambda T, x: x.diagflat(-1), ("diagflat",)),
    ("diag_embed", lambda T, x: T.diag_embed(x), ("diag_embed",)),
    ("diag_embed_dims", lambda T, x: x.diag_embed(1, 0, 2), ("diag_embed",)),
    ("trapezoid", lambda T, x: T.trapezoid(x), ("trapezoid",)),
    ("trapezoid_dx", lambda T, x: T.trapezoid(x, dx=0.5, dim=0), ("trapezoid",)),
    ("trapz", lambda T, x: T.trapz(x, dim=0), ("trapz",)),
    ("cumulative_trapezoid", lambda T, x: T.cumulative_trapezoid(x), ("cumulative_trapezoid",)),
    ("cumulative_trapezoid_dx", lambda T, x: T.cumulative_trapezoid(x, dx=2.0, dim=0), ()),
]
CASES += [
    Case(
        f"c15-{name}",
        fn,
        (I(data=np.random.default_rng(i).permutation(12).reshape(3, 4) * 0.37 - 2.0),),
        op=ops,
    )
    for i, (name, fn, ops) in enumerate(ALONG)
]
CASES += [
    Case("c15-diag_vector", lambda T, x: T.diag(x), (I((4,)),), op=("diag",)),
    Case("c15-diag_vector_k", lambda T, x: x.diag(-1), (I((4,)),), op=("diag",)),
    Case("c15-diag_vector_0d_out", lambda T, x: x.diag(), (I((1,)),), op=("diag",)),
    Case("c15-diag_embed_3d", lambda T, x: x.diag_embed(-1, 1, 0), (I((2, 3, 2)),)),
    Case("c15-diagflat_0d", lambda T, x: T.diagflat(x), (I(()),), op=("diagflat",)),
    Case("c15-trace_rect", lambda T, x: x.trace(), (I((2, 5)),), op=("trace",)),
    Case("c15-median_0d_dim", lambda T, x: x.median(0)[0], (I(()),), op=("median",)),
    Case("c15-kthvalue_0d", lambda T, x: x.kthvalue(1).values, (I(()),), op=("kthvalue",)),
    Case("c15-cummax_0d", lambda T, x: x.cummax(0).values, (I(()),), op=("cummax",)),
    Case("c15-cummax_empty", lambda T, x: x.cummax(1).values, (I((2, 0)),), op=("cummax",)),
    Case("c15-logcumsumexp_big", lambda T, x: (x * 300).logcumsumexp(1), (I((2, 5)),)),
    Case(
        "c15-trapezoid_x",
        lambda T, y, x: T.trapezoid(y, x),
        (I((3, 4)), I(data=np.array([0.0, 0.5, 1.5, 1.75]))),
        op=("trapezoid",),
    ),
    Case(
        "c15-trapz_x_nd",
        lambda T, y, x: T.trapz(y, x, dim=0),
        (I((3, 4)), I(data=np.array([[0.0], [0.5], [1.5]]))),
        op=("trapz",),
    ),
    Case(
        "c15-cumulative_trapezoid_x",
        lambda T, y, x: T.cumulative_trapezoid(y, x),
        (I((3, 4)), I(data=np.array([0.0, 0.5, 1.5, 1.75]))),
        op=("cumulative_trapezoid",),
    ),
    Case("c15-ger", lambda T, a, b: a.ger(b), (I((3,)), I((4,))), op=("ger",)),
    Case("c15-ger_fn", lambda T, a, b: T.ger(a, b), (I((3,)), I((0,))), op=("ger",)),
    Case("c15-cross", lambda T, a, b: T.cross(a, b, dim=1), (I((4, 3)), I((4, 3))), op=("cross",)),
    Case("c15-cross_bcast", lambda T, a, b: a.cross(b, dim=-1), (I((2, 1, 3)), I((1, 4, 3)))),
    Case("c15-cross_default_dim", lambda T, a, b: T.cross(a, b), (I((3, 5)), I((3, 5)))),
    Case("c15-cross_const", lambda T, a, b: T.cross(a, b, 0), (I((3,)), I((3,), grad=False))),
]

BINARY = [
    ("atan2", lambda T, a, b: T.atan2(a, b), ("atan2",)),
    ("arctan2", lambda T, a, b: a.arctan2(b), ("arctan2",)),
    ("hypot", lambda T, a, b: T.hypot(a, b), ("hypot",)),
]
PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3,)), ((0, 2), (2,))]
CASES += [
    Case(f"c15-{name}-{_sid(sa)}-{_sid(sb)}", fn, (I(sa, "away"), I(sb, "away")), op=ops)
    for name, fn, ops in BINARY
    for sa, sb in PAIRS
]
CASES += [
    Case(f"c15-{name}-const", fn, (I((3, 4), "away"), I((3, 4), "away", grad=False)), op=ops)
    for name, fn, ops in BINARY
]

TERNARY = [
    ("addcmul", lambda T, a, b, c: T.addcmul(a, b, c), ("addcmul",)),
    ("addcmul_value", lambda T, a, b, c: a.addcmul(b, c, value=-0.5), ("addcmul",)),
    ("addcdiv", lambda T, a, b, c: T.addcdiv(a, b, c), ("addcdiv",)),
    ("addcdiv_value", lambda T, a, b, c: a.addcdiv(b, c, value=2), ("addcdiv",)),
]
TRIPLES = [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), (3, 1)), ((), (2, 3), ()), ((0,), (0,), (1,))]
CASES += [
    Case(
        f"c15-{name}-{'-'.join(map(_sid, shapes))}", fn, tuple(I(s, "away") for s in shapes), op=ops
    )
    for name, fn, ops in TERNARY
    for shapes in TRIPLES
]
CASES += [
    Case(
        f"c15-{name}-const_tensor1",
        fn,
        (I((3, 4), "away"), I((3, 4), "away", grad=False), I((3, 4), "away")),
        op=ops,
    )
    for name, fn, ops in TERNARY
]

# what test_ops_torch.test_registry_is_covered counts
COVERED = {n for c in CASES for n in c.op} | {"count_nonzero"}
# the sparse tensor's ops: tests/test_cover15_sparse_torch.py
COVERED |= {"to_sparse", "sparse_coo_tensor", "spmm"}

_ids = [c.id for c in CASES]
assert len(set(_ids)) == len(_ids), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_op_matches_torch(torch, case):
    check_case(torch, case)


# ---------------------------------------------------------------------------------------------
# Values (indices, ties, NaN, integers) and gradients where the index decides them
# ---------------------------------------------------------------------------------------------

TIES = np.array([[1.0, 2.0, 2.0, 3.0, 2.0], [5.0, 5.0, 5.0, 1.0, 5.0], [2.0, 1.0, 2.0, 1.0, 1.0]])
NAN = np.array([[1.0, np.nan, 3.0, 0.5], [np.nan, np.nan, np.nan, np.nan], [4.0, 2.0, 2.0, 9.0]])


def _t(T, a, **kw):
    return T.tensor(np.array(a), **kw)


VALUES = [
    ("count_nonzero", lambda T: T.count_nonzero(_t(T, TIES) - 2)),
    ("count_nonzero_dim", lambda T: _t(T, TIES - 2).count_nonzero(dim=0)),
    ("count_nonzero_dims", lambda T: T.count_nonzero(_t(T, NAN), (0, 1))),
    ("count_nonzero_int", lambda T: T.count_nonzero(_t(T, [[0, 1], [2, 0]]), 1)),
    ("median_ties", lambda T: tuple(_t(T, TIES).median(1))),
    ("median_ties0", lambda T: tuple(_t(T, TIES).median(0))),
    ("median_nan", lambda T: tuple(_t(T, NAN).median(1))),
    ("median_full_nan", lambda T: _t(T, NAN).median()),
    ("nanmedian_nan", lambda T: tuple(_t(T, NAN).nanmedian(1))),
    ("nanmedian_full", lambda T: _t(T, NAN).nanmedian()),
    ("median_int", lambda T: tuple(_t(T, [[3, 1, 2, 2]]).median(1))),
    ("median_empty", lambda T: T.tensor([]).median()),
    ("median_empty_rows", lambda T: tuple(T.zeros(0, 3).median(1))),
    ("kthvalue_ties", lambda T: tuple(_t(T, TIES).kthvalue(3, 1))),
    ("kthvalue_ties0", lambda T: tuple(_t(T, TIES).kthvalue(2, 0))),
    ("kthvalue_nan", lambda T: tuple(_t(T, NAN).kthvalue(4, 1))),
    ("cummax_ties", lambda T: tuple(_t(T, TIES).cummax(1))),
    ("cummin_ties", lambda T: tuple(_t(T, TIES).cummin(1))),
    ("cummax_nan", lambda T: tuple(_t(T, NAN).cummax(1))),
    ("cummin_nan", lambda T: tuple(_t(T, NAN).cummin(1))),
    ("cummax_int", lambda T: tuple(_t(T, [3, 1, 4, 4, 2]).cummax(0))),
    ("nansum_nan", lambda T: _t(T, NAN).nansum(1)),
    ("nansum_int", lambda T: _t(T, [[1, 2], [3, 4]]).nansum(0)),
    ("nansum_bool", lambda T: _t(T, [True, False, True]).nansum()),
    ("nanmean_nan", lambda T: _t(T, NAN).nanmean(1)),
    ("logit_out_of_range", lambda T: _t(T, [-0.5, 0.0, 1.0, 1.5]).logit()),
    ("logit_eps_clamps", lambda T: _t(T, [-0.5, 0.0, 1.0, 1.5]).logit(0.1)),
    ("acos_int", lambda T: _t(T, [0, 1, 2]).acos()),
    ("atan2_int", lambda T: T.atan2(_t(T, [1, -2]), _t(T, [3, 4]))),
    ("atan2_mixed", lambda T: T.atan2(_t(T, [1, -2]), _t(T, [3.0, 4.0], dtype=T.float64))),
    ("frac_neg", lambda T: _t(T, [-1.5, 2.25, -0.0]).frac()),
    ("addcmul_int", lambda T: _t(T, [1, 2]).addcmul(_t(T, [1, 2]), _t(T, [3, 4]), value=2)),
    ("trace_int", lambda T: T.arange(6).view(2, 3).trace()),
    ("diag_int", lambda T: T.diag(T.arange(3))),
    ("trapezoid_int", lambda T: T.trapezoid(T.arange(5))),
    ("trapezoid_empty", lambda T: T.trapezoid(T.ones(3, 0))),
    ("cross_int", lambda T: T.cross(_t(T, [1, 0, 0]), _t(T, [0, 1, 0]), dim=0)),
]


def _same(a, t, where="value"):
    if isinstance(t, tuple):
        assert isinstance(a, tuple) and len(a) == len(t), where
        for k, (ai, ti) in enumerate(zip(a, t)):
            _same(ai, ti, f"{where}[{k}]")
        return
    assert str(a.dtype).rsplit(".")[-1] == str(t.dtype).rsplit(".")[-1], f"{where}: dtype"
    assert tuple(a.shape) == tuple(t.shape), f"{where}: shape {a.shape} vs {t.shape}"
    np.testing.assert_allclose(_np(a), _np(t), rtol=1e-6, equal_nan=True, err_msg=where)


@pytest.mark.parametrize("fn", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_value_matches_torch(torch, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(fn(ad), fn(torch))


def _grad_of(T, data, fn, dtype="float64"):
    x = T.tensor(np.array(data), dtype=getattr(T, dtype), requires_grad=True)
    out = fn(x)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(T.tensor(np.arange(1.0, out.numel() + 1).reshape(tuple(out.shape)), dtype=x.dtype))
    return x.grad


TIE_GRADS = [
    ("median_dim", lambda x: x.median(1)),
    ("median_dim0", lambda x: x.median(0)),
    ("median_full", lambda x: x.median()),
    ("nanmedian_dim", lambda x: x.nanmedian(1)),
    ("nanmedian_full", lambda x: x.nanmedian()),
    ("kthvalue", lambda x: x.kthvalue(2, 1)),
    ("kthvalue3", lambda x: x.kthvalue(3, 1)),
    ("cummax", lambda x: x.cummax(1)),
    ("cummin", lambda x: x.cummin(0)),
    ("nansum", lambda x: x.nansum(0)),
    ("nanmean", lambda x: x.nanmean(1)),
]


@pytest.mark.parametrize("data", [TIES, NAN], ids=["ties", "nan"])
@pytest.mark.parametrize("fn", [g[1] for g in TIE_GRADS], ids=[g[0] for g in TIE_GRADS])
def test_gradient_goes_where_torchs_goes(torch, fn, data):
    _same(_grad_of(ad, data, fn), _grad_of(torch, data, fn), "grad")


@pytest.mark.parametrize("seed", range(30))
def test_selection_ties_match_torch_on_random_rows(torch, seed):
    """Which of several equal values median/nanmedian/kthvalue pick (NOTE [Selection ties]):
    rows of few distinct values, of every length up to 40, some all NaN."""
    rng = np.random.default_rng(seed)
    n = seed + 1 + (seed % 3) * 4
    a = rng.integers(0, 3, (6, n)).astype(np.float64)
    a[rng.random(a.shape) < 0.15] = np.nan
    a[0] = np.nan
    for k in {1, (n + 1) // 2, n}:
        _same(tuple(ad.tensor(a).kthvalue(k, 1)), tuple(torch.tensor(a).kthvalue(k, 1)), f"k{k}")
    _same(tuple(ad.tensor(a).median(1)), tuple(torch.tensor(a).median(1)), "median")
    _same(tuple(ad.tensor(a).nanmedian(1)), tuple(torch.tensor(a).nanmedian(1)), "nanmedian")


def test_logcumsumexp_gradient_of_mixed_signs_and_large_values(torch):
    data = np.array([[-800.0, 0.0, 1.0, 700.0, 700.0], [3.0, -2.0, 50.0, -50.0, 0.0]])
    g = np.array([[1.0, -2.0, 0.0, 3.0, -1.0], [-1.0, -1.0, 2.0, 0.5, 0.0]])

    def run(T):
        x = T.tensor(data, requires_grad=True)
        x.logcumsumexp(1).backward(T.tensor(g))
        return x.grad

    _same(run(ad), run(torch))


# ---------------------------------------------------------------------------------------------
# In-place twins, errors, the debugger's view
# ---------------------------------------------------------------------------------------------

INPLACE = [
    ("acos_", lambda x: x.acos_()),
    ("sinh_", lambda x: x.sinh_()),
    ("frac_", lambda x: x.frac_()),
    ("logit_", lambda x: x.logit_(0.1)),
    ("atan2_", lambda x: x.atan2_(x * 2 + 1)),
    ("hypot_", lambda x: x.hypot_(x + 1)),
    ("addcmul_", lambda x: x.addcmul_(x * 2, x + 1, value=0.5)),
    ("addcdiv_", lambda x: x.addcdiv_(x * 2, x + 2, value=0.5)),
]


@pytest.mark.parametrize("fn", [c[1] for c in INPLACE], ids=[c[0] for c in INPLACE])
def test_inplace_twin_matches_torch(torch, fn):
    def run(T):
        leaf = T.tensor([0.1, 0.3, 0.6], dtype=T.float64, requires_grad=True)
        x = leaf * 1.0
        y = fn(x)
        if y is not x:  # the twin of an op on a temporary
            x = y
        assert x._version == 1
        name = x.grad_fn.name()
        (x * T.tensor([1.0, 2.0, 3.0], dtype=T.float64)).sum().backward()
        return name, x.detach(), leaf.grad

    (an, av, ag), (tn, tv, tg) = run(ad), run(torch)
    assert an == tn
    _same((av, ag), (tv, tg))


@pytest.mark.parametrize("name", ["asinh_", "arcsinh_", "acosh_", "arccosh_", "atanh_", "arctanh_"])
def test_inplace_without_derivative_raises_at_backward_as_torch(torch, name):
    """PyTorch has no derivative for asinh_/atanh_: the values, a node that raises."""

    def run(T):
        x = T.tensor([0.1, 0.3], dtype=T.float64, requires_grad=True) * 1.0
        if "cosh" in name:
            x = x + 1.5
        getattr(x, name)()
        node = x.grad_fn.name()
        with pytest.raises(NotImplementedError) as e:
            x.sum().backward()
        return node, x.detach(), str(e.value)

    (an, av, am), (tn, tv, tm) = run(ad), run(torch)
    assert an == tn and am == tm
    _same(av, tv)


def test_inplace_on_a_saved_input_is_reported(torch):
    def run(T):
        x = T.tensor([0.1, 0.2], requires_grad=True)
        y = x * 1.0
        z = y.asin()
        y.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()

    run(torch)
    run(ad)


ERRORS = [
    ("diag_3d", lambda T: T.diag(T.ones(2, 2, 2)), RuntimeError, "Supports 1D or 2D tensors"),
    ("diag_0d", lambda T: T.diag(T.tensor(1.0)), RuntimeError, "Got 0D"),
    ("trace_1d", lambda T: T.ones(3).trace(), RuntimeError, "expected a matrix"),
    ("cross_no_3", lambda T: T.cross(T.ones(2, 4), T.ones(2, 4)), RuntimeError, "size 3"),
    (
        "cross_ndim",
        lambda T: T.cross(T.ones(2, 3), T.ones(3), dim=-1),
        RuntimeError,
        "same number of dimensions",
    ),
    ("cross_dim_4", lambda T: T.cross(T.ones(2, 4), T.ones(2, 4), dim=1), RuntimeError, "length 3"),
    ("frac_int", lambda T: T.tensor([1, 2]).frac(), NotImplementedError, "frac_cpu"),
    ("hypot_int", lambda T: T.hypot(T.tensor([1]), T.tensor([2])), NotImplementedError, "hypot"),
    ("hypot_scalar", lambda T: T.hypot(T.ones(2), 2.0), TypeError, "must be Tensor"),
    ("atan2_scalar", lambda T: T.atan2(T.ones(2), 2.0), TypeError, "must be Tensor"),
    ("nanmean_int", lambda T: T.tensor([1, 2]).nanmean(), RuntimeError, "floating point"),
    ("kth_big", lambda T: T.ones(2, 3).kthvalue(4, 1), RuntimeError, "k out of range"),
    ("kth_zero", lambda T: T.ones(2, 3).kthvalue(0), RuntimeError, "k out of range"),
    ("median_empty_dim", lambda T: T.zeros(0, 3).median(0), IndexError, "non-zero size"),
    ("lcse_int", lambda T: T.tensor([1, 2]).logcumsumexp(0), NotImplementedError, "logcumsumexp"),
    (
        "addcdiv_int",
        lambda T: T.tensor([1]).addcdiv(T.tensor([1]), T.tensor([2])),
        RuntimeError,
        "Integer division with addcdiv",
    ),
    (
        "addcmul_shape",
        lambda T: T.ones(3).addcmul_(T.ones(2, 3), T.ones(3)),
        RuntimeError,
        "doesn't match the broadcast shape",
    ),
    ("trapezoid_0d", lambda T: T.trapezoid(T.tensor(1.0)), IndexError, "has no dimensions"),
    (
        "trapezoid_x_len",
        lambda T: T.trapezoid(T.ones(3), T.ones(2)),
        RuntimeError,
        "one `x` value for each sample point",
    ),
]


@pytest.mark.parametrize("fn, exc, phrase", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_matches_torch(torch, fn, exc, phrase):
    from differential import same_error

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(fn, torch, phrase)
    with pytest.raises(exc):
        fn(ad)


def test_cross_without_dim_warns(monkeypatch):
    # PyTorch's text (a TORCH_WARN_ONCE: the flag is reset, other tests may have warned)
    from autodiag import _warnings

    monkeypatch.setattr(_warnings, "WARNED", set())
    with pytest.warns(UserWarning, match="without specifying the dim arg is deprecated"):
        ad.cross(ad.ones(3), ad.ones(3))


CROSS_TWICE = """\
import warnings
import {lib} as torch
warnings.simplefilter("always")
a = torch.eye(3)
torch.cross(a, a)
torch.cross(a, a)
a.cross(a)
"""


def test_cross_without_dim_warns_once_per_process_as_pytorch(tmp_path):
    pytest.importorskip("torch")
    seen = {}
    for lib in ("torch", "autodiag"):
        (tmp_path / lib).mkdir()
        script = tmp_path / lib / "cross.py"
        script.write_text(CROSS_TWICE.format(lib=lib))
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, check=True
        )
        seen[lib] = [ln for ln in out.stderr.splitlines() if "UserWarning" in ln]
    assert len(seen["torch"]) == 1
    assert [ln.split(": Using")[0].replace("/autodiag/", "/torch/") for ln in seen["autodiag"]] == [
        ln.split(": Using")[0] for ln in seen["torch"]
    ]  # one warning, at the script's line 5


def test_torch_trace_under_the_import_alias():
    """``torch.trace`` is the op in a script (``autodiag.trace`` stays the tracing API)."""
    from autodiag.torch_alias import torch_alias

    with torch_alias():
        import torch

        x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y = torch.trace(x)
        y.backward()
        assert y.item() == 5.0 and y.grad_fn.name() == "TraceBackward0"
        assert x.grad.tolist() == [[1.0, 0.0], [0.0, 1.0]]
        with pytest.raises(AttributeError):
            torch.trace.tracing  # noqa: B018 - the op, not the module
    import autodiag.trace

    assert hasattr(autodiag.trace, "tracing")


SCRIPT = """
import torch

def main():
    x = torch.tensor([[0.2, 0.4, 0.6], [0.1, 0.3, 0.5], [0.7, 0.8, 0.9]], requires_grad=True)
    w = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    a = x.acos().sum() + torch.atan2(x, x + 1).sum() + torch.addcmul(x, x, x, value=0.5).sum()
    b = torch.diag(w).trace() + torch.cross(x, x.flip(0), dim=1).sum()
    c = x.median(1).values.sum() + x.logcumsumexp(1).sum() + torch.trapezoid(x).sum()
    loss = a + b + c + torch.nansum(x.logit())
    loss.backward()
    print("loss", round(loss.item(), 4))

main()
"""


def test_cli_graph_and_check_on_a_script_of_the_new_ops(tmp_path):
    p = tmp_path / "ops15.py"
    p.write_text(textwrap.dedent(SCRIPT))
    r = cli("graph", str(p), "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    names = {n["name"] for n in json.loads(r.stdout)["nodes"]}
    for want in (
        "AcosBackward0",
        "Atan2Backward0",
        "AddcmulBackward0",
        "DiagEmbedBackward0",
        "TraceBackward0",
        "LinalgCrossBackward0",
        "MedianBackward1",
        "LogcumsumexpBackward0",
        "LogitBackward0",
        "NansumBackward0",
    ):
        assert want in names, (want, sorted(names))
    r = cli("check", str(p), "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr


def test_cli_anomaly_names_the_new_op(tmp_path):
    p = tmp_path / "nan15.py"
    p.write_text(
        "import torch\n"
        "x = torch.tensor([0.5, 2.0], requires_grad=True)\n"
        "y = x.acos()\n"
        "y.sum().backward()\n"
    )
    r = cli("anomaly", str(p), "-f", "json")
    assert r.exit_code == 1, r.stdout + r.stderr
    (f,) = json.loads(r.stdout)["findings"]
    assert f["kind"] == "nan_forward" and f["op"] == "acos"
    p.write_text(p.read_text().replace("2.0]", "1.0]"))  # acos'(1) = -inf
    r = cli("anomaly", str(p), "-f", "json")
    assert r.exit_code == 1, r.stdout + r.stderr
    (f,) = json.loads(r.stdout)["findings"]
    assert f["kind"] == "inf_backward" and "AcosBackward0" in f["message"]


def test_cli_inplace_names_the_new_op(tmp_path):
    p = tmp_path / "inplace15.py"
    p.write_text(
        "import torch\n"
        "x = torch.tensor([0.5, 0.2], requires_grad=True)\n"
        "y = x * 1.0\n"
        "z = y.asinh()\n"
        "y.atan_()\n"
        "z.sum().backward()\n"
    )
    r = cli("inplace", str(p), "-f", "json")
    assert r.exit_code == 1, r.stdout + r.stderr
    assert "AsinhBackward0" in r.stdout and "atan_" in r.stdout
