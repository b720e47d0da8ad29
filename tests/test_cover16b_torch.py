"""Differential tests of cover16b's ops (issue 20): the in-place forms PyTorch has (``Tensor.X_``
twins and ``torch.X_`` functions), elementwise math (ops/special2.py), statistics
(ops/stats2.py), linear algebra (ops/linalg2.py, ``autodiag.linalg``) and the settings
functions (``set_num_threads`` ...).

Differentiable rows go through ``test_ops_torch.check_case`` (values and dtypes in float32 and
float64, node names and ``next_functions`` to the leaves, first and second derivatives);
``test_ops_torch.test_registry_is_covered`` counts them through ``COVERED``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_torch import Case, I, _np, check_case

import autodiag as ad


def _u(shape, lo, hi, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _sid(shape) -> str:
    return "x".join(map(str, shape)) or "0d"


SHAPES = [(), (5,), (3, 4), (0,)]

UNARY = [
    # (id, fn, lo, hi, registry names)
    ("deg2rad", lambda T, x: T.deg2rad(x), -5.0, 5.0, ("deg2rad",)),
    ("rad2deg_m", lambda T, x: x.rad2deg(), -5.0, 5.0, ("rad2deg",)),
    ("sinc", lambda T, x: T.sinc(x), -3.0, 3.0, ("sinc",)),
    ("lgamma", lambda T, x: T.lgamma(x), 0.1, 6.0, ("lgamma",)),
    ("lgamma_neg", lambda T, x: x.lgamma(), -3.9, -3.1, ("lgamma",)),
    ("digamma", lambda T, x: T.digamma(x), 0.1, 12.0, ("digamma",)),
    ("digamma_neg", lambda T, x: x.digamma(), -2.9, -2.1, ("digamma",)),
    ("polygamma1", lambda T, x: T.polygamma(1, x), 0.2, 12.0, ("polygamma",)),
    ("polygamma2_m", lambda T, x: x.polygamma(2), 0.2, 5.0, ("polygamma",)),
    ("mvlgamma", lambda T, x: T.mvlgamma(x, 3), 1.2, 5.0, ("mvlgamma",)),
    ("absolute", lambda T, x: T.absolute(x), -2.0, 2.0, ("absolute",)),
    ("fix", lambda T, x: x.fix() * x, -3.0, 3.0, ("fix",)),
    ("positive", lambda T, x: T.positive(x) * 2, -3.0, 3.0, ("positive",)),
    ("hardshrink", lambda T, x: x.hardshrink(0.7), -2.0, 2.0, ("hardshrink",)),
    ("hardshrink_fn", lambda T, x: T.hardshrink(x), -2.0, 2.0, ("hardshrink",)),
    ("selu", lambda T, x: T.selu(x), -2.0, 2.0, ("selu",)),
    ("celu", lambda T, x: T.celu(x, 0.7), -2.0, 2.0, ("celu",)),
    ("rrelu", lambda T, x: T.rrelu(x), -2.0, 2.0, ("rrelu",)),
    ("threshold", lambda T, x: T.threshold(x, 0.3, -2.0), -2.0, 2.0, ("threshold",)),
    ("frexp", lambda T, x: T.frexp(x)[0], -9.0, 9.0, ("frexp",)),
    ("float_power", lambda T, x: T.float_power(x, 3), -2.0, 2.0, ("float_power",)),
    ("fmod_scalar", lambda T, x: T.fmod(x, 1.5), -5.0, 5.0, ("fmod",)),
    ("copysign_scalar", lambda T, x: x.copysign(-1.0), -2.0, 2.0, ("copysign",)),
]

CASES = [
    Case(f"c16b-{name}-{_sid(s)}", fn, (I(data=_u(s, lo, hi)),), op=ops)
    for name, fn, lo, hi, ops in UNARY
    for s in SHAPES
]

BINARY = [
    ("fmod", lambda T, a, b: T.fmod(a, b), ("fmod",)),
    ("fmod_m", lambda T, a, b: a.fmod(b), ("fmod",)),
    ("copysign", lambda T, a, b: T.copysign(a, b), ("copysign",)),
    ("fmax", lambda T, a, b: T.fmax(a, b), ("fmax",)),
    ("fmin_m", lambda T, a, b: a.fmin(b), ("fmin",)),
    ("ldexp", lambda T, a, b: T.ldexp(a, b), ("ldexp",)),
    ("float_power_t", lambda T, a, b: T.float_power(a.abs(), b), ("float_power",)),
]
PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3,))]
CASES += [
    Case(f"c16b-{name}-{_sid(sa)}-{_sid(sb)}", fn, (I(sa, "away"), I(sb, "away")), op=ops)
    for name, fn, ops in BINARY
    for sa, sb in PAIRS
]
CASES += [
    Case(
        "c16b-prelu-c3",
        lambda T, x, w: T.prelu(x, w),
        (I((2, 3, 4), "away"), I((3,), "pos")),
        op=("prelu",),
    ),
    Case(
        "c16b-prelu-1",
        lambda T, x, w: x.prelu(w),
        (I((2, 3), "away"), I((1,), "pos")),
        op=("prelu",),
    ),
]

# what test_ops_torch.test_registry_is_covered counts
COVERED = {n for c in CASES for n in c.op}
# registered ops checked by the value/other tests below rather than by a Case row
COVERED |= {
    "heaviside",
    "nextafter",
    "signbit",
    "isposinf",
    "isneginf",
    "isreal",
    "gcd",
    "lcm",
}

_ids = [c.id for c in CASES]
assert len(set(_ids)) == len(_ids), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_op_matches_torch(torch, case):
    check_case(torch, case)


# ---------------------------------------------------------------------------------------------
# Values to the bit, special values, integer inputs
# ---------------------------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")
SPECIAL = [0.0, -0.0, 0.5, 1.0, -1.0, -2.5, 2.0, 10.0, 1e-30, 30.0, -30.0, INF, -INF, NAN]


def _same(a, t, exact=True):
    an, tn = _np(a), t.detach().numpy()
    assert str(a.dtype).replace("autodiag", "torch") == str(t.dtype)
    assert an.shape == tn.shape
    if exact:
        np.testing.assert_array_equal(an, tn)
    else:
        np.testing.assert_allclose(an, tn, rtol=1e-6, atol=0)


VALUES = [
    ("fmod", lambda T, a, b: T.fmod(a, b)),
    ("copysign", lambda T, a, b: T.copysign(a, b)),
    ("fmax", lambda T, a, b: T.fmax(a, b)),
    ("fmin", lambda T, a, b: T.fmin(a, b)),
    ("nextafter", lambda T, a, b: T.nextafter(a, b)),
    ("heaviside", lambda T, a, b: T.heaviside(a, b)),
    ("deg2rad", lambda T, a, b: T.deg2rad(a)),
    ("rad2deg", lambda T, a, b: T.rad2deg(a)),
    ("signbit", lambda T, a, b: T.signbit(a)),
    ("isposinf", lambda T, a, b: T.isposinf(a)),
    ("isneginf", lambda T, a, b: T.isneginf(a)),
    ("isreal", lambda T, a, b: T.isreal(a)),
    ("sinc", lambda T, a, b: T.sinc(a)),
    ("digamma", lambda T, a, b: T.digamma(a)),
    ("trigamma", lambda T, a, b: T.polygamma(1, a)),
    ("frexp_m", lambda T, a, b: T.frexp(a)[0]),
    ("frexp_e", lambda T, a, b: T.frexp(a)[1]),
    ("hardshrink", lambda T, a, b: a.hardshrink()),
    ("threshold", lambda T, a, b: T.threshold(a, 1.0, 7.0)),
]
# pow with a tensor exponent: PyTorch's vectorised pow differs from C's in the last place
VALUES_CLOSE = [("float_power", lambda T, a, b: T.float_power(a, b))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_value_matches_torch_to_the_bit(torch, fn, dtype):
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    a, b = a.ravel().astype(dtype), b.ravel().astype(dtype)
    t = fn(torch, torch.tensor(a), torch.tensor(b))
    r = fn(ad, ad.tensor(a), ad.tensor(b))
    _same(r, t)


@pytest.mark.parametrize("fn", [v[1] for v in VALUES_CLOSE], ids=[v[0] for v in VALUES_CLOSE])
def test_value_matches_torch(torch, fn):
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    t = fn(torch, torch.tensor(a.ravel()), torch.tensor(b.ravel()))
    _same(fn(ad, ad.tensor(a.ravel()), ad.tensor(b.ravel())), t, exact=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["digamma", "trigamma", "polygamma3", "lgamma", "sinc"])
def test_gamma_family_on_many_values(torch, name, dtype):
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [rng.uniform(-20, 20, 400), rng.uniform(0, 2, 200), rng.uniform(20, 1e4, 100)]
    ).astype(dtype)
    fns = {
        "digamma": lambda T, v: T.digamma(v),
        "trigamma": lambda T, v: T.polygamma(1, v),
        "polygamma3": lambda T, v: T.polygamma(3, v),
        "lgamma": lambda T, v: T.lgamma(v),
        "sinc": lambda T, v: T.sinc(v),
    }
    t = fns[name](torch, torch.tensor(x)).numpy()
    r = _np(fns[name](ad, ad.tensor(x)))
    assert r.dtype == t.dtype
    # NOTE [Gamma family values]: libm's log/tan/sin and lgamma may differ in the last place
    np.testing.assert_allclose(r, t, rtol=4e-6 if dtype == "float32" else 1e-13, atol=1e-13)
    assert np.array_equal(np.isnan(r), np.isnan(t))


@pytest.mark.parametrize(
    "name",
    ["fmod", "remainder", "gcd", "lcm", "bitwise_and", "fmax", "copysign", "float_power"],
)
def test_integer_inputs_match_torch(torch, name):
    a = np.array([-7, -3, 0, 4, 9, 12])
    b = np.array([2, 5, 3, -4, 6, 8])
    t = getattr(torch, name)(torch.tensor(a), torch.tensor(b))
    r = getattr(ad, name)(ad.tensor(a), ad.tensor(b))
    _same(r, t)


def test_frexp_returns_torchs_named_tuple(torch):
    x = [0.0, 3.0, -0.75, 1e-40]
    m, e = ad.frexp(ad.tensor(x))
    tm, te = torch.frexp(torch.tensor(x))
    _same(m, tm)
    _same(e, te)
    assert ad.frexp(ad.tensor(x)).exponent.dtype == ad.int32


# ---------------------------------------------------------------------------------------------
# In-place: Tensor twins and torch.X_ functions
# ---------------------------------------------------------------------------------------------

INPLACE = [
    ("cumsum_", lambda x, T: x.cumsum_(0)),
    ("cumprod_", lambda x, T: x.cumprod_(-1)),
    ("erf_", lambda x, T: x.erf_()),
    ("log1p_", lambda x, T: x.abs_().log1p_()),
    ("rsqrt_", lambda x, T: x.abs_().rsqrt_()),
    ("tan_", lambda x, T: x.tan_()),
    ("trunc_", lambda x, T: x.trunc_()),
    ("absolute_", lambda x, T: x.absolute_()),
    ("fix_", lambda x, T: x.fix_()),
    ("negative_", lambda x, T: x.negative_()),
    ("remainder_", lambda x, T: x.remainder_(0.7)),
    ("true_divide_", lambda x, T: x.true_divide_(3.0)),
    ("fmod_", lambda x, T: x.fmod_(0.6)),
    ("deg2rad_", lambda x, T: x.deg2rad_()),
    ("rad2deg_", lambda x, T: x.rad2deg_()),
    ("sinc_", lambda x, T: x.sinc_()),
    ("lgamma_", lambda x, T: x.abs_().lgamma_()),
    ("digamma_", lambda x, T: x.abs_().add_(0.5).digamma_()),
    ("polygamma_", lambda x, T: x.abs_().add_(0.5).polygamma_(1)),
    ("mvlgamma_", lambda x, T: x.abs_().add_(2.0).mvlgamma_(2)),
    ("eq_", lambda x, T: x.eq_(T.tensor(-1.5, dtype=T.float64))),
    ("ne_", lambda x, T: x.ne_(0.5)),
    ("gt_", lambda x, T: x.gt_(0.0)),
    ("ge_", lambda x, T: x.ge_(T.zeros(4, dtype=T.float64))),
    ("lt_", lambda x, T: x.lt_(0.0)),
    ("le_", lambda x, T: x.le_(0.1)),
    ("greater_", lambda x, T: x.greater_(0.0)),
    ("less_equal_", lambda x, T: x.less_equal_(0.0)),
    ("logical_and_", lambda x, T: x.logical_and_(T.tensor([1.0, 0.0, 1.0, 1.0]))),
    ("logical_not_", lambda x, T: x.logical_not_()),
    ("floor_divide_", lambda x, T: x.floor_divide_(0.3)),
    ("torch.exp_", lambda x, T: T.exp_(x)),
    ("torch.relu_", lambda x, T: T.relu_(x)),
    ("torch.sqrt_", lambda x, T: T.sqrt_(x.abs_())),
    ("torch.clamp_", lambda x, T: T.clamp_(x, -0.5, 0.5)),
    ("torch.erf_", lambda x, T: T.erf_(x)),
    ("torch.log1p_", lambda x, T: T.log1p_(x.abs_())),
    ("torch.rsqrt_", lambda x, T: T.rsqrt_(x.abs_())),
    ("torch.tan_", lambda x, T: T.tan_(x)),
    ("torch.trunc_", lambda x, T: T.trunc_(x)),
    ("torch.zero_", lambda x, T: T.zero_(x)),
    ("torch.fill_", lambda x, T: T.fill_(x, 2.5)),
    ("torch.sigmoid_", lambda x, T: T.sigmoid_(x)),
    ("torch.deg2rad_", lambda x, T: T.deg2rad_(x)),
    ("torch.selu_", lambda x, T: T.selu_(x)),
    ("torch.celu_", lambda x, T: T.celu_(x)),
    ("torch.threshold_", lambda x, T: T.threshold_(x, 0.1, 9.0)),
    ("torch.rrelu_", lambda x, T: T.rrelu_(x)),
    ("torch.square_", lambda x, T: T.square_(x)),
    ("torch.xlogy_", lambda x, T: T.xlogy_(x, 2.0)),
]


def _inplace_run(T, fn):
    x = T.tensor([0.25, -1.5, 2.0, 0.75], dtype=T.float64, requires_grad=True)
    a = x * 1.0
    v = a._version
    out = fn(a, T)
    assert out is a
    return x, a, a._version - v


def _chain(fn):
    names, frontier = [], [fn]
    while frontier and len(names) < 12:
        f = frontier.pop(0)
        names.append(None if f is None else f.name())
        if f is not None:
            frontier.extend(g for g, _ in f.next_functions)
    return names


@pytest.mark.parametrize("fn", [v[1] for v in INPLACE], ids=[v[0] for v in INPLACE])
def test_inplace_matches_torch(torch, fn):
    tx, ta, tbump = _inplace_run(torch, fn)
    ax, aa, abump = _inplace_run(ad, fn)
    np.testing.assert_allclose(_np(aa), ta.detach().numpy(), rtol=1e-12, atol=0)
    assert abump == tbump
    assert _chain(aa.grad_fn) == _chain(ta.grad_fn)
    assert aa.requires_grad == ta.requires_grad
    g = np.array([1.0, 2.0, -3.0, 0.5])
    try:
        ta.backward(torch.tensor(g))
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e).split(" is not")[0][:40]):
            aa.backward(ad.tensor(g))
        return
    aa.backward(ad.tensor(g))
    np.testing.assert_allclose(_np(ax.grad), tx.grad.numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "name", ["exp_", "relu_", "sqrt_", "erf_", "tan_", "trunc_", "zero_", "deg2rad_", "selu_"]
)
def test_torch_inplace_function_refuses_a_leaf(torch, name):
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(torch, name)(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(ad, name)(ad.ones(2, requires_grad=True))


def test_inplace_function_names_exist_where_torchs_do(torch):
    missing = [
        n
        for n in dir(torch)
        if n.endswith("_") and not n.startswith("_") and hasattr(ad.Tensor, n)
        if not hasattr(ad, n)
    ]
    assert not missing


def test_comparison_twin_of_integer_tensor_writes_integers(torch):
    t = torch.tensor([1, 2, 3])
    a = ad.tensor([1, 2, 3])
    t.eq_(2)
    a.eq_(2)
    _same(a, t)


def test_inplace_into_integer_refuses_as_torch(torch):
    for name, arg in (("true_divide_", 2), ("fmod_", 1.5)):
        with pytest.raises(RuntimeError) as te:
            getattr(torch.tensor([1, 2]), name)(arg)
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            getattr(ad.tensor([1, 2]), name)(arg)
        assert "can't be cast" in str(te.value)


def test_inplace_on_a_saved_input_is_reported(torch):
    for T in (torch, ad):
        x = T.tensor([0.5, 1.5], dtype=T.float64, requires_grad=True)
        a = x * 1
        y = a.lgamma()
        a.sinc_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

ERRORS = [
    (
        "heaviside_dtypes",
        lambda T: T.heaviside(T.tensor([1.0]), T.tensor([1])),
        RuntimeError,
        "different dtypes",
    ),
    (
        "gcd_float",
        lambda T: T.gcd(T.tensor([1.0]), T.tensor([2.0])),
        NotImplementedError,
        "gcd_cpu",
    ),
    ("frexp_int", lambda T: T.frexp(T.tensor([1])), RuntimeError, "floating-point dtypes"),
    (
        "mvlgamma_p",
        lambda T: T.mvlgamma(T.tensor([2.0]), 0),
        RuntimeError,
        "p has to be greater than or equal to 1",
    ),
    ("polygamma_neg", lambda T: T.polygamma(-1, T.tensor([1.0])), RuntimeError, "negative n"),
    (
        "prelu_channels",
        lambda T: T.prelu(T.ones(2, 3), T.ones(2)),
        RuntimeError,
        "Mismatch of parameter numbers",
    ),
    ("fmod_int_zero", lambda T: T.fmod(T.tensor([1]), 0), RuntimeError, "ZeroDivisionError"),
    ("positive_bool", lambda T: T.positive(T.tensor([True])), RuntimeError, "bool tensor"),
    ("celu_alpha0", lambda T: T.celu(T.ones(2), 0.0), RuntimeError, "alpha cannot be 0 for CELU"),
    ("selu_inplace_kw", lambda T: T.selu(T.ones(2), inplace=True), TypeError, "inplace"),
]


@pytest.mark.parametrize("fn, exc, phrase", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_matches_torch(torch, fn, exc, phrase):
    with pytest.raises(exc, match=phrase):
        fn(torch)
    with pytest.raises(exc, match=phrase):
        fn(ad)


def test_heaviside_backward_raises_nextafter_passes_as_torch(torch):
    for T in (torch, ad):
        x = T.tensor([1.0, -1.0], requires_grad=True)
        y = T.heaviside(x, T.tensor([0.5, 0.5]))
        assert y.grad_fn.name() == "torch::autograd::NotImplemented"
        with pytest.raises(RuntimeError, match="derivative for aten::heaviside is not implemented"):
            y.sum().backward()
        o = T.tensor([2.0, -3.0], requires_grad=True)
        y = T.nextafter(x, o)
        assert y.grad_fn.name() == "NextafterBackward0"
        y.backward(T.tensor([2.0, 3.0]))
        assert x.grad.tolist() == [2.0, 3.0] and o.grad.tolist() == [0.0, 0.0]


def test_rrelu_training_is_refused_not_guessed():
    with pytest.raises(NotImplementedError, match="rrelu: training=True"):
        ad.rrelu(ad.ones(3), training=True)


# ---------------------------------------------------------------------------------------------
# Linear algebra (ops/linalg2.py, autodiag.linalg)
# ---------------------------------------------------------------------------------------------


def _spd(T, x):
    n = x.shape[-1]
    return x @ x.mT + T.eye(n, dtype=x.dtype) * n


LINALG = [
    ("det", lambda T, x: T.det(x), ("det",)),
    ("det_m", lambda T, x: x.det(), ("det",)),
    ("linalg_det", lambda T, x: T.linalg.det(x), ()),
    ("inverse", lambda T, x: T.inverse(x), ("inverse",)),
    ("inverse_m", lambda T, x: x.inverse(), ("inverse",)),
    ("linalg_inv", lambda T, x: T.linalg.inv(x), ()),
    ("slogdet", lambda T, x: T.slogdet(x)[1], ("slogdet",)),
    ("slogdet_m", lambda T, x: x.slogdet().logabsdet, ("slogdet",)),
    ("linalg_slogdet", lambda T, x: T.linalg.slogdet(x).logabsdet * 2, ()),
    ("logdet", lambda T, x: T.logdet(_spd(T, x)), ("logdet",)),
    ("logdet_m", lambda T, x: _spd(T, x).logdet(), ("logdet",)),
    ("matrix_power3", lambda T, x: T.matrix_power(x, 3), ("matrix_power",)),
    ("matrix_power5", lambda T, x: x.matrix_power(5), ("matrix_power",)),
    ("matrix_power1", lambda T, x: x.matrix_power(1), ("matrix_power",)),
    ("matrix_power_neg2", lambda T, x: x.matrix_power(-2), ("matrix_power",)),
    ("linalg_matrix_power", lambda T, x: T.linalg.matrix_power(x, 4), ()),
]
LINALG_SHAPES = [(3, 3), (2, 4, 4), (1, 1)]
CASES_LINALG = [
    Case(f"c16b-{name}-{_sid(s)}", fn, (I(s, "any"),), op=ops)
    for name, fn, ops in LINALG
    for s in LINALG_SHAPES
    # det of a 1x1 matrix: its second derivative is 0 in exact arithmetic, 1e-16 through solve
    if not (name.endswith("det") or name == "det_m") or s != (1, 1)
]
CASES_LINALG += [
    Case(
        f"c16b-solve-{_sid(sa)}-{_sid(sb)}",
        lambda T, a, b: T.linalg.solve(a, b),
        (I(sa), I(sb)),
    )
    for sa, sb in [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (2, 3)), ((2, 3, 3), (3, 1))]
]
CASES_LINALG += [
    Case(
        f"c16b-cholesky-{_sid(s)}",
        lambda T, x: T.linalg.cholesky(_spd(T, x)),
        (I(s),),
        second=False,  # double backward raises NotImplementedError (tested below)
    )
    for s in [(3, 3), (2, 2, 2)]
]
CASES_LINALG += [
    Case(
        "c16b-cholesky_upper",
        lambda T, x: T.linalg.cholesky(_spd(T, x), upper=True),
        (I((3, 3)),),
        second=False,
    ),
]
COVERED |= {n for c in CASES_LINALG for n in c.op} | {"solve", "cholesky"}


@pytest.mark.parametrize("case", CASES_LINALG, ids=[c.id for c in CASES_LINALG])
def test_linalg_matches_torch(torch, case):
    check_case(torch, case)


def test_deprecated_cholesky_matches_torch(torch):
    a = np.array([[4.0, 2.0, 0.4], [2.0, 3.0, 0.5], [0.4, 0.5, 2.0]])
    outs = []
    for T in (torch, ad):
        x = T.tensor(a, requires_grad=True)
        with pytest.warns(UserWarning, match="torch.cholesky is deprecated"):
            L = T.cholesky(x)
        assert L.grad_fn.name() == "CholeskyBackward0"
        (L * T.tensor(a)).sum().backward()
        outs.append((L.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-12)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-10)


def test_cholesky_double_backward_is_refused_not_wrong():
    x = ad.tensor([[4.0, 2.0], [2.0, 3.0]], dtype=ad.float64, requires_grad=True)
    (g,) = ad.autograd.grad(ad.linalg.cholesky(x).sum(), x, create_graph=False)
    assert g.shape == (2, 2)
    with pytest.raises(NotImplementedError, match="double backward through cholesky"):
        ad.autograd.grad(ad.linalg.cholesky(x).sum(), x, create_graph=True)


def test_det_gradient_at_a_singular_matrix_matches_torch(torch):
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    grads = []
    for T in (torch, ad):
        x = T.tensor(a, requires_grad=True)
        d = T.det(x)
        d.backward()
        grads.append((d.item(), x.grad.numpy()))
    assert grads[1][0] == 0.0 or abs(grads[1][0]) < 1e-15
    np.testing.assert_allclose(grads[1][1], grads[0][1], atol=1e-8)


def test_slogdet_returns_torchs_named_tuples(torch):
    a = [[-2.0, 0.0], [0.0, 1.0]]
    for fn in (lambda T: T.slogdet, lambda T: T.linalg.slogdet):
        t = fn(torch)(torch.tensor(a))
        r = fn(ad)(ad.tensor(a))
        assert type(r).__name__ == type(t).__name__
        assert repr(r) == repr(t)


def test_logdet_of_negative_and_singular_matrices_matches_torch(torch):
    for a in ([[-1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 4.0]]):
        t = torch.logdet(torch.tensor(a))
        r = ad.logdet(ad.tensor(a))
        np.testing.assert_array_equal(_np(r), t.numpy())


LINALG_ERRORS = [
    (
        "inv_singular",
        lambda T: T.linalg.inv(T.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])),
        "linalg.inv: The diagonal element 3 is zero, the inversion could not be completed",
    ),
    (
        "inverse_batch",
        lambda T: T.inverse(T.stack([T.eye(2), T.zeros(2, 2)])),
        r"linalg.inv: \(Batch element 1\): The diagonal element 1 is zero",
    ),
    (
        "solve_singular",
        lambda T: T.linalg.solve(T.zeros(2, 2), T.ones(2)),
        "torch.linalg.solve: The solver failed because the input matrix is singular.",
    ),
    (
        "solve_shapes",
        lambda T: T.linalg.solve(T.eye(3), T.ones(2)),
        r"Incompatible shapes of A and B for the equation AX = B \(3x3 and 2x1\)",
    ),
    (
        "cholesky_not_pd",
        lambda T: T.linalg.cholesky(T.tensor([[1.0, 2.0], [2.0, 1.0]])),
        "the leading minor of order 2 is not positive-definite",
    ),
    (
        "det_not_square",
        lambda T: T.det(T.ones(2, 3)),
        "linalg.det: A must be batches of square matrices, but they are 2 by 3 matrices",
    ),
    (
        "inv_int",
        lambda T: T.linalg.inv(T.ones(2, 2, dtype=T.int64)),
        "linalg.inv: Expected a floating point or complex tensor as input. Got Long",
    ),
    (
        "torch_solve_removed",
        lambda T: T.solve(T.eye(2), T.eye(2)),
        "torch.solve` is deprecated in favor of `torch.linalg.solve`",
    ),
    (
        "matrix_power_not_square",
        lambda T: T.matrix_power(T.ones(2, 3), 2),
        "linalg.matrix_power: A must be batches of square matrices",
    ),
]


@pytest.mark.parametrize(
    "fn, phrase", [e[1:] for e in LINALG_ERRORS], ids=[e[0] for e in LINALG_ERRORS]
)
def test_linalg_error_matches_torch(torch, fn, phrase):
    with pytest.raises(RuntimeError, match=phrase) as te:
        fn(torch)
    with pytest.raises(RuntimeError, match=phrase) as ae:
        fn(ad)
    assert type(ae.value).__name__ == type(te.value).__name__


def test_linalg_error_is_catchable_as_linalg_error(torch):
    with pytest.raises(ad.linalg.LinAlgError):
        ad.linalg.inv(ad.zeros(2, 2))


# ---------------------------------------------------------------------------------------------
# Settings and predicates
# ---------------------------------------------------------------------------------------------


def test_thread_settings_behave_as_torchs(torch):
    n = ad.get_num_threads()
    assert isinstance(n, int) and n >= 1
    ad.set_num_threads(3)
    assert ad.get_num_threads() == 3
    ad.set_num_threads(n)
    for bad, phrase in ((0, "expects a positive integer"), ("a", "expects an int")):
        for T in (torch, ad):
            with pytest.raises(RuntimeError, match=phrase):
                T.set_num_threads(bad)
    assert isinstance(ad.get_num_interop_threads(), int)
    assert ad.set_flush_denormal(False) is True
    assert ad.set_flush_denormal(True) is False  # numpy keeps subnormals: honest


PREDICATES = [
    ("is_nonzero", lambda T: T.is_nonzero(T.tensor([1.5]))),
    ("is_nonzero0", lambda T: T.is_nonzero(T.tensor(0.0))),
    ("is_nonzero_nan", lambda T: T.is_nonzero(T.tensor([float("nan")]))),
    ("is_same_size", lambda T: T.is_same_size(T.ones(2, 3), T.ones(2, 3))),
    ("is_same_size_no", lambda T: T.ones(2).is_same_size(T.ones(3))),
    ("is_signed_u8", lambda T: T.is_signed(T.ones(2, dtype=T.uint8))),
    ("is_signed_f", lambda T: T.ones(2).is_signed()),
    ("result_type", lambda T: str(T.result_type(T.tensor([1], dtype=T.int32), 2.5))),
    ("result_type_t", lambda T: str(T.result_type(T.tensor([1], dtype=T.int32), T.tensor(5)))),
    ("can_cast", lambda T: T.can_cast(T.float64, T.int64)),
    ("can_cast_ok", lambda T: T.can_cast(T.int64, T.uint8)),
    ("can_cast_bool", lambda T: T.can_cast(T.int8, T.bool)),
]


@pytest.mark.parametrize("fn", [p[1] for p in PREDICATES], ids=[p[0] for p in PREDICATES])
def test_predicate_matches_torch(torch, fn):
    assert fn(ad) == fn(torch)


@pytest.mark.parametrize("value", [[], [1.0, 2.0]])
def test_is_nonzero_errors_match_torch(torch, value):
    for T in (torch, ad):
        with pytest.raises(RuntimeError, match="Boolean value of Tensor with"):
            T.is_nonzero(T.tensor(value))


# ---------------------------------------------------------------------------------------------
# Statistics (ops/stats2.py)
# ---------------------------------------------------------------------------------------------

STATS = [
    ("var_mean", lambda T, x: T.var_mean(x), ("var_mean",)),
    ("var_mean_dim", lambda T, x: T.var_mean(x, 1, keepdim=True), ("var_mean",)),
    ("var_mean_corr", lambda T, x: T.var_mean(x, 0, correction=0), ("var_mean",)),
    ("var_mean_only_mean", lambda T, x: T.var_mean(x, 0)[1], ("var_mean",)),
    ("std_mean", lambda T, x: T.std_mean(x), ("std_mean",)),
    ("std_mean_dim", lambda T, x: T.std_mean(x, -1), ("std_mean",)),
    ("aminmax", lambda T, x: tuple(T.aminmax(x)), ("aminmax",)),
    ("aminmax_dim", lambda T, x: tuple(T.aminmax(x, dim=1, keepdim=True)), ("aminmax",)),
    ("aminmax_max", lambda T, x: x.aminmax(dim=0).max, ("aminmax",)),
    ("msort", lambda T, x: T.msort(x), ("msort",)),
    ("msort_m", lambda T, x: x.msort(), ("msort",)),
    ("cov", lambda T, x: T.cov(x), ("cov",)),
    ("cov_corr0", lambda T, x: x.cov(correction=0), ("cov",)),
    ("cov_1d", lambda T, x: T.cov(x[0]), ("cov",)),
    ("corrcoef", lambda T, x: T.corrcoef(x), ("corrcoef",)),
    ("corrcoef_m", lambda T, x: x.corrcoef(), ("corrcoef",)),
]
CASES_STATS = [
    Case(f"c16b-{name}", fn, (I((3, 5), "distinct"),), op=ops) for name, fn, ops in STATS
]
CASES_STATS += [
    Case(
        f"c16b-dist-p{p}",
        lambda T, a, b, p=p: T.dist(a, b, p),
        (I((3, 4), "distinct"), I((1, 4), "distinct")),
        op=("dist",),
    )
    for p in (2, 1, 3, 1.5, float("inf"))
]
CASES_STATS += [
    Case("c16b-dist_m", lambda T, a, b: a.dist(b), (I((3,)), I((3,))), op=("dist",)),
]
COVERED |= {n for c in CASES_STATS for n in c.op}
COVERED |= {"bincount", "histc", "unique", "unique_consecutive"}


@pytest.mark.parametrize("case", CASES_STATS, ids=[c.id for c in CASES_STATS])
def test_stats_matches_torch(torch, case):
    check_case(torch, case)


def _same_tree(a, t):
    if isinstance(t, tuple):
        assert isinstance(a, tuple) and len(a) == len(t)
        for x, y in zip(a, t):
            _same_tree(x, y)
        return
    _same(a, t)


INTS = [3, 1, 2, 3, 7, 1, 0, 5, 5, 5]
NO_GRAD_STATS = [
    ("bincount", lambda T: T.bincount(T.tensor(INTS))),
    ("bincount_min", lambda T: T.bincount(T.tensor(INTS), minlength=12)),
    ("bincount_w", lambda T: T.bincount(T.tensor(INTS), weights=T.linspace(0, 1, 10))),
    ("bincount_w64", lambda T: T.tensor(INTS).bincount(T.ones(10, dtype=T.float64))),
    ("bincount_wint", lambda T: T.bincount(T.tensor(INTS), weights=T.tensor(INTS))),
    ("bincount_empty", lambda T: T.bincount(T.tensor([], dtype=T.int64))),
    ("histc", lambda T: T.histc(T.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 4.5, -1.0]), 4, 0, 4)),
    ("histc_auto", lambda T: T.tensor([1.0, 2.0, 1.0, 7.5]).histc(bins=5)),
    ("histc_same", lambda T: T.histc(T.tensor([2.0, 2.0]), bins=3)),
    ("histc_rand", lambda T: T.histc(T.linspace(-3, 3, 1001) ** 3, bins=17, min=-10, max=12)),
    ("unique", lambda T: T.unique(T.tensor(INTS))),
    ("unique_all", lambda T: T.unique(T.tensor(INTS), return_inverse=True, return_counts=True)),
    ("unique_m", lambda T: T.tensor([[2.0, 1.0], [1.0, 3.0]]).unique(return_inverse=True)),
    ("unique_nan", lambda T: T.unique(T.tensor([float("nan"), 1.0, float("nan")]))),
    (
        "unique_dim",
        lambda T: T.unique(
            T.tensor([[1, 2], [1, 2], [0, 3]]), dim=0, return_inverse=True, return_counts=True
        ),
    ),
    ("unique_dim1", lambda T: T.unique(T.tensor([[1, 1, 0], [2, 2, 3]]), dim=1)),
    (
        "unique_consecutive",
        lambda T: T.unique_consecutive(
            T.tensor([1, 1, 2, 2, 3, 1, 1]), return_inverse=True, return_counts=True
        ),
    ),
    (
        "unique_consecutive_dim",
        lambda T: T.tensor([[1, 1, 2], [1, 1, 3]]).unique_consecutive(dim=1, return_counts=True),
    ),
]


@pytest.mark.parametrize("fn", [v[1] for v in NO_GRAD_STATS], ids=[v[0] for v in NO_GRAD_STATS])
def test_counting_stats_match_torch(torch, fn):
    _same_tree(fn(ad), fn(torch))


def test_unique_of_a_grad_tensor_records_torchs_node(torch):
    for T in (torch, ad):
        x = T.tensor([2.0, 1.0, 2.0], requires_grad=True)
        u = T.unique(x)
        assert u.grad_fn.name() == "Unique2Backward0"
        with pytest.raises(RuntimeError, match="the derivative for '_unique2' is not implemented"):
            u.sum().backward()


STATS_ERRORS = [
    (
        "bincount_neg",
        lambda T: T.bincount(T.tensor([-1, 2])),
        RuntimeError,
        "bincount only supports 1-d non-negative integral inputs",
    ),
    ("bincount_float", lambda T: T.bincount(T.tensor([1.0])), NotImplementedError, "bincount_cpu"),
    ("histc_int", lambda T: T.histc(T.tensor([1, 2])), NotImplementedError, "histogram_cpu"),
    ("cov_3d", lambda T: T.cov(T.ones(2, 2, 2)), RuntimeError, "two or fewer dimensions"),
    ("aminmax_empty", lambda T: T.aminmax(T.ones(0)), RuntimeError, "aminmax"),
]


@pytest.mark.parametrize(
    "fn, exc, phrase", [e[1:] for e in STATS_ERRORS], ids=[e[0] for e in STATS_ERRORS]
)
def test_stats_error_matches_torch(torch, fn, exc, phrase):
    with pytest.raises(exc, match=phrase):
        fn(torch)
    with pytest.raises(exc, match=phrase):
        fn(ad)


def test_cov_weights_are_refused_not_ignored():
    with pytest.raises(NotImplementedError, match="cov: fweights and aweights"):
        ad.cov(ad.ones(2, 3), fweights=ad.tensor([1, 2, 1]))


# ---------------------------------------------------------------------------------------------
# set_printoptions
# ---------------------------------------------------------------------------------------------

PRINT_CASES = [
    {"precision": 2},
    {"precision": 8},
    {"sci_mode": True},
    {"sci_mode": False},
    {"threshold": 5},
    {"edgeitems": 1, "threshold": 10},
    {"linewidth": 40},
    {"profile": "short"},
    {"profile": "full"},
    {"precision": 3, "profile": "short"},
]
_R = np.random.default_rng(0).standard_normal((3, 4)) * np.logspace(-2, 2, 4)
PRINT_ARRAYS = [
    _R,
    _R[0],
    np.array([1.5, 2.25, 1e-5]),
    np.arange(12.0).reshape(3, 4),
    np.array(3.14159),
    np.zeros((2, 2)),
    np.arange(30.0) * 1.5,
]
# NOTE: not a summarised row wider than the line: its wrap around " ..." differs from
# PyTorch's with the default options too (printing.py uses numpy's array2string)


@pytest.fixture
def restore_printoptions(torch):
    yield
    torch.set_printoptions(profile="default")
    ad.set_printoptions(profile="default")


@pytest.mark.parametrize("opts", PRINT_CASES, ids=[str(c) for c in PRINT_CASES])
def test_set_printoptions_changes_repr_as_torchs(torch, opts, restore_printoptions):
    torch.set_printoptions(**opts)
    ad.set_printoptions(**opts)
    for a in PRINT_ARRAYS:
        for dt in ("float32", "float64"):
            assert repr(ad.tensor(a.astype(dt))) == repr(torch.tensor(a.astype(dt)))
    ints = np.arange(100).reshape(10, 10)
    if "linewidth" not in opts:  # int rows wrap a column apart from PyTorch's (numpy's wrap)
        assert repr(ad.tensor(ints)) == repr(torch.tensor(ints))


# ---------------------------------------------------------------------------------------------
# quantile, nanquantile (NOTE [Quantile graph])
# ---------------------------------------------------------------------------------------------

_QV = [0.1, 0.6, 0.9]
QUANTILE = [
    ("q", lambda T, x: T.quantile(x, 0.3)),
    ("q_m_dim1", lambda T, x: x.quantile(0.5, dim=1)),
    ("q_dim0_keep", lambda T, x: T.quantile(x, 0.3, dim=0, keepdim=True)),
    ("q_keep", lambda T, x: T.quantile(x, 0.7, keepdim=True)),
    ("q_vec", lambda T, x: T.quantile(x, T.tensor(_QV, dtype=x.dtype), dim=1)),
    ("q_vec_dim0", lambda T, x: T.quantile(x, T.tensor(_QV, dtype=x.dtype), dim=0, keepdim=True)),
    ("q_lower", lambda T, x: T.quantile(x, 0.3, dim=1, interpolation="lower")),
    ("q_higher", lambda T, x: T.quantile(x, 0.3, dim=1, interpolation="higher")),
    ("q_midpoint", lambda T, x: T.quantile(x, 0.3, dim=0, interpolation="midpoint")),
    ("q_nearest", lambda T, x: T.quantile(x, 0.5, interpolation="nearest")),
    ("nanq", lambda T, x: T.nanquantile(x, 0.3, dim=1)),
    ("nanq_m", lambda T, x: x.nanquantile(0.8)),
]
CASES_Q = [
    Case(f"c16b-{name}", fn, (I((3, 5), "distinct"),), op=("quantile", "nanquantile"))
    for name, fn in QUANTILE
]
COVERED |= {"quantile", "nanquantile"}


@pytest.mark.parametrize("case", CASES_Q, ids=[c.id for c in CASES_Q])
def test_quantile_matches_torch(torch, case):
    check_case(torch, case)


@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_with_nan_matches_torch(torch, fn, interpolation):
    a = np.random.default_rng(0).standard_normal((3, 5))
    a[1, 2] = np.nan
    a[2] = np.nan
    outs = []
    for T in (torch, ad):
        x = T.tensor(a, requires_grad=True)
        y = getattr(T, fn)(x, T.tensor(_QV, dtype=T.float64), dim=1, interpolation=interpolation)
        y.backward(T.ones_like(y))
        outs.append((y.detach().numpy(), x.grad.numpy()))
    # NOTE: linear interpolation goes through lerp, whose values differ from PyTorch's fused
    # multiply-add in the last place
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-14, atol=0)
    np.testing.assert_array_equal(outs[1][1], outs[0][1])


QUANTILE_ERRORS = [
    ("range", lambda T: T.quantile(T.ones(3), 1.5), r"q must be in the range \[0, 1\] but got 1.5"),
    ("range_t", lambda T: T.quantile(T.ones(3), T.tensor([0.5, 1.5])), "q values must be in the"),
    ("empty", lambda T: T.quantile(T.ones(0), 0.5), "input tensor must be non-empty"),
    ("int", lambda T: T.quantile(T.ones(3, dtype=T.int64), 0.5), "either float or double"),
    ("interp", lambda T: T.quantile(T.ones(3), 0.5, interpolation="cubic"), "interpolation"),
    ("q2d", lambda T: T.quantile(T.ones(3), T.ones(2, 2) / 2), "scalar or 1D tensor"),
    ("qdtype", lambda T: T.quantile(T.ones(3), T.tensor([0.5], dtype=T.float64)), "same dtype"),
]


@pytest.mark.parametrize(
    "fn, phrase", [e[1:] for e in QUANTILE_ERRORS], ids=[e[0] for e in QUANTILE_ERRORS]
)
def test_quantile_error_matches_torch(torch, fn, phrase):
    with pytest.raises(RuntimeError, match=phrase):
        fn(torch)
    with pytest.raises(RuntimeError, match=phrase):
        fn(ad)


# ---------------------------------------------------------------------------------------------
# cdist (NOTE [cdist paths])
# ---------------------------------------------------------------------------------------------

_MM = "use_mm_for_euclid_dist"
CDIST = [
    # (id, shapes, p, compute_mode, double backward: only the euclidean path has one)
    ("p2", ((3, 4), (5, 4)), 2.0, None, False),
    ("p1", ((3, 4), (5, 4)), 1.0, None, False),
    ("p3", ((3, 4), (5, 4)), 3.0, None, False),
    ("p05", ((3, 4), (5, 4)), 0.5, None, False),
    ("pinf", ((3, 4), (5, 4)), float("inf"), None, False),
    ("batch", ((2, 3, 4), (5, 4)), 2.0, None, False),
    ("batch_bcast", ((1, 3, 4), (2, 5, 4)), 1.5, None, False),
    ("euclid_big", ((30, 4), (5, 4)), 2.0, None, True),
    ("euclid_mm", ((3, 4), (5, 4)), 2.0, _MM, True),
    ("euclid_batch", ((2, 30, 4), (30, 4)), 2.0, None, True),
    ("euclid_bcast", ((1, 3, 4), (2, 5, 4)), 2.0, _MM, True),
    ("donot_mm", ((30, 4), (5, 4)), 2.0, "donot_use_mm_for_euclid_dist", False),
]
CASES_CDIST = [
    Case(
        f"c16b-cdist-{name}",
        (
            (lambda T, a, b, p=p: T.cdist(a, b, p))
            if mode is None
            else (lambda T, a, b, p=p, mode=mode: T.cdist(a, b, p, compute_mode=mode))
        ),
        (I(sa, "distinct"), I(sb, "distinct")),
        op=("cdist",),
        second=second,
    )
    for name, (sa, sb), p, mode, second in CDIST
]
COVERED |= {"cdist"}


@pytest.mark.parametrize("case", CASES_CDIST, ids=[c.id for c in CASES_CDIST])
def test_cdist_matches_torch(torch, case):
    check_case(torch, case)


def test_cdist_double_backward_raises_as_torch(torch):
    for T in (torch, ad):
        x = T.tensor([[0.0, 1.0], [2.0, 0.5]], requires_grad=True)
        y = T.tensor([[1.0, 1.0]], requires_grad=True)
        (g,) = T.autograd.grad(T.cdist(x, y).sum(), x, create_graph=True)
        assert g.grad_fn.name() == "CdistBackwardBackward0"
        with pytest.raises(RuntimeError, match="the derivative for '_cdist_backward' is not"):
            g.sum().backward()


CDIST_ERRORS = [
    ("columns", lambda T: T.cdist(T.ones(3, 4), T.ones(2, 3)), "same number of columns"),
    ("p_neg", lambda T: T.cdist(T.ones(3, 4), T.ones(2, 4), p=-1), "non-negative p values"),
    ("one_d", lambda T: T.cdist(T.ones(4), T.ones(2, 4)), "at least 2D tensors"),
]


@pytest.mark.parametrize(
    "fn, phrase", [e[1:] for e in CDIST_ERRORS], ids=[e[0] for e in CDIST_ERRORS]
)
def test_cdist_error_matches_torch(torch, fn, phrase):
    with pytest.raises(RuntimeError, match=phrase):
        fn(torch)
    with pytest.raises(RuntimeError, match=phrase):
        fn(ad)


def test_cdist_bad_compute_mode_is_a_value_error_as_torch(torch):
    for T in (torch, ad):
        with pytest.raises(ValueError, match="x is not a valid value for compute_mode"):
            T.cdist(T.ones(3, 4), T.ones(2, 4), compute_mode="x")


# ---------------------------------------------------------------------------------------------
# renorm
# ---------------------------------------------------------------------------------------------

RENORM = [
    ("p2_dim0", (3, 4), lambda T, x: T.renorm(x, 2, 0, 1.0)),
    ("p1_dim1", (3, 4), lambda T, x: x.renorm(1, 1, 0.8)),
    ("p3_3d", (2, 3, 4), lambda T, x: T.renorm(x, 3, 1, 0.7)),
    ("pinf", (3, 4), lambda T, x: T.renorm(x, float("inf"), 0, 0.5)),
    ("none_over", (3, 4), lambda T, x: T.renorm(x, 2, 0, 100.0)),
]
CASES_RENORM = [
    Case(f"c16b-renorm-{name}", fn, (I(shape, "distinct"),), op=("renorm",))
    for name, shape, fn in RENORM
]
COVERED |= {"renorm"}


@pytest.mark.parametrize("case", CASES_RENORM, ids=[c.id for c in CASES_RENORM])
def test_renorm_matches_torch(torch, case):
    check_case(torch, case)


def test_renorm_inplace_matches_torch(torch):
    a = np.random.default_rng(3).standard_normal((3, 4))
    outs = []
    for T in (torch, ad):
        x = T.tensor(a, requires_grad=True)
        y = x * 2
        v = y._version
        assert y.renorm_(2, 0, 1.0) is y
        assert y._version == v + 1
        y.sum().backward()
        outs.append((y.detach().numpy(), x.grad.numpy(), y.grad_fn.name()))
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-12)
    np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-10)
    assert outs[1][2] == outs[0][2]


RENORM_ERRORS = [
    ("p0", lambda T: T.renorm(T.ones(2, 2), 0, 0, 1.0), "non-positive-norm not supported"),
    ("maxnorm", lambda T: T.renorm(T.ones(2, 2), 2, 0, -1.0), "expected maxnorm to be >= 0"),
    ("one_d", lambda T: T.renorm(T.ones(3), 2, 0, 1.0), "at least 2 dimensions"),
]


@pytest.mark.parametrize(
    "fn, phrase", [e[1:] for e in RENORM_ERRORS], ids=[e[0] for e in RENORM_ERRORS]
)
def test_renorm_error_matches_torch(torch, fn, phrase):
    with pytest.raises(RuntimeError, match=phrase):
        fn(torch)
    with pytest.raises(RuntimeError, match=phrase):
        fn(ad)


# ---------------------------------------------------------------------------------------------
# mode (NOTE [Mode ties])
# ---------------------------------------------------------------------------------------------

CASES_MODE = [
    Case("c16b-mode", lambda T, x: T.mode(x.round()).values, (I((3, 20)),), op=("mode",)),
    Case("c16b-mode_dim0_keep", lambda T, x: x.round().mode(0, True)[0], (I((9, 4)),)),
    Case("c16b-mode_0d", lambda T, x: T.mode(x, 0).values, (I(()),), op=("mode",)),
]
COVERED |= {"mode"}


@pytest.mark.parametrize("case", CASES_MODE, ids=[c.id for c in CASES_MODE])
def test_mode_gradient_matches_torch(torch, case):
    check_case(torch, case)


@pytest.mark.parametrize("size", [1, 5, 16, 17, 40, 300, 2000])
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_mode_index_among_ties_matches_torch(torch, size, dtype):
    rng = np.random.default_rng(size)
    for k in (2, 5, 50):
        a = rng.integers(0, k, (3, size)).astype(dtype)
        if dtype == "float32" and size > 3:
            a[0, 2] = np.nan
        t = torch.mode(torch.tensor(a), 1)
        r = ad.mode(ad.tensor(a), 1)
        _same(r.values, t.values)
        _same(r.indices, t.indices)
    assert repr(ad.mode(ad.tensor([1.0, 2.0, 2.0]))) == repr(
        torch.mode(torch.tensor([1.0, 2.0, 2.0]))
    )


TWIN_VALUES = [
    ("copysign_", "float64", lambda T, x: x.copysign_(T.tensor([-1.0, 1.0, -0.0, 2.0]))),
    ("heaviside_", "float64", lambda T, x: x.heaviside_(T.full((4,), 0.5, dtype=T.float64))),
    ("ldexp_", "float64", lambda T, x: x.ldexp_(T.tensor([1, 2, 3, -1]))),
    ("nextafter_", "float64", lambda T, x: x.nextafter_(T.tensor([9.0, 9.0, -9.0, 0.0]))),
    ("float_power_", "float64", lambda T, x: x.float_power_(2)),
    ("gcd_", "int64", lambda T, x: x.gcd_(T.tensor([4, 6, 9, 0]))),
    ("lcm_", "int64", lambda T, x: x.lcm_(T.tensor([4, 6, 9, 0]))),
    ("bitwise_xor_", "int64", lambda T, x: x.bitwise_xor_(T.tensor([1, 2, 3, 4]))),
    ("bitwise_not_", "int64", lambda T, x: x.bitwise_not_()),
    ("logical_or_", "float64", lambda T, x: x.logical_or_(T.tensor([0.0, 0.0, 1.0, 0.0]))),
    ("logical_xor_", "float64", lambda T, x: x.logical_xor_(T.tensor([0.0, 1.0, 1.0, 0.0]))),
    ("not_equal_", "float64", lambda T, x: x.not_equal_(2.0)),
    ("greater_equal_", "float64", lambda T, x: x.greater_equal_(2.0)),
    ("less_", "float64", lambda T, x: x.less_(2.0)),
    ("torch.gcd_", "int64", lambda T, x: T.gcd_(x, T.tensor([4, 6, 9, 0]))),
    ("torch.lcm_", "int64", lambda T, x: T.lcm_(x, T.tensor([4, 6, 9, 0]))),
    ("torch.ldexp_", "float64", lambda T, x: T.ldexp_(x, T.tensor([1, 2, 3, -1]))),
    ("torch.negative_", "float64", lambda T, x: T.negative_(x)),
    ("torch.fix_", "float64", lambda T, x: T.fix_(x)),
    ("torch.rad2deg_", "float64", lambda T, x: T.rad2deg_(x)),
    ("torch.sinc_", "float64", lambda T, x: T.sinc_(x)),
    ("torch.i0_", "float64", None),  # absent in autodiag: i0 is not provided yet
]


@pytest.mark.parametrize("dtype, fn", [v[1:] for v in TWIN_VALUES], ids=[v[0] for v in TWIN_VALUES])
def test_twin_values_match_torch(torch, dtype, fn):
    if fn is None:
        assert not hasattr(ad, "i0_")  # what we leave out is absent, never a guess
        return
    data = [1.5, 2.0, -3.0, 0.0] if dtype == "float64" else [8, 3, 27, 5]
    outs = []
    for T in (torch, ad):
        x = T.tensor(data, dtype=getattr(T, dtype))
        v = x._version
        assert fn(T, x) is x
        assert x._version == v + 1
        outs.append(x)
    _same(outs[1], outs[0])


def test_set_num_interop_threads_refuses_a_second_call():
    from autodiag.ops import runtime_fns

    saved = dict(runtime_fns._threads)
    try:
        runtime_fns._threads["inter_set"] = False
        ad.set_num_interop_threads(2)
        assert ad.get_num_interop_threads() == 2
        with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
            ad.set_num_interop_threads(3)
    finally:
        runtime_fns._threads.update(saved)


# ---------------------------------------------------------------------------------------------
# torch.linalg.vector_norm / norm
# ---------------------------------------------------------------------------------------------

NORMS = [
    ("vector_norm", lambda T, x: T.linalg.vector_norm(x)),
    ("vector_norm_1_dim", lambda T, x: T.linalg.vector_norm(x, 1, dim=1)),
    ("vector_norm_inf_keep", lambda T, x: T.linalg.vector_norm(x, float("inf"), (0, 1), True)),
    ("norm", lambda T, x: T.linalg.norm(x)),
    ("norm_dim", lambda T, x: T.linalg.norm(x, dim=1)),
    ("norm_fro", lambda T, x: T.linalg.norm(x, "fro")),
    ("norm_vec3", lambda T, x: T.linalg.norm(x[0], 3)),
    ("norm_1", lambda T, x: T.linalg.norm(x, 1)),
    ("norm_inf", lambda T, x: T.linalg.norm(x, float("inf"))),
    ("norm_m1_keep", lambda T, x: T.linalg.norm(x, -1, keepdim=True)),
    ("norm_dims", lambda T, x: T.linalg.norm(x, dim=(0, 1))),
]
CASES_NORM = [Case(f"c16b-linalg_{n}", fn, (I((3, 4), "distinct"),)) for n, fn in NORMS]


@pytest.mark.parametrize("case", CASES_NORM, ids=[c.id for c in CASES_NORM])
def test_linalg_norms_match_torch(torch, case):
    check_case(torch, case)


def test_singular_value_norms_are_refused_not_guessed():
    with pytest.raises(NotImplementedError, match="linalg.norm: ord='nuc'"):
        ad.linalg.norm(ad.ones(2, 2), "nuc")


# ---------------------------------------------------------------------------------------------
# An ``import torch`` script through the CLI
# ---------------------------------------------------------------------------------------------


def test_cli_runs_an_import_torch_script_using_the_new_names(tmp_path):
    import json
    import textwrap

    from test_cli import cli

    script = tmp_path / "fit.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            torch.set_printoptions(precision=3)
            torch.set_num_threads(1)


            class Model:
                def __init__(self):
                    self.w = torch.eye(3, dtype=torch.float64).requires_grad_()

                def loss(self, x):
                    h = torch.linalg.solve(self.w + 3 * torch.eye(3, dtype=torch.float64), x)
                    h = torch.relu_(h * 1.0).lgamma_() if False else h.relu()
                    v, m = torch.var_mean(h, 0)
                    q = torch.quantile(h, 0.25)
                    return (v.sum() + m.sum() + q + torch.logdet(self.w @ self.w.T + 1.0)
                            + torch.cdist(h.T, h.T).sum() + torch.lgamma(h.abs() + 1).sum())


            def main():
                m = Model()
                x = torch.linspace(-1, 2, 12, dtype=torch.float64).reshape(3, 4)
                for _ in range(2):
                    loss = m.loss(x)
                    loss.backward()
                    with torch.no_grad():
                        m.w -= 0.01 * m.w.grad
                        m.w.grad.zero_()
                print(repr(loss.detach()))


            main()
            """
        )
    )
    r = cli("graph", str(script), "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    names = {n["name"] for n in json.loads(r.stdout)["nodes"]}
    want = {
        "LinalgSolveExBackward0",
        "VarMeanBackward0",
        "SqueezeBackward4",
        "LinalgSlogdetBackward0",
        "CdistBackward0",
        "LgammaBackward0",
    }
    assert want <= names, names


def test_a_scripts_print_options_do_not_outlive_its_run(tmp_path):
    from test_cli import cli

    script = tmp_path / "p.py"
    script.write_text(
        "import torch\ntorch.set_printoptions(precision=1, sci_mode=True)\n"
        "x = torch.tensor([1.0], requires_grad=True)\n(x * 2).sum().backward()\n"
    )
    r = cli("graph", str(script))
    assert r.exit_code == 0, r.stdout + r.stderr
    assert repr(ad.tensor([0.123456])) == "tensor([0.1235])"
