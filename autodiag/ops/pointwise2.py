"""More of the elementwise ops public programs reach for (issue 20): ``log2 log10 exp2 expm1
erfc square``, ``logaddexp logaddexp2`` and ``nan_to_num``.

Each backward is PyTorch's formula from derivatives.yaml, written once for both vocabularies
(``xp`` arrays or Tensors, NOTE [Backward vocabulary] in core/graph.py), so double backward goes
through the recorded ops; the one-input ops take ``unary_op``'s hot path, as ``exp`` does.
``square`` is ``pow(input, 2)``, as PyTorch records it (``PowBackward0``).
"""

from __future__ import annotations

import math

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    broadcasting,
    edge,
    register,
    result,
    save,
    set_broadcast_meta,
)
from autodiag.ops.nn_ops import add_scalar, mul_scalar
from autodiag.ops.pointwise import (
    _RESULT,
    _SELF,
    _no_kernel,
    _operands,
    _Unary,
    _unary,
    _UnaryResult,
    unary_op,
)
from autodiag.ops.pointwise import pow as _pow
from autodiag.tensor import Tensor

_LN2 = 0.6931471805599453  # the constants PyTorch's formulas use (M_LN2, M_LN10)
_LN10 = 2.302585092994046
_2_SQRT_PI = 2 / math.sqrt(math.pi)


# NOTE [Scalar overloads in formulas]
# derivatives.yaml's ``self * 0.693...`` or ``result + 1`` are C++ ``mul.Scalar``/``add.Scalar``
# calls: under create_graph PyTorch records MulBackward1/AddBackward1 for them, not the
# MulBackward0/AddBackward0 of Python's ``*``/``+``. ``_mul_s``/``_add_s`` record the same nodes,
# so the graph of a first derivative has PyTorch's node names.


def _mul_s(xp, t, s):
    return t * s if xp.arrays else mul_scalar(t, s)


def _add_s(xp, t, s):
    return t + s if xp.arrays else add_scalar(t, s)


# ---------------------------------------------------------------------------------------------
# One input
# ---------------------------------------------------------------------------------------------


class Log2Backward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g / _mul_s(xp, self.saved_self(xp), _LN2),)


class Log10Backward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g / _mul_s(xp, self.saved_self(xp), _LN10),)


class Exp2Backward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (_mul_s(xp, g * self.saved_result(xp), _LN2),)


class Expm1Backward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * _add_s(xp, self.saved_result(xp), 1),)


class ErfcBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        # derivatives.yaml: -2 / sqrt(pi) * exp(-self.pow(2)) * grad (pow, as erf's)
        x = self.saved_self(xp)
        return (_mul_s(xp, xp.exp(-(x**2)), -_2_SQRT_PI) * g,)


_erfc_f64 = np.vectorize(math.erfc, otypes=[np.float64])


def _erfc_array(a):
    # libm's erfc through math.erfc: 1 - erf(x) would lose every digit in the tail (x > 5)
    if a.size == 0:
        return np.empty(a.shape, a.dtype)
    return np.asarray(_erfc_f64(a.astype(np.float64, copy=False))).astype(a.dtype, copy=False)


log2 = register(expr=True, inplace=True)(unary_op("log2", np.log2, Log2Backward0, _SELF))
log10 = register(expr=True, inplace=True)(unary_op("log10", np.log10, Log10Backward0, _SELF))
exp2 = register(expr=True, inplace=True)(unary_op("exp2", np.exp2, Exp2Backward0, _RESULT))
expm1 = register(expr=True, inplace=True)(unary_op("expm1", np.expm1, Expm1Backward0, _RESULT))
erfc = register(expr=True, inplace=True)(unary_op("erfc", _erfc_array, ErfcBackward0, _SELF))


@register(expr=True, inplace=True)
def square(input):
    """``input * input``, recorded as PyTorch records it: ``pow(input, 2)`` (``PowBackward0``).
    A bool tensor squares to int64, as in PyTorch.

    >>> import autodiag as torch
    >>> torch.tensor([-2.0, 3.0]).square()
    tensor([4., 9.])
    """
    if not isinstance(input, Tensor):
        raise TypeError(
            f"square(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}"
        )
    x = input
    if x._data.dtype.kind == "b":
        x = x.long()
    return _pow(x, 2)


# ---------------------------------------------------------------------------------------------
# logaddexp, logaddexp2
# ---------------------------------------------------------------------------------------------


class LogaddexpBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        x, y = self.saved_self(xp), self.saved_other(xp)
        needs_self, needs_other = self.needs_grad
        return (
            g / _add_s(xp, xp.exp(y - x), 1) if needs_self else None,
            g / _add_s(xp, xp.exp(x - y), 1) if needs_other else None,
        )


def _exp2(xp, a):
    return np.exp2(a) if xp.arrays else 2**a


class Logaddexp2Backward0(LogaddexpBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        # derivatives.yaml: grad / (1 + pow(2, other - self)), and its mirror
        x, y = self.saved_self(xp), self.saved_other(xp)
        needs_self, needs_other = self.needs_grad
        return (
            g / _add_s(xp, _exp2(xp, y - x), 1) if needs_self else None,
            g / _add_s(xp, _exp2(xp, x - y), 1) if needs_other else None,
        )


def _log_add_array(a, b, exp_fn, scale):
    # PyTorch's kernel: max(a, b) + log1p(exp(-|a - b|)) (times 1/ln 2 for base 2), and a
    # itself where a and b are the same infinity; numpy's logaddexp2 rounds differently
    # (logaddexp2(-1, -1) is 0 there, -4.8e-17 in PyTorch)
    m = np.maximum(a, b)
    out = m + np.log1p(exp_fn(-np.abs(a - b))) * scale
    return np.where(np.isinf(a) & (a == b), a, out).astype(m.dtype, copy=False)


def _np_logaddexp(a, b):
    return _log_add_array(a, b, np.exp, 1)


def _np_logaddexp2(a, b):
    dt = np.result_type(a, b)
    return _log_add_array(a, b, np.exp2, dt.type(1 / math.log(2)))


def _log_add(name, input, other, np_fn, cls):
    for i, t in enumerate((input, other)):
        if not isinstance(t, Tensor):
            arg = ("input", "other")[i]
            raise TypeError(
                f"{name}(): argument '{arg}' (position {i + 1}) must be Tensor, "
                f"not {type(t).__name__}"
            )
    ad, bd = _operands(input, other)
    if ad.dtype.kind != "f":
        raise _no_kernel(f"{name}_cpu", ad.dtype)
    with np.errstate(all="ignore"):
        out = np.asarray(broadcasting(np_fn, ad, bd))
    if _state.record and (input.requires_grad or other.requires_grad):
        node = cls((edge(input), edge(other)))
        set_broadcast_meta(node, out, input, other)
        r = result(out, node)
        node._saved = (save(input), save(other))
        return r
    return result(out, None)


@register(expr=True)
def logaddexp(input, other):
    """``log(exp(input) + exp(other))`` without overflow.

    >>> import autodiag as torch
    >>> torch.logaddexp(torch.tensor([0.0]), torch.tensor([0.0]))
    tensor([0.6931])
    """
    return _log_add("logaddexp", input, other, _np_logaddexp, LogaddexpBackward0)


@register(expr=True)
def logaddexp2(input, other):
    """``log2(2**input + 2**other)`` without overflow.

    >>> import autodiag as torch
    >>> torch.logaddexp2(torch.tensor([1.0]), torch.tensor([1.0]))
    tensor([2.])
    """
    return _log_add("logaddexp2", input, other, _np_logaddexp2, Logaddexp2Backward0)


# ---------------------------------------------------------------------------------------------
# nan_to_num
# ---------------------------------------------------------------------------------------------


class NanToNumBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        # derivatives.yaml: grad * at::isfinite(self) (a product: an inf grad at a NaN gives NaN)
        x = self.saved_self(xp)
        return (g * (np.isfinite(x) if xp.arrays else x.isfinite()),)


def _nan_to_num_array(a, nan, posinf, neginf):
    if a.dtype.kind != "f":
        return a.copy()  # integers and bools have nothing to replace (PyTorch: a copy)
    info = np.finfo(a.dtype)
    with np.errstate(over="ignore"):
        return np.nan_to_num(
            a,
            copy=True,
            nan=0.0 if nan is None else nan,
            posinf=info.max if posinf is None else posinf,
            neginf=info.min if neginf is None else neginf,
        )


@register(expr=True, inplace=True)
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` and ``neginf``; by default 0 and
    the dtype's largest and lowest finite values.

    >>> import autodiag as torch
    >>> torch.tensor([float("nan"), float("inf"), 1.0]).nan_to_num(posinf=9.0)
    tensor([0., 9., 1.])
    """
    for arg, v in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
        if v is not None and not isinstance(v, (int, float, np.number)):
            raise TypeError(f"nan_to_num(): argument '{arg}' must be float, not {type(v).__name__}")
    return _unary(
        input,
        lambda a: _nan_to_num_array(a, nan, posinf, neginf),
        NanToNumBackward0,
        _SELF,
        float_only=False,
    )


# ---------------------------------------------------------------------------------------------
# xlogy
# ---------------------------------------------------------------------------------------------


def _xlogy_array(x, y):
    # PyTorch's kernel: NaN where y is NaN, else 0 where x is 0 (also at y <= 0), else x log y
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(x * np.log(y))
    return np.where((x == 0) & ~np.isnan(y), out.dtype.type(0), out).astype(out.dtype, copy=False)


def _xlogy_self_grad(xp, g, x, y):
    # derivatives.yaml: at::xlogy(grad, other).masked_fill((self == 0.) & (other <= 0.), 0.);
    # for a number ``other``, the masked_fill (on self == 0.) only where other > 0 is false
    # (NaN included: xlogy(0, nan) has the gradient 0 there, NaN with a tensor other)
    if not xp.arrays:
        d = xlogy(g, y)
    else:  # a number other in g's dtype (a float32 gradient stays float32)
        d = _xlogy_array(g, np.asarray(y, g.dtype) if isinstance(y, (int, float)) else y)
    if isinstance(y, (int, float)):
        if y > 0:
            return d
        zero = x == 0
    else:
        zero = (x == 0) & (y <= 0)
    return np.where(zero, d.dtype.type(0), d) if xp.arrays else d.masked_fill(zero, 0.0)


class XlogyBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        x, y = self.saved_self(xp), self.saved_other(xp)
        needs_self, needs_other = self.needs_grad
        return (
            _xlogy_self_grad(xp, g, x, y) if needs_self else None,
            g * x / y if needs_other else None,
        )


class XlogyBackward1(Node):
    """``xlogy(number, tensor)``: the gradient of ``other`` only."""

    __slots__ = ("self_",)
    _saved_names = ("other",)

    def backward(self, xp, g):
        return (_mul_s(xp, g, self.self_) / self.saved_other(xp),)

    def _saved_extra(self):
        return {"self": self.self_}


class XlogyBackward2(Node):
    """``xlogy(tensor, number)``: the gradient of ``self`` only."""

    __slots__ = ("other",)
    _saved_names = ("self",)

    def backward(self, xp, g):
        return (_xlogy_self_grad(xp, g, self.saved_self(xp), self.other),)

    def _saved_extra(self):
        return {"other": self.other}


def _scalar(v):
    return isinstance(v, (int, float, bool, np.number, np.bool_))


@register(inplace=True)
def xlogy(input, other):
    """``input * log(other)``, 0 where ``input`` is 0 (unless ``other`` is NaN).

    >>> import autodiag as torch
    >>> torch.xlogy(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 1.0]))
    tensor([0., 0.])
    """
    if isinstance(input, Tensor) and isinstance(other, Tensor):
        ad, bd = _operands(input, other, true_divide=True)
        out = broadcasting(_xlogy_array, ad, bd)
        if _state.record and (input.requires_grad or other.requires_grad):
            node = XlogyBackward0((edge(input), edge(other)))
            set_broadcast_meta(node, out, input, other)
            node._saved = (save(input), save(other))
            return result(out, node)
        return result(out, None)
    if isinstance(other, Tensor) and _scalar(input):
        if isinstance(input, np.generic):
            input = input.item()
        od, sd = _operands(other, input, true_divide=True)
        out = _xlogy_array(np.asarray(sd, od.dtype), od)
        if _state.record and other.requires_grad:
            node = XlogyBackward1((edge(other),))
            node.self_ = input
            node._saved = (save(other),)
            return result(out, node)
        return result(out, None)
    if isinstance(input, Tensor) and _scalar(other):
        if isinstance(other, np.generic):
            other = other.item()
        ad, od = _operands(input, other, true_divide=True)
        out = _xlogy_array(ad, np.asarray(od, ad.dtype))
        if _state.record and input.requires_grad:
            node = XlogyBackward2((edge(input),))
            node.other = other
            node._saved = (save(input),)
            return result(out, node)
        return result(out, None)
    raise TypeError(
        "xlogy() received an invalid combination of arguments - got "
        f"({type(input).__name__}, {type(other).__name__}), but expected one of: "
        "(Tensor input, Tensor other), (Number self, Tensor other), (Tensor input, Number other)"
    )
