"""Differential sweep of the hot-path elementwise ops (NOTE [Hot path] in ops/pointwise.py).

``binary_op`` / ``unary_op`` handle the common cases inline and fall back to the general path for
the rest; every case here runs under autodiag and PyTorch and compares forward values, dtypes,
node names and edges, saved tensors, gradients, grad modes, inference tensors, version counters
and saved-tensor hooks. Data is seeded; snippets are written once as functions of ``m``.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from differential import assert_same, catch, names, run_both, same_error

import autodiag as ad

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

FLOATS = ("float16", "float32", "float64")


def _dt(m, name):
    return getattr(m, name)


def dtname(t):
    return str(t.dtype).rsplit(".", 1)[-1]


def _array(shape, dtype, seed, positive=False):
    """Seeded data away from zero (division) and from the kinks of abs/relu/sign/floor."""
    rng = np.random.RandomState(seed)
    if dtype == "bool":
        return rng.rand(*shape) > 0.4
    if dtype in FLOATS:
        v = rng.uniform(0.3, 1.7, size=shape) + 0.05
        if not positive:
            v = v * np.where(rng.rand(*shape) > 0.5, 1.0, -1.0)
        return np.asarray(v, dtype=dtype)
    return np.asarray(rng.randint(1, 6, size=shape), dtype=dtype)


class T:
    """A tensor operand: shape, dtype, and how it is made (plain, Parameter, view, ...)."""

    def __init__(self, shape, dtype="float64", kind="plain", positive=False):
        self.shape, self.dtype, self.kind, self.positive = shape, dtype, kind, positive

    @property
    def is_float(self):
        return self.dtype in FLOATS

    def make(self, m, seed, rg):
        data = _array(self.shape, self.dtype, seed, self.positive)
        if self.kind == "param":
            return m.nn.Parameter(m.tensor(data))
        if self.kind == "view":  # a view of a bigger tensor: it has a version counter
            big = m.tensor(np.concatenate([data[None], data[None]]), requires_grad=rg)
            return big[1]
        if self.kind == "versioned":  # written in place before the op
            t = m.tensor(data, requires_grad=rg)
            with m.no_grad():
                t.mul_(1)
            return t
        return m.tensor(data, requires_grad=rg)

    def __repr__(self):
        return f"{self.kind}{list(self.shape)}{self.dtype}"


def operand(spec, m, seed, rg):
    return spec.make(m, seed, rg) if isinstance(spec, T) else spec


def _loose(a, b, path):
    """assert_same, with float16 compared to float16 precision (PyTorch computes half ops in
    float32 and rounds once; numpy may round a Python scalar to half first)."""
    if isinstance(b, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            _loose(x, y, f"{path}[{i}]")
        return
    if isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: {a.keys()} vs {b.keys()}"
        for k in b:
            _loose(a[k], b[k], f"{path}[{k!r}]")
        return
    if hasattr(b, "dtype") and dtname(b) == "float16":
        assert hasattr(a, "dtype") and dtname(a) == "float16", f"{path}: {a!r} vs {b!r}"
        an, bn = np.asarray(a.detach().numpy()), np.asarray(b.detach().numpy(force=True))
        assert an.shape == bn.shape, path
        np.testing.assert_allclose(
            an.astype(np.float64), bn.astype(np.float64), rtol=2e-3, atol=1e-3, err_msg=path
        )
        return
    assert_same(a, b, path)


def check(fn, torch):
    """fn(m) under both: the same values, or the same exception type and first phrase."""
    try:
        b = fn(torch)
    except Exception as et:  # noqa: BLE001 - compare whatever torch raises
        ea = catch(fn, ad)
        assert type(ea) is type(et), f"autodiag raised {type(ea).__name__}: {ea}; torch {et!r}"
        key = str(et).split("\n")[0][:45]
        assert key in str(ea), f"autodiag's message lacks {key!r}: {ea}"
        return None
    a = fn(ad)
    _loose(a, b, "result")
    return a


SAVED = ("_saved_self", "_saved_other", "_saved_result", "_saved_alpha")


def saved(fn, *inputs):
    """The saved attributes PyTorch exposes on ``fn``: value, and which input object it is."""
    out = {}
    for attr in SAVED:
        try:
            v = getattr(fn, attr)
        except AttributeError:
            continue
        out[attr] = v
        if v is not None and hasattr(v, "grad_fn"):
            same = tuple(v is t for t in inputs)
            if any(same) or v.dim():  # (a wrapped Python scalar is a fresh 0-d tensor)
                out[attr + " is"] = same
    return out


def facts(r):
    """What a result is: value, dtype, flags, its node and edges."""
    f = [r, dtname(r), r.requires_grad, r.is_leaf, r.is_inference()]
    if r.grad_fn is not None:
        f.append(names(r.grad_fn))
    return f


def seed_grad(m, r, seed=99):
    g = _array(tuple(r.shape), "float64", seed)
    return m.tensor(g).to(r.dtype)


def grads_of(*ts):
    """Gradients of the leaves behind the tensor operands (a view's base)."""
    out = []
    for t in ts:
        if hasattr(t, "requires_grad") and t.requires_grad:
            out.append((t._base if t._base is not None else t).grad)
    return out


# ---------------------------------------------------------------------------------------------
# Binary ops: + * - /
# ---------------------------------------------------------------------------------------------

BIN = {
    "add": (lambda m, a, b: a + b, lambda m, a, b: m.add(a, b), lambda m, a, b: a.add(b)),
    "mul": (lambda m, a, b: a * b, lambda m, a, b: m.mul(a, b), lambda m, a, b: a.mul(b)),
    "sub": (lambda m, a, b: a - b, lambda m, a, b: m.sub(a, b), lambda m, a, b: a.sub(b)),
    "div": (lambda m, a, b: a / b, lambda m, a, b: m.div(a, b), lambda m, a, b: a.div(b)),
}
FORMS = ("operator", "function", "method")

f64, f32 = T((3, 4), "float64"), T((3, 4), "float32")
OPERANDS = {
    # the inline cases: one dtype and shape, or a float tensor and a Python float / int
    "f64_f64": (f64, T((3, 4))),
    "f32_f32": (f32, T((3, 4), "float32")),
    "f16_f16": (T((3, 4), "float16"), T((3, 4), "float16")),
    "0d_0d_f64": (T((), "float64"), T((), "float64")),
    "f64_float": (f64, 2.5),
    "f64_int": (f64, 3),
    "f32_float": (f32, -0.75),
    "f32_int": (f32, 2),
    "f16_float": (T((3, 4), "float16"), 1.5),
    "0d_f32_float": (T((), "float32"), 2.5),
    "float_f64": (2.5, f64),
    "int_f32": (3, f32),
    "float_0d_f64": (-1.25, T(())),
    # broadcasting
    "bcast_row": (f64, T((4,))),
    "bcast_outer": (T((3, 1)), T((1, 4))),
    "bcast_left": (T((4,)), T((3, 4))),
    "bcast_0d": (T(()), f64),
    # promotion
    "f32_f64": (f32, T((3, 4), "float64")),
    "f64_f32": (f64, T((3, 4), "float32")),
    "i64_f32": (T((3, 4), "int64"), T((3, 4), "float32")),
    "f32_i64": (f32, T((3, 4), "int64")),
    "bool_f32": (T((3, 4), "bool"), T((3, 4), "float32")),
    "f64_bool": (f64, T((3, 4), "bool")),
    "f16_f32": (T((3, 4), "float16"), T((3, 4), "float32")),
    "i32_i64": (T((3, 4), "int32"), T((3, 4), "int64")),
    "i64_i64": (T((3, 4), "int64"), T((3, 4), "int64")),
    "bool_bool": (T((3, 4), "bool"), T((3, 4), "bool")),
    "0d_f64__f32": (T((), "float64"), T((3,), "float32")),
    "f32__0d_f64": (T((3,), "float32"), T((), "float64")),
    "i64__0d_f64": (T((3,), "int64"), T((), "float64")),
    "0d_f32_0d_f64": (T((), "float32"), T((), "float64")),
    # other scalars (the general path)
    "f64_bool_scalar": (f64, True),
    "f64_npint": (f64, np.int64(3)),
    "i64_int": (T((3, 4), "int64"), 3),
    "i64_float": (T((3, 4), "int64"), 2.5),
    "i32_int": (T((3, 4), "int32"), 2),
    "i64_bool_scalar": (T((3, 4), "int64"), True),
    "bool_int": (T((3, 4), "bool"), 2),
    "bool_float": (T((3, 4), "bool"), 0.5),
    "int_i64": (2, T((3, 4), "int64")),
    "bool_scalar_f32": (True, f32),
    # Parameters, views, tensors with a version counter
    "param_left": (T((3, 4), kind="param"), T((3, 4))),
    "param_right": (T((3, 4)), T((3, 4), kind="param")),
    "param_float": (T((3, 4), kind="param"), 2.0),
    "float_param": (2.0, T((3, 4), kind="param")),
    "view_left": (T((3, 4), kind="view"), T((3, 4))),
    "versioned_right": (T((3, 4)), T((3, 4), kind="versioned")),
}
# numpy scalars on the left hand their operator to Tensor.__r*__ (checked separately: see the
# xfail tests for their promotion)
RG = ("none", "left", "right", "both")


def _can_rg(spec):
    return isinstance(spec, T) and spec.is_float and spec.kind != "param"


def _bin_params():
    out = []
    for op in BIN:
        for case, (a, b) in OPERANDS.items():
            for rg in RG:
                if (_rg(rg, "left") and not _can_rg(a)) or (_rg(rg, "right") and not _can_rg(b)):
                    continue
                forms = FORMS if isinstance(a, T) and rg in ("none", "both") else ("operator",)
                for form in forms:
                    out.append(pytest.param(op, case, rg, form, id=f"{op}-{case}-{rg}-{form}"))
    return out


def _rg(rg, side):
    return rg == "both" or rg == side


@pytest.mark.parametrize("op, case, rg, form", _bin_params())
def test_binary(torch, op, case, rg, form):
    a_spec, b_spec = OPERANDS[case]
    fn = BIN[op][FORMS.index(form)]

    def f(m):
        a = operand(a_spec, m, 1, _rg(rg, "left"))
        b = operand(b_spec, m, 2, _rg(rg, "right"))
        r = fn(m, a, b)
        out = facts(r)
        if r.grad_fn is not None:
            out.append(saved(r.grad_fn, a, b))
            r.backward(seed_grad(m, r))
            gs = grads_of(a, b)
            if dtname(r) != "float64":
                # a float64 input of a float32 op: PyTorch computes its gradient in float32
                gs = [(dtname(g), g.float()) if dtname(g) == "float64" else g for g in gs]
            out.append(gs)
        return out

    check(f, torch)


SECOND = [
    "f64_f64",
    "bcast_row",
    "bcast_outer",
    "f64_float",
    "float_f64",
    "f64_int",
    "0d_0d_f64",
    "bcast_0d",
    "f32__0d_f64",
]


def _double(m, op, case, with_names):
    a_spec, b_spec = OPERANDS[case]
    a = operand(a_spec, m, 3, True)
    b = operand(b_spec, m, 4, True)
    ins = [t for t in (a, b) if isinstance(t, m.Tensor)]
    r = BIN[op][0](m, a, b)
    g = m.autograd.grad((r * r).sum(), ins, create_graph=True)
    if with_names:
        return [names(x.grad_fn) if x.grad_fn is not None else None for x in g]
    gg = m.autograd.grad(sum((x * x).sum() for x in g), ins, allow_unused=True)
    out = [list(g), [x.requires_grad for x in g], list(gg)]
    if dtname(r) == "float32":  # PyTorch computes a float64 input's gradient in float32 here
        out = [[(dtname(x), x.detach().float()) for x in xs] for xs in (out[0], out[2])]
    return out


@pytest.mark.parametrize("op", list(BIN))
@pytest.mark.parametrize("case", SECOND)
def test_binary_double_backward(torch, op, case):
    check(lambda m: _double(m, op, case, False), torch)


def _double_names_params():
    return [pytest.param(op, case, id=f"{op}-{case}") for case in SECOND for op in BIN]


@pytest.mark.parametrize("op, case", _double_names_params())
def test_binary_double_backward_graph(torch, op, case):
    check(lambda m: _double(m, op, case, True), torch)


# ---------------------------------------------------------------------------------------------
# Unary ops
# ---------------------------------------------------------------------------------------------

# name -> (x -> y, input domain positive?)
UN = {
    "neg": (lambda m, x: -x, False),
    "neg_fn": (lambda m, x: m.neg(x), False),
    "abs": (lambda m, x: abs(x), False),
    "abs_method": (lambda m, x: x.abs(), False),
    "exp": (lambda m, x: m.exp(x), False),
    "log": (lambda m, x: x.log(), True),
    "log1p": (lambda m, x: m.log1p(x), True),
    "sqrt": (lambda m, x: x.sqrt(), True),
    "rsqrt": (lambda m, x: m.rsqrt(x), True),
    "reciprocal": (lambda m, x: x.reciprocal(), False),
    "sin": (lambda m, x: m.sin(x), False),
    "cos": (lambda m, x: x.cos(), False),
    "tan": (lambda m, x: m.tan(x), False),
    "tanh": (lambda m, x: x.tanh(), False),
    "sigmoid": (lambda m, x: m.sigmoid(x), False),
    "relu": (lambda m, x: x.relu(), False),
    "relu_F": (lambda m, x: m.nn.functional.relu(x), False),
    "erf": (lambda m, x: x.erf(), False),
    "sign": (lambda m, x: m.sign(x), False),
    "sgn": (lambda m, x: x.sgn(), False),
    "floor": (lambda m, x: x.floor(), False),
    "ceil": (lambda m, x: m.ceil(x), False),
    "trunc": (lambda m, x: x.trunc(), False),
    "round": (lambda m, x: x.round(), False),
    "round_decimals": (lambda m, x: m.round(x, decimals=1), False),
    "clamp": (lambda m, x: x.clamp(-0.5, 0.8), False),
    "clamp_min": (lambda m, x: m.clamp(x, min=0.2), False),
    "clamp_max": (lambda m, x: x.clamp(max=-0.1), False),
    "leaky_relu": (lambda m, x: m.nn.functional.leaky_relu(x, 0.2), False),
    "gelu": (lambda m, x: m.nn.functional.gelu(x), False),
    "gelu_tanh": (lambda m, x: m.nn.functional.gelu(x, approximate="tanh"), False),
    "softplus": (lambda m, x: m.nn.functional.softplus(x, beta=2.0), False),
    "erfinv": (lambda m, x: x.erfinv(), False),
    # issue 20's ops (ops/trig.py); NaN outside their domains, in both
    "acos": (lambda m, x: m.acos(x), False),
    "asin": (lambda m, x: x.asin(), False),
    "atan": (lambda m, x: m.atan(x), False),
    "sinh": (lambda m, x: x.sinh(), False),
    "cosh": (lambda m, x: m.cosh(x), False),
    "asinh": (lambda m, x: x.asinh(), False),
    "acosh": (lambda m, x: m.acosh(x), True),
    "atanh": (lambda m, x: x.atanh(), False),
    "frac": (lambda m, x: m.frac(x), False),
    # ops16's (ops/pointwise2.py)
    "log2": (lambda m, x: x.log2(), True),
    "log10": (lambda m, x: m.log10(x), True),
    "exp2": (lambda m, x: m.exp2(x), False),
    "expm1": (lambda m, x: x.expm1(), False),
    "erfc": (lambda m, x: m.erfc(x), False),
}
UN_INPUTS = {
    "f64": T((3, 4)),
    "f32": T((3, 4), "float32"),
    "f16": T((2, 3), "float16"),
    "0d": T(()),
    "i64": T((3, 4), "int64"),
    "bool": T((3,), "bool"),
    "param": T((3, 4), kind="param"),
    "view": T((3, 4), kind="view"),
    "versioned": T((3, 4), kind="versioned"),
}
UN_SAVED = (
    "_saved_self",
    "_saved_result",
    "_saved_min",
    "_saved_max",
    "_saved_negative_slope",
    "_saved_approximate",
    "_saved_beta",
    "_saved_threshold",
)


def test_every_hot_path_op_is_swept():
    # the ops that unary_op/binary_op build (``OpInfo.hot``): each needs its row in UN
    from autodiag.ops import OPS

    hot = {n for n, info in OPS.items() if info.hot}
    assert "exp" in hot and "neg" not in hot
    assert not hot - set(UN), f"hot-path ops without a row in UN: {sorted(hot - set(UN))}"


def un_saved(fn, x, r):
    out = {}
    for attr in UN_SAVED:
        try:
            v = getattr(fn, attr)
        except AttributeError:
            continue
        out[attr] = v
        if hasattr(v, "shape"):
            out[attr + " is"] = (v is x, v is r)
    return out


def _un_params():
    out = []
    for op in UN:
        for inp, spec in UN_INPUTS.items():
            for rg in (False, True):
                if rg and (not spec.is_float or spec.kind == "param"):
                    continue
                out.append(pytest.param(op, inp, rg, id=f"{op}-{inp}-{'rg' if rg else 'nog'}"))
    return out


@pytest.mark.parametrize("op, inp, rg", _un_params())
def test_unary(torch, op, inp, rg):
    fn, positive = UN[op]
    spec = UN_INPUTS[inp]
    spec = T(spec.shape, spec.dtype, spec.kind, positive)

    def f(m):
        x = spec.make(m, 5, rg)
        r = fn(m, x)
        out = facts(r)
        if r.grad_fn is not None:
            out.append(un_saved(r.grad_fn, x, r))
            r.backward(seed_grad(m, r))
            out.append(grads_of(x))
        return out

    check(f, torch)


# floor..sign: the zero gradient is zeros_like(grad), as in torch (no grad_fn: the second grad
# raises in both)
SMOOTH = [
    "neg",
    "abs",
    "exp",
    "log",
    "log1p",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "erf",
    "clamp",
    "leaky_relu",
    "gelu",
    "gelu_tanh",
    "softplus",
    "floor",
    "ceil",
    "trunc",
    "round",
    "sign",
    "sgn",
    "log2",
    "log10",
    "exp2",
    "expm1",
    "erfc",
]


@pytest.mark.parametrize("op", SMOOTH)
def test_unary_double_backward(torch, op):
    fn, positive = UN[op]

    def f(m):
        x = m.tensor(_array((5,), "float64", 6, positive), requires_grad=True)
        r = fn(m, x)
        (g,) = m.autograd.grad((r * r).sum(), x, create_graph=True)
        (gg,) = m.autograd.grad(g.sum(), x, allow_unused=True)
        return g, gg, g.requires_grad

    check(f, torch)


# ---------------------------------------------------------------------------------------------
# Grad modes
# ---------------------------------------------------------------------------------------------

MODES = (
    "no_grad",
    "inference_mode",
    "enable_grad_in_no_grad",
    "set_grad_enabled_false",
    "no_grad_then_enable_outside",
)

HOT = {
    f"{op}-{case}": (lambda m, a, b, op=op: BIN[op][0](m, a, b), case)
    for op in BIN
    for case in (
        "f64_f64",
        "f64_float",
        "f64_int",
        "float_f64",
        "bcast_row",
        "f32_f64",
        "f64_npint",
        "param_left",
        "view_left",
    )
}
HOT.update(
    {
        f"un-{op}": (lambda m, a, b, op=op: UN[op][0](m, a), "f64_f64")
        for op in ("neg", "abs", "exp", "sin", "sqrt", "relu", "sign", "clamp", "gelu", "round")
    }
)


def _mode(m, mode):
    if mode == "no_grad":
        return m.no_grad()
    if mode == "inference_mode":
        return m.inference_mode()
    if mode == "set_grad_enabled_false":
        return m.set_grad_enabled(False)
    return m.no_grad()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", list(HOT))
def test_grad_modes(torch, key, mode):
    fn, case = HOT[key]
    a_spec, b_spec = OPERANDS[case]

    def f(m):
        a = operand(a_spec, m, 7, isinstance(a_spec, T) and a_spec.kind != "param")
        b = operand(b_spec, m, 8, isinstance(b_spec, T) and b_spec.kind != "param")
        with _mode(m, mode):
            if mode == "enable_grad_in_no_grad":
                with m.enable_grad():
                    r = fn(m, a, b)
            else:
                r = fn(m, a, b)
            inside = (m.is_grad_enabled(), m.is_inference_mode_enabled())
        out = facts(r) + [inside]
        if mode == "no_grad_then_enable_outside":
            r2 = fn(m, r, b) if isinstance(r, m.Tensor) else r
            out.append(facts(r2))
        if r.grad_fn is not None:
            r.sum().backward()
            out.append(grads_of(a, b))
        return out

    check(f, torch)


@pytest.mark.parametrize("key", ["mul-f64_f64", "add-f64_float", "un-exp"])
def test_enable_grad_inside_inference_mode(torch, key):
    fn, case = HOT[key]
    a_spec, b_spec = OPERANDS[case]

    def f(m):
        a = operand(a_spec, m, 7, isinstance(a_spec, T))
        b = operand(b_spec, m, 8, isinstance(b_spec, T))
        with m.inference_mode(), m.enable_grad():
            r = fn(m, a, b)
        return r.is_inference(), r.requires_grad, r.grad_fn is None

    check(f, torch)


# ---------------------------------------------------------------------------------------------
# Inference tensors in a later grad-recording op
# ---------------------------------------------------------------------------------------------

INF_OPS = {
    "x+c": lambda m, x, c: x + c,
    "c+x": lambda m, x, c: c + x,
    "x*c": lambda m, x, c: x * c,
    "c*x": lambda m, x, c: c * x,
    "x-c": lambda m, x, c: x - c,
    "c-x": lambda m, x, c: c - x,
    "x/c": lambda m, x, c: x / c,
    "c/x": lambda m, x, c: c / x,
    "x*c.exp": lambda m, x, c: x * c.exp(),  # unary on the inference tensor first
    "c.exp": lambda m, x, c: c.exp() + x,
    "mul_fn": lambda m, x, c: m.mul(x, c),
    "div_method": lambda m, x, c: x.div(c),
}
INF_SHAPES = {"same": ((3,), (3,)), "bcast": ((2, 3), (3,)), "0d": ((3,), ())}


@pytest.mark.parametrize("grad", ["rg", "not_rg", "no_grad"])
@pytest.mark.parametrize("shapes", list(INF_SHAPES))
@pytest.mark.parametrize("op", list(INF_OPS))
def test_inference_tensor_operand(torch, op, shapes, grad):
    xs, cs = INF_SHAPES[shapes]

    def f(m):
        x = m.tensor(_array(xs, "float64", 9), requires_grad=grad != "not_rg")
        with m.inference_mode():
            c = m.tensor(_array(cs, "float64", 10)) * 1.0
        if grad == "no_grad":
            with m.no_grad():
                r = INF_OPS[op](m, x, c)
        else:
            r = INF_OPS[op](m, x, c)
        out = facts(r)
        if r.requires_grad:
            r.sum().backward()
            out.append(x.grad)
        return out

    check(f, torch)


def test_inference_tensor_saved_error_phrase(torch):
    def f(m):
        x = m.ones(3, requires_grad=True)
        with m.inference_mode():
            c = m.full((3,), 2.0)
        return x / c

    same_error(f, torch, "Inference tensors cannot be saved for backward")

    def g(m):
        with m.inference_mode():
            c = m.full((3,), 2.0)
        return m.ones(3, requires_grad=True) * c

    same_error(g, torch, "Inference tensors cannot be saved for backward")


# ---------------------------------------------------------------------------------------------
# Saved tensors: version counters
# ---------------------------------------------------------------------------------------------

# op(x, c) with x requiring grad and c not: every one saves c (or x) for backward
SAVERS = {
    "x*c": (lambda m, x, c: x * c, "c"),
    "c*x": (lambda m, x, c: c * x, "c"),
    "x/c": (lambda m, x, c: x / c, "c"),
    "mul_fn": (lambda m, x, c: m.mul(x, c), "c"),
    "x*c_bcast": (lambda m, x, c: x * c[0], "c"),
    "x*c_promote": (lambda m, x, c: x * c.float(), None),  # saves the cast copy
    "h.sin": (lambda m, x, c: x.sin(), "x"),
    "h.log": (lambda m, x, c: m.log(x.abs()), None),
    "h.exp": (lambda m, x, c: x.exp(), "r"),
    "h.sqrt": (lambda m, x, c: x.abs().sqrt(), "r"),
    "h.tanh": (lambda m, x, c: m.tanh(x), "r"),
    "h.sigmoid": (lambda m, x, c: x.sigmoid(), "r"),
    "h.relu": (lambda m, x, c: x.relu(), "r"),
    "h.abs": (lambda m, x, c: abs(x), "x"),
    "h.rsqrt": (lambda m, x, c: x.abs().rsqrt(), "r"),
    "h.reciprocal": (lambda m, x, c: x.reciprocal(), "r"),
    "h.clamp": (lambda m, x, c: x.clamp(-0.5, 0.5), "x"),
    "h.gelu": (lambda m, x, c: m.nn.functional.gelu(x), "x"),
    "h.leaky": (lambda m, x, c: m.nn.functional.leaky_relu(x), "x"),
    "h*h": (lambda m, x, c: x * x, "x"),
    "h/h": (lambda m, x, c: x / x, "x"),
}
WRITES = (
    "none",
    "after",
    "after_view",
    "before",
    "before_and_after",
    "base_of_view",
    "detach_after",
)


@pytest.mark.parametrize(
    "op, write",
    [(op, w) for op in SAVERS for w in WRITES if SAVERS[op][1] is not None or w == "none"],
)
def test_saved_versions(torch, op, write):
    fn, target = SAVERS[op]

    def f(m):
        leaf = m.tensor(_array((3, 3), "float64", 11), requires_grad=True)
        base = m.tensor(_array((2, 3, 3), "float64", 12))
        x = leaf * 1.0  # a non-leaf: may be written in place
        c = base[1] if write == "base_of_view" else base[1].clone()
        tgt = {"c": c, "x": x}.get(target)
        if write in ("before", "before_and_after") and tgt is not None:
            with m.no_grad():
                tgt.mul_(1)
        r = fn(m, x, c)
        tgt = r if target == "r" else tgt
        if write in ("after", "before_and_after"):
            tgt.add_(0.5) if target != "r" else r.mul_(1)
        elif write == "after_view":
            (r if target == "r" else tgt)[0].add_(0)
        elif write == "base_of_view" and target == "c":
            base.add_(1)
        elif write == "detach_after":
            tgt.detach().add_(0)
        r.backward(seed_grad(m, r))
        return leaf.grad, r._version

    if write == "after_view" and target in ("x", "r"):
        # in-place on a view of a tensor in autograd: documented limitation (README)
        ea = catch(f, ad)
        assert isinstance(ea, RuntimeError)
        return
    if write == "none" or (write == "before" or write == "base_of_view" and target != "c"):
        run_both(f, torch)
        return
    if write == "base_of_view" and target == "c":
        same_error(
            f,
            torch,
            "modified by an inplace operation",
            "is at version 1; expected version 0 instead",
        )
        return
    v = (
        "is at version 2; expected version 1"
        if write == "before_and_after" and target != "r"
        else "is at version 1; expected version 0"
    )
    ea, et = same_error(f, torch, "modified by an inplace operation", v)
    # the tensor's description: type, shape and the node it is an output of
    desc = re.compile(r"\[torch\.\w+ \[[\d, ]*\]\](, which is output \d+ of \w+,)?")
    assert desc.search(str(ea)).group(0) == desc.search(str(et)).group(0)


@pytest.mark.parametrize("op", ["sin", "exp", "mul", "div", "abs", "rdiv"])
def test_saved_view_of_leaf_written_under_no_grad(torch, op):
    # the saved input is a view of a leaf; the leaf is written under no_grad afterwards
    def f(m):
        leaf = m.tensor(_array((2, 3), "float64", 22), requires_grad=True)
        v = leaf[1]
        r = {
            "sin": lambda: v.sin(),
            "exp": lambda: v.exp() * v,
            "mul": lambda: v * v,
            "div": lambda: leaf[0] / v,
            "abs": lambda: abs(v),
            "rdiv": lambda: 2.0 / v,
        }[op]()
        with m.no_grad():
            leaf.mul_(2)
        r.sum().backward()
        return leaf.grad

    if op == "rdiv":  # reciprocal saves its result, not v: no error
        run_both(f, torch)
        return
    same_error(f, torch, "modified by an inplace operation", "is at version 1; expected version 0")


# ---------------------------------------------------------------------------------------------
# Saved-tensor hooks: calls, order, arguments
# ---------------------------------------------------------------------------------------------

HOOKED = {
    "x*y": lambda m, x, y: x * y,
    "y*x": lambda m, x, y: y * x,
    "x*y_bcast": lambda m, x, y: x * y[0],
    "x*y_promote": lambda m, x, y: x * y.float(),
    "x*2.0": lambda m, x, y: x * 2.0,
    "2*x": lambda m, x, y: 2 * x,
    "x*True": lambda m, x, y: x * True,
    "x/y": lambda m, x, y: x / y,
    "y/x": lambda m, x, y: y / x,
    "x/3": lambda m, x, y: x / 3,
    "3/x": lambda m, x, y: 3 / x,
    "x+y": lambda m, x, y: x + y,
    "x-y": lambda m, x, y: x - y,
    "1-x": lambda m, x, y: 1 - x,
    "x*x": lambda m, x, y: x * x,
    "x/x": lambda m, x, y: x / x,
    "sin": lambda m, x, y: x.sin(),
    "exp": lambda m, x, y: m.exp(x),
    "sqrt": lambda m, x, y: x.abs().sqrt(),
    "tanh_sigmoid": lambda m, x, y: x.tanh().sigmoid(),
    "neg": lambda m, x, y: -x,
    "relu": lambda m, x, y: x.relu(),
    "clamp": lambda m, x, y: x.clamp(min=0.0),
    "gelu": lambda m, x, y: m.nn.functional.gelu(x),
    "chain": lambda m, x, y: (x * y).exp() / (y + 1.5),
}


@pytest.mark.parametrize("y_rg", [False, True])
@pytest.mark.parametrize("x_kind", ["leaf", "nonleaf", "versioned", "view"])
@pytest.mark.parametrize("op", list(HOOKED))
def test_saved_tensors_hooks_calls(torch, op, x_kind, y_rg):
    def f(m):
        log = []
        leaf = m.tensor(_array((2, 3), "float64", 13), requires_grad=True)
        y = m.tensor(_array((2, 3), "float64", 14), requires_grad=y_rg)
        x = {"leaf": leaf, "nonleaf": leaf * 1.0}.get(x_kind)
        if x_kind == "versioned":
            x = leaf * 1.0
            x.mul_(1)
        elif x_kind == "view":
            x = (leaf * 1.0).view(3, 2).view(2, 3)
        ins = {"x": x, "y": y}

        def pack(t):
            who = [k for k, v in ins.items() if t is v]
            log.append(("pack", tuple(t.shape), dtname(t), who, t._version))
            return t

        def unpack(t):
            log.append(("unpack", tuple(t.shape), dtname(t)))
            return t

        with m.autograd.graph.saved_tensors_hooks(pack, unpack):
            r = HOOKED[op](m, x, y)
        log.append("forward done")
        r.backward(seed_grad(m, r), retain_graph=True)
        log.append("backward 1")
        r.backward(seed_grad(m, r, 98))
        return log, leaf.grad, y.grad

    check(f, torch)


def test_saved_tensors_hooks_nested_and_outside(torch):
    # only the innermost hooks pack; ops after the context save normally
    def f(m):
        log = []
        x = m.tensor(_array((3,), "float64", 15), requires_grad=True)
        outer = m.autograd.graph.saved_tensors_hooks(
            lambda t: log.append("outer") or t, lambda t: log.append("uo") or t
        )
        inner = m.autograd.graph.saved_tensors_hooks(
            lambda t: log.append("inner") or t, lambda t: log.append("ui") or t
        )
        with outer:
            a = x * x
            with inner:
                b = a.exp() * x
            c = b.sin()
        d = c * x
        d.sum().backward()
        return log, x.grad

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# Errors the hot ops raise as PyTorch does
# ---------------------------------------------------------------------------------------------

ERRORS = {
    "bool-bool": (lambda m: m.tensor([True]) - m.tensor([False]), "Subtraction, the `-` op"),
    "bool-True": (lambda m: m.tensor([True]) - True, "Subtraction, the `-` operator"),
    "-bool": (lambda m: -m.tensor([True]), "Negation, the `-` operator, on a bool tensor"),
    "backward_twice_mul": (lambda m: _twice(m, lambda x: x * x), "a second time"),
    "backward_twice_scalar": (lambda m: _twice(m, lambda x: x * 2.0), "a second time"),
    "backward_twice_exp": (lambda m: _twice(m, lambda x: x.exp()), "a second time"),
    "backward_twice_div": (lambda m: _twice(m, lambda x: x / 3), "a second time"),
    "saved_after_free": (
        lambda m: _saved_after(m, lambda x: x.sin(), "_saved_self"),
        "a second time",
    ),
    "saved_other_after_free": (
        lambda m: _saved_after(m, lambda x: x * x, "_saved_other"),
        "a second time",
    ),
    "leaf_inplace": (
        lambda m: m.ones(2, requires_grad=True).mul_(2),
        "a leaf Variable that requires grad",
    ),
}


def _twice(m, fn):
    x = m.tensor([1.0, 2.0], requires_grad=True)
    y = fn(x).sum()
    y.backward()
    y.backward()


def _saved_after(m, fn, attr):
    x = m.tensor([1.0, 2.0], requires_grad=True)
    y = fn(x)
    y.sum().backward()
    return getattr(y.grad_fn, attr)


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(torch, case):
    fn, phrase = ERRORS[case]
    same_error(fn, torch, phrase)


def test_backward_twice_add_sub_neg_need_nothing(torch):
    def f(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = (-(x + 1.0) - x + 2 + (1 - x) + 3.0 - x).sum()
        y.backward()
        y.backward()
        return x.grad

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# Long chains, repeated calls from one line (the hot ops remember the last saving line)
# ---------------------------------------------------------------------------------------------


def test_chain_of_hot_ops(torch):
    def f(m):
        x = m.tensor(_array((4,), "float64", 16), requires_grad=True)
        w = m.nn.Parameter(m.tensor(_array((4,), "float64", 17)))
        h = x
        for i in range(30):
            h = (h * w + 0.1 * i).tanh() - h / (w.abs() + 1) + 2 * h.sin()
        h.sum().backward()
        return h, x.grad, w.grad, names(h.grad_fn)

    run_both(f, torch)


def test_inplace_error_after_loop(torch):
    def f(m):
        x = m.tensor(_array((4,), "float64", 18), requires_grad=True)
        hs = []
        for _ in range(3):
            hs.append(x * 1.0)
        ys = [h.exp() * h for h in hs]
        hs[1].add_(1)
        sum(y.sum() for y in ys).backward()

    same_error(f, torch, "modified by an inplace operation", "is at version 1; expected version 0")


# ---------------------------------------------------------------------------------------------
# Operands that are outputs > 0 of multi-output nodes, alpha, anomaly mode
# ---------------------------------------------------------------------------------------------

MULTI = {
    "b*2": lambda m, a, b, c2, v: b * 2.0,
    "b+a": lambda m, a, b, c2, v: b + a,
    "a*b": lambda m, a, b, c2, v: a * b,
    "c2.exp": lambda m, a, b, c2, v: c2.exp(),
    "-c2": lambda m, a, b, c2, v: -c2,
    "b/a": lambda m, a, b, c2, v: b / a,
    "v.sin": lambda m, a, b, c2, v: v.sin(),
    "2-b": lambda m, a, b, c2, v: 2 - b,
    "c2*c2": lambda m, a, b, c2, v: c2 * c2,
    "b.relu": lambda m, a, b, c2, v: b.relu(),
    "b-a": lambda m, a, b, c2, v: b - a,
    "1/b": lambda m, a, b, c2, v: 1 / b,
    "b.sigmoid": lambda m, a, b, c2, v: m.sigmoid(b),
    "3*b": lambda m, a, b, c2, v: 3 * b,
}


@pytest.mark.parametrize("op", list(MULTI))
def test_operand_is_output_1_of_multi_output_node(torch, op):
    def f(m):
        x = m.tensor(_array((2, 3), "float64", 23), requires_grad=True)
        a, b = x.unbind(0)
        _, c2 = x.chunk(2)
        v, _ = x.max(0)
        r = MULTI[op](m, a, b, c2, v)
        out = facts(r) + [saved(r.grad_fn, a, b, c2)]
        r.backward(seed_grad(m, r))
        return out, x.grad

    run_both(f, torch)


@pytest.mark.parametrize("alpha", [2, 0.5, -1])
@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("other", ["tensor", "scalar", "bcast"])
def test_alpha_is_not_hot_but_agrees(torch, op, alpha, other):
    def f(m):
        x = m.tensor(_array((2, 3), "float64", 24), requires_grad=True)
        y = {
            "tensor": m.tensor(_array((2, 3), "float64", 25), requires_grad=True),
            "scalar": 3.0,
            "bcast": m.tensor(_array((3,), "float64", 26), requires_grad=True),
        }[other]
        r = getattr(m, op)(x, y, alpha=alpha)
        out = facts(r) + [saved(r.grad_fn, x, y)]
        r.backward(seed_grad(m, r))
        return out, grads_of(x, y)

    run_both(f, torch)


@pytest.mark.parametrize(
    "expr", ["x / x", "x.sqrt() * 0.0", "x.log() * x", "x.rsqrt() - 1", "x.reciprocal() + x"]
)
def test_anomaly_mode_names_the_hot_node(torch, expr):
    def f(m):
        x = m.tensor([0.0, 1.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.autograd.set_detect_anomaly(True)
            try:
                eval(expr, {"x": x}).sum().backward()  # noqa: S307 - fixed test expressions
            finally:
                m.autograd.set_detect_anomaly(False)
        return x.grad

    try:
        torch_result = f(torch)
    except RuntimeError as e:
        key = re.search(r"Function '\w+' returned nan values in its \d+th output", str(e))
        assert key is not None, e
        same_error(f, torch, key.group(0))
        return
    assert_same(f(ad), torch_result)


# ---------------------------------------------------------------------------------------------
# Differences found (not fixed here: strict xfails document them)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["f32*npf64", "npf64*f32", "i32*npi64", "f32/npf64", "f32+npf64", "f32-npf64", "f16*npf32"],
)
def test_numpy_scalar_promotion(torch, case):
    def f(m):
        f32 = m.tensor(_array((3,), "float32", 19))
        i32 = m.tensor(_array((3,), "int32", 20))
        f16 = m.tensor(_array((3,), "float16", 21))
        r = {
            "f32*npf64": lambda: f32 * np.float64(2.5),
            "npf64*f32": lambda: np.float64(2.5) * f32,
            "i32*npi64": lambda: i32 * np.int64(2),
            "f32/npf64": lambda: f32 / np.float64(2.5),
            "f32+npf64": lambda: f32 + np.float64(2.5),
            "f32-npf64": lambda: f32 - np.float64(2.5),
            "f16*npf32": lambda: f16 * np.float32(2.5),
        }[case]()
        return dtname(r), r

    check(f, torch)


@pytest.mark.parametrize("other", [2.0, 3, True])
@pytest.mark.parametrize("op", ["mul", "div"])
def test_saved_scalar_other_is_a_tensor(torch, op, other):
    def f(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        s = BIN[op][0](m, x, other).grad_fn._saved_other
        return isinstance(s, m.Tensor), dtname(s) if isinstance(s, m.Tensor) else type(s).__name__

    run_both(f, torch)


@pytest.mark.xfail(
    strict=True,
    reason="an int scalar beyond int64 is accepted (torch: OverflowError 'int too big to convert')",
)
@pytest.mark.parametrize("op", list(BIN))
def test_int_scalar_out_of_int64(torch, op):
    same_error(lambda m: BIN[op][0](m, m.ones(2), 2**70), torch, "int too big")


@pytest.mark.xfail(
    strict=True,
    reason="float16 tensor with a Python float rounds the scalar to "
    "half first (torch computes in float32 and rounds once): 1-ulp differences",
)
def test_float16_python_scalar_rounding(torch):
    def f(m):
        x = m.tensor([3.0, 7.0, 11.0], dtype=m.float16)
        return [(x * 0.1).tolist(), (x / 0.3).tolist(), (x + 0.001).tolist()]

    a, b = f(ad), f(torch)
    assert a == b, f"{a} vs {b}"


@pytest.mark.parametrize("op", list(BIN))
def test_shape_mismatch_error(torch, op):
    same_error(
        lambda m: BIN[op][0](m, m.ones(2), m.ones(3)), torch, "must match the size of tensor b"
    )
