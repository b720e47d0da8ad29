"""Differential tests of ops16's pointwise ops (issue 20, ops/pointwise2.py): ``log2 log10
exp2 expm1 erfc square logaddexp logaddexp2 xlogy nan_to_num`` and their in-place twins.

Each differentiable row goes through ``test_ops_torch.check_case`` (values and dtypes in
float32 and float64, node names and ``next_functions`` to the leaves, first and second
derivatives); ``test_ops_torch.test_registry_is_covered`` counts these rows too. Special values
(infinities, NaN, zeros), integer and float16 inputs, scalar overloads and the in-place forms'
version counters and nodes are checked against torch below.
"""

from __future__ import annotations

import json
import textwrap
import warnings

import numpy as np
import pytest
from test_cli import cli
from test_ops_torch import Case, I, _np, check_case

import autodiag as ad


def _u(shape, lo, hi, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _sid(shape) -> str:
    return "x".join(map(str, shape)) or "0d"


SHAPES = [(), (5,), (3, 4), (0,), (2, 0)]

UNARY = [
    # (id, fn, lo, hi, registry names)
    ("log2", lambda T, x: T.log2(x), 0.2, 4.0, ("log2",)),
    ("log2_m", lambda T, x: x.log2(), 0.2, 4.0, ("log2",)),
    ("log10", lambda T, x: x.log10(), 0.2, 4.0, ("log10",)),
    ("exp2", lambda T, x: T.exp2(x), -3.0, 3.0, ("exp2",)),
    ("expm1", lambda T, x: x.expm1(), -3.0, 3.0, ("expm1",)),
    ("erfc", lambda T, x: T.erfc(x), -2.5, 2.5, ("erfc",)),
    ("square", lambda T, x: x.square(), -2.0, 2.0, ("square",)),
    ("square_fn", lambda T, x: T.square(x), -2.0, 2.0, ("square",)),
    ("nan_to_num", lambda T, x: x.nan_to_num(), -2.0, 2.0, ("nan_to_num",)),
    ("chain", lambda T, x: (x.expm1() * 0.3).exp2().log10().square().erfc(), -1.0, 1.0, ()),
]

CASES = [
    Case(f"o16-{name}-{_sid(s)}", fn, (I(data=_u(s, lo, hi)),), op=ops)
    for name, fn, lo, hi, ops in UNARY
    for s in SHAPES
]

BINARY = [
    ("logaddexp", lambda T, a, b: T.logaddexp(a, b), ("logaddexp",)),
    ("logaddexp_m", lambda T, a, b: a.logaddexp(b), ("logaddexp",)),
    ("logaddexp2", lambda T, a, b: T.logaddexp2(a, b), ("logaddexp2",)),
    ("logaddexp2_m", lambda T, a, b: a.logaddexp2(b), ("logaddexp2",)),
    ("xlogy", lambda T, a, b: T.xlogy(a, b.abs()), ("xlogy",)),
    ("xlogy_m", lambda T, a, b: a.xlogy(b.abs()), ("xlogy",)),
]
PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3,)), ((0, 2), (2,))]
CASES += [
    Case(f"o16-{name}-{_sid(sa)}-{_sid(sb)}", fn, (I(sa, "away"), I(sb, "away")), op=ops)
    for name, fn, ops in BINARY
    for sa, sb in PAIRS
]
CASES += [
    Case(f"o16-{name}-const", fn, (I((3, 4), "away"), I((3, 4), "away", grad=False)), op=ops)
    for name, fn, ops in BINARY
]
CASES += [
    Case(f"o16-{name}-const_self", fn, (I((3, 4), "away", grad=False), I((3, 4), "away")), op=ops)
    for name, fn, ops in BINARY
]
CASES += [
    # the scalar overloads: XlogyBackward2 (number other), XlogyBackward1 (number self)
    Case("o16-xlogy_scalar_other", lambda T, x: T.xlogy(x, 2.5), (I((3, 4)),), op=("xlogy",)),
    Case("o16-xlogy_scalar_other_m", lambda T, x: x.xlogy(3), (I((3,)),), op=("xlogy",)),
    Case("o16-xlogy_scalar_self", lambda T, x: T.xlogy(1.5, x.abs()), (I((3, 4), "away"),)),
    Case("o16-xlogy_scalar_self_0d", lambda T, x: T.xlogy(-2, x.abs()), (I((), "away"),)),
]

# what test_ops_torch.test_registry_is_covered counts
COVERED = {n for c in CASES for n in c.op}

_ids = [c.id for c in CASES]
assert len(set(_ids)) == len(_ids), "duplicate case ids"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_op_matches_torch(torch, case):
    check_case(torch, case)


# ---------------------------------------------------------------------------------------------
# Values: special values, integer/bool/float16 inputs, promotion
# ---------------------------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")
SPECIAL = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 1e-30, 30.0, -30.0, 700.0]


def _t(T, a, **kw):
    return T.tensor(np.array(a), **kw)


def _pairs():
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    return a.ravel(), b.ravel()


VALUES = [
    *[
        (
            f"{n}_special_{dt}",
            lambda T, n=n, dt=dt: getattr(_t(T, SPECIAL, dtype=getattr(T, dt)), n)(),
        )
        for n in ("log2", "log10", "exp2", "expm1", "erfc", "square", "nan_to_num")
        for dt in ("float64", "float32", "float16")
    ],
    *[
        (f"{n}_{dt}", lambda T, n=n, dt=dt: getattr(_t(T, [0, 1, 3]).to(getattr(T, dt)), n)())
        for n in ("log2", "log10", "exp2", "expm1", "erfc", "square", "nan_to_num")
        for dt in ("int64", "int32", "uint8", "bool")
    ],
    *[
        (f"{n}_special_pairs", lambda T, n=n: getattr(T, n)(*(_t(T, p) for p in _pairs())))
        for n in ("logaddexp", "logaddexp2", "xlogy")
    ],
    ("erfc_tail", lambda T: _t(T, [5.0, 10.0, 26.0, 27.0, -6.0]).erfc()),
    ("erfc_tail_f32", lambda T: _t(T, [5.0, 9.0, 10.0], dtype=T.float32).erfc()),
    ("xlogy_zero_zero", lambda T: T.xlogy(_t(T, [0.0, 0.0, 0.0]), _t(T, [0.0, NAN, -1.0]))),
    ("xlogy_int", lambda T: T.xlogy(_t(T, [0, 1, 2]), _t(T, [0, 3, 5]))),
    ("xlogy_bool", lambda T: T.xlogy(_t(T, [True, False]), _t(T, [True, True]))),
    ("xlogy_int_scalar", lambda T: T.xlogy(_t(T, [0, 1, 2]), 2)),
    ("xlogy_scalar_int", lambda T: T.xlogy(2, _t(T, [0, 1, 2]))),
    ("xlogy_scalar_zero", lambda T: T.xlogy(0.0, _t(T, [0.0, NAN, 2.0]))),
    ("xlogy_f32_f64", lambda T: T.xlogy(T.ones(2), T.full((2,), 2.0, dtype=T.float64))),
    ("xlogy_f32_0d_f64", lambda T: T.xlogy(T.ones(2) * 3, T.tensor(2.0, dtype=T.float64))),
    ("xlogy_f16_scalar", lambda T: T.xlogy(T.ones(2, dtype=T.float16) * 3, 2.5)),
    ("logaddexp_f32_f64", lambda T: T.logaddexp(T.ones(2), T.ones(2, dtype=T.float64))),
    (
        "logaddexp2_f16",
        lambda T: T.logaddexp2(T.ones(2, dtype=T.float16), T.zeros(2, dtype=T.float16)),
    ),
    ("nan_to_num_args", lambda T: _t(T, [NAN, INF, -INF, 1.0]).nan_to_num(1.5, 2.5, -3.5)),
    ("nan_to_num_kw", lambda T: T.nan_to_num(_t(T, [NAN, INF, -INF]), posinf=7.0)),
    ("nan_to_num_f32", lambda T: _t(T, [NAN, INF, -INF], dtype=T.float32).nan_to_num(neginf=1)),
    ("nan_to_num_f16_big", lambda T: _t(T, [INF, -INF], dtype=T.float16).nan_to_num(posinf=1e6)),
    ("square_bool", lambda T: _t(T, [True, False]).square()),
    ("square_0d_int", lambda T: T.square(T.tensor(3))),
    ("empty_f32", lambda T: T.ones(0, 3).log2()),
]


def _same(a, t, where="value", atol=0.0):
    assert str(a.dtype).rsplit(".")[-1] == str(t.dtype).rsplit(".")[-1], f"{where}: dtype"
    assert tuple(a.shape) == tuple(t.shape), f"{where}: shape {a.shape} vs {t.shape}"
    an, tn = _np(a), _np(t)
    if tn.dtype.kind == "f":
        rtol = 1e-6 if tn.dtype == np.float64 else 2e-3 if tn.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(an, tn, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        # the same infinities, and the same signs of zero
        exact = ((an == 0) & (tn == 0)) | np.isinf(tn)
        assert (np.signbit(an) == np.signbit(tn))[exact].all(), where
    else:
        np.testing.assert_array_equal(an, tn, err_msg=where)


@pytest.mark.parametrize("fn", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_value_matches_torch(torch, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # atol: logaddexp2(-1, -1) is -4.8e-17 in PyTorch (its rounding), 0 here
        _same(fn(ad), fn(torch), atol=1e-15)


def test_erfc_keeps_its_tail():
    # 1 - erf(x) would be 0 from x = 6: erfc(10) is 2.09e-45
    assert float(ad.tensor([10.0], dtype=ad.float64).erfc()[0]) == pytest.approx(
        2.088487583762545e-45
    )


# ---------------------------------------------------------------------------------------------
# Gradients at special values
# ---------------------------------------------------------------------------------------------


def _grads(T, fn, *arrays, create_graph=False):
    xs = [T.tensor(np.array(a), dtype=T.float64, requires_grad=True) for a in arrays]
    out = fn(T, *xs)
    gs = T.autograd.grad(out, xs, T.ones_like(out) * 1.5, create_graph=create_graph)
    if not create_graph:
        return gs
    live = [g for g in gs if g.requires_grad]
    if not live:
        return gs
    return gs + T.autograd.grad(sum(g.sum() for g in live), xs, allow_unused=True)


SPECIAL_GRADS = [
    ("log2", lambda T, x: x.log2(), (SPECIAL,)),
    ("log10", lambda T, x: x.log10(), (SPECIAL,)),
    ("exp2", lambda T, x: x.exp2(), (SPECIAL,)),
    ("expm1", lambda T, x: x.expm1(), (SPECIAL,)),
    ("erfc", lambda T, x: x.erfc(), (SPECIAL,)),
    ("square", lambda T, x: x.square(), (SPECIAL,)),
    ("nan_to_num", lambda T, x: x.nan_to_num(), (SPECIAL,)),
    ("nan_to_num_args", lambda T, x: T.nan_to_num(x, 1.0, 2.0, 3.0), (SPECIAL,)),
    ("logaddexp", lambda T, a, b: T.logaddexp(a, b), _pairs()),
    ("logaddexp2", lambda T, a, b: T.logaddexp2(a, b), _pairs()),
    ("xlogy", lambda T, a, b: T.xlogy(a, b), _pairs()),
    ("xlogy_scalar_other0", lambda T, a: T.xlogy(a, 0.0), (SPECIAL,)),
    ("xlogy_scalar_other_neg", lambda T, a: T.xlogy(a, -1), (SPECIAL,)),
    ("xlogy_scalar_self", lambda T, b: T.xlogy(0.0, b), (SPECIAL,)),
    ("xlogy_scalar_other_nan", lambda T, a: T.xlogy(a, NAN), (SPECIAL,)),
    ("xlogy_scalar_other_pos", lambda T, a: T.xlogy(a, 2.0), (SPECIAL,)),
    ("xlogy_scalar_other_inf", lambda T, a: a.xlogy(INF), (SPECIAL,)),
]


@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
@pytest.mark.parametrize(
    "fn, arrays", [g[1:] for g in SPECIAL_GRADS], ids=[g[0] for g in SPECIAL_GRADS]
)
def test_gradient_at_special_values_matches_torch(torch, fn, arrays, second):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _grads(ad, fn, *arrays, create_graph=second)
        t = _grads(torch, fn, *arrays, create_graph=second)
    assert len(a) == len(t)
    for k, (ga, gt) in enumerate(zip(a, t)):
        if gt is None:
            assert ga is None, f"grad {k}"
            continue
        # atol: the second derivatives of logaddexp cancel to ~1e-29 (rounding noise) in both
        _same(ga.detach(), gt.detach(), f"grad {k}", atol=1e-15)


def _names(fn):
    """The node names of a graph, walked iteratively (sorted: the graph's multiset)."""
    out, stack, seen = [], [fn], set()
    while stack:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f.name())
        stack.extend(n for n, _ in f.next_functions)
    return sorted(out)


FIRST_GRAPHS = [
    ("log2", lambda T, x, y: x.log2()),
    ("log10", lambda T, x, y: T.log10(x)),
    ("exp2", lambda T, x, y: x.exp2()),
    ("expm1", lambda T, x, y: T.expm1(x)),
    ("erfc", lambda T, x, y: x.erfc()),
    ("nan_to_num", lambda T, x, y: x.nan_to_num()),
    ("square", lambda T, x, y: x.square()),
    ("pow3", lambda T, x, y: x.pow(3)),
    ("pow_half", lambda T, x, y: (x + 1) ** 0.5),
    ("logaddexp", lambda T, x, y: T.logaddexp(x, y)),
    ("logaddexp2", lambda T, x, y: x.logaddexp2(y)),
    ("xlogy", lambda T, x, y: T.xlogy(x, y)),
    ("xlogy_number_self", lambda T, x, y: T.xlogy(2.0, y)),
    ("xlogy_number_other", lambda T, x, y: T.xlogy(x, 2.0)),
    ("xlogy_number_other_0", lambda T, x, y: x.xlogy(0)),
]


@pytest.mark.parametrize("fn", [c[1] for c in FIRST_GRAPHS], ids=[c[0] for c in FIRST_GRAPHS])
def test_first_derivative_graph_has_torchs_nodes(torch, fn):
    """create_graph records derivatives.yaml's formula as PyTorch does: its Scalar overloads
    (MulBackward1, AddBackward1), masked_fill, pow(2, .) (NOTE [Scalar overloads in formulas])."""

    def run(T):
        x = T.tensor([0.0, 1.5], dtype=T.float64, requires_grad=True)
        y = T.tensor([2.0, 0.5], dtype=T.float64, requires_grad=True)
        seed = T.ones(2, dtype=T.float64, requires_grad=True)
        gs = T.autograd.grad(fn(T, x, y), (x, y), seed, create_graph=True, allow_unused=True)
        return [None if g is None or g.grad_fn is None else _names(g.grad_fn) for g in gs]

    assert run(ad) == run(torch)


# ---------------------------------------------------------------------------------------------
# In-place twins: version counter, node, gradient
# ---------------------------------------------------------------------------------------------

INPLACE = [
    ("log2_", lambda x: x.log2_()),
    ("log10_", lambda x: x.log10_()),
    ("exp2_", lambda x: x.exp2_()),
    ("expm1_", lambda x: x.expm1_()),
    ("erfc_", lambda x: x.erfc_()),
    ("square_", lambda x: x.square_()),
    ("nan_to_num_", lambda x: x.nan_to_num_(posinf=3.0)),
    ("xlogy_", lambda x: x.xlogy_(x * 2 + 1)),
    ("xlogy_scalar", lambda x: x.xlogy_(2.5)),
]


@pytest.mark.parametrize("fn", [c[1] for c in INPLACE], ids=[c[0] for c in INPLACE])
def test_inplace_twin_matches_torch(torch, fn):
    def run(T):
        leaf = T.tensor([0.1, 0.3, 0.6], dtype=T.float64, requires_grad=True)
        x = leaf * 1.0
        assert fn(x) is x
        assert x._version == 1
        name = x.grad_fn.name()
        (x * T.tensor([1.0, 2.0, 3.0], dtype=T.float64)).sum().backward()
        return name, x.detach(), leaf.grad

    (an, av, ag), (tn, tv, tg) = run(ad), run(torch)
    assert an == tn
    _same(av, tv)
    _same(ag, tg, "grad")


@pytest.mark.parametrize("name", ["log2_", "exp2_", "erfc_", "square_", "xlogy_"])
def test_inplace_on_a_saved_input_is_reported(torch, name):
    def run(T):
        x = T.tensor([0.5, 0.2], requires_grad=True) * 1.0
        z = x.log2()  # saves x
        args = (x + 1,) if name == "xlogy_" else ()
        getattr(x, name)(*args)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()

    run(torch)
    run(ad)


def test_inplace_into_integer_refuses_as_torch(torch):
    from differential import same_error

    same_error(lambda T: T.tensor([1, 2]).log2_(), torch, "result type Float")
    with pytest.raises(RuntimeError):
        ad.tensor([1, 2]).log2_()


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

ERRORS = [
    ("square_number", lambda T: T.square(2), TypeError, "must be Tensor, not int"),
    ("square_bool_", lambda T: T.tensor([True]).square_(), RuntimeError, "can't be cast"),
    ("log2_int_", lambda T: T.tensor([1, 2]).log2_(), RuntimeError, "can't be cast"),
    ("xlogy_int_", lambda T: T.tensor([1]).xlogy_(T.tensor([2])), RuntimeError, "can't be cast"),
    (
        "xlogy_broadcast_",
        lambda T: T.ones(2).xlogy_(T.ones(2, 1)),
        RuntimeError,
        "doesn't match the broadcast shape",
    ),
    ("nan_to_num_str", lambda T: T.ones(2).nan_to_num(nan="x"), TypeError, "must be float"),
    (
        "logaddexp_int",
        lambda T: T.logaddexp(_t(T, [1]), _t(T, [2])),
        NotImplementedError,
        "logaddexp",
    ),
    (
        "logaddexp2_bool",
        lambda T: T.logaddexp2(_t(T, [True]), _t(T, [False])),
        NotImplementedError,
        "logaddexp2",
    ),
    ("logaddexp_scalar", lambda T: T.logaddexp(T.ones(2), 2.0), TypeError, "must be Tensor"),
    ("logaddexp2_scalar_self", lambda T: T.logaddexp2(2.0, T.ones(2)), TypeError, "must be Tensor"),
    (
        "logaddexp_shape",
        lambda T: T.logaddexp(T.ones(2), T.ones(3)),
        RuntimeError,
        "size of tensor a",
    ),
    ("xlogy_shape", lambda T: T.xlogy(T.ones(2), T.ones(3)), RuntimeError, "size of tensor a"),
    ("xlogy_numbers", lambda T: T.xlogy(2.0, 3.0), TypeError, "xlogy"),
]


@pytest.mark.parametrize("fn, exc, phrase", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_matches_torch(torch, fn, exc, phrase):
    from differential import same_error

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(fn, torch, phrase)
    with pytest.raises(exc):
        fn(ad)


# ---------------------------------------------------------------------------------------------
# Through the CLI: an ``import torch`` script
# ---------------------------------------------------------------------------------------------


def test_cli_graph_names_the_new_nodes(tmp_path):
    script = tmp_path / "net.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch


            def main():
                x = torch.tensor([0.5, 2.0], requires_grad=True)
                y = torch.logaddexp(x.log2(), x.expm1()) + torch.xlogy(x, x.exp2())
                loss = (y.erfc() + x.square() + x.nan_to_num()).sum()
                loss.backward()


            main()
            """
        )
    )
    r = cli("graph", str(script), "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    names = {n["name"] for n in json.loads(r.stdout)["nodes"]}
    want = {
        "Log2Backward0",
        "Expm1Backward0",
        "Exp2Backward0",
        "LogaddexpBackward0",
        "XlogyBackward0",
        "ErfcBackward0",
        "PowBackward0",
        "NanToNumBackward0",
    }
    assert want <= names, names
