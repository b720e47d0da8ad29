"""Inverse and hyperbolic trigonometry, and the other elementwise ops public programs reach
for: ``acos asin atan sinh cosh asinh acosh atanh`` (and numpy's ``arc*`` spellings), ``frac``,
``logit``, ``atan2``, ``hypot``, ``addcmul`` and ``addcdiv``.

Each backward is PyTorch's formula from derivatives.yaml, written once for both vocabularies
(``xp`` arrays or Tensors, NOTE [Backward vocabulary] in core/graph.py); the one-input ops take
``unary_op``'s hot path, as ``sin`` and ``exp`` do.
"""

from __future__ import annotations

import numpy as np

from autodiag import dtypes
from autodiag.core.graph import Node
from autodiag.ops._core import (
    NO_EDGE,
    _state,
    as_tensor_operand,
    broadcasting,
    edge,
    register,
    result,
    save,
    save_output,
    set_broadcast_meta,
)
from autodiag.ops.pointwise import (
    _ALWAYS,
    _NONE,
    _SELF,
    _Binary,
    _no_kernel,
    _operands,
    _Unary,
    _unary,
    binary_op,
    unary_op,
)
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# Functions the formulas need in both vocabularies
# ---------------------------------------------------------------------------------------------


def _rsqrt(xp, a):
    return 1 / np.sqrt(a) if xp.arrays else a.rsqrt()


def _sinh(xp, a):
    return np.sinh(a) if xp.arrays else a.sinh()


def _cosh(xp, a):
    return np.cosh(a) if xp.arrays else a.cosh()


# ---------------------------------------------------------------------------------------------
# Inverse and hyperbolic trigonometry
# ---------------------------------------------------------------------------------------------


class AcosBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * -_rsqrt(xp, -x * x + 1),)


class AsinBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * _rsqrt(xp, -x * x + 1),)


class AtanBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g / (x * x + 1),)


class SinhBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * _cosh(xp, self.saved_self(xp)),)


class CoshBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * _sinh(xp, self.saved_self(xp)),)


class AsinhBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * _rsqrt(xp, x * x + 1),)


class AcoshBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * _rsqrt(xp, x * x - 1),)


class AtanhBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        x = self.saved_self(xp)
        return (g * 1 / (1 - x * x),)


acos = register(expr=True, inplace=True)(unary_op("acos", np.arccos, AcosBackward0, _SELF))
asin = register(expr=True, inplace=True)(unary_op("asin", np.arcsin, AsinBackward0, _SELF))
atan = register(expr=True, inplace=True)(unary_op("atan", np.arctan, AtanBackward0, _SELF))
sinh = register(expr=True, inplace=True)(unary_op("sinh", np.sinh, SinhBackward0, _SELF))
cosh = register(expr=True, inplace=True)(unary_op("cosh", np.cosh, CoshBackward0, _SELF))
asinh = register(expr=True, inplace=True)(unary_op("asinh", np.arcsinh, AsinhBackward0, _SELF))
acosh = register(expr=True, inplace=True)(unary_op("acosh", np.arccosh, AcoshBackward0, _SELF))
atanh = register(expr=True, inplace=True)(unary_op("atanh", np.arctanh, AtanhBackward0, _SELF))


class _NoInplaceDerivative(Node):
    """``asinh_``/``acosh_``/``atanh_``: PyTorch records ``AsinhBackward1`` ..., whose backward
    raises (derivatives.yaml has no formula for these in-place versions)."""

    __slots__ = ()

    def backward(self, xp, g):
        op = type(self).__name__[: -len("Backward1")].lower()
        raise NotImplementedError(
            f"the derivative for 'inplace version of {op}' is not implemented."
        )


class AsinhBackward1(_NoInplaceDerivative):
    __slots__ = ()


class AcoshBackward1(_NoInplaceDerivative):
    __slots__ = ()


class AtanhBackward1(_NoInplaceDerivative):
    __slots__ = ()


def _no_derivative_in_place(np_fn, cls):
    """What ``Tensor.<op>_`` computes for an op PyTorch has no in-place derivative for: the
    values, recorded under ``cls`` (ops/inplace.py writes them into the tensor)."""

    def compute(t):
        x = as_tensor_operand(t)
        out = np.asarray(
            np_fn(
                x._data
                if x._data.dtype.kind == "f"
                else x._data.astype(dtypes.get_default_dtype().np)
            )
        )
        if _state.record and x.requires_grad:
            return result(out, cls((edge(x),)))
        return result(out, None)

    return compute


asinh.inplace_compute = _no_derivative_in_place(np.arcsinh, AsinhBackward1)
acosh.inplace_compute = _no_derivative_in_place(np.arccosh, AcoshBackward1)
atanh.inplace_compute = _no_derivative_in_place(np.arctanh, AtanhBackward1)

# numpy's spellings, which PyTorch keeps as aliases (same nodes: ``AcosBackward0``)
arccos = register("arccos", expr=True, inplace=True)(acos)
arcsin = register("arcsin", expr=True, inplace=True)(asin)
arctan = register("arctan", expr=True, inplace=True)(atan)
arcsinh = register("arcsinh", expr=True, inplace=True)(asinh)
arccosh = register("arccosh", expr=True, inplace=True)(acosh)
arctanh = register("arctanh", expr=True, inplace=True)(atanh)


# ---------------------------------------------------------------------------------------------
# frac, logit
# ---------------------------------------------------------------------------------------------


class FracBackward0(_Unary):
    __slots__ = ()
    _saved_names = ()

    def backward(self, xp, g):
        return (g,)


def _frac_array(a):
    if a.dtype.kind != "f":
        raise _no_kernel("frac_cpu", a.dtype)
    return a - np.trunc(a)  # PyTorch's self - self.trunc(): frac(-1.5) is -0.5


frac = register(expr=True, inplace=True)(
    unary_op("frac", _frac_array, FracBackward0, _NONE, float_only=False)
)


class LogitBackward0(_Unary):
    __slots__ = ("eps",)

    def backward(self, xp, g):
        # PyTorch's logit_backward (and, under create_graph, its differentiable twin): the
        # derivative 1 / (x (1 - x)) inside [eps, 1 - eps], 0 outside it; without eps, NaN
        # outside [0, 1]. A select, not a product (NOTE [Masked gradients]).
        x = self.saved_self(xp)
        eps = self.eps
        lo, hi = (0.0, 1.0) if eps is None else (eps, 1.0 - eps)
        inside = (x >= lo) & (x <= hi)
        d = g / (x * (1 - x))
        if eps is None:
            return (
                xp.where(inside, d, np.nan) if xp.arrays else xp.where(inside, d, float("nan")),
            )
        return (xp.mask(inside, d),)

    def _saved_extra(self):
        return {"eps": self.eps}


def _logit_array(a, eps):
    if a.dtype.kind == "b":
        raise _no_kernel("logit_cpu", a.dtype)
    if eps is not None:
        a = np.clip(a, eps, 1 - eps).astype(a.dtype, copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(a / (1 - a))


@register(expr=True, inplace=True)
def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given.

    >>> import autodiag as torch
    >>> torch.tensor([0.5, 0.75]).logit()
    tensor([0.0000, 1.0986])
    """
    eps = None if eps is None else float(eps)
    r = _unary(input, lambda a: _logit_array(a, eps), LogitBackward0, _SELF)
    if r.grad_fn is not None:
        r.grad_fn.eps = eps
    return r


# ---------------------------------------------------------------------------------------------
# atan2, hypot
# ---------------------------------------------------------------------------------------------


class Atan2Backward0(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        # PyTorch's atan2_backward: where x*x + y*y is 0 (at the origin, or squares that
        # underflow) the reciprocal is taken as 0, so both gradients are (signed) zeros, not
        # nan/inf as 1/0 would give
        x, y = self.saved_self(xp), self.saved_other(xp)
        needs_self, needs_other = self.needs_grad
        d = x * x + y * y
        zero = d == 0
        recip = xp.where(zero, d * 0, 1 / d)
        return (g * y * recip if needs_self else None, g * -x * recip if needs_other else None)


_atan2 = binary_op("atan2", np.arctan2, Atan2Backward0, _ALWAYS, _ALWAYS, true_divide=True)


def _tensor_other(name: str, other) -> None:
    if not isinstance(other, Tensor):
        raise TypeError(
            f"{name}(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}"
        )


@register(inplace=True)
def atan2(input, other):
    """The angle of the point ``(other, input)``, elementwise.

    >>> import autodiag as torch
    >>> torch.atan2(torch.tensor([1.0]), torch.tensor([1.0]))
    tensor([0.7854])
    """
    _tensor_other("atan2", other)
    return _atan2(input, other)


arctan2 = register("arctan2", inplace=True)(atan2)


class HypotBackward0(Node):
    __slots__ = ()
    _saved_names = ("self", "other", "result")

    def backward(self, xp, g):
        x, y, r = self.saved_self(xp), self.saved_other(xp), self.saved_result(xp)
        needs_self, needs_other = self.needs_grad
        return (g * x / r if needs_self else None, g * y / r if needs_other else None)


@register(inplace=True)
def hypot(input, other):
    """``sqrt(input**2 + other**2)`` without overflow in the squares.

    >>> import autodiag as torch
    >>> torch.hypot(torch.tensor([3.0]), torch.tensor([4.0]))
    tensor([5.])
    """
    _tensor_other("hypot", other)
    a = as_tensor_operand(input)
    ad, bd = _operands(a, other)
    if ad.dtype.kind != "f":
        raise _no_kernel("hypot_cpu", ad.dtype)
    out = broadcasting(np.hypot, ad, bd)
    if _state.record and (a.requires_grad or other.requires_grad):
        node = HypotBackward0((edge(a), edge(other)))
        set_broadcast_meta(node, out, a, other)
        r = result(out, node)
        node._saved = (save(a), save(other), save_output(r))
        return r
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# addcmul, addcdiv
# ---------------------------------------------------------------------------------------------


class AddcmulBackward0(Node):
    __slots__ = ("value",)
    _saved_names = ("tensor1", "tensor2")

    def backward(self, xp, g):
        needs_self, needs_t1, needs_t2 = self.needs_grad
        v = self.value
        return (
            g if needs_self else None,
            g * (self.saved_tensor2(xp) * v) if needs_t1 else None,
            g * (self.saved_tensor1(xp) * v) if needs_t2 else None,
        )

    def _saved_extra(self):
        return {"value": self.value}


class AddcdivBackward0(AddcmulBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_t1, needs_t2 = self.needs_grad
        v = self.value
        t2 = self.saved_tensor2(xp)
        return (
            g if needs_self else None,
            g * (v / t2) if needs_t1 else None,
            -g * v * self.saved_tensor1(xp) / (t2 * t2) if needs_t2 else None,
        )


_ADDCDIV_INT = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
    "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
    "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
    "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
    "for all dtypes."
)


def _addc(name, input, tensor1, tensor2, value, np_fn, cls):
    for i, t in enumerate((input, tensor1, tensor2)):
        if not isinstance(t, Tensor):
            arg = ("input", "tensor1", "tensor2")[i]
            raise TypeError(
                f"{name}(): argument '{arg}' (position {i + 1}) must be Tensor, "
                f"not {type(t).__name__}"
            )
    dt = dtypes.result_type((input, tensor1, tensor2)).np
    if (
        cls is AddcdivBackward0
        and tensor1._data.dtype.kind in "biu"
        and (tensor2._data.dtype.kind in "biu")
    ):
        raise RuntimeError(_ADDCDIV_INT)
    if dt.kind in "biu" and isinstance(value, float):
        raise RuntimeError(
            "value cannot be converted to type int64_t without overflow"
            if dt.kind != "b"
            else f"{name}: value must be a bool for bool tensors"
        )
    a, b, c = (t._data.astype(dt, copy=False) for t in (input, tensor1, tensor2))
    # PyTorch's kernel: self + value * tensor1 * tensor2 (or / tensor2), in that order
    v = dt.type(value) if dt.kind == "f" else value
    with np.errstate(divide="ignore", invalid="ignore"):
        out = broadcasting(lambda a, b, c: a + np_fn(v * b, c), a, b, c)
    out = np.asarray(out).astype(dt, copy=False)
    if _state.record and (input.requires_grad or tensor1.requires_grad or tensor2.requires_grad):
        node = cls(
            tuple(edge(t) if t.requires_grad else NO_EDGE for t in (input, tensor1, tensor2))
        )
        node.value = value
        set_broadcast_meta(node, out, input, tensor1, tensor2)
        node._saved = (save(tensor1), save(tensor2))
        return result(out, node)
    return result(out, None)


@register(inplace=True)
def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``.

    >>> import autodiag as torch
    >>> torch.addcmul(torch.ones(2), torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), value=0.5)
    tensor([2.5000, 5.0000])
    """
    return _addc("addcmul", input, tensor1, tensor2, value, np.multiply, AddcmulBackward0)


@register(inplace=True)
def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``.

    >>> import autodiag as torch
    >>> torch.addcdiv(torch.ones(2), torch.tensor([1.0, 2.0]), torch.tensor([4.0, 4.0]))
    tensor([1.2500, 1.5000])
    """
    return _addc("addcdiv", input, tensor1, tensor2, value, np.true_divide, AddcdivBackward0)
