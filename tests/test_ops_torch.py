"""Differential tests of every op against PyTorch (the oracle).

One table row per op form: a function ``fn(T, *xs)`` written once for both libraries (``T`` is
``torch`` or ``autodiag``) and the specs of its tensor inputs. For each differentiable row we
check, against torch: forward values and dtype (float64 and float32), the grad_fn graph (node
names, ``next_functions`` lengths and input_nr, walked to the leaves), first derivatives through
``backward(g)`` and second derivatives through ``autograd.grad(..., create_graph=True)``.
Non-differentiable ops (comparisons, argmax, dtype promotion) have a forward-only table.

Random inputs avoid kinks and domain edges (see ``KINDS``); ties are tested on purpose in
``TIES``. ``test_registry_is_covered`` fails when a newly registered op has no row here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

import autodiag as ad

# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def _away(rng, shape):
    """|x| in [0.2, 2]: clear of the kinks of abs/relu/sign and of division by ~0."""
    return rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _grid(rng, shape):
    """Values within 0.1 of k/2 + 1/4: clear of integers and halves (floor, round, clamp at
    integer bounds all have their kinks there)."""
    return rng.integers(-6, 6, shape) / 2 + 0.25 + rng.uniform(-0.1, 0.1, shape)


def _distinct(rng, shape):
    """Distinct values (no ties for max/min), spaced at least 0.05 apart."""
    n = int(np.prod(shape, dtype=np.int64))
    return (rng.permutation(n) * 0.1 - n * 0.05 + rng.uniform(0, 0.05, n)).reshape(shape)


KINDS = {
    "any": lambda rng, shape: rng.standard_normal(shape),
    "pos": lambda rng, shape: rng.uniform(0.2, 2.0, shape),
    "unit": lambda rng, shape: rng.uniform(-0.9, 0.9, shape),
    "away": _away,
    "grid": _grid,
    "distinct": _distinct,
}


@dataclass(frozen=True)
class I:  # noqa: E742 - an input spec reads best short in the tables
    """An input: shape and value kind, or fixed ``data``; ``grad`` = requires_grad."""

    shape: tuple = (3, 4)
    kind: str = "any"
    grad: bool = True
    data: object = None

    def array(self, rng) -> np.ndarray:
        if self.data is not None:
            return np.array(self.data)
        return np.asarray(KINDS[self.kind](rng, self.shape), dtype=np.float64)


@dataclass
class Case:
    """One op form. ``op``: the REGISTRY names it covers. ``second``: check double backward
    (False only with a reason in ``second_skip``)."""

    id: str
    fn: object
    inputs: tuple
    op: tuple = ()
    second: bool = True
    f32: bool = True
    raises_second: object = None  # an exception type autodiag raises for double backward
    rtol: float = 1e-6
    extra: dict = field(default_factory=dict)


def _tensors(T, arrays, specs, dtype: str):
    out = []
    for a, s in zip(arrays, specs):
        if a.dtype.kind == "f":
            a = a.astype(np.dtype(dtype))
        t = T.tensor(a.copy())
        if s.grad and a.dtype.kind == "f":
            t.requires_grad_(True)
        out.append(t)
    return out


def F(T):
    """``torch.nn.functional``; for autodiag (no ``nn`` yet) its registered ops."""
    if hasattr(T, "nn"):
        return T.nn.functional
    from types import SimpleNamespace

    from autodiag.ops import REGISTRY

    return SimpleNamespace(**REGISTRY)


def _dt(t) -> str:
    """A dtype's name without the library prefix (``float32``)."""
    return str(t.dtype).rsplit(".", 1)[-1]


def _np(t) -> np.ndarray:
    if getattr(t, "_is_zerotensor", lambda: False)():
        return np.zeros(tuple(t.shape))  # torch's efficient zeros (e.g. abs'' = 0)
    return np.asarray(t.detach().numpy())


def _is_zero(t) -> bool:
    """None, or a tensor of zeros (torch's ZeroTensor included)."""
    return t is None or np.allclose(_np(t), 0, rtol=0, atol=1e-12)


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ---------------------------------------------------------------------------------------------
# Graph comparison: walk torch's and autodiag's graphs in lockstep
# ---------------------------------------------------------------------------------------------


def _name(fn):
    return None if fn is None else type(fn).__name__


def assert_same_graph(tfn, afn, where="out"):
    assert _name(afn) == _name(tfn), f"{where}: grad_fn {_name(afn)} != torch {_name(tfn)}"
    if tfn is None:
        return
    assert afn.name() == tfn.name(), f"{where}: name() {afn.name()} != torch {tfn.name()}"
    stack, seen = [(tfn, afn, where)], set()
    while stack:
        t, a, path = stack.pop()
        if (id(t), id(a)) in seen:
            continue
        seen.add((id(t), id(a)))
        tn, an = t.next_functions, a.next_functions
        sig_t = [(_name(f), nr) for f, nr in tn]
        sig_a = [(_name(f), nr) for f, nr in an]
        assert sig_a == sig_t, f"{path} -> {_name(t)}.next_functions: {sig_a} != torch {sig_t}"
        for i, ((ft, _), (fa, _)) in enumerate(zip(tn, an)):
            if ft is not None:
                stack.append((ft, fa, f"{path}.{_name(t)}[{i}]"))


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------

TOL64 = dict(rtol=1e-6, atol=1e-10)
TOL32 = dict(rtol=1e-5, atol=1e-6)


def _run(T, case, arrays, dtype):
    xs = _tensors(T, arrays, case.inputs, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = _as_tuple(case.fn(T, *xs))
    return xs, outs


def _seed(case_id: str) -> int:
    return sum(map(ord, case_id)) * 7919 % 2**31


def check_case(torch, case: Case):
    rng = np.random.default_rng(_seed(case.id))
    arrays = [s.array(rng) for s in case.inputs]

    # 1. forward values and dtypes, float32 then float64 (graph checked on both)
    for dtype_name, tol in (("float32", TOL32), ("float64", TOL64)):
        if dtype_name == "float32" and not case.f32:
            continue
        tx, touts = _run(torch, case, arrays, dtype_name)
        ax, aouts = _run(ad, case, arrays, dtype_name)
        assert len(aouts) == len(touts)
        for k, (t, a) in enumerate(zip(touts, aouts)):
            assert _dt(a) == _dt(t), f"output {k} dtype ({dtype_name} inputs)"
            assert tuple(a.shape) == tuple(t.shape), f"output {k} shape ({dtype_name} inputs)"
            tol_k = dict(tol, rtol=max(tol["rtol"], case.rtol))
            if t.dtype == torch.float32:
                tol_k = TOL32
            np.testing.assert_allclose(
                _np(a), _np(t), err_msg=f"output {k} ({dtype_name})", **tol_k
            )
            # 2 + 3. node names and next_functions, to the leaves
            assert_same_graph(t.grad_fn, a.grad_fn, f"output{k}[{dtype_name}]")
            assert a.requires_grad == t.requires_grad

    # 4. first derivatives through backward(g) (float64; tx/ax are the float64 run's)
    diff = [k for k, t in enumerate(touts) if t.requires_grad]
    if not diff:
        return
    gs = [rng.standard_normal(touts[k].shape) for k in diff]
    torch.autograd.backward([touts[k] for k in diff], [torch.tensor(g) for g in gs])
    ad.autograd.backward([aouts[k] for k in diff], [ad.tensor(g) for g in gs])
    for i, (t, a) in enumerate(zip(tx, ax)):
        if not t.requires_grad:
            continue
        if t.grad is None:
            assert a.grad is None, f"input {i}: grad should be None"
            continue
        assert a.grad is not None, f"input {i}: grad is None, torch has one"
        assert _dt(a.grad) == _dt(t.grad)
        np.testing.assert_allclose(_np(a.grad), _np(t.grad), err_msg=f"grad of input {i}", **TOL64)

    # 5. second derivatives: d/dx sum_i <dL/dx_i, v_i>
    if not case.second:
        return
    tx, touts = _run(torch, case, arrays, "float64")
    ax, aouts = _run(ad, case, arrays, "float64")
    tin = [t for t in tx if t.requires_grad]
    ain = [a for a in ax if a.requires_grad]
    tg = torch.autograd.grad(
        [touts[k] for k in diff],
        tin,
        [torch.tensor(g) for g in gs],
        create_graph=True,
        allow_unused=True,
    )
    if case.raises_second is not None:
        with pytest.raises(case.raises_second):
            ag = ad.autograd.grad(
                [aouts[k] for k in diff],
                ain,
                [ad.tensor(g) for g in gs],
                create_graph=True,
                allow_unused=True,
            )
            s = sum(
                (gi * ad.tensor(rng.standard_normal(gi.shape))).sum()
                for gi in ag
                if gi is not None and gi.requires_grad
            )
            ad.autograd.grad(s, ain, allow_unused=True)
        return
    ag = ad.autograd.grad(
        [aouts[k] for k in diff],
        ain,
        [ad.tensor(g) for g in gs],
        create_graph=True,
        allow_unused=True,
    )
    for i, (t, a) in enumerate(zip(tg, ag)):
        assert (a is None) == (t is None), f"create_graph grad {i}: None mismatch"
        if t is not None:
            np.testing.assert_allclose(_np(a), _np(t), err_msg=f"create_graph grad {i}", **TOL64)
    vs = [None if t is None else rng.standard_normal(t.shape) for t in tg]
    live = [i for i, t in enumerate(tg) if t is not None and t.requires_grad]
    alive = [i for i, a in enumerate(ag) if a is not None and a.requires_grad]
    if not live:
        # torch's first derivative is constant in the inputs: so must autodiag's be (or zero)
        for i in alive:
            ts = ad.autograd.grad((ag[i] * ad.tensor(vs[i])).sum(), ain, allow_unused=True)
            for x in ts:
                assert x is None or not np.any(_np(x)), "second derivative should be zero"
        return
    ts = sum((tg[i] * torch.tensor(vs[i])).sum() for i in live)
    t2 = torch.autograd.grad(ts, tin, allow_unused=True)
    # autodiag may know a first derivative is constant where torch records it (relu's mask)
    if alive:
        as_ = sum((ag[i] * ad.tensor(vs[i])).sum() for i in alive)
        a2 = ad.autograd.grad(as_, ain, allow_unused=True)
    else:
        a2 = [None] * len(ain)
    for i, (t, a) in enumerate(zip(t2, a2)):
        if _is_zero(t):
            assert _is_zero(a), f"second derivative {i}: torch's is zero"
            continue
        assert a is not None, f"second derivative {i} is None, torch has one"
        np.testing.assert_allclose(_np(a), _np(t), err_msg=f"second derivative {i}", **TOL64)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

SHAPES1 = [(), (5,), (3, 4)]
SHAPES2 = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (3,)), ((2, 3), ())]


def _sid(shape) -> str:
    return "x".join(map(str, shape)) or "0d"


UNARY = [
    # (id, fn, kind, registry names)
    ("neg", lambda T, x: -x, "any", ("neg",)),
    ("neg_fn", lambda T, x: T.neg(x), "any", ("neg", "negative")),
    ("abs", lambda T, x: T.abs(x), "away", ("abs",)),
    ("abs_op", lambda T, x: abs(x), "away", ("abs",)),
    ("exp", lambda T, x: T.exp(x), "any", ("exp",)),
    ("log", lambda T, x: T.log(x), "pos", ("log",)),
    ("log1p", lambda T, x: T.log1p(x), "pos", ("log1p",)),
    ("sqrt", lambda T, x: T.sqrt(x), "pos", ("sqrt",)),
    ("rsqrt", lambda T, x: T.rsqrt(x), "pos", ("rsqrt",)),
    ("reciprocal", lambda T, x: T.reciprocal(x), "away", ("reciprocal",)),
    ("sin", lambda T, x: T.sin(x), "any", ("sin",)),
    ("cos", lambda T, x: T.cos(x), "any", ("cos",)),
    ("tan", lambda T, x: T.tan(x), "unit", ("tan",)),
    ("tanh", lambda T, x: T.tanh(x), "any", ("tanh",)),
    ("sigmoid", lambda T, x: T.sigmoid(x), "any", ("sigmoid",)),
    ("erf", lambda T, x: x.erf(), "any", ("erf",)),
    ("erfinv", lambda T, x: x.erfinv(), "unit", ("erfinv",)),
    ("relu", lambda T, x: T.relu(x), "away", ("relu",)),
    ("leaky_relu", lambda T, x: F(T).leaky_relu(x), "away", ("leaky_relu",)),
    ("leaky_relu_0.2", lambda T, x: F(T).leaky_relu(x, 0.2), "away", ()),
    ("gelu", lambda T, x: F(T).gelu(x), "any", ("gelu",)),
    ("gelu_tanh", lambda T, x: F(T).gelu(x, approximate="tanh"), "any", ()),
    ("softplus", lambda T, x: F(T).softplus(x), "any", ("softplus",)),
    ("softplus_beta", lambda T, x: F(T).softplus(x, beta=2.0, threshold=1.0), "away", ()),
    ("clamp_min", lambda T, x: T.clamp(x, min=-1.0), "grid", ("clamp",)),
    ("clamp_max", lambda T, x: T.clamp(x, max=1.0), "grid", ("clamp",)),
    ("clamp_both", lambda T, x: T.clamp(x, -1.0, 1.0), "grid", ("clamp",)),
    ("clamp_method", lambda T, x: x.clamp(min=0), "grid", ("clamp",)),
    ("clip", lambda T, x: T.clip(x, -1, 1), "grid", ("clip",)),
    ("clamp_min_fn", lambda T, x: T.clamp_min(x, -1.0), "grid", ("clamp_min",)),
    ("clamp_max_fn", lambda T, x: T.clamp_max(x, 1.0), "grid", ("clamp_max",)),
    ("round", lambda T, x: T.round(x), "grid", ("round",)),
    ("round_decimals", lambda T, x: T.round(x, decimals=1), "grid", ("round",)),
    ("sign", lambda T, x: T.sign(x), "away", ("sign",)),
    ("sgn", lambda T, x: T.sgn(x), "away", ("sgn",)),
    ("floor", lambda T, x: T.floor(x), "grid", ("floor",)),
    ("ceil", lambda T, x: T.ceil(x), "grid", ("ceil",)),
    ("trunc", lambda T, x: T.trunc(x), "grid", ("trunc",)),
    ("pow2", lambda T, x: x**2, "any", ("pow",)),
    ("pow3", lambda T, x: T.pow(x, 3), "any", ("pow",)),
    ("pow2.0", lambda T, x: x**2.0, "any", ("pow",)),
    ("pow0.5", lambda T, x: x**0.5, "pos", ("pow",)),
    ("pow-1.5", lambda T, x: x**-1.5, "pos", ("pow",)),
    ("pow0", lambda T, x: x**0, "any", ("pow",)),
    ("pow1", lambda T, x: x**1, "any", ("pow",)),
    ("rpow2", lambda T, x: 2**x, "any", ("pow",)),
    ("rpow0.5", lambda T, x: 0.5**x, "any", ("pow",)),
    ("rpow_fn", lambda T, x: T.pow(3.0, x), "any", ("pow",)),
    ("x+2", lambda T, x: x + 2, "any", ("add",)),
    ("2+x", lambda T, x: 2 + x, "any", ("add",)),
    ("x+2.5", lambda T, x: x + 2.5, "any", ("add",)),
    ("x-2", lambda T, x: x - 2, "any", ("sub",)),
    ("2-x", lambda T, x: 2 - x, "any", ("sub", "rsub")),
    ("rsub", lambda T, x: T.rsub(x, 2.0), "any", ("rsub",)),
    ("x*2", lambda T, x: x * 2, "any", ("mul",)),
    ("2*x", lambda T, x: 2 * x, "any", ("mul",)),
    ("x/2", lambda T, x: x / 2, "any", ("div",)),
    ("2/x", lambda T, x: 2 / x, "away", ("div",)),
    ("x.add(2,alpha)", lambda T, x: x.add(2, alpha=3), "any", ("add",)),
    ("div_floor", lambda T, x: T.div(x, 0.7, rounding_mode="floor"), "grid", ("div",)),
    ("div_trunc", lambda T, x: T.div(x, 0.7, rounding_mode="trunc"), "grid", ("div",)),
    ("x%1.5", lambda T, x: x % 1.5, "grid", ("remainder",)),
    ("sum_of_chain", lambda T, x: (T.exp(x) * T.sin(x) + x).tanh(), "any", ()),
]

UNARY_CASES = [
    Case(f"{name}-{_sid(s)}", fn, (I(s, kind),), op=ops)
    for name, fn, kind, ops in UNARY
    for s in SHAPES1
]
# gelu's exact (erf) form: double backward is its own case so its support is explicit.

BINARY = [
    ("add", lambda T, x, y: x + y, "any", "any", ("add",)),
    ("add_alpha", lambda T, x, y: T.add(x, y, alpha=2), "any", "any", ("add",)),
    ("sub", lambda T, x, y: x - y, "any", "any", ("sub",)),
    ("sub_alpha", lambda T, x, y: T.sub(x, y, alpha=0.5), "any", "any", ("sub", "subtract")),
    ("mul", lambda T, x, y: x * y, "any", "any", ("mul",)),
    ("multiply", lambda T, x, y: T.multiply(x, y), "any", "any", ("multiply",)),
    ("div", lambda T, x, y: x / y, "any", "away", ("div",)),
    ("divide", lambda T, x, y: T.divide(x, y), "any", "away", ("divide", "true_divide")),
    ("pow", lambda T, x, y: x**y, "pos", "any", ("pow",)),
    ("pow_fn", lambda T, x, y: T.pow(x, y), "pos", "any", ("pow",)),
    ("maximum", lambda T, x, y: T.maximum(x, y), "distinct", "distinct", ("maximum",)),
    ("minimum", lambda T, x, y: T.minimum(x, y), "distinct", "distinct", ("minimum",)),
    ("where", lambda T, x, y: T.where(x > y, x, y), "distinct", "distinct", ("where",)),
    ("where_cond_const", lambda T, x, y: T.where(y > 0, x * 2, y), "any", "any", ("where",)),
    ("remainder", lambda T, x, y: T.remainder(x, y), "any", "away", ("remainder",)),
    ("mixed_chain", lambda T, x, y: (x * y + x / (1 + y * y)).sum(), "any", "any", ()),
]

BINARY_CASES = [
    Case(f"{name}-{_sid(sa)}-{_sid(sb)}", fn, (I(sa, ka), I(sb, kb)), op=ops)
    for name, fn, ka, kb, ops in BINARY
    for sa, sb in SHAPES2
]
# an input that needs no grad: (None, 0) in next_functions, no grad for it
BINARY_CASES += [
    Case(f"{name}-const_other", fn, (I((3, 4), ka), I((3, 4), kb, grad=False)), op=ops)
    for name, fn, ka, kb, ops in BINARY
] + [
    Case(f"{name}-const_self", fn, (I((3, 4), ka, grad=False), I((3, 4), kb)), op=ops)
    for name, fn, ka, kb, ops in BINARY
]
BINARY_CASES += [
    Case("where_scalar_other", lambda T, x: T.where(x > 0, x, 0.0), (I((3, 4)),), op=("where",)),
    Case("where_scalar_self", lambda T, x: T.where(x > 0, 1.0, x), (I((3, 4)),), op=("where",)),
    Case(
        "maximum_bcast_const",
        lambda T, x: T.maximum(x, T.tensor(0.3, dtype=x.dtype)),
        (I((3, 4), "away"),),
        op=("maximum",),
    ),
    Case("x_sq_plus_x", lambda T, x: x * x + x, (I((4,)),)),  # fan-out accumulation
]

R3 = (3, 4, 5)


def _reds(
    name,
    kind="any",
    dims=((), (1,), (-1,), (1, "k"), ((0, 2),), ((0, 2), "k"), ((-1, 0),)),
    op=None,
    shapes=(R3,),
):
    out = []
    for shape in shapes:
        for d in dims:
            keep = len(d) == 2 and d[1] == "k"
            dim = d[0] if d else None
            label = ("all" if not d else str(dim).replace(" ", "")) + ("-keep" if keep else "")

            def fn(T, x, dim=dim, keep=keep, name=name):
                f = getattr(x, name)
                if dim is None:
                    return f()
                return f(dim=dim, keepdim=True) if keep else f(dim=dim)

            out.append(
                Case(f"{name}-{label}-{_sid(shape)}", fn, (I(shape, kind),), op=(op or name,))
            )
    return out


RED_CASES = (
    _reds("sum")
    + _reds("mean")
    + _reds("logsumexp", dims=((1,), (-1, "k"), ((0, 2),)))
    + _reds("var", dims=((), (1,), (1, "k"), ((0, 2),)))
    + _reds("std", dims=((), (1,), (1, "k"), ((0, 2),)))
    + _reds("norm", dims=((), (1,), (1, "k"), ((0, 2),)), kind="away")
    + _reds("amax", kind="distinct")
    + _reds("amin", kind="distinct")
    + _reds("prod", dims=((), (1,), (-1, "k")), kind="away")
    + _reds("max", dims=((),), kind="distinct")
    + _reds("min", dims=((),), kind="distinct")
    + _reds("sum", dims=((), (0,), (0, "k")), shapes=((),))
    + _reds("mean", dims=((), (0,)), shapes=((),))
    + _reds("prod", dims=((),), shapes=((),))
    + _reds("amax", dims=((),), shapes=((),))
    + _reds("max", dims=((),), shapes=((),))
    + _reds("sum", dims=((), (0,)), shapes=((5,),))
    + _reds("prod", dims=((), (0,)), shapes=((5,),), kind="away")
) + [
    Case("max_dim", lambda T, x: T.max(x, 1), (I(R3, "distinct"),), op=("max",)),
    Case("max_dim_keep", lambda T, x: x.max(-1, keepdim=True), (I(R3, "distinct"),), op=("max",)),
    Case("max_dim_values", lambda T, x: x.max(dim=0).values, (I(R3, "distinct"),), op=("max",)),
    Case("min_dim", lambda T, x: T.min(x, 1), (I(R3, "distinct"),), op=("min",)),
    Case(
        "min_dim_indices",
        lambda T, x: x.min(2, keepdim=True).indices * 1.0,
        (I(R3, "distinct"),),
        op=("min",),
    ),
    Case(
        "max_binary",
        lambda T, x, y: T.max(x, y),
        (I((3, 4), "distinct"), I((4,), "distinct")),
        op=("max",),
    ),
    Case("var_correction0", lambda T, x: x.var(1, correction=0), (I(R3),), op=("var",)),
    Case("var_unbiased_false", lambda T, x: T.var(x, unbiased=False), (I(R3),), op=("var",)),
    Case("std_correction2", lambda T, x: x.std((0, 1), correction=2), (I(R3),), op=("std",)),
    Case("norm_p1", lambda T, x: x.norm(p=1), (I(R3, "away"),), op=("norm",)),
    Case("norm_p3_dim", lambda T, x: x.norm(p=3, dim=1), (I(R3, "away"),), op=("norm",)),
    Case("norm_inf", lambda T, x: x.norm(p=float("inf")), (I(R3, "distinct"),), op=("norm",)),
    Case("norm_0d", lambda T, x: x.norm(), (I((), "away"),), op=("norm",)),
    Case("var_0d_dim", lambda T, x: x.std(0, correction=0), (I((3,)),), op=("std",)),
    Case("logsumexp_0d", lambda T, x: T.logsumexp(x, 0), (I(()),), op=("logsumexp",)),
    Case("sum_dtype", lambda T, x: x.sum(dtype=T.float64), (I((3, 4)),), op=("sum",)),
    Case("cumsum_dim1", lambda T, x: T.cumsum(x, 1), (I(R3),), op=("cumsum",)),
    Case("cumsum_0d", lambda T, x: x.cumsum(0), (I(()),), op=("cumsum",)),
    Case("cumsum_dtype", lambda T, x: x.cumsum(-1, dtype=T.float64), (I(R3),), op=("cumsum",)),
    Case("cumprod_dim0", lambda T, x: T.cumprod(x, 0), (I(R3, "away"),), op=("cumprod",)),
    Case("cumprod_dim-1", lambda T, x: x.cumprod(-1), (I(R3, "away"),), op=("cumprod",)),
    Case("flip_dims", lambda T, x: T.flip(x, (0, -1)), (I(R3),), op=("flip",)),
    Case("flip_varargs", lambda T, x: x.flip(1), (I(R3),), op=("flip",)),
]

SOFTMAX_CASES = [
    Case(
        f"{name}-{dim}-{_sid(s)}",
        lambda T, x, dim=dim, name=name: getattr(T, name)(x, dim),
        (I(s),),
        op=(name,),
    )
    for name in ("softmax", "log_softmax")
    for s, dims in (((3, 4, 5), (0, 1, -1)), ((5,), (0,)), ((), (0,)))
    for dim in dims
] + [
    Case("softmax_F", lambda T, x: F(T).softmax(x, dim=-1), (I((2, 3)),), op=("softmax",)),
    Case("log_softmax_method", lambda T, x: x.log_softmax(1), (I((2, 3)),), op=("log_softmax",)),
    Case(
        "softmax_dtype",
        lambda T, x: T.softmax(x, 1, dtype=T.float64),
        (I((2, 3)),),
        op=("softmax",),
    ),
]

LINALG_CASES = (
    [
        Case("mm", lambda T, a, b: T.mm(a, b), (I((3, 4)), I((4, 5))), op=("mm",)),
        Case("mm_method", lambda T, a, b: a.mm(b), (I((3, 4)), I((4, 2), grad=False)), op=("mm",)),
        Case("bmm", lambda T, a, b: T.bmm(a, b), (I((2, 3, 4)), I((2, 4, 5))), op=("bmm",)),
        Case("dot", lambda T, a, b: T.dot(a, b), (I((4,)), I((4,))), op=("dot",)),
        Case("outer", lambda T, a, b: T.outer(a, b), (I((3,)), I((4,))), op=("outer",)),
        Case("mv", lambda T, a, b: T.mv(a, b), (I((3, 4)), I((4,))), op=("mv",)),
        Case(
            "einsum",
            lambda T, a, b: T.einsum("bij,jk->bki", a, b),
            (I((2, 3, 4)), I((4, 5))),
            op=("einsum",),
        ),  # more in tests/test_einsum_torch.py
        Case(
            "einsum_diag",
            lambda T, a: T.einsum("ii->i", a),
            (I((3, 3)),),
            op=("einsum", "diagonal", "movedim"),
        ),
        Case("diagonal", lambda T, a: a.diagonal(1, 0, 2), (I((3, 4, 5)),), op=("diagonal",)),
        Case("moveaxis", lambda T, a: T.moveaxis(a, 0, -1), (I((2, 3, 4)),), op=("moveaxis",)),
    ]
    + [
        Case(f"matmul-{_sid(sa)}@{_sid(sb)}", lambda T, a, b: a @ b, (I(sa), I(sb)), op=("matmul",))
        for sa, sb in [
            ((4,), (4,)),
            ((3, 4), (4,)),
            ((4,), (4, 5)),
            ((3, 4), (4, 5)),
            ((2, 3, 4), (2, 4, 5)),
            ((2, 3, 4), (4, 5)),
            ((2, 3, 4), (4,)),
            ((4,), (2, 4, 5)),
            ((3, 4), (2, 4, 5)),
            ((2, 1, 3, 4), (5, 4, 2)),
            ((1, 3, 4), (2, 4, 5)),
            ((2, 2, 3, 4), (2, 2, 4, 5)),
        ]
    ]
    + [
        Case(
            "matmul_fn",
            lambda T, a, b: T.matmul(a, b),
            (I((2, 3, 4)), I((2, 4, 5), grad=False)),
            op=("matmul",),
        ),
        Case(
            "matmul_const2d@3d",
            lambda T, a, b: a @ b,
            (I((3, 4), grad=False), I((2, 4, 5))),
            op=("matmul",),
        ),
        Case(
            "matmul_3d@const2d",
            lambda T, a, b: a @ b,
            (I((2, 3, 4)), I((4, 5), grad=False)),
            op=("matmul",),
        ),
        Case(
            "matmul_3d@const1d",
            lambda T, a, b: a @ b,
            (I((2, 3, 4)), I((4,), grad=False)),
            op=("matmul",),
        ),
        Case(
            "matmul_strided@const2d",
            lambda T, a, b: a.transpose(0, 1) @ b,
            (I((3, 2, 4)), I((4, 5), grad=False)),
            op=("matmul",),
        ),
        Case(
            "matmul_3d@1x4x5", lambda T, a, b: a @ b, (I((2, 3, 4)), I((1, 4, 5))), op=("matmul",)
        ),
        Case(
            "rmatmul_const",
            lambda T, a: T.ones(2, 3, dtype=a.dtype) @ a,
            (I((3, 4)),),
            op=("matmul",),
        ),
    ]
)

S3 = (2, 3, 4)
MASK = np.array(
    [[True, False, True, False], [False, False, True, True], [True, True, False, False]]
)

SHAPE_CASES = [
    Case(f"shape-{name}", fn, (I(shape),), op=ops)
    for name, fn, shape, ops in [
        ("reshape", lambda T, x: x.reshape(4, 3), (3, 4), ("reshape",)),
        ("reshape_tuple", lambda T, x: T.reshape(x, (-1,)), (3, 4), ("reshape",)),
        ("reshape_0d", lambda T, x: x.reshape(1, 1), (), ("reshape",)),
        ("reshape_nonview", lambda T, x: x.t().reshape(-1), (3, 4), ("reshape",)),
        ("reshape_alias", lambda T, x: x.transpose(0, 1).reshape(3, 2, 2, 2), S3, ("reshape",)),
        ("reshape_same_strided", lambda T, x: x.t().reshape(4, 3), (3, 4), ("reshape",)),
        ("reshape_sliced", lambda T, x: x[:, :2].reshape(4, 4), S3, ("reshape",)),
        ("reshape_expanded", lambda T, x: x.expand(3, 4).reshape(12), (4,), ("reshape",)),
        ("view", lambda T, x: x.view(2, 6), (3, 4), ("view",)),
        ("view_neg", lambda T, x: x.view(-1, 2), (3, 4), ("view",)),
        ("view_tuple", lambda T, x: x.view((4, 3)), (3, 4), ("view",)),
        ("view_as", lambda T, x: x.view_as(T.zeros(6, 2)), (3, 4), ("view_as",)),
        ("reshape_as", lambda T, x: x.reshape_as(T.zeros(12)), (3, 4), ("reshape_as",)),
        ("flatten", lambda T, x: x.flatten(), S3, ("flatten",)),
        ("flatten1", lambda T, x: T.flatten(x, 1), S3, ("flatten",)),
        ("flatten01", lambda T, x: x.flatten(0, 1), S3, ("flatten",)),
        ("flatten_0d", lambda T, x: x.flatten(), (), ("flatten",)),
        ("unflatten", lambda T, x: x.unflatten(1, (2, 2)), (3, 4), ("unflatten",)),
        ("squeeze", lambda T, x: x.squeeze(), (3, 1, 4, 1), ("squeeze",)),
        ("squeeze1", lambda T, x: x.squeeze(1), (3, 1, 4, 1), ("squeeze",)),
        ("squeeze_neg", lambda T, x: T.squeeze(x, -1), (3, 1, 4, 1), ("squeeze",)),
        ("squeeze_noop", lambda T, x: x.squeeze(0), (3, 1, 4, 1), ("squeeze",)),
        ("squeeze_tuple", lambda T, x: x.squeeze((1, 3)), (3, 1, 4, 1), ("squeeze",)),
        ("unsqueeze0", lambda T, x: x.unsqueeze(0), (3, 4), ("unsqueeze",)),
        ("unsqueeze_neg", lambda T, x: T.unsqueeze(x, -1), (3, 4), ("unsqueeze",)),
        ("unsqueeze_0d", lambda T, x: x.unsqueeze(0), (), ("unsqueeze",)),
        ("transpose", lambda T, x: x.transpose(0, 1), S3, ("transpose",)),
        ("transpose_neg", lambda T, x: T.transpose(x, -1, -3), S3, ("transpose",)),
        ("swapaxes", lambda T, x: T.swapaxes(x, 0, 2), S3, ("swapaxes",)),
        ("swapdims", lambda T, x: x.swapdims(0, 2), S3, ("swapdims",)),
        ("permute", lambda T, x: x.permute(2, 0, 1), S3, ("permute",)),
        ("permute_tuple", lambda T, x: T.permute(x, (1, 2, 0)), S3, ("permute",)),
        ("permute_neg", lambda T, x: x.permute(-1, 0, 1), S3, ("permute",)),
        ("expand", lambda T, x: x.expand(3, 4), (3, 1), ("expand",)),
        ("expand_new_dims", lambda T, x: x.expand(2, 3, 4), (4,), ("expand",)),
        ("expand_neg", lambda T, x: x.expand(2, -1, -1), (3, 4), ("expand",)),
        ("expand_0d", lambda T, x: x.expand(3), (), ("expand",)),
        ("expand_as", lambda T, x: x.expand_as(T.zeros(2, 3, 4)), (3, 1), ("expand_as",)),
        ("broadcast_to", lambda T, x: T.broadcast_to(x, (2, 3, 4)), (1, 4), ("broadcast_to",)),
        ("broadcast_to_method", lambda T, x: x.broadcast_to((3, 4)), (1, 4), ("broadcast_to",)),
        ("repeat", lambda T, x: x.repeat(2, 3), (3, 4), ("repeat",)),
        ("repeat_new_dims", lambda T, x: x.repeat(2, 1, 1), (3, 4), ("repeat",)),
        ("repeat_1d", lambda T, x: x.repeat(3), (4,), ("repeat",)),
        (".T", lambda T, x: x.T, (3, 4), ("t",)),
        (".T_1d", lambda T, x: x.T, (4,), ("t",)),
        (".t()", lambda T, x: x.t(), (3, 4), ("t",)),
        ("t_fn", lambda T, x: T.t(x), (4,), ("t",)),
        ("clone", lambda T, x: x.clone(), (3, 4), ("clone",)),
        ("clone_fn", lambda T, x: T.clone(x), (), ("clone",)),
        ("contiguous", lambda T, x: x.t().contiguous(), (3, 4), ("contiguous",)),
        ("contiguous_noop", lambda T, x: (x * 1).contiguous(), (3, 4), ("contiguous",)),
        ("float", lambda T, x: x.float(), (3, 4), ("to",)),
        ("double", lambda T, x: x.double(), (3, 4), ("to",)),
        ("to_f32", lambda T, x: x.to(T.float32), (3, 4), ("to",)),
        ("to_f64", lambda T, x: x.to(dtype=T.float64), (3, 4), ("to",)),
        ("to_same", lambda T, x: (x * 1).to(x.dtype), (3, 4), ("to",)),
        ("type_as", lambda T, x: x.type_as(T.zeros(1, dtype=T.float64)), (3, 4), ("type_as",)),
        ("select", lambda T, x: x.select(1, 2), S3, ("select",)),
        ("select_neg", lambda T, x: T.select(x, -1, -1), S3, ("select",)),
        ("narrow", lambda T, x: x.narrow(2, 1, 2), S3, ("narrow",)),
        ("unbind", lambda T, x: x.unbind(1), S3, ("unbind",)),
        ("unbind_one", lambda T, x: T.unbind(x)[1], S3, ("unbind",)),
        ("chain_view_math", lambda T, x: (x.t() * 2).reshape(-1)[::3].sum(), (3, 4), ()),
    ]
]

IDX = [
    ("int", lambda T, x: x[1]),
    ("neg_int", lambda T, x: x[-1]),
    ("int_int", lambda T, x: x[1, 2]),
    ("int_int_int", lambda T, x: x[1, 2, 3]),
    ("slice", lambda T, x: x[1:3]),
    ("slice_step", lambda T, x: x[::2]),
    ("slice_step2", lambda T, x: x[:, 1::2]),
    ("neg_slice", lambda T, x: x[-2:, :-1]),
    ("full_slice", lambda T, x: x[:]),
    ("full_slice_explicit", lambda T, x: x[0:2]),
    ("full_slices_in_tuple", lambda T, x: x[:, 0:3, ::1]),
    ("slice_in_tuple_neg_start", lambda T, x: x[-2:, 1]),
    ("ellipsis_only", lambda T, x: x[...]),
    ("none", lambda T, x: x[None]),
    ("none_mid", lambda T, x: x[:, None, 1:]),
    ("ellipsis", lambda T, x: x[..., 1]),
    ("ellipsis_slice", lambda T, x: x[0, ..., ::3]),
    ("list", lambda T, x: x[[1, 0]]),
    ("repeated", lambda T, x: x[[0, 0, 1]]),
    ("long_tensor", lambda T, x: x[T.tensor([1, 0, 1])]),
    ("long_tensor_2d", lambda T, x: x[T.tensor([[0, 1], [1, 1]])]),
    ("neg_list", lambda T, x: x[[-1, 0]]),
    ("two_lists", lambda T, x: x[[0, 1, 1], [2, 0, 2]]),
    ("mixed", lambda T, x: x[1:, [0, 2]]),
    ("mixed_int_list", lambda T, x: x[0, [1, 2, 1]]),
    ("mixed_split_adv", lambda T, x: x[[0, 1], :, [1, 3]]),
    ("ellipsis_list", lambda T, x: x[..., [0, 0]]),
    ("bool_mask_full", lambda T, x: x[x > 0]),
    ("bool_mask_rows", lambda T, x: x[T.tensor([True, False])]),
    ("bool_mask_2d", lambda T, x: x[T.tensor(MASK)]),
    ("bool_list", lambda T, x: x[:, [True, False, True]]),
    ("int_tensor_0d", lambda T, x: x[T.tensor(1)]),
]

INDEX_CASES = [
    Case(
        f"index-{name}",
        fn,
        (I(S3 if name not in ("bool_mask_2d",) else (3, 4, 2)),),
        op=("__getitem__",),
    )
    for name, fn in IDX
]

GIDX = np.array([[0, 2, 2, 1], [3, 0, 0, 0], [1, 1, 3, 2]])

JOIN_CASES = [
    Case("cat0", lambda T, x, y: T.cat([x, y]), (I((2, 4)), I((3, 4))), op=("cat",)),
    Case("cat1", lambda T, x, y: T.cat((x, y), dim=1), (I((3, 2)), I((3, 4))), op=("cat",)),
    Case("cat_neg", lambda T, x, y: T.cat([x, y, x], -1), (I((3, 2)), I((3, 4))), op=("cat",)),
    Case(
        "cat_const", lambda T, x, y: T.cat([x, y]), (I((2, 4)), I((1, 4), grad=False)), op=("cat",)
    ),
    Case("concat", lambda T, x, y: T.concat([x, y]), (I((2, 4)), I((3, 4))), op=("concat",)),
    Case(
        "concatenate",
        lambda T, x, y: T.concatenate([x, y], 1),
        (I((3, 2)), I((3, 4))),
        op=("concatenate",),
    ),
    Case("stack0", lambda T, x, y: T.stack([x, y]), (I((3, 4)), I((3, 4))), op=("stack",)),
    Case("stack1", lambda T, x, y: T.stack((x, y), 1), (I((3, 4)), I((3, 4))), op=("stack",)),
    Case(
        "stack_neg", lambda T, x, y: T.stack([x, y], dim=-1), (I((3, 4)), I((3, 4))), op=("stack",)
    ),
    Case("stack_0d", lambda T, x, y: T.stack([x, y]), (I(()), I(())), op=("stack",)),
    Case("split_int", lambda T, x: x.split(2), (I((5, 3)),), op=("split",)),
    Case("split_one", lambda T, x: T.split(x, 2)[1], (I((5, 3)),), op=("split",)),
    Case("split_sizes", lambda T, x: x.split([1, 2], dim=1), (I((4, 3)),), op=("split",)),
    Case("split_rejoin", lambda T, x: T.cat(x.split(2)[::-1]), (I((5, 3)),), op=("split",)),
    Case("chunk", lambda T, x: x.chunk(2), (I((5, 3)),), op=("chunk",)),
    Case("chunk_dim", lambda T, x: T.chunk(x, 3, dim=1)[2], (I((2, 3)),), op=("chunk",)),
    Case("unsafe_split", lambda T, x: T.unsafe_split(x, 2, 1), (I((4, 5)),), op=("unsafe_split",)),
    Case(
        "unsafe_chunk", lambda T, x: x.unsafe_chunk(4, 1)[1:3], (I((3, 8)),), op=("unsafe_chunk",)
    ),
    Case("gather", lambda T, x: T.gather(x, 1, T.tensor(GIDX)), (I((3, 4)),), op=("gather",)),
    Case(
        "gather0", lambda T, x: x.gather(0, T.tensor(GIDX[:2, :] % 3)), (I((3, 4)),), op=("gather",)
    ),
    Case(
        "index_select",
        lambda T, x: T.index_select(x, 0, T.tensor([2, 0, 2])),
        (I((3, 4)),),
        op=("index_select",),
    ),
    Case(
        "index_select1",
        lambda T, x: x.index_select(1, T.tensor([3, 1])),
        (I((3, 4)),),
        op=("index_select",),
    ),
    Case(
        "masked_fill",
        lambda T, x: x.masked_fill(T.tensor(MASK), 0.5),
        (I((3, 4)),),
        op=("masked_fill",),
    ),
    Case(
        "masked_fill_bcast",
        lambda T, x: T.masked_fill(x, T.tensor([True, False, True, True]), -1.0),
        (I((3, 4)),),
        op=("masked_fill",),
    ),
]

# --- ties: torch splits the gradient evenly between equal values (except max/min(dim)) -------

TIE = np.array([[1.0, 3.0, 3.0, 0.5], [2.0, 2.0, 2.0, 2.0], [-1.0, 0.5, -1.0, 0.0]])

TIES = [
    Case(f"tie-{name}", fn, ins, op=ops)
    for name, fn, ins, ops in [
        ("max", lambda T, x: x.max(), (I(data=TIE),), ("max",)),
        ("min", lambda T, x: x.min(), (I(data=TIE),), ("min",)),
        ("max_dim", lambda T, x: x.max(1), (I(data=TIE),), ("max",)),
        ("min_dim", lambda T, x: x.min(0, keepdim=True), (I(data=TIE),), ("min",)),
        ("amax", lambda T, x: x.amax(), (I(data=TIE),), ("amax",)),
        ("amax_dim", lambda T, x: x.amax(1), (I(data=TIE),), ("amax",)),
        ("amin_dim", lambda T, x: T.amin(x, -1, keepdim=True), (I(data=TIE),), ("amin",)),
        ("amin_dims", lambda T, x: x.amin((0, 1)), (I(data=TIE),), ("amin",)),
        (
            "maximum",
            lambda T, x, y: T.maximum(x, y),
            (I(data=TIE), I(data=TIE[::-1].copy())),
            ("maximum",),
        ),
        ("minimum", lambda T, x, y: T.minimum(x, y), (I(data=TIE), I(data=TIE[1])), ("minimum",)),
        ("maximum_self", lambda T, x: T.maximum(x, x), (I(data=TIE),), ("maximum",)),
        ("norm_inf", lambda T, x: x.norm(p=float("inf")), (I(data=TIE),), ("norm",)),
        ("clamp_at_bound", lambda T, x: x.clamp(0.5, 2.0), (I(data=TIE),), ("clamp",)),
        ("relu_at_0", lambda T, x: T.relu(x), (I(data=TIE),), ("relu",)),
        ("abs_at_0", lambda T, x: x.abs(), (I(data=TIE),), ("abs",)),
        (
            "pow_zero_base",
            lambda T, x, y: x**y,
            (I(data=[0.0, 0.0, 2.0]), I(data=[2.0, 0.5, 1.0])),
            ("pow",),
        ),
        ("rpow_zero_base", lambda T, x: 0.0**x, (I(data=[0.5, 2.0, 3.0]),), ("pow",)),
        ("sqrt_at_1", lambda T, x: T.sqrt(x), (I(data=[1.0, 4.0]),), ("sqrt",)),
    ]
]

# prod through zeros: first and second derivatives match (result / x is 0/0 there)
TIES += [
    Case(f"tie-{name}", fn, (I(data=data),), op=("prod",))
    for name, fn, data in [
        ("prod_one_zero", lambda T, x: x.prod(), [2.0, 0.0, 3.0, -1.5]),
        ("prod_two_zeros", lambda T, x: x.prod(), [2.0, 0.0, 3.0, 0.0]),
        (
            "prod_dim_zeros",
            lambda T, x: x.prod(1),
            [[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]],
        ),
    ]
] + [
    Case(f"tie-{name}", fn, (I(data=data),), op=("cumprod",))
    for name, fn, data in [
        ("cumprod_one_zero", lambda T, x: x.cumprod(0), [2.0, 0.0, 3.0, -1.5]),
        (
            "cumprod_zeros",
            lambda T, x: x.cumprod(1),
            [[2.0, 0.0, 3.0, 0.0], [0.0, 0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 0.0]],
        ),
    ]
]

# --- nn ops (autodiag/ops/nn_ops.py); modules and training are in test_nn_torch.py ------------

TGT = [0, 2, 1, 4]  # class indices for (4, 5) logits
CW = [0.5, 1.0, 2.0, 1.5, 0.25]  # class weights


def _t(T, data, like=None):
    return T.tensor(data, dtype=None if like is None else like.dtype)


def _soft(rng_seed, shape):
    """Class probabilities (rows sum to 1), fixed across libraries."""
    a = np.random.default_rng(rng_seed).uniform(0.1, 1.0, shape)
    return a / a.sum(-1, keepdims=True)


PROBS = _soft(5, (4, 5))

NN_CASES = [
    Case(f"nn-{name}", fn, ins, op=ops)
    for name, fn, ins, ops in [
        ("addmm", lambda T, b, x, w: T.addmm(b, x, w), (I((5,)), I((4, 3)), I((3, 5))), ("addmm",)),
        (
            "addmm_scaled",
            lambda T, b, x, w: T.addmm(b, x, w, beta=0.5, alpha=2.0),
            (I((4, 5)), I((4, 3)), I((3, 5))),
            ("addmm",),
        ),
        (
            "addmm_method",
            lambda T, b, x, w: b.addmm(x, w),
            (I((4, 5)), I((4, 3), grad=False), I((3, 5))),
            ("addmm",),
        ),
        (
            "linear",
            lambda T, x, w, b: F(T).linear(x, w, b),
            (I((4, 3)), I((5, 3)), I((5,))),
            ("linear",),
        ),
        ("linear_nobias", lambda T, x, w: F(T).linear(x, w), (I((4, 3)), I((5, 3))), ("linear",)),
        (
            "linear_3d",
            lambda T, x, w, b: F(T).linear(x, w, b),
            (I((2, 4, 3)), I((5, 3)), I((5,))),
            ("linear",),
        ),
        (
            "linear_3d_nobias",
            lambda T, x, w: F(T).linear(x, w),
            (I((2, 4, 3)), I((5, 3))),
            ("linear",),
        ),
        (
            "linear_1d",
            lambda T, x, w, b: F(T).linear(x, w, b),
            (I((3,)), I((5, 3)), I((5,))),
            ("linear",),
        ),
        ("linear_1d_nobias", lambda T, x, w: F(T).linear(x, w), (I((3,)), I((5, 3))), ("linear",)),
        (
            "linear_strided",
            lambda T, x, w, b: F(T).linear(x.transpose(0, 1), w, b),
            (I((4, 2, 3)), I((5, 3)), I((5,))),
            ("linear",),
        ),
        (
            "linear_const_x",
            lambda T, x, w, b: F(T).linear(x, w, b),
            (I((4, 3), grad=False), I((5, 3)), I((5,))),
            ("linear",),
        ),
        (
            "mse",
            lambda T, x, t: F(T).mse_loss(x, t),
            (I((4, 5)), I((4, 5), grad=False)),
            ("mse_loss",),
        ),
        (
            "mse_sum_both",
            lambda T, x, t: F(T).mse_loss(x, t, reduction="sum"),
            (I((4, 5)), I((4, 5))),
            ("mse_loss",),
        ),
        (
            "mse_none",
            lambda T, x, t: F(T).mse_loss(x, t, reduction="none"),
            (I((4, 5)), I((4, 5))),
            ("mse_loss",),
        ),
        ("mse_bcast", lambda T, x, t: F(T).mse_loss(x, t), (I((4, 5)), I((4, 1))), ("mse_loss",)),
        (
            "mse_weight",
            lambda T, x, t, w: F(T).mse_loss(x, t, weight=w),
            (I((4, 5)), I((4, 5), grad=False), I((4, 5), "pos", grad=False)),
            ("mse_loss",),
        ),
        ("nll", lambda T, x: F(T).nll_loss(x, T.tensor(TGT)), (I((4, 5)),), ("nll_loss",)),
        (
            "nll_sum",
            lambda T, x: F(T).nll_loss(x, T.tensor(TGT), reduction="sum"),
            (I((4, 5)),),
            ("nll_loss",),
        ),
        (
            "nll_none",
            lambda T, x: F(T).nll_loss(x, T.tensor(TGT), reduction="none"),
            (I((4, 5)),),
            ("nll_loss",),
        ),
        (
            "nll_weight",
            lambda T, x: F(T).nll_loss(x, T.tensor(TGT), _t(T, CW, x)),
            (I((4, 5)),),
            ("nll_loss",),
        ),
        (
            "nll_ignore",
            lambda T, x: F(T).nll_loss(x, T.tensor([0, 7, 1, 7]), ignore_index=7),
            (I((4, 5)),),
            ("nll_loss",),
        ),
        ("nll_1d", lambda T, x: F(T).nll_loss(x, T.tensor(3)), (I((5,)),), ("nll_loss",)),
        (
            "nll_3d",
            lambda T, x: F(T).nll_loss(x, T.tensor([[0, 2], [1, 4]])),
            (I((2, 5, 2)),),
            ("nll_loss",),
        ),
        (
            "nll_3d_none",
            lambda T, x: F(T).nll_loss(x, T.tensor([[0, 2], [1, 4]]), reduction="none"),
            (I((2, 5, 2)),),
            ("nll_loss",),
        ),
        (
            "nll_4d",
            lambda T, x: F(T).nll_loss(x, T.tensor([[[0, 2]], [[1, 4]]])),
            (I((2, 5, 1, 2)),),
            ("nll_loss",),
        ),
        ("ce", lambda T, x: F(T).cross_entropy(x, T.tensor(TGT)), (I((4, 5)),), ("cross_entropy",)),
        (
            "ce_sum",
            lambda T, x: F(T).cross_entropy(x, T.tensor(TGT), reduction="sum"),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_none",
            lambda T, x: F(T).cross_entropy(x, T.tensor(TGT), reduction="none"),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_weight_ignore",
            lambda T, x: F(T).cross_entropy(x, T.tensor([0, 2, -100, 4]), _t(T, CW, x)),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_smooth",
            lambda T, x: F(T).cross_entropy(x, T.tensor(TGT), label_smoothing=0.1),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_smooth_weight_ignore",
            lambda T, x: F(T).cross_entropy(
                x, T.tensor([0, 2, 3, 4]), _t(T, CW, x), ignore_index=3, label_smoothing=0.2
            ),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_smooth_none",
            lambda T, x: F(T).cross_entropy(
                x, T.tensor(TGT), reduction="none", label_smoothing=0.3
            ),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_probs",
            lambda T, x: F(T).cross_entropy(x, _t(T, PROBS, x)),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_probs_grad",
            lambda T, x, p: F(T).cross_entropy(x, p, reduction="sum"),
            (I((4, 5)), I(data=PROBS)),
            ("cross_entropy",),
        ),
        (
            "ce_probs_smooth_weight",
            lambda T, x: F(T).cross_entropy(x, _t(T, PROBS, x), _t(T, CW, x), label_smoothing=0.1),
            (I((4, 5)),),
            ("cross_entropy",),
        ),
        (
            "ce_3d",
            lambda T, x: F(T).cross_entropy(x, T.tensor([[0, 2], [1, 4]])),
            (I((2, 5, 2)),),
            ("cross_entropy",),
        ),
        ("ce_1d", lambda T, x: F(T).cross_entropy(x, T.tensor(1)), (I((5,)),), ("cross_entropy",)),
        (
            "bce",
            lambda T, x, t: F(T).binary_cross_entropy_with_logits(x, t),
            (I((4, 5)), I((4, 5), "pos", grad=False)),
            ("binary_cross_entropy_with_logits",),
        ),
        (
            "bce_none_target_grad",
            lambda T, x, t: F(T).binary_cross_entropy_with_logits(x, t, reduction="none"),
            (I((4, 5)), I((4, 5), "pos")),
            ("binary_cross_entropy_with_logits",),
        ),
        (
            "bce_weights",
            lambda T, x, t, w, pw: F(T).binary_cross_entropy_with_logits(
                x, t, w, reduction="sum", pos_weight=pw
            ),
            (I((4, 5)), I((4, 5), "pos"), I((5,), "pos", grad=False), I((5,), "pos", grad=False)),
            ("binary_cross_entropy_with_logits",),
        ),
        (
            "layer_norm",
            lambda T, x, w, b: F(T).layer_norm(x, (5,), w, b),
            (I((4, 5)), I((5,)), I((5,))),
            ("layer_norm",),
        ),
        (
            "layer_norm_2dims",
            lambda T, x, w, b: F(T).layer_norm(x, [4, 5], w, b, eps=1e-3),
            (I((2, 4, 5)), I((4, 5)), I((4, 5))),
            ("layer_norm",),
        ),
        ("layer_norm_plain", lambda T, x: F(T).layer_norm(x, (5,)), (I((3, 5)),), ("layer_norm",)),
        (
            "layer_norm_weight_only",
            lambda T, x, w: F(T).layer_norm(x, (5,), w),
            (I((5,)), I((5,))),
            ("layer_norm",),
        ),
        (
            "embedding",
            lambda T, w: F(T).embedding(T.tensor([[1, 2], [4, 1]]), w),
            (I((6, 3)),),
            ("embedding",),
        ),
        (
            "embedding_pad_freq",
            lambda T, w: F(T).embedding(
                T.tensor([[1, 0], [4, 1], [1, 1]]), w, padding_idx=0, scale_grad_by_freq=True
            ),
            (I((6, 3)),),
            ("embedding",),
        ),
        ("dropout_p1", lambda T, x: F(T).dropout(x, 1.0), (I((4, 5)),), ("dropout",)),
        (
            "dropout_eval",
            lambda T, x: F(T).dropout(x * 1, 0.3, training=False),
            (I((4, 5)),),
            ("dropout",),
        ),
        (
            "leaky_relu_",
            lambda T, x: F(T).leaky_relu_(x * 1, 0.2),
            (I((4, 5), "away"),),
            ("leaky_relu_",),
        ),
        ("l1_loss", lambda T, x, t: F(T).l1_loss(x, t), (I((4, 5)), I((4, 5))), ("l1_loss",)),
        (
            "smooth_l1_loss",
            lambda T, x, t: F(T).smooth_l1_loss(x, t, reduction="none", beta=0.5),
            (I((4, 5)), I((4, 5))),
            ("smooth_l1_loss",),
        ),
        (
            "huber_loss",
            lambda T, x, t: F(T).huber_loss(x, t, reduction="sum", delta=0.7),
            (I((4, 5)), I((4, 5))),
            ("huber_loss",),
        ),
        (
            "binary_cross_entropy",
            lambda T, x, t: F(T).binary_cross_entropy(x.sigmoid(), t.sigmoid()),
            (I((4, 5)), I((4, 5))),
            ("binary_cross_entropy",),
        ),
        (
            "kl_div",
            lambda T, x, t: F(T).kl_div(x.log_softmax(1), t.softmax(1), reduction="batchmean"),
            (I((4, 5)), I((4, 5))),
            ("kl_div",),
        ),
        (
            "cosine_embedding_loss",
            lambda T, a, b: F(T).cosine_embedding_loss(
                a, b, T.tensor([1.0, -1.0, 1.0, -1.0]), margin=0.1
            ),
            (I((4, 5)), I((4, 5))),
            ("cosine_embedding_loss",),
        ),
        (
            "margin_ranking_loss",
            lambda T, a, b: F(T).margin_ranking_loss(a, b, T.tensor([1.0, -1.0, 1.0, 1.0])),
            (I((4,)), I((4,))),
            ("margin_ranking_loss",),
        ),
    ]
]

# attention and GPT ops (more forms, errors and the random ops in tests/test_attention_torch.py)
ATTN_CASES = [
    Case(f"attn-{name}", fn, ins, op=ops, raises_second=raises)
    for name, fn, ins, ops, raises in [
        ("tril", lambda T, x: x.tril(1), (I((3, 4)),), ("tril",), None),
        ("triu", lambda T, x: T.triu(x, -1), (I((2, 3, 4)),), ("triu",), None),
        (
            "sort",
            lambda T, x: T.sort(x, 1, descending=True),
            (I((3, 4), "distinct"),),
            ("sort",),
            None,
        ),
        ("topk", lambda T, x: x.topk(2, dim=0), (I((3, 4), "distinct"),), ("topk",), None),
        ("roll", lambda T, x: x.roll((1, -1), (0, 1)), (I((3, 4)),), ("roll",), None),
        ("unfold", lambda T, x: x.unfold(1, 2, 1), (I((3, 4)),), ("unfold",), None),
        (
            "repeat_interleave",
            lambda T, x: x.repeat_interleave(T.tensor([2, 0, 1]), dim=0),
            (I((3, 4)),),
            ("repeat_interleave",),
            None,
        ),
        (
            "baddbmm",
            lambda T, a, b, c: T.baddbmm(a, b, c, beta=0.5, alpha=2.0),
            (I((3, 4)), I((2, 3, 5)), I((2, 5, 4))),
            ("baddbmm",),
            None,
        ),
        ("lerp", lambda T, a, b, w: T.lerp(a, b, w), (I(), I(), I(kind="unit")), ("lerp",), None),
        ("silu", lambda T, x: F(T).silu(x), (I(),), ("silu",), None),
        ("elu", lambda T, x: F(T).elu(x, 0.5), (I(kind="away"),), ("elu",), None),
        ("pad", lambda T, x: F(T).pad(x, (2, -1, 0, 1), value=0.5), (I(),), ("pad",), None),
        ("normalize", lambda T, x: F(T).normalize(x, dim=0), (I(),), ("normalize",), None),
        (
            "sdpa_flash",
            lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v, is_causal=True),
            (I((2, 2, 4, 3)), I((2, 2, 5, 3)), I((2, 2, 5, 3))),
            ("scaled_dot_product_attention",),
            RuntimeError,  # as PyTorch: the flash kernel's backward has no derivative
        ),
        (
            "sdpa_math",
            lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v, is_causal=True),
            (I((2, 4, 3)), I((2, 5, 3)), I((2, 5, 2))),
            ("scaled_dot_product_attention",),
            None,
        ),
    ]
]

# convolution, pooling, batch/group norm (tests/test_conv_torch.py has the wider table)
CNN_CASES = [
    Case(*c)
    for c in [
        (
            "conv2d",
            lambda T, x, w, b: F(T).conv2d(x, w, b, stride=2, padding=1, groups=2),
            (I((2, 4, 6, 5)), I((4, 2, 3, 3)), I((4,))),
            ("conv2d",),
        ),
        (
            "conv1d",
            lambda T, x, w: F(T).conv1d(x, w, dilation=2, padding="same"),
            (I((2, 3, 7)), I((4, 3, 3))),
            ("conv1d",),
        ),
        (
            "conv_transpose2d",
            lambda T, x, w, b: F(T).conv_transpose2d(x, w, b, stride=2, output_padding=1),
            (I((2, 3, 4, 3)), I((3, 2, 3, 2)), I((2,))),
            ("conv_transpose2d",),
        ),
        (
            "conv_transpose1d",
            lambda T, x, w: F(T).conv_transpose1d(x, w, stride=3, padding=1),
            (I((2, 2, 4)), I((2, 3, 3))),
            ("conv_transpose1d",),
        ),
        (
            "fold",
            lambda T, x: F(T).fold(x, (4, 5), (2, 3), padding=1),
            (I((2, 12, 25)),),
            ("fold",),
        ),
        (
            "max_pool2d",
            lambda T, x: F(T).max_pool2d(x, 3, 2, 1, ceil_mode=True),
            (I((2, 3, 7, 6)),),
            ("max_pool2d",),
        ),
        ("max_pool1d", lambda T, x: F(T).max_pool1d(x, 2, 1), (I((2, 3, 6)),), ("max_pool1d",)),
        (
            "avg_pool2d",
            lambda T, x: F(T).avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            (I((2, 3, 7, 6)),),
            ("avg_pool2d",),
        ),
        (
            "adaptive_avg_pool2d",
            lambda T, x: F(T).adaptive_avg_pool2d(x, (3, 4)),
            (I((2, 3, 7, 6)),),
            ("adaptive_avg_pool2d",),
        ),
        (
            "batch_norm",
            lambda T, x, w, b: F(T).batch_norm(
                x, T.zeros(3, dtype=x.dtype), T.ones(3, dtype=x.dtype), w, b, True
            ),
            (I((4, 3, 2, 2)), I((3,)), I((3,))),
            ("batch_norm",),
        ),
        (
            "group_norm",
            lambda T, x, w, b: F(T).group_norm(x, 2, w, b),
            (I((2, 4, 3)), I((4,)), I((4,))),
            ("group_norm",),
        ),
        ("dropout2d_p1", lambda T, x: F(T).dropout2d(x, 1.0), (I((2, 3, 2, 2)),), ("dropout2d",)),
        (
            "dropout1d_eval",
            lambda T, x: F(T).dropout1d(x * 1, 0.3, training=False),
            (I((2, 3, 4)),),
            ("dropout1d",),
        ),
        # 3-d, adaptive max and instance norm (tests/test_layers2_torch.py has the wider table)
        (
            "conv3d",
            lambda T, x, w, b: F(T).conv3d(x, w, b, stride=(1, 2, 1), padding=1, groups=2),
            (I((2, 4, 3, 5, 4)), I((4, 2, 2, 3, 2)), I((4,))),
            ("conv3d",),
        ),
        (
            "conv_transpose3d",
            lambda T, x, w: F(T).conv_transpose3d(x, w, stride=2, output_padding=1),
            (I((1, 2, 2, 3, 2)), I((2, 3, 2, 2, 3))),
            ("conv_transpose3d",),
        ),
        (
            "max_pool3d",
            lambda T, x: F(T).max_pool3d(x, 2, (1, 2, 2), 1, ceil_mode=True),
            (I((2, 2, 4, 5, 4)),),
            ("max_pool3d",),
        ),
        (
            "avg_pool3d",
            lambda T, x: F(T).avg_pool3d(x, 3, 2, 1, count_include_pad=False),
            (I((2, 2, 4, 5, 4)),),
            ("avg_pool3d",),
        ),
        (
            "adaptive_max_pool2d",
            lambda T, x: F(T).adaptive_max_pool2d(x, (3, 4)),
            (I((2, 3, 7, 6)),),
            ("adaptive_max_pool2d",),
        ),
        (
            "adaptive_max_pool1d",
            lambda T, x: T.adaptive_max_pool1d(x, 4)[0],
            (I((2, 3, 7)),),
            ("adaptive_max_pool1d",),
        ),
        (
            "instance_norm",
            lambda T, x, w, b: F(T).instance_norm(x, weight=w, bias=b),
            (I((2, 3, 4)), I((3,)), I((3,))),
            ("instance_norm",),
        ),
    ]
]

GRAD_CASES = (
    UNARY_CASES
    + BINARY_CASES
    + RED_CASES
    + SOFTMAX_CASES
    + LINALG_CASES
    + SHAPE_CASES
    + INDEX_CASES
    + JOIN_CASES
    + TIES
    + NN_CASES
    + ATTN_CASES
    + CNN_CASES
)

_ids = [c.id for c in GRAD_CASES]
assert len(set(_ids)) == len(_ids), "duplicate case ids"


@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids)
def test_op_matches_torch(torch, case):
    check_case(torch, case)


def test_floor_divide_grad_not_implemented(torch):
    """``x // 2`` records torch's ``NotImplemented`` node; its backward raises in both."""
    data = np.array([1.25, -0.75, 2.25])
    outs = []
    for T in (torch, ad):
        x = T.tensor(data, requires_grad=True)
        y = x // 2
        np.testing.assert_array_equal(_np(y), np.floor(data / 2))
        outs.append(y)
        with pytest.raises(
            RuntimeError, match="derivative for aten::floor_divide is not implemented"
        ):
            y.sum().backward()
    assert_same_graph(outs[0].grad_fn, outs[1].grad_fn)


# ---------------------------------------------------------------------------------------------
# Forward-only: comparisons, logic, predicates, arg-reductions, dtype promotion
# ---------------------------------------------------------------------------------------------

A = np.array([[0.5, -1.0, 2.0], [np.nan, np.inf, -np.inf]])
B = np.array([[0.5, 1.0, 2.0 + 1e-9], [np.nan, np.inf, 3.0]])
BA = np.array([[True, False, True], [False, False, True]])
BB = np.array([True, True, False])
IA = np.array([[3, -2, 7], [0, 5, -1]])
IB = np.array([2, 4, -3])
V = np.array([[0.3, -1.2, 2.5, 2.5], [1.0, 4.0, -3.0, 4.0], [-0.1, -0.2, -0.1, 0.0]])


def _F(T, a):
    return T.tensor(a.copy())


VALUE_CASES = [
    # (id, fn(T) -> tensor / bool / tuple, registry names)
    ("gt", lambda T: _F(T, A) > _F(T, B), ("gt",)),
    ("ge", lambda T: _F(T, A) >= _F(T, B), ("ge",)),
    ("lt", lambda T: _F(T, A) < _F(T, B), ("lt",)),
    ("le", lambda T: _F(T, A) <= _F(T, B), ("le",)),
    ("eq", lambda T: _F(T, A) == _F(T, B), ("eq",)),
    ("ne", lambda T: _F(T, A) != _F(T, B), ("ne",)),
    ("gt_scalar", lambda T: _F(T, A) > 0.5, ("gt",)),
    ("le_scalar_int", lambda T: _F(T, IA) <= 3, ("le",)),
    ("eq_int_float", lambda T: _F(T, IA) == 3.0, ("eq",)),
    ("lt_bcast", lambda T: _F(T, IA) < _F(T, IB), ("lt",)),
    ("gt_int_float_tensor", lambda T: _F(T, IA) > _F(T, V[:2, :3]), ("gt",)),
    ("ge_fn", lambda T: T.ge(_F(T, V), 0.3), ("ge",)),
    ("greater", lambda T: _F(T, V).greater(0.0), ("greater",)),
    ("greater_equal", lambda T: _F(T, V).greater_equal(0.0), ("greater_equal",)),
    ("less", lambda T: _F(T, V).less(0.0), ("less",)),
    ("less_equal", lambda T: _F(T, V).less_equal(0.0), ("less_equal",)),
    ("not_equal", lambda T: _F(T, V).not_equal(4.0), ("not_equal",)),
    ("eq_fn", lambda T: T.eq(_F(T, IA), _F(T, IB)), ("eq",)),
    ("ne_fn", lambda T: T.ne(_F(T, V), _F(T, V[0])), ("ne",)),
    ("gt_fn", lambda T: T.gt(_F(T, V), _F(T, V[:, :1])), ("gt",)),
    ("lt_fn", lambda T: T.lt(_F(T, V), 1), ("lt",)),
    ("le_fn", lambda T: T.le(_F(T, IA), 0), ("le",)),
    ("and", lambda T: _F(T, BA) & _F(T, BB), ("bitwise_and",)),
    ("or", lambda T: _F(T, BA) | _F(T, BB), ("bitwise_or",)),
    ("xor", lambda T: _F(T, BA) ^ _F(T, BB), ("bitwise_xor",)),
    ("invert", lambda T: ~_F(T, BA), ("bitwise_not",)),
    ("and_int", lambda T: _F(T, IA) & _F(T, IB), ("bitwise_and",)),
    ("or_int", lambda T: _F(T, IA) | 6, ("bitwise_or",)),
    ("invert_int", lambda T: ~_F(T, IA), ("bitwise_not",)),
    ("and_bool_scalar", lambda T: _F(T, BA) & True, ("bitwise_and",)),
    ("logical_and", lambda T: T.logical_and(_F(T, V), _F(T, BB[:1])), ("logical_and",)),
    ("logical_or", lambda T: T.logical_or(_F(T, IA), _F(T, BB)), ("logical_or",)),
    ("logical_xor", lambda T: T.logical_xor(_F(T, BA), _F(T, BB)), ("logical_xor",)),
    ("logical_not", lambda T: T.logical_not(_F(T, V)), ("logical_not",)),
    ("isnan", lambda T: T.isnan(_F(T, A)), ("isnan",)),
    ("isinf", lambda T: _F(T, A).isinf(), ("isinf",)),
    ("isfinite", lambda T: T.isfinite(_F(T, A)), ("isfinite",)),
    ("isfinite_int", lambda T: T.isfinite(_F(T, IA)), ("isfinite",)),
    ("isclose", lambda T: T.isclose(_F(T, A), _F(T, B)), ("isclose",)),
    ("isclose_nan", lambda T: T.isclose(_F(T, A), _F(T, B), equal_nan=True), ("isclose",)),
    ("isclose_tol", lambda T: _F(T, V).isclose(_F(T, V) + 1e-3, rtol=0, atol=1e-2), ("isclose",)),
    ("allclose", lambda T: T.allclose(_F(T, V), _F(T, V) + 1e-9), ("allclose",)),
    ("allclose_false", lambda T: T.allclose(_F(T, V), _F(T, V) + 1e-3), ("allclose",)),
    ("allclose_nan", lambda T: T.allclose(_F(T, A), _F(T, A), equal_nan=True), ("allclose",)),
    ("allclose_nan_false", lambda T: T.allclose(_F(T, A), _F(T, A)), ("allclose",)),
    ("equal", lambda T: T.equal(_F(T, V), _F(T, V)), ("equal",)),
    ("equal_false", lambda T: T.equal(_F(T, V), _F(T, V[:2])), ("equal",)),
    ("any", lambda T: (_F(T, V) > 0.5).any(), ("any",)),
    ("any_dim", lambda T: T.any(_F(T, V) > 0.5, 1), ("any",)),
    ("any_dim_keep", lambda T: _F(T, A).isnan().any(dim=0, keepdim=True), ("any",)),
    ("any_float", lambda T: _F(T, V).any(-1), ("any",)),
    ("all", lambda T: (_F(T, V) > -5).all(), ("all",)),
    ("all_dims", lambda T: T.all(_F(T, V) > 0, dim=(0, 1)), ("all",)),
    ("all_keep", lambda T: (_F(T, V) > 0).all(keepdim=True, dim=1), ("all",)),
    ("all_0d", lambda T: T.tensor(1.5).all(), ("all",)),
    ("any_uint8", lambda T: T.tensor([[1, 0], [0, 0]], dtype=T.uint8).any(1), ("any",)),
    ("argmax", lambda T: T.argmax(_F(T, V)), ("argmax",)),
    ("argmax_dim", lambda T: _F(T, V).argmax(1), ("argmax",)),
    ("argmax_dim_keep", lambda T: _F(T, V).argmax(dim=-1, keepdim=True), ("argmax",)),
    ("argmax_dim0", lambda T: T.argmax(_F(T, V), 0), ("argmax",)),
    ("argmin", lambda T: _F(T, V).argmin(), ("argmin",)),
    ("argmin_dim", lambda T: T.argmin(_F(T, V), -1), ("argmin",)),
    ("argmin_dim_keep", lambda T: _F(T, V).argmin(0, keepdim=True), ("argmin",)),
    ("argmax_int", lambda T: _F(T, IA).argmax(1), ("argmax",)),
    ("argmax_0d", lambda T: T.tensor(1.5).argmax(), ("argmax",)),
    ("max_dim_int", lambda T: _F(T, IA).max(1), ("max",)),
    ("amax_int", lambda T: _F(T, IA).amax(0), ("amax",)),
    ("sum_int", lambda T: _F(T, IA).sum(), ("sum",)),
    ("sum_bool", lambda T: _F(T, BA).sum(1), ("sum",)),
    ("prod_int", lambda T: _F(T, IA).prod(1), ("prod",)),
    ("mean_dtype", lambda T: _F(T, IA).mean(dtype=T.float64), ("mean",)),
    ("abs_int", lambda T: _F(T, IA).abs(), ("abs",)),
    ("neg_int", lambda T: -_F(T, IA), ("neg",)),
    ("sign_int", lambda T: _F(T, IA).sign(), ("sign",)),
    ("relu_int", lambda T: T.relu(_F(T, IA)), ("relu",)),
    ("clamp_int", lambda T: _F(T, IA).clamp(-1, 4), ("clamp",)),
    ("clamp_int_float", lambda T: _F(T, IA).clamp(min=0.5), ("clamp",)),
    ("exp_int", lambda T: T.exp(_F(T, IA)), ("exp",)),
    ("sqrt_bool", lambda T: T.sqrt(_F(T, BA)), ("sqrt",)),
    ("round_int", lambda T: _F(T, IA).round(), ("round",)),
    ("floor_int", lambda T: T.floor(_F(T, IA)), ("floor",)),
    ("pow_int", lambda T: _F(T, IA) ** 2, ("pow",)),
    ("pow_int_float", lambda T: _F(T, IA) ** 0.5, ("pow",)),
    ("rpow_int", lambda T: 2 ** _F(T, IB), ("pow",)),
    ("rpow_float_int", lambda T: 2.5 ** _F(T, IB), ("pow",)),
    ("pow_int_tensors", lambda T: _F(T, np.abs(IA)) ** _F(T, np.abs(IB)), ("pow",)),
    ("maximum_int_float", lambda T: T.maximum(_F(T, IA), _F(T, V[:2, :3])), ("maximum",)),
    ("where_int_float", lambda T: T.where(_F(T, BA), _F(T, IA), 0.5), ("where",)),
    ("where_int_int", lambda T: T.where(_F(T, BA), _F(T, IA), 7), ("where",)),
    ("where_nonzero", lambda T: T.where(_F(T, BA)), ("where",)),
    ("floordiv_int", lambda T: _F(T, IA) // 2, ("floor_divide",)),
    ("floordiv_int_neg", lambda T: _F(T, IA) // _F(T, IB), ("floor_divide",)),
    ("div_trunc_int", lambda T: T.div(_F(T, IA), _F(T, IB), rounding_mode="trunc"), ("div",)),
    ("rem_int", lambda T: _F(T, IA) % 3, ("remainder",)),
    ("rem_int_neg", lambda T: _F(T, IA) % -3, ("remainder",)),
    ("rem_float_fn", lambda T: T.remainder(_F(T, V), -0.7), ("remainder",)),
    # dtype promotion
    ("int*float_scalar", lambda T: _F(T, IA) * 2.5, ("mul",)),
    ("float_scalar*int", lambda T: 2.5 * _F(T, IA), ("mul",)),
    ("int+int_scalar", lambda T: _F(T, IA) + 3, ("add",)),
    ("int+bool_scalar", lambda T: _F(T, IA) + True, ("add",)),
    ("int-float_scalar", lambda T: _F(T, IA) - 0.5, ("sub",)),
    ("float_scalar-int", lambda T: 0.5 - _F(T, IA), ("sub",)),
    (
        "f32+f64_0d",
        lambda T: T.tensor(V, dtype=T.float32) + T.tensor(2.0, dtype=T.float64),
        ("add",),
    ),
    (
        "f64_0d*f32",
        lambda T: T.tensor(2.0, dtype=T.float64) * T.tensor(V, dtype=T.float32),
        ("mul",),
    ),
    ("f32+f64", lambda T: T.tensor(V, dtype=T.float32) + T.tensor(V, dtype=T.float64), ("add",)),
    ("int+f32_0d", lambda T: _F(T, IA) + T.tensor(0.5), ("add",)),
    ("int_0d+f32", lambda T: T.tensor(3) + T.tensor(V, dtype=T.float32), ("add",)),
    ("int/int", lambda T: _F(T, IA) / _F(T, IB), ("div",)),
    ("int/int_scalar", lambda T: _F(T, IA) / 2, ("div",)),
    ("int_scalar/int", lambda T: 6 / _F(T, IB), ("div",)),
    ("bool+bool", lambda T: _F(T, BA) + _F(T, BB), ("add",)),
    ("bool*bool", lambda T: _F(T, BA) * _F(T, BB), ("mul",)),
    ("bool+int_scalar", lambda T: _F(T, BA) + 1, ("add",)),
    ("bool*float_scalar", lambda T: _F(T, BA) * 1.5, ("mul",)),
    ("bool+int_tensor", lambda T: _F(T, BA) + _F(T, IB), ("add",)),
    ("int*bool", lambda T: _F(T, IA) * _F(T, BA), ("mul",)),
    ("f32_0d+int_tensor", lambda T: T.tensor(1.5) + _F(T, IA), ("add",)),
    ("f64_0d+int_tensor", lambda T: T.tensor(1.5, dtype=T.float64) + _F(T, IA), ("add",)),
    ("int_0d*f64_0d", lambda T: T.tensor(3) * T.tensor(1.5, dtype=T.float64), ("mul",)),
    ("f32*np_float_scalar", lambda T: T.tensor(V, dtype=T.float32) * 1e-3, ("mul",)),
    ("float_tensor_default", lambda T: T.tensor([1.0, 2.0]) + 1, ("tensor",)),
    ("int_tensor_default", lambda T: T.tensor([1, 2]) * 1, ("tensor",)),
    ("matmul_int", lambda T: _F(T, IA) @ _F(T, IA.T), ("matmul",)),
]


def _compare_value(t, a, where):
    if isinstance(t, tuple):
        assert isinstance(a, tuple) and len(a) == len(t), where
        for k, (ti, ai) in enumerate(zip(t, a)):
            _compare_value(ti, ai, f"{where}[{k}]")
        return
    if isinstance(t, bool):
        assert a is t or (isinstance(a, bool) and a == t), f"{where}: {a!r} != torch {t!r}"
        return
    assert _dt(a) == _dt(t), f"{where}: dtype {a.dtype} != torch {t.dtype}"
    assert tuple(a.shape) == tuple(t.shape), f"{where}: shape"
    np.testing.assert_allclose(_np(a), _np(t), rtol=1e-6, atol=0, equal_nan=True, err_msg=where)
    assert a.grad_fn is None and not a.requires_grad


@pytest.mark.parametrize("fn", [c[1] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES])
def test_value_matches_torch(torch, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = fn(torch)
        a = fn(ad)
    _compare_value(
        tuple(t) if isinstance(t, tuple) else t, tuple(a) if isinstance(a, tuple) else a, "value"
    )


@pytest.mark.parametrize("op", ["gt", "eq", "argmax", "isnan", "and"])
def test_non_differentiable_on_grad_inputs(torch, op):
    """Comparisons/predicates of a tensor that requires grad: no grad_fn, like torch."""
    fns = {
        "gt": lambda x: x > 0,
        "eq": lambda x: x == x,
        "argmax": lambda x: x.argmax(1),
        "isnan": lambda x: x.isnan(),
        "and": lambda x: (x > 0) & (x < 1),
    }
    data = np.random.default_rng(0).standard_normal((3, 4))
    t = fns[op](torch.tensor(data, requires_grad=True))
    a = fns[op](ad.tensor(data, requires_grad=True))
    assert a.grad_fn is None and t.grad_fn is None
    assert a.requires_grad is t.requires_grad is False
    np.testing.assert_array_equal(_np(a), _np(t))


# ---------------------------------------------------------------------------------------------
# Errors, and what autodiag does not support (must raise, never differ)
# ---------------------------------------------------------------------------------------------

ERROR_CASES = [
    ("matmul_0d", lambda T: T.tensor(1.0) @ T.ones(3), RuntimeError, "1D"),
    ("matmul_mismatch", lambda T: T.ones(2, 3) @ T.ones(4, 2), RuntimeError, "shapes"),
    ("mm_mismatch", lambda T: T.mm(T.ones(2, 3), T.ones(4, 2)), RuntimeError, "shapes"),
    (
        "bool_sub",
        lambda T: T.tensor([True]) - T.tensor([False]),
        RuntimeError,
        "with two bool tensors is not supported",
    ),
    ("bool_neg", lambda T: -T.tensor([True]), RuntimeError, "on a bool tensor is not supported"),
    ("and_float", lambda T: T.ones(2) & T.ones(2), RuntimeError, "not implemented for"),
    (
        "invert_float",
        lambda T: ~T.ones(2),
        TypeError,
        "only implemented on integer and Boolean-type tensors",
    ),
    ("dim_out_of_range", lambda T: T.ones(2, 3).sum(2), IndexError, "Dimension out of range"),
    ("view_bad", lambda T: T.ones(2, 3).view(4, 2), RuntimeError, "invalid for input of size"),
    ("index_oob", lambda T: T.ones(2, 3)[2], IndexError, "out of bounds"),
    ("too_many_indices", lambda T: T.ones(2)[0, 0], IndexError, "too many indices"),
    ("where_float_cond", lambda T: T.where(T.ones(2), T.ones(2), T.ones(2)), RuntimeError, "bool"),
    ("int_neg_pow", lambda T: T.tensor([2]) ** -1, RuntimeError, "negative integer powers"),
    (
        "cat_dim_mismatch",
        lambda T: T.cat([T.ones(2, 3), T.ones(2, 4)]),
        RuntimeError,
        "Sizes of tensors must match",
    ),
    (
        "stack_mismatch",
        lambda T: T.stack([T.ones(2), T.ones(3)]),
        RuntimeError,
        "stack expects each tensor to be equal size",
    ),
    ("expand_bad", lambda T: T.ones(2, 3).expand(4, 3), RuntimeError, "expanded size"),
    ("gelu_bad", lambda T: F(T).gelu(T.ones(2), approximate="x"), RuntimeError, "approximate"),
    ("clamp_none", lambda T: T.clamp(T.ones(2)), RuntimeError, "At least one of"),
    ("squeeze_oob", lambda T: T.ones(2, 1).squeeze(3), IndexError, "Dimension out of range"),
    ("max_empty", lambda T: T.ones(0).max(), RuntimeError, "numel() == 0"),
    ("logsumexp_no_dim", lambda T: T.logsumexp(T.ones(3)), TypeError, ""),
    (
        "float_index",
        lambda T: T.ones(3)[T.tensor([0.0])],
        IndexError,
        "tensors used as indices must be long",
    ),
]


@pytest.mark.parametrize(
    "fn,exc,phrase", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_error_matches_torch(torch, fn, exc, phrase):
    with pytest.raises(exc) as te:
        fn(torch)
    assert phrase in str(te.value), "the oracle's message changed: update the phrase"
    with pytest.raises(exc) as ae:
        fn(ad)
    assert phrase in str(ae.value)


# ---------------------------------------------------------------------------------------------
# Every registered op is covered
# ---------------------------------------------------------------------------------------------

VALUE_CASES += [
    ("argsort", lambda T: T.argsort(_F(T, V), dim=1, descending=True), ("argsort",)),
    ("one_hot", lambda T: F(T).one_hot(T.tensor([[2, 0], [1, 1]]), 4), ("one_hot",)),
]

# Registered names that create tensors or are not ops on data: no grad_fn to compare.
# (the random ones draw PyTorch's numbers: tests/test_rng_torch.py compares them)
NON_DIFFERENTIABLE = {
    "multinomial",
    "bernoulli",
    "arange",
    "as_tensor",
    "empty",
    "empty_like",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "normal",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randint",
    "randn",
    "randn_like",
    "randperm",
    "tensor",
    "zeros",
    "zeros_like",
    "randint_like",
}


def _covered() -> set:
    names = set()
    for c in GRAD_CASES:
        names.update(c.op)
    for c in VALUE_CASES:
        names.update(c[2])
    from test_cover15_torch import COVERED  # the ops issue 20 added, in their own file
    from test_ops16_torch import COVERED as OPS16  # ops16's, in their own file

    names |= _covered_cover16a() | _covered_16b() | _covered_grid()
    return names | {"floor_divide"} | COVERED | OPS16  # test_floor_divide_grad_not_implemented


def _covered_cover16a() -> set:
    from test_cover16a_torch import COVERED  # cover16a's indexing and shape ops

    return COVERED


def _covered_16b():
    from test_cover16b_torch import COVERED as C16B  # cover16b's, in their own file

    return C16B


def _covered_grid() -> set:
    from test_programs16_grid_torch import COVERED  # affine_grid / grid_sample's aten names

    return COVERED


def test_registry_is_covered():
    from autodiag.ops import REGISTRY

    covered = _covered() | NON_DIFFERENTIABLE
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"registered ops without a row in tests/test_ops_torch.py: {missing}"
    unknown = sorted(n for n in covered if n not in REGISTRY and not n.startswith("__"))
    assert not unknown, f"table names that are not registered ops: {unknown}"
