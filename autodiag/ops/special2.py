"""Elementwise math public programs call (issue 20, cover16b): ``fmod copysign heaviside
float_power fmax fmin deg2rad rad2deg signbit isposinf isneginf isreal sinc lgamma digamma
polygamma mvlgamma ldexp frexp nextafter gcd lcm positive absolute fix``, and the activations
PyTorch has as ``torch.<name>``: ``hardshrink prelu selu celu rrelu threshold``.

Backward formulas are derivatives.yaml's, written once for both vocabularies (NOTE [Backward
vocabulary] in core/graph.py). The gamma family follows ATen's own scalar algorithms
(NOTE [Gamma family values]).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from autodiag import dtypes
from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    broadcasting,
    edge,
    register,
    result,
    save,
    save_output,
    set_broadcast_meta,
    wrap,
)
from autodiag.ops.attention import EluBackward0, EluBackward1
from autodiag.ops.pointwise import (
    NotImplementedBackward,
    _no_kernel,
    _operands,
)
from autodiag.ops.pointwise import (
    abs as _abs,
)
from autodiag.ops.pointwise import pow as _pow
from autodiag.ops.pointwise import trunc as _trunc
from autodiag.tensor import Tensor

_PI = math.pi


def _tensor_arg(name: str, x, pos: int = 1, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}"
        )
    return x


def _needs(*xs) -> bool:
    return _state.record and any(isinstance(x, Tensor) and x.requires_grad for x in xs)


def _record(out: np.ndarray, cls, inputs: tuple, saved: tuple = (), **attrs) -> Tensor:
    """The result of a general op: ``cls`` recorded with edges to the tensor ``inputs`` when one
    requires grad (Python numbers are no inputs), ``saved`` saved, ``attrs`` set."""
    tensors = tuple(x for x in inputs if isinstance(x, Tensor))
    if not _needs(*tensors):
        return result(out, None)
    node = cls(tuple(edge(x) for x in tensors))
    for k, v in attrs.items():
        setattr(node, k, v)
    set_broadcast_meta(node, out, *tensors)
    r = result(out, node)
    node._saved = tuple(save(s) if isinstance(s, Tensor) else s for s in saved)
    return r


def _float_dtype(d: np.ndarray) -> np.dtype:
    return d.dtype if d.dtype.kind == "f" else dtypes.get_default_dtype().np


def _floating(x: Tensor) -> np.ndarray:
    d = x._data
    return d if d.dtype.kind == "f" else d.astype(dtypes.get_default_dtype().np)


# ---------------------------------------------------------------------------------------------
# fmod
# ---------------------------------------------------------------------------------------------


class FmodBackward0(Node):
    __slots__ = ()

    def backward(self, xp, g):
        return (g,)


class FmodBackward1(Node):
    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        go = None
        if needs_other:
            # derivatives.yaml: -grad * self.div(other, rounding_mode="trunc")
            a, b = self.saved_self(xp), self.saved_other(xp)
            q = np.trunc(a / b) if xp.arrays else a.div(b, rounding_mode="trunc")
            go = -g * q
        return (g if needs_self else None, go)


def _int_divisor_check(bd) -> None:
    if np.asarray(bd).dtype.kind in "iub" and np.any(np.asarray(bd) == 0):
        raise RuntimeError("ZeroDivisionError")


@register(expr=True)
def fmod(input, other):
    """C's ``fmod``: the remainder with the dividend's sign.

    >>> import autodiag as torch
    >>> torch.fmod(torch.tensor([-3.0, 3.0]), 2)
    tensor([-1.,  1.])
    """
    a = as_tensor_operand(input)
    ad, bd = _operands(a, other)
    _int_divisor_check(bd)
    with np.errstate(all="ignore"):
        out = np.asarray(broadcasting(np.fmod, ad, bd))
    if out.dtype != ad.dtype and not isinstance(other, Tensor):
        out = out.astype(ad.dtype)
    if isinstance(other, Tensor):
        return _record(out, FmodBackward1, (a, other), (a, other))
    return _record(out, FmodBackward0, (a,))


# ---------------------------------------------------------------------------------------------
# copysign, heaviside, fmax, fmin, nextafter, ldexp
# ---------------------------------------------------------------------------------------------


class CopysignBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # copysign_tensor_self_backward: grad * (result / self), 0 where self == 0; other: 0
        x, r = self.saved_self(xp), self.saved_result(xp)
        needs = self.needs_grad
        with np.errstate(all="ignore"):
            ratio = xp.mask(x != 0, r / x)
        gs = g * ratio if needs[0] else None
        if len(needs) == 1:
            return (gs,)
        return (gs, xp.zeros_like(g) if needs[1] else None)


class CopysignBackward1(CopysignBackward0):
    __slots__ = ()


@register(expr=True)
def copysign(input, other):
    """``|input|`` with the sign of ``other`` (``-0.0`` counts as negative).

    >>> import autodiag as torch
    >>> torch.copysign(torch.tensor([1.0, -2.0]), -1.0)
    tensor([-1., -2.])
    """
    a = as_tensor_operand(input)
    ad, bd = _operands(a, other, true_divide=True)
    out = np.asarray(broadcasting(np.copysign, ad, bd))
    if isinstance(other, Tensor):
        return _copysign_record(out, CopysignBackward0, a, other)
    return _copysign_record(out.astype(ad.dtype, copy=False), CopysignBackward1, a, None)


def _copysign_record(out, cls, a, other):
    inputs = (a, other) if other is not None else (a,)
    if not _needs(*inputs):
        return result(out, None)
    node = cls(tuple(edge(x) for x in inputs))
    set_broadcast_meta(node, out, *inputs)
    r = result(out, node)
    from autodiag.ops._core import save_output

    node._saved = (save(a), save_output(r))
    return r


@register(expr=True)
def heaviside(input, values):
    """0 where ``input < 0``, ``values`` where it is 0, 1 where it is positive (NaN gives 0).

    >>> import autodiag as torch
    >>> torch.heaviside(torch.tensor([-1.0, 0.0, 2.0]), torch.tensor(0.5))
    tensor([0.0000, 0.5000, 1.0000])
    """
    a = _tensor_arg("heaviside", input)
    v = _tensor_arg("heaviside", values, 2, "values")
    if a._data.dtype != v._data.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    ad, vd = a._data, v._data
    if ad.dtype.kind == "b":
        raise _no_kernel("heaviside_cpu", ad.dtype)
    out = np.asarray(broadcasting(lambda x, y: np.where(x == 0, y, x > 0), ad, vd)).astype(ad.dtype)
    if _needs(a, v):
        node = NotImplementedBackward((edge(a), edge(v)))
        node.op = "heaviside"
        return result(out, node)
    return result(out, None)


class FmaxBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other")
    _select = staticmethod(lambda a, b: a >= b)

    def backward(self, xp, g):
        # grad.masked_fill((self >= other).logical_or_(other.isnan()).logical_not_(), 0), and
        # the complement for other (fmin: <=)
        a, b = self.saved_self(xp), self.saved_other(xp)
        keep = type(self)._select(a, b) | (np.isnan(b) if xp.arrays else b.isnan())
        needs_self, needs_other = self.needs_grad
        return (
            xp.mask(keep, g) if needs_self else None,
            xp.mask(~keep, g) if needs_other else None,
        )


class FminBackward0(FmaxBackward0):
    __slots__ = ()
    _select = staticmethod(lambda a, b: a <= b)


def _fmaxmin(name, input, other, np_fn, cls):
    a = _tensor_arg(name, input)
    b = _tensor_arg(name, other, 2, "other")
    ad, bd = _operands(a, b)
    if ad.dtype.kind == "b":
        raise _no_kernel(f"{name}_cpu", ad.dtype)
    out = np.asarray(broadcasting(np_fn, ad, bd))
    return _record(out, cls, (a, b), (a, b))


@register(expr=True)
def fmax(input, other):
    """Elementwise maximum that ignores NaN (NaN only where both are NaN).

    >>> import autodiag as torch
    >>> torch.fmax(torch.tensor([1.0, float("nan")]), torch.tensor([2.0, 0.0]))
    tensor([2., 0.])
    """
    return _fmaxmin("fmax", input, other, np.fmax, FmaxBackward0)


@register(expr=True)
def fmin(input, other):
    """Elementwise minimum that ignores NaN.

    >>> import autodiag as torch
    >>> torch.fmin(torch.tensor([1.0, float("nan")]), torch.tensor([2.0, 0.0]))
    tensor([1., 0.])
    """
    return _fmaxmin("fmin", input, other, np.fmin, FminBackward0)


class NextafterBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        # PyTorch 2.13: grad.masked_fill(self == other, 0) to self (its output is other there),
        # a zero gradient to other
        a, b = self.saved_self(xp), self.saved_other(xp)
        needs_self, needs_other = self.needs_grad
        return (
            xp.mask(a != b, g) if needs_self else None,
            xp.zeros_like(g) if needs_other else None,
        )


@register(expr=True)
def nextafter(input, other):
    """The next float after ``input`` towards ``other``.

    >>> import autodiag as torch
    >>> one = torch.tensor([1.0], dtype=torch.float64)
    >>> torch.nextafter(one, one + 1) - one
    tensor([2.2204e-16], dtype=torch.float64)
    """
    a = _tensor_arg("nextafter", input)
    b = _tensor_arg("nextafter", other, 2, "other")
    ad, bd = _operands(a, b)
    if ad.dtype.kind != "f":
        raise _no_kernel("nextafter_cpu", ad.dtype)
    out = np.asarray(broadcasting(np.nextafter, ad, bd))
    return _record(out, NextafterBackward0, (a, b), (a, b))


class LdexpBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        a, b = self.saved_self(xp), self.saved_other(xp)
        bd = b if xp.arrays else b._data
        if bd.dtype.kind in "iub":
            # PyTorch's formula is grad * pow(2, other): an integer pow for an integer
            # exponent (0 for a negative one, wrapping past the dtype's bits), so its gradient
            # is 0 where the value was divided by a power of 2
            p = _int_pow2(bd)
            p = p if xp.arrays else wrap(p)
        else:
            p = np.exp2(b) if xp.arrays else 2.0**b
        needs_self, needs_other = self.needs_grad
        return (
            g * p if needs_self else None,
            g * a * p * math.log(2) if needs_other else None,
        )


def _int_pow2(e: np.ndarray) -> np.ndarray:
    """``2 ** e`` in the integer dtype of ``e`` as PyTorch's integer pow computes it: 0 for a
    negative exponent, the product wrapping (to 0, or the dtype's minimum) past its bits."""
    bits = 1 if e.dtype == np.bool_ else e.dtype.itemsize * 8
    ee = e.astype(np.int64)
    shifted = np.left_shift(np.int64(1), np.clip(ee, 0, 62)).astype(np.uint64)
    shifted = np.where(ee == 63, np.uint64(1) << np.uint64(63), shifted)
    out = np.where((ee < 0) | (ee >= bits), np.uint64(0), shifted)
    return out.astype(e.dtype if e.dtype != np.bool_ else np.int64)


@register(expr=True)
def ldexp(input, other):
    """``input * 2 ** other``.

    >>> import autodiag as torch
    >>> torch.ldexp(torch.tensor([1.0]), torch.tensor([3]))
    tensor([8.])
    """
    a = _tensor_arg("ldexp", input)
    b = _tensor_arg("ldexp", other, 2, "other")
    if b._data.dtype == np.bool_ and a._data.dtype.kind == "f":  # PyTorch's ldexp kernel
        raise NotImplementedError("\"ldexp_cpu_exp\" not implemented for 'Bool'")
    ad, bd = _operands(a, b, true_divide=True)
    with np.errstate(all="ignore"):
        out = np.asarray(broadcasting(lambda x, y: x * np.exp2(y), ad, bd))
    return _record(out, LdexpBackward0, (a, b), (a, b))


# ---------------------------------------------------------------------------------------------
# float_power, positive, absolute, fix, signbit, isposinf, isneginf, isreal, gcd, lcm
# ---------------------------------------------------------------------------------------------


def _to_double(x):
    if isinstance(x, Tensor):
        return x if x._data.dtype == np.float64 else x.to(dtypes.float64)
    return float(x)


@register(expr=True)
def float_power(input, exponent):
    """``pow`` in float64 (PyTorch's ``PowBackward0``/``PowBackward1`` after a cast).

    >>> import autodiag as torch
    >>> torch.float_power(torch.tensor([2]), 3)
    tensor([8.], dtype=torch.float64)
    """
    if not isinstance(input, Tensor) and not isinstance(exponent, Tensor):
        raise TypeError("float_power(): argument 'input' (position 1) must be Tensor, not float")
    if not isinstance(input, Tensor):
        return _pow(float(input), _to_double(exponent))
    return _pow(_to_double(input), _to_double(exponent))


def _float_power_(self, exponent):
    if self._data.dtype != np.float64:
        raise RuntimeError(
            "the base given to float_power_ has dtype "
            f"{self.dtype.scalar_name} but the operation's result requires dtype Double"
        )
    return self.pow_(_to_double(exponent))  # PowBackward0/1, as PyTorch's float_power_


Tensor.float_power_ = _float_power_


@register()
def positive(input):
    """``input`` itself (``+x``); refuses bool as PyTorch does.

    >>> import autodiag as torch
    >>> torch.positive(torch.tensor([-1.0]))
    tensor([-1.])
    """
    x = _tensor_arg("positive", input)
    if x._data.dtype.kind == "b":
        raise RuntimeError(
            "The `+` operator, on a bool tensor is not supported. If you are trying to invert "
            "a mask, use the `~` or `logical_not()` operator instead."
        )
    return x


absolute = register("absolute", expr=True, inplace=True)(_abs)
fix = register("fix", expr=True, inplace=True)(_trunc)


def _predicate(name, fn, need_float=False):
    def op(input):
        x = _tensor_arg(name, input)
        d = x._data
        return result(np.asarray(fn(d)), None)

    op.__name__ = name
    return op


signbit = register("signbit", expr=True)(
    _predicate("signbit", lambda d: np.signbit(d) if d.dtype.kind != "b" else np.zeros_like(d))
)
isposinf = register("isposinf", expr=True)(
    _predicate("isposinf", lambda d: np.isposinf(d) if d.dtype.kind == "f" else d != d)
)
isneginf = register("isneginf", expr=True)(
    _predicate("isneginf", lambda d: np.isneginf(d) if d.dtype.kind == "f" else d != d)
)
isreal = register("isreal", expr=True)(
    _predicate("isreal", lambda d: np.ones(d.shape, dtype=np.bool_))
)


def _int_op(name, fn):
    def op(input, other):
        a = _tensor_arg(name, input)
        b = as_tensor_operand(other)
        ad, bd = _operands(a, b)
        if ad.dtype.kind not in "iu":
            raise _no_kernel(f"{name}_cpu", ad.dtype)
        return result(np.asarray(broadcasting(fn, ad, bd)), None)

    op.__name__ = name
    return op


gcd = register("gcd", expr=True)(_int_op("gcd", np.gcd))
lcm = register("lcm", expr=True)(_int_op("lcm", np.lcm))


# ---------------------------------------------------------------------------------------------
# deg2rad, rad2deg, sinc
# ---------------------------------------------------------------------------------------------


class Deg2RadBackward0(Node):
    __slots__ = ()
    _k = _PI / 180

    def backward(self, xp, g):
        return (g * type(self)._k,)


class Rad2DegBackward0(Deg2RadBackward0):
    __slots__ = ()
    _k = 180 / _PI


def _scale(name, k, cls):
    def op(input):
        x = _tensor_arg(name, input)
        d = x._data
        if d.dtype.kind == "b":
            raise _no_kernel(name, d.dtype)  # PyTorch: a bool input is refused
        d = _floating(x)
        out = np.asarray(d * d.dtype.type(k))
        return _record(out, cls, (x,))

    op.__name__ = name
    return op


deg2rad = register("deg2rad", expr=True, inplace=True)(
    _scale("deg2rad", _PI / 180, Deg2RadBackward0)
)
rad2deg = register("rad2deg", expr=True, inplace=True)(
    _scale("rad2deg", 180 / _PI, Rad2DegBackward0)
)


class SincBackward0(Node):
    __slots__ = ()
    _saved_names = ("self",)

    def backward(self, xp, g):
        # sinc_backward: grad * (x pi cos(x pi) - sin(x pi)) / (x^2 pi), 0 where x^2 pi == 0
        x = self.saved_self(xp)
        xpi = x * _PI
        sq = x * x * _PI
        with np.errstate(all="ignore"):
            out = g * (xpi * xp.cos(xpi) - xp.sin(xpi)) / sq
        return (xp.mask(sq != 0, out),)


def _sinc_array(d):
    with np.errstate(all="ignore"):
        p = d * d.dtype.type(_PI)
        return np.where(d == 0, d.dtype.type(1), np.sin(p) / p).astype(d.dtype)


@register(expr=True, inplace=True)
def sinc(input):
    """``sin(pi x) / (pi x)``, 1 at 0.

    >>> import autodiag as torch
    >>> torch.sinc(torch.tensor([0.0, 0.5]))
    tensor([1.0000, 0.6366])
    """
    x = _tensor_arg("sinc", input)
    return _record(_sinc_array(_floating(x)), SincBackward0, (x,), (x,))


# ---------------------------------------------------------------------------------------------
# The gamma family: lgamma, digamma, polygamma, mvlgamma
# ---------------------------------------------------------------------------------------------

# NOTE [Gamma family values]: PyTorch's CPU ``digamma`` and ``trigamma`` (``polygamma(1, x)``)
# are ATen's own scalar algorithms (calc_digamma/calc_trigamma in Math.h: a recurrence up to
# x >= 10 then an asymptotic series; reflection below 0 / 0.5), vectorised here step for step
# in the input's dtype, so values match to the bit where the libm calls (log, tan, sin) agree.
# ``polygamma(n >= 2)`` is ``(-1)^(n+1) n! zeta(n + 1, x)`` with ATen's (Cephes') Hurwitz
# zeta, which we run per element in float64. ``lgamma`` is C's ``lgamma``: CPython's
# ``math.lgamma`` is its own Lanczos code, not libm's, so float64 values may differ from
# PyTorch's in the last place; float32 goes through float64 and is rounded once (PyTorch:
# SLEEF's lgammaf, 1 ulp).

_lgamma_f64 = np.frompyfunc(
    lambda v: math.lgamma(v) if v == v and not (v <= 0 and v == math.floor(v)) else _lg_special(v),
    1,
    1,
)


def _lg_special(v):
    if v != v:
        return v
    return math.inf  # poles: non-positive integers


def _lgamma_array(d: np.ndarray) -> np.ndarray:
    if d.size == 0:
        return np.empty(d.shape, d.dtype)
    w = d.astype(np.float64)
    out = np.empty(w.shape, np.float64)
    fin = np.isfinite(w)
    out[~fin] = np.where(np.isnan(w[~fin]), w[~fin], math.inf)
    if fin.any():
        out[fin] = _lgamma_f64(w[fin]).astype(np.float64)
    return out.astype(d.dtype)


_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (
    8.33333333333333333333e-2,
    -2.10927960927960927961e-2,
    7.57575757575757575758e-3,
    -4.16666666666666666667e-3,
    3.96825396825396825397e-3,
    -8.33333333333333333333e-3,
    8.33333333333333333333e-2,
)


def _digamma_array(d: np.ndarray) -> np.ndarray:
    """ATen's calc_digamma, vectorised (NOTE [Gamma family values])."""
    t = d.dtype.type
    x = d.copy()
    out = np.zeros_like(x)
    with np.errstate(all="ignore"):
        zero = x == 0
        neg = x < 0
        neg_int = neg & (x == np.trunc(x))
        reflect = neg & ~neg_int
        # reflection: digamma(1 - x) - pi / tan(pi * frac(x))
        refl_term = np.zeros_like(x)
        if reflect.any():
            # ATen computes this term in double for float too, then rounds it once
            r = x[reflect].astype(np.float64) - np.trunc(x[reflect].astype(np.float64))
            refl_term[reflect] = (_PI / np.tan(_PI * r)).astype(d.dtype)
            x = np.where(reflect, t(1) - x, x)
        res = np.zeros_like(x)
        active = (x < 10) & ~zero & ~neg_int & ~np.isnan(x)
        while active.any():
            res = np.where(active, res - t(1) / x, res)
            x = np.where(active, x + t(1), x)
            active = active & (x < 10)
        is10 = x == 10
        z = t(1) / (x * x)
        poly = np.full_like(x, t(_DIGAMMA_A[0]))
        for c in _DIGAMMA_A[1:]:
            poly = poly * z + t(c)
        y = np.where(x < t(1.0e17), z * poly, t(0))
        asym = res + np.log(x) - (t(0.5) / x) - y
        out = np.where(is10, res + t(_PSI_10), asym)
        out = np.where(reflect, out - refl_term, out)
        out = np.where(zero, np.copysign(t(np.inf), -d), out)
        out = np.where(neg_int, t(np.nan), out)
    return np.asarray(out, dtype=d.dtype)


def _trigamma_array(d: np.ndarray) -> np.ndarray:
    """ATen's calc_trigamma, vectorised."""
    t = d.dtype.type
    x = d.copy()
    with np.errstate(all="ignore"):
        small = x < t(0.5)
        sign = np.where(small, t(-1), t(1))
        s = np.sin(t(_PI) * x)
        res = np.where(small, -(t(_PI) * t(_PI)) / (s * s), t(0))
        x = np.where(small, t(1) - x, x)
        for _ in range(6):
            res = res + t(1) / (x * x)
            x = x + t(1)
        ixx = t(1) / (x * x)
        res = (
            res
            + (
                t(1)
                + t(1) / (t(2) * x)
                + ixx * (t(1.0 / 6) - ixx * (t(1.0 / 30) - ixx * t(1.0 / 42)))
            )
            / x
        )
    return np.asarray(sign * res, dtype=d.dtype)


_ZETA_A = (
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
)


def _zeta(x: float, q: float) -> float:
    """Cephes' Hurwitz zeta, as ATen's ``zeta`` (float64)."""
    machep = 1.11022302462515654042e-16
    if x == 1:
        return math.inf
    if x < 1:
        return math.nan
    if q <= 0:
        if q == math.floor(q):
            return math.inf
        if x != math.floor(x):
            return math.nan
    s = math.pow(q, -x)
    a = q
    i = 0
    b = 0.0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1
        b = math.pow(a, -x)
        s += b
        if -machep * s < b < machep * s:
            return s
    w = a
    s += b * w / (x - 1)
    s -= 0.5 * b
    a = 1.0
    k = 0.0
    for c in _ZETA_A:
        a *= x + k
        b /= w
        t = a * b / c
        s = s + t
        t = abs(t / s)
        if t < machep:
            return s
        k += 1
        a *= x + k
        b /= w
        k += 1
    return s


def _polygamma_array(n: int, d: np.ndarray) -> np.ndarray:
    if n == 0:
        return _digamma_array(d)
    if n == 1:
        return _trigamma_array(d)
    # ATen: ((n % 2) ? 1.0 : -1.0) * exp(lgamma(n + 1.0)) * zeta(n + 1, x)
    fact = math.exp(math.lgamma(n + 1.0))
    sign = 1.0 if n % 2 else -1.0
    flat = d.astype(np.float64).ravel().tolist()
    vals = [sign * fact * _zeta(n + 1.0, v) for v in flat]
    return np.asarray(vals, dtype=np.float64).reshape(d.shape).astype(d.dtype)


def _gamma_input(name, input):
    x = _tensor_arg(name, input)
    return x, _floating(x)


class LgammaBackward0(Node):
    __slots__ = ()
    _saved_names = ("self",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * (_digamma_array(x) if xp.arrays else digamma(x)),)


class DigammaBackward0(Node):
    __slots__ = ()
    _saved_names = ("self",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * (_trigamma_array(x) if xp.arrays else polygamma(1, x)),)


class PolygammaBackward0(Node):
    __slots__ = ("n",)
    _saved_names = ("self",)
    _extra_names = ("n",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * (_polygamma_array(self.n + 1, x) if xp.arrays else polygamma(self.n + 1, x)),)

    def _saved_extra(self):
        return {"n": self.n}


@register(expr=True, inplace=True)
def lgamma(input):
    """``log |Gamma(input)|``.

    >>> import autodiag as torch
    >>> torch.lgamma(torch.tensor([0.5, 3.0]))
    tensor([0.5724, 0.6931])
    """
    x, d = _gamma_input("lgamma", input)
    return _record(_lgamma_array(d), LgammaBackward0, (x,), (x,))


@register(expr=True, inplace=True)
def digamma(input):
    """The logarithmic derivative of Gamma (``polygamma(0, x)``).

    >>> import autodiag as torch
    >>> torch.digamma(torch.tensor([1.0]))
    tensor([-0.5772])
    """
    x, d = _gamma_input("digamma", input)
    return _record(_digamma_array(d), DigammaBackward0, (x,), (x,))


@register(expr=True)
def polygamma(n, input):
    """The ``n``-th derivative of digamma.

    >>> import autodiag as torch
    >>> torch.polygamma(1, torch.tensor([1.0]))
    tensor([1.6449])
    """
    if isinstance(n, Tensor) or not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(
            f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}"
        )
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    x, d = _gamma_input("polygamma", input)
    return _record(_polygamma_array(int(n), d), PolygammaBackward0, (x,), (x,), n=int(n))


def _polygamma_method(self, n):
    return polygamma(n, self)


class PolygammaBackward1(PolygammaBackward0):
    """``x.polygamma_(n)`` (PyTorch names the in-place overload's node apart)."""

    __slots__ = ()


def _polygamma_inplace(t, n):
    r = polygamma(n, t)
    node = r.grad_fn
    if node is not None:
        twin = PolygammaBackward1(node._next)
        twin.n, twin._saved = node.n, node._saved
        r.grad_fn = twin
    return r


def _polygamma_(self, n):
    from autodiag.ops.inplace import apply_inplace

    return apply_inplace(self, "polygamma_", lambda t: _polygamma_inplace(t, n))


Tensor.polygamma = _polygamma_method
Tensor.polygamma_ = _polygamma_


class MvlgammaBackward0(Node):
    __slots__ = ("p",)
    _saved_names = ("self",)
    _extra_names = ("p",)

    def backward(self, xp, g):
        # mvlgamma_backward: grad * (self.unsqueeze(-1) + arange(-p/2 + 0.5, 0.5, 0.5))
        #   .digamma().sum(-1)
        x = self.saved_self(xp)
        if xp.arrays:
            args = x[..., None] + _mv_args(self.p, x.dtype)
            return (g * _sum_last(_digamma_array(args)),)
        from autodiag.ops.factories import tensor

        args = x.unsqueeze(-1) + tensor(_mv_args(self.p, x._data.dtype))
        return (g * digamma(args).sum(-1),)

    def _saved_extra(self):
        return {"p": self.p}


def _mv_args(p: int, dt) -> np.ndarray:
    return np.arange(-p / 2.0 + 0.5, 0.5, 0.5).astype(dt)


def _sum_last(a: np.ndarray) -> np.ndarray:
    from autodiag.ops._cascade import cascade_sum

    return np.asarray(cascade_sum(a, (a.ndim - 1,), False), dtype=a.dtype)


@register(expr=True)
def mvlgamma(input, p: int):
    """The multivariate log-gamma function of dimension ``p``.

    >>> import autodiag as torch
    >>> torch.mvlgamma(torch.tensor([2.5]), 2)
    tensor([0.8570])
    """
    x = _tensor_arg("mvlgamma", input)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    d = _floating(x)  # PyTorch 2.13 checks no domain: lgamma's poles give inf
    args = d[..., None] + _mv_args(p, d.dtype)
    out = _sum_last(_lgamma_array(args)) + d.dtype.type(p * (p - 1) * math.log(_PI) / 4)
    return _record(np.asarray(out, dtype=d.dtype), MvlgammaBackward0, (x,), (x,), p=p)


# ---------------------------------------------------------------------------------------------
# frexp
# ---------------------------------------------------------------------------------------------

FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])


class FrexpBackward0(Node):
    __slots__ = ()
    _saved_names = ("exponent",)

    def backward(self, xp, g):
        e = self.saved_exponent(xp)
        # derivatives.yaml: grad / exponent.exp2()
        return (g / (np.exp2(e).astype(g.dtype) if xp.arrays else e.exp2()),)


@register(expr=True)
def frexp(input):
    """Mantissa in [0.5, 1) and int32 exponent with ``input = mantissa * 2 ** exponent``.

    >>> import autodiag as torch
    >>> torch.frexp(torch.tensor([8.0]))
    torch.return_types.frexp(
    mantissa=tensor([0.5000]),
    exponent=tensor([4], dtype=torch.int32))
    """
    x = _tensor_arg("frexp", input)
    if x._data.dtype.kind != "f":
        raise RuntimeError(
            f"torch.frexp() only supports floating-point dtypes, but got {x.dtype.scalar_name}"
        )
    m, e = np.frexp(x._data)
    e = np.asarray(e, dtype=np.int32)
    ex = result(e, None)
    if _needs(x):
        node = FrexpBackward0((edge(x),))
        r = result(np.asarray(m), node)
        node._saved = (ex,)
        return _return_type(FrexpResult, r, ex)
    return _return_type(FrexpResult, result(np.asarray(m), None), ex)


def _return_type(cls, *parts):
    return cls(*parts)


def _return_repr(self) -> str:
    fields = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
    return f"torch.return_types.{type(self).__name__}(\n{fields})"


FrexpResult.__repr__ = _return_repr


# ---------------------------------------------------------------------------------------------
# Activations PyTorch has as torch.<name>: hardshrink, prelu, selu, celu, rrelu, threshold
# ---------------------------------------------------------------------------------------------


class HardshrinkBackward0(Node):
    __slots__ = ("lambd",)
    _saved_names = ("self",)
    _extra_names = ("lambd",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (xp.mask(~((x >= -self.lambd) & (x <= self.lambd)), g),)

    def _saved_extra(self):
        return {"lambd": self.lambd}


@register(expr=True)
def hardshrink(input, lambd: float = 0.5):
    """0 where ``|input| <= lambd``, else ``input``.

    >>> import autodiag as torch
    >>> torch.tensor([-1.0, 0.2, 0.7]).hardshrink()
    tensor([-1.0000,  0.0000,  0.7000])
    """
    x = _tensor_arg("hardshrink", input)
    d = x._data
    if d.dtype.kind != "f":
        raise _no_kernel("hardshrink_cpu", d.dtype)
    out = np.where((d >= -lambd) & (d <= lambd), d.dtype.type(0), d)
    return _record(np.asarray(out, dtype=d.dtype), HardshrinkBackward0, (x,), (x,), lambd=lambd)


class ThresholdBackward0(Node):
    __slots__ = ("threshold",)
    _saved_names = ("self",)
    _extra_names = ("threshold",)

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (xp.mask(~(x <= self.threshold), g),)

    def _saved_extra(self):
        return {"threshold": self.threshold}


class ThresholdBackward1(ThresholdBackward0):
    __slots__ = ()


@register(method=False, expr=True)
def threshold(input, threshold, value):
    """``value`` where ``input <= threshold``, else ``input``.

    >>> import autodiag as torch
    >>> torch.threshold(torch.tensor([-1.0, 2.0]), 0.0, 5.0)
    tensor([5., 2.])
    """
    x = _tensor_arg("threshold", input)
    d = x._data
    out = np.where(d <= threshold, np.asarray(value).astype(d.dtype), d)
    return _record(
        np.asarray(out, dtype=d.dtype), ThresholdBackward0, (x,), (x,), threshold=threshold
    )


def _elu_general(name, x, alpha, scale, input_scale, cls=EluBackward0):
    x = _tensor_arg(name, x)
    d = x._data
    if d.dtype.kind != "f":
        raise _no_kernel("elu", d.dtype)
    t = d.dtype.type
    with np.errstate(over="ignore", invalid="ignore"):
        # ATen's elu kernel: x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale
        neg = np.expm1((d * t(input_scale)).astype(np.float64))
        if d.dtype == np.float32:
            neg = neg.astype(np.float32)
        neg = neg * t(alpha * scale)
        out = np.asarray(np.where(d <= 0, neg, d * t(scale)), dtype=d.dtype)
    if not _needs(x):
        return result(out, None)
    node = cls((edge(x),))
    node.alpha, node.scale, node.input_scale = alpha, scale, input_scale
    r = result(out, node)
    node._saved = (save_output(r),) if cls.is_result else (save(x),)
    return r


class CeluBackward0(EluBackward0):
    __slots__ = ()


class CeluBackward1(EluBackward1):
    __slots__ = ()


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@register(method=False, expr=True)
def selu(input):
    """``scale * elu(input, alpha)`` with SELU's constants (``EluBackward0``).

    >>> import autodiag as torch
    >>> torch.selu(torch.tensor([-1.0, 1.0]))
    tensor([-1.1113,  1.0507])
    """
    return _elu_general("selu", input, _SELU_ALPHA, _SELU_SCALE, 1.0)


@register(method=False, expr=True)
def celu(input, alpha: float = 1.0):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (``CeluBackward0``).

    >>> import autodiag as torch
    >>> torch.celu(torch.tensor([-1.0, 1.0]))
    tensor([-0.6321,  1.0000])
    """
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _elu_general("celu", input, alpha, 1.0, 1.0 / alpha, CeluBackward0)


class RreluWithNoiseBackward0(Node):
    __slots__ = ("lower", "upper", "training")
    _saved_names = ("self",)
    _extra_names = ("lower", "upper", "training")

    def backward(self, xp, g):
        # eval mode: leaky_relu_backward(grad, self, (lower + upper) / 2)
        x = self.saved_self(xp)
        slope = (self.lower + self.upper) / 2
        return (xp.where(x > 0, g, g * slope),)

    def _saved_extra(self):
        return {"lower": self.lower, "upper": self.upper, "training": self.training}


class RreluWithNoiseBackward1(RreluWithNoiseBackward0):
    """In-place rrelu: the formula reads the output (same sign as the input)."""

    __slots__ = ()
    _saved_names = ("result",)

    def backward(self, xp, g):
        r = self.saved_result(xp)
        slope = (self.lower + self.upper) / 2
        return (xp.where(r > 0, g, g * slope),)


@register(method=False, expr=True)
def rrelu(
    input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, generator=None
):
    """Leaky ReLU with slope ``(lower + upper) / 2`` (eval mode; ``RreluWithNoiseBackward0``).

    >>> import autodiag as torch
    >>> torch.rrelu(torch.tensor([-1.0, 1.0]))
    tensor([-0.2292,  1.0000])
    """
    if training:
        raise NotImplementedError(
            "rrelu: training=True (random slopes drawn from PyTorch's generator) is not "
            "supported by autodiag; use training=False"
        )
    x = _tensor_arg("rrelu", input)
    d = x._data
    if d.dtype.kind != "f":
        raise _no_kernel("rrelu_with_noise_cpu", d.dtype)
    t = d.dtype.type
    slope = t((lower + upper) / 2)
    out = np.asarray(np.where(d > 0, d, d * slope), dtype=d.dtype)
    return _record(
        out, RreluWithNoiseBackward0, (x,), (x,), lower=lower, upper=upper, training=False
    )


class PreluKernelBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "weight")

    def backward(self, xp, g):
        # _prelu_kernel_backward: where(x > 0, g, w * g); weight: where(x > 0, 0, x * g), summed
        # to the weight's (viewed) shape by the engine (set_broadcast_meta)
        x, w = self.saved_self(xp), self.saved_weight(xp)
        needs_self, needs_w = self.needs_grad
        pos = x > 0
        gx = xp.where(pos, g, w * g) if needs_self else None
        gw = xp.where(pos, xp.zeros_like(g), x * g) if needs_w else None
        return (gx, gw)


@register(expr=True)
def prelu(input, weight):
    """``x`` where positive, else ``weight * x``; ``weight`` has 1 or C (dim 1) values.

    >>> import autodiag as torch
    >>> torch.prelu(torch.tensor([-1.0, 2.0]), torch.tensor([0.25]))
    tensor([-0.2500,  2.0000])
    """
    x = _tensor_arg("prelu", input)
    w = _tensor_arg("prelu", weight, 2, "weight")
    d, wd = x._data, w._data
    if wd.ndim > 1:
        raise RuntimeError(
            f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {wd.ndim}"
        )
    n = wd.size
    channels = d.shape[1] if d.ndim >= 2 else 1
    if n != 1 and n != channels:
        raise RuntimeError(
            "Mismatch of parameter numbers and input channel size. Found parameter numbers = "
            f"{n} and channel size = {channels}."
        )
    if d.dtype.kind != "f":
        raise _no_kernel("prelu_cpu", d.dtype)
    if d.ndim != wd.ndim:  # PyTorch: weight.reshape(dim_w), a view (ViewBackward0)
        shape = [1] * d.ndim
        if d.ndim > 1:
            shape[1] = n
        w = w.reshape(shape)
        wd = w._data
    xd, wv = _operands(x, w)
    out = np.asarray(np.where(xd > 0, xd, wv * xd))
    return _record(out, PreluKernelBackward0, (x, w), (x, w))


# torch.<name>_ functions without a Tensor twin (inplace2.function_forms reads them); their
# nodes are PyTorch's in-place overloads' (EluBackward1 ... saving the result)


def selu_(input):
    return _inplace_act(
        input,
        "selu_",
        lambda t: _elu_general("selu_", t, _SELU_ALPHA, _SELU_SCALE, 1.0, EluBackward1),
    )


def celu_(input, alpha: float = 1.0):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _inplace_act(
        input, "celu_", lambda t: _elu_general("celu_", t, alpha, 1.0, 1.0 / alpha, CeluBackward1)
    )


def rrelu_(
    input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, generator=None
):
    return _inplace_act(
        input,
        "rrelu_",
        lambda t: _renamed(rrelu(t, lower, upper, training), RreluWithNoiseBackward1, True),
    )


def threshold_(input, threshold, value):
    op = globals()["threshold"]
    return _inplace_act(
        input, "threshold_", lambda t: _renamed(op(t, threshold, value), ThresholdBackward1, False)
    )


def _renamed(r, cls, saves_result):
    """``r`` with its node replaced by the in-place overload's ``cls`` (same attributes)."""
    node = r.grad_fn
    if node is None:
        return r
    twin = cls(node._next)
    for k in node._extra_names:
        setattr(twin, k, getattr(node, k))
    r.grad_fn = twin
    twin._saved = (save_output(r),) if saves_result else node._saved
    return r


def _inplace_act(input, name, compute):
    from autodiag.ops.inplace import apply_inplace

    _tensor_arg(name, input)
    return apply_inplace(input, name, compute)


FUNCTION_ONLY = {"selu_": selu_, "celu_": celu_, "rrelu_": rrelu_, "threshold_": threshold_}
