"""Elementwise ops: arithmetic, math functions, activations, comparisons.

Each op's forward sits right above its Node; the Node's ``backward(xp, grad)`` is the chain rule
in the vocabulary of ``_core`` (works on arrays and, for create_graph, on Tensors). Broadcasting
needs no code here: the engine sums gradients back to input shapes (``set_broadcast_meta``).
"""

from __future__ import annotations

import math
from sys import _getframe

import numpy as np

from autodiag import dtypes
from autodiag.core.graph import FlatNode, Node, _saved_hooks_stack, _seq_counter
from autodiag.ops._core import (
    ARRAY,
    NO_EDGE,
    IdentityBackward,
    _state,
    as_tensor_operand,
    broadcast_error,
    broadcasting,
    check_broadcast,
    edge,
    register,
    result,
    rounded_once,
    save,
    save_output,
    set_broadcast_meta,
    sign_array,
    wrap,
)
from autodiag.ops._vector_ties import tie_takes_second
from autodiag.tensor import Tensor, _new
from autodiag.trace.events import TRACERS, _depth, call_traced, call_traced_binary, self_traced
from autodiag.trace.sites import last_user as _last_user
from autodiag.trace.sites import note_saver

# numpy's module has a __getattr__, so CPython 3.11 never specializes ``np.x`` lookups (each is a
# full module getattr); the hot paths read these globals instead (NOTE [Hot path]).
_ndarray = np.ndarray
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)

_SELF, _RESULT, _NONE, _SELF_RESULT = 0, 1, 2, 3
_FOR_OTHER, _ALWAYS = 1, 2  # when _binary saves an operand


def _float_data(x: Tensor) -> np.ndarray:
    """Data for a float-valued function: integers and bools become the default float dtype."""
    d = x._data
    if d.dtype.kind != "f":
        d = d.astype(dtypes.get_default_dtype().np)
    return d


# NOTE [Hot path]
# Elementwise ops are the most frequent calls in user code, so ``unary_op`` and ``binary_op``
# build ops that do in one Python frame what the general path spreads over several calls: they
# check ``TRACERS`` themselves (no registry wrapper around them), build the node field by field
# (``Node.__init__`` inlined: every slot it sets is set here too, which a test checks), compute
# edges and version-0 saves inline (``edge()``, ``save()``), and record the saving line with one
# identity test (NOTE [Saving sites] in core/graph.py). Anything unusual (promotion,
# broadcasting, coercion, saved-tensor hooks, a tensor with a version counter) goes the general
# way. A Python call costs ~80-110 ns against ~1.7 µs per recorded op.
#
# Each op gets its own copy of its closure's code object (``_own_code``). CPython 3.11 keeps its
# specialized attribute stores and loads per code object, keyed on the type they last saw: with
# one code object shared by ``*`` and ``+``, a chain alternating them swapped MulBackward0 and
# AddBackward0 under every node store, and each store fell back to the generic path.


def _own_code(op):
    """``op`` with a code object of its own (NOTE [Hot path]); for ops built once, at import."""
    op.__code__ = op.__code__.replace()
    return op


def _no_kernel(kernel: str, dt: np.dtype) -> NotImplementedError:
    """PyTorch's error for a dtype its ``kernel`` has no loop for, where numpy would compute."""
    name = dtypes.from_numpy_dtype(dt).scalar_name
    return NotImplementedError(f"\"{kernel}\" not implemented for '{name}'")


def _refuse(x, kernel: str, kinds: str) -> None:
    """Raise ``_no_kernel`` for a tensor of one of ``kinds`` (numpy dtype kinds: ``b`` bool,
    ``iu`` integers)."""
    if isinstance(x, Tensor) and x._data.dtype.kind in kinds:
        raise _no_kernel(kernel, x._data.dtype)


def _no_bool(np_fn, kernel: str):
    """``np_fn``, refusing bool arrays as PyTorch's ``kernel`` does."""

    def fn(a):
        if a.dtype.kind == "b":
            raise _no_kernel(kernel, a.dtype)
        return np_fn(a)

    return fn


def _check_flat(cls, arity: int) -> None:
    """The hot paths write a node's slots directly: its class must be a FlatNode of that many
    edges (NOTE [Flat nodes])."""
    if not (issubclass(cls, FlatNode) and cls._arity == arity):
        raise TypeError(f"{cls.__name__} must be a FlatNode with {arity} edge(s)")


def unary_op(name: str | None, fn, cls, saves: int, float_only: bool = True):
    """The op ``name(input)``: ``fn`` on the data, recording ``cls``; ``saves`` is what its
    backward reads (_SELF, _RESULT, _NONE or _SELF_RESULT); ``float_only`` computes integer
    inputs in the default float dtype.

    ``x.sin()`` and ``torch.sin(x)`` are one Python call (NOTE [Hot path]). A ``name`` of None
    makes an op that never reports itself, for use inside another op.
    """
    _check_flat(cls, 1)

    def op(input):
        if TRACERS and not _depth.n and name:
            return call_traced(name, op, (input,), None)
        x = (
            input
            if input.__class__ is Tensor or isinstance(input, Tensor)
            else as_tensor_operand(input)
        )
        d = x._data
        dt = d.dtype  # the identity tests skip a `.kind` lookup for the usual float dtypes
        out = fn(
            d if dt is _F32 or dt is _F64 or dt.kind == "f" or not float_only else _float_data(x)
        )
        if out.__class__ is not _ndarray:
            out = np.asarray(out)
        r = _new(Tensor)
        r._data, r._vc = out, None
        if not _state.record or not x.requires_grad:
            r.grad_fn, r.requires_grad = None, False
            if _state.inference:
                r._inference = True  # made in inference_mode
            return r
        # NOTE [Hot path]; an input at version 0 is saved as itself (NOTE [Compact saves])
        e = x.grad_fn
        if e is None or x._output_nr:
            e = edge(x)
        node = _new(cls)  # a FlatNode: edge and saved values in slots (NOTE [Flat nodes])
        node._e0, node._e1 = e, None  # FlatNode._edges reads both
        node._seq = next(_seq_counter)
        node._x = None
        r.grad_fn, r.requires_grad = node, True
        if saves == _SELF:
            node._s0 = (
                x if x._vc is None and not _saved_hooks_stack and not x._inference else save(x)
            )
            node._held = 1
        elif saves == _RESULT:
            node._s0 = save_output(r)
            node._held = 1
        elif saves == _SELF_RESULT:  # sgn's, unread for real tensors: saved as PyTorch saves them
            node._s0, node._s1 = save(x), save_output(r)
            node._held = 2
        else:
            node._held = None
            return r
        if TRACERS:
            return r  # a tracer gives the node its whole stack (node._trace)
        # note_saver, inlined for a call from the user's code seen last (NOTE [Saving sites])
        f = _getframe(1)
        code = f.f_code
        if code is _last_user[0]:
            node._src_code, node._src_lasti = code, f.f_lasti
        else:
            note_saver(node)
        return r

    return self_traced(name, _own_code(op)) if name else op


def _unary(x, fn, cls, saves: int, float_only: bool = True) -> Tensor:
    """``unary_op`` with a one-off ``fn``: for ops with parameters (gelu's ``approximate``,
    clamp's bounds), which run inside their own traced wrapper."""
    return unary_op(None, fn, cls, saves, float_only)(x)


class _Unary(FlatNode):
    __slots__ = ()
    _saved_names = ("self",)


class _UnaryResult(FlatNode):
    __slots__ = ()
    _saved_names = ("result",)


# --- simple math ----------------------------------------------------------------------------


class NegBackward0(FlatNode):
    __slots__ = ()

    def backward(self, xp, g):
        return (-g,)


_neg = _own_code(unary_op(None, np.negative, NegBackward0, _NONE, float_only=False))


@register(inplace=True)
def neg(input):
    if isinstance(input, Tensor) and input._data.dtype == np.bool_:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. If you "
            "are trying to invert a mask, use the `~` or `logical_not()` operator "
            "instead."
        )
    return _neg(input)


negative = register("negative")(neg)


class AbsBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * xp.sgn(self.saved_self(xp)),)  # recorded as SgnBackward0, as PyTorch


abs = register(expr=True, inplace=True)(  # noqa: A001
    unary_op("abs", _no_bool(np.abs, "abs_cpu"), AbsBackward0, _SELF, float_only=False)
)


class ExpBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * self.saved_result(xp),)


exp = register(expr=True, inplace=True)(unary_op("exp", np.exp, ExpBackward0, _RESULT))


class LogBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g / self.saved_self(xp),)


log = register(expr=True, inplace=True)(unary_op("log", np.log, LogBackward0, _SELF))


class Log1PBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g / (self.saved_self(xp) + 1),)


# NOTE [log1p of tiny values]
# PyTorch's CPU log1p runs SLEEF's vector log1p on every element (vml's map loads a short tail
# as a partial vector), which forms log1p(x) for |x| below 2x the smallest normal as
# 2 * (x / 2): the halving rounds a subnormal to even, so the result is one subnormal ulp off
# where x's last bit is odd (1e-310 -> 1.00000000000005e-310, 5e-324 -> 0, float32 1e-45 ->
# 0), where the exact log1p(x) is x. Measured on 80,000 such values of each dtype: that rule
# matched all of them, numpy's exact log1p a quarter to a half fewer.
_TINY2 = {np.dtype(np.float32): np.float32(2.0**-125), np.dtype(np.float64): 2.0**-1021}


def _log1p(d: np.ndarray) -> np.ndarray:
    out = np.log1p(d)
    tiny2 = _TINY2.get(d.dtype)
    if tiny2 is not None:
        small = np.abs(d) < tiny2
        if small.any():
            two = d.dtype.type(2)
            out = np.where(small, d / two * two, out).astype(d.dtype, copy=False)
    return out


log1p = register(expr=True)(unary_op("log1p", _log1p, Log1PBackward0, _SELF))


class SqrtBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (g / (2 * self.saved_result(xp)),)


sqrt = register(expr=True, inplace=True)(unary_op("sqrt", np.sqrt, SqrtBackward0, _RESULT))


class RsqrtBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        r = self.saved_result(xp)
        return (-0.5 * g * r * r * r,)


rsqrt = register(expr=True)(unary_op("rsqrt", lambda a: 1 / np.sqrt(a), RsqrtBackward0, _RESULT))


class ReciprocalBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        r = self.saved_result(xp)
        # NOTE: PyTorch's -grad * (result * result): r * r underflows to 0 first, so an
        # inf gradient gives NaN (-g * r * r would give inf)
        return (-g * (r * r),)


reciprocal = register(expr=True, inplace=True)(
    unary_op("reciprocal", np.reciprocal, ReciprocalBackward0, _RESULT)
)


class SinBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * xp.cos(self.saved_self(xp)),)


sin = register(expr=True, inplace=True)(unary_op("sin", np.sin, SinBackward0, _SELF))


class CosBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        return (g * -xp.sin(self.saved_self(xp)),)


cos = register(expr=True, inplace=True)(unary_op("cos", np.cos, CosBackward0, _SELF))


class TanBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        r = self.saved_result(xp)
        return (g * (1 + r * r),)


tan = register(expr=True)(unary_op("tan", np.tan, TanBackward0, _RESULT))


class TanhBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (_result_backward(xp, g, self.saved_result(xp), TanhBackwardBackward0),)


def _one_minus_square(r: np.ndarray) -> np.ndarray:
    """``1 - r * r`` with one rounding, as PyTorch's CPU tanh_backward computes it (a fused
    multiply-add): near saturation the plain float32 form keeps few digits (r = 0.99999833:
    3.33786e-06 for PyTorch's 3.3378574e-06). Measured on 20,000 values: all equal (float32),
    and float64 by Dekker's exact product."""
    if r.dtype == np.float32:
        return (1 - r.astype(np.float64) ** 2).astype(np.float32)  # r * r is exact in float64
    if r.dtype != np.float64:
        return 1 - r * r
    with np.errstate(all="ignore"):
        t = 134217729.0 * r  # Veltkamp's split: r = hi + lo, 26 bits each
        hi = t - (t - r)
        lo = r - hi
        p = r * r
        e = ((hi * hi - p) + 2 * hi * lo) + lo * lo  # r * r = p + e exactly
        s = 1 - p
        bb = s - 1
        err = (1 - (s - bb)) + (-p - bb)  # 1 - p = s + err exactly (two-sum)
        return s + (err - e)


tanh = register(expr=True, inplace=True)(
    unary_op("tanh", rounded_once(np.tanh), TanhBackward0, _RESULT)
)


def _np_sigmoid(a):
    # NOTE: exp(-a) overflows for very negative a; the two-branch form stays finite.
    out = np.empty_like(a)
    pos = a >= 0
    out[pos] = 1 / (1 + np.exp(-a[pos]))
    e = np.exp(a[~pos])
    out[~pos] = e / (1 + e)
    return out


class SigmoidBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (_result_backward(xp, g, self.saved_result(xp), SigmoidBackwardBackward0),)


# NOTE [Recorded result backward]
# PyTorch computes tanh's and sigmoid's gradients with ops of their own, ``tanh_backward(grad,
# output)`` and ``sigmoid_backward(grad, output)``, recorded under create_graph as
# TanhBackwardBackward0 / SigmoidBackwardBackward0 with their own derivatives
# (derivatives.yaml): for ``output``, ``grad * (-2 * output * grad_output)`` and
# ``grad * grad_output * (-2 * output + 1)``. Written as ``g * (1 - r * r)`` from recorded
# mul/sub nodes, the derivative along r is distributed (``gg * g * r + gg * g * r``), which is
# inf - inf = NaN where the incoming gradient is inf and PyTorch's one product is inf.


class _ResultBackwardBackward(Node):
    """``tanh_backward`` / ``sigmoid_backward(grad_output, output)``, recorded."""

    __slots__ = ()
    _saved_names = ("grad_output", "output")

    def backward(self, xp, gg):
        needs_grad_output, needs_output = self.needs_grad
        go, out = self.saved_grad_output(xp), self.saved_output(xp)
        return (
            _result_backward(xp, gg, out, type(self)) if needs_grad_output else None,
            self._output_gradient(gg, go, out) if needs_output else None,
        )


class TanhBackwardBackward0(_ResultBackwardBackward):
    __slots__ = ()

    @staticmethod
    def _output_gradient(gg, go, out):
        return gg * (-2 * out * go)

    @staticmethod
    def _array(g, r):
        return g * _one_minus_square(r) if r.dtype.kind == "f" else g * (1 - r * r)


class SigmoidBackwardBackward0(_ResultBackwardBackward):
    __slots__ = ()

    @staticmethod
    def _output_gradient(gg, go, out):
        return gg * go * (-2 * out + 1)

    @staticmethod
    def _array(g, r):
        return g * (r * (1 - r))


def _result_backward(xp, g, r, cls):
    """``cls``'s forward (tanh_backward or sigmoid_backward of ``g`` given the output ``r``);
    under create_graph recorded as ``cls`` (NOTE [Recorded result backward])."""
    if xp.arrays:
        return cls._array(g, r)
    out = cls._array(g._data, r._data)
    if _state.record and (g.requires_grad or r.requires_grad):
        node = cls((edge(g), edge(r)))
        node._saved = (save(g), save(r))
        set_broadcast_meta(node, out, g, r)
        return result(out, node)
    return result(out, None)


sigmoid = register(expr=True, inplace=True)(
    unary_op("sigmoid", _np_sigmoid, SigmoidBackward0, _RESULT)
)


# --- piecewise functions (zero or undefined derivative at the kinks, as PyTorch) ------------


# NOTE [Recorded select backward]
# PyTorch computes the backward of relu and leaky_relu with ops of their own
# (``threshold_backward(grad, result, 0)``, ``leaky_relu_backward(grad, self, slope)``), which
# autograd records under create_graph with an edge to the tensor the mask is read from; their
# derivative along that edge is zeros. So the first gradient of ``relu(x).sum()`` requires grad
# (through ``result``) even though the incoming gradient does not, and differentiating it again
# gives zeros rather than "does not require grad". ``_select_backward`` records the same node.


class _SelectBackwardBackward(Node):
    """``where(self > threshold, grad, grad * slope)``, recorded; no gradient reaches ``self``."""

    __slots__ = ("threshold", "slope")
    _saved_names = ("self",)

    def backward(self, xp, gg):
        needs_grad_output, needs_self = self.needs_grad
        s = self.saved_self(xp)
        return (
            _select_backward(xp, gg, s, self.threshold, self.slope, type(self))
            if needs_grad_output
            else None,
            xp.zeros_like(gg) if needs_self else None,
        )


class ThresholdBackwardBackward0(_SelectBackwardBackward):
    __slots__ = ()

    def _saved_extra(self):
        return {"threshold": self.threshold}


class LeakyReluBackwardBackward0(_SelectBackwardBackward):
    __slots__ = ()

    def _saved_extra(self):
        return {"negative_slope": self.slope}


def _select_backward(xp, g, s, threshold, slope, cls):
    """``g`` where ``s > threshold``; elsewhere 0 (``slope`` None: PyTorch's threshold_backward,
    a select) or ``g * slope`` (leaky_relu_backward). Under create_graph the op is recorded as
    ``cls`` (NOTE [Recorded select backward])."""
    if xp.arrays:
        if slope is None:
            return ARRAY.mask(~(s <= threshold), g)  # NaN passes the gradient, as in PyTorch
        return np.where(s > threshold, g, g * slope)
    gd, sd = g._data, s._data
    out = (
        ARRAY.mask(~(sd <= threshold), gd)
        if slope is None
        else np.where(sd > threshold, gd, gd * slope)
    )
    if _state.record and (g.requires_grad or s.requires_grad):
        node = cls((edge(g), edge(s)))
        node.threshold, node.slope = threshold, slope
        node._saved = (save(s),)
        set_broadcast_meta(node, out, g, s)
        return result(out, node)
    return result(out, None)


class ReluBackward0(_UnaryResult):
    __slots__ = ()

    def backward(self, xp, g):
        return (
            _select_backward(xp, g, self.saved_result(xp), 0, None, ThresholdBackwardBackward0),
        )


def _np_relu(a):
    if a.dtype.kind == "b":
        raise RuntimeError("Boolean inputs not supported for relu")
    # NOTE: PyTorch keeps the input on ties, so relu(-0.0) is -0.0; numpy's maximum returns its
    # second argument on ties, hence the order.
    return np.maximum(a.dtype.type(0), a)


relu = register(expr=True, inplace=True)(
    unary_op("relu", _np_relu, ReluBackward0, _RESULT, float_only=False)
)


class LeakyReluBackward0(_Unary):
    __slots__ = ("negative_slope",)

    def backward(self, xp, g):
        return (
            _select_backward(
                xp, g, self.saved_self(xp), 0, self.negative_slope, LeakyReluBackwardBackward0
            ),
        )

    def _saved_extra(self):
        return {"negative_slope": self.negative_slope}


@register(method=False, home="nn.functional", expr=True)
def leaky_relu(input, negative_slope: float = 0.01):
    _refuse(input, "leaky_relu_cpu", "biu")
    r = _unary(
        input,
        lambda a: np.where(a > 0, a, a * negative_slope).astype(a.dtype),
        LeakyReluBackward0,
        _SELF,
    )
    if r.grad_fn is not None:
        r.grad_fn.negative_slope = negative_slope
    return r


_np_erf = ARRAY.erf
_2_SQRT_PI = 2 / math.sqrt(math.pi)


class ErfBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        # PyTorch's formula, pow(2) as it records it: with create_graph, the double backward
        # then gives PyTorch's NaN where 2 * x overflows (x * x differentiated gave 0 there)
        x = self.saved_self(xp)
        return (_2_SQRT_PI * xp.exp(-(x**2)) * g,)


erf = register()(unary_op("erf", _np_erf, ErfBackward0, _SELF))

from autodiag.ops._erf import erfinv_array  # noqa: E402 - kept next to the op that uses it

_SQRT_PI_2 = math.sqrt(math.pi) / 2


class ErfinvBackward0(_Unary):
    __slots__ = ()

    def backward(self, xp, g):
        # PyTorch saves self, not the result: its formula recomputes erfinv(self)
        x = self.saved_self(xp)
        inv = erfinv_array(x) if xp.arrays else xp.erfinv(x)
        return (g * (_SQRT_PI_2 * xp.exp(inv * inv)),)


erfinv = register(inplace=True)(unary_op("erfinv", erfinv_array, ErfinvBackward0, _SELF))


_SQRT1_2 = 1 / math.sqrt(2)
_SQRT_2_PI = math.sqrt(2 / math.pi)


def _gelu_forward(a, approximate):
    if approximate == "tanh":
        return 0.5 * a * (1 + np.tanh(_SQRT_2_PI * (a + 0.044715 * a**3)))
    return 0.5 * a * (1 + _np_erf(a * _SQRT1_2))


def _same_arrays(*arrays) -> bool:
    """All plain ndarrays of one dtype, none 0-d (so in-place arithmetic keeps every result's
    dtype, and numpy's arithmetic on them gives arrays, not scalars)."""
    dt = arrays[0].dtype
    return all(a.__class__ is np.ndarray and a.dtype == dt and a.ndim for a in arrays)


def _gelu_grad_array(g, x, e):
    """``g * (0.5 * (1 + e) + x * (exp(-0.5 * x * x) / sqrt(2 pi)))``, the same operations on
    the same values, into two buffers instead of eight temporaries (each a fresh allocation:
    page faults cost more than the arithmetic at a GPT's activation sizes)."""
    cdf = np.add(e, 1)
    cdf *= 0.5
    pdf = np.multiply(x, -0.5)
    pdf *= x
    np.exp(pdf, out=pdf)
    pdf *= 1 / math.sqrt(2 * math.pi)
    pdf *= x
    pdf += cdf
    pdf *= g
    return pdf


class GeluBackward0(_Unary):
    # ``erf``: erf(x / sqrt 2) as the forward computed it, read once by the first array
    # backward instead of computing it again (erf is most of a GELU model's step); the same
    # float32/64 values the formula would compute, after the saved input's version check
    __slots__ = ("approximate", "erf")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        if self.approximate == "tanh":
            inner = _SQRT_2_PI * (x + 0.044715 * x * x * x)
            t = xp.tanh(inner)
            left = 0.5 * (1 + t)
            right = 0.5 * x * (1 - t * t) * _SQRT_2_PI * (1 + 3 * 0.044715 * x * x)
            return (g * (left + right),)
        e = self.erf if xp.arrays else None
        if e is None:
            e = xp.erf(x * _SQRT1_2)
        else:
            self.erf = None  # single use: it is not kept past the backward that frees saves
        if xp.arrays and _same_arrays(g, x, e):
            return (_gelu_grad_array(g, x, e),)
        cdf = 0.5 * (1 + e)
        pdf = xp.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
        return (g * (cdf + x * pdf),)

    def _saved_extra(self):
        return {"approximate": self.approximate}


@register(method=False, home="nn.functional", expr=True)
def gelu(input, approximate: str = "none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    _refuse(input, "GeluKernelImpl", "biu")
    if approximate == "tanh":
        r = _unary(input, lambda a: _gelu_forward(a, approximate), GeluBackward0, _SELF)
        if r.grad_fn is not None:
            r.grad_fn.approximate, r.grad_fn.erf = approximate, None
        return r
    kept = []

    def fwd(a):  # _gelu_forward's "none" form, keeping erf for the backward
        e = _np_erf(a * _SQRT1_2)
        kept.append(e)
        if not _same_arrays(a, e):
            return 0.5 * a * (1 + e)
        out = np.multiply(a, 0.5)  # the same operations, into one buffer
        out *= np.add(e, 1)
        return out

    r = _unary(input, fwd, GeluBackward0, _SELF)
    # NOTE: pop, not index: _unary's one-off op is a closure cycle that ``fwd`` (and ``kept``)
    # stay in until the garbage collector runs; an array left in ``kept`` would outlive the
    # backward that frees the node's copy
    e = kept.pop()
    if r.grad_fn is not None:
        r.grad_fn.approximate, r.grad_fn.erf = approximate, e
    return r


class SoftplusBackward0(_Unary):
    __slots__ = ("beta", "threshold")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        bx = x * self.beta
        z = xp.exp(xp.where(bx > self.threshold, bx * 0, bx))
        return (xp.where(bx > self.threshold, g, g * z / (z + 1)),)

    def _saved_extra(self):
        return {"beta": self.beta, "threshold": self.threshold}


@register(method=False, home="nn.functional", expr=True)
def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    _refuse(input, "softplus_cpu", "biu")

    def fwd(a):
        bx = a * beta
        safe = np.where(bx > threshold, 0, bx)
        return np.where(bx > threshold, a, np.log1p(np.exp(safe)) / beta).astype(a.dtype)

    r = _unary(input, fwd, SoftplusBackward0, _SELF)
    if r.grad_fn is not None:
        r.grad_fn.beta, r.grad_fn.threshold = beta, threshold
    return r


class ClampBackward1(_Unary):
    __slots__ = ("min", "max")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        lo, hi = self.min, self.max
        if lo is not None and hi is not None:
            keep = (x >= lo) & (x <= hi)
        else:
            keep = x >= lo if lo is not None else x <= hi
        return (xp.mask(keep, g),)

    def _saved_extra(self):
        return {"min": self.min, "max": self.max}


class ClampMinBackward0(ClampBackward1):
    __slots__ = ()


class ClampMaxBackward0(ClampBackward1):
    __slots__ = ()


def _clamp_fwd(a, min, max):  # noqa: A002
    # NOTE: an integer tensor clamped to a float bound is promoted, as PyTorch does
    if a.dtype.kind in "biu" and any(isinstance(v, float) for v in (min, max)):
        a = a.astype(dtypes.get_default_dtype().np)
    return _clamp_array(a, min, max).astype(a.dtype, copy=False)


def _clamp_array(a, lo, hi):
    """min(max(a, lo), hi) as PyTorch computes it: a tie keeps ``a`` (clamp(-0.0, min=0) is
    -0.0; numpy's maximum/minimum return their second argument on ties), NaN propagates, and
    ``lo > hi`` gives ``hi``."""
    if lo is not None:
        a = np.maximum(lo, a)
    if hi is not None:
        a = np.minimum(hi, a)
    return a


@register(expr=True, inplace=True)
def clamp(input, min=None, max=None, *, _cls=ClampBackward1):  # noqa: A002
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        if (
            min is not None
            and max is not None
            and isinstance(min, Tensor) is not isinstance(max, Tensor)
        ):
            # NOTE: a Tensor next to a number: PyTorch's parser takes a 0-d tensor that does
            # not require grad as a Number (clamp(x, t, 2.5)); any other is a TypeError
            min, max = (
                b.item() if isinstance(b, Tensor) and not b.ndim and not b.requires_grad else b
                for b in (min, max)
            )
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            return _clamp_tensor(input, min, max)
    r = _unary(input, lambda a: _clamp_fwd(a, min, max), _cls, _SELF, float_only=False)
    if r.grad_fn is not None:
        r.grad_fn.min, r.grad_fn.max = min, max
    return r


class ClampBackward0(Node):
    """clamp with tensor bounds: edges (self, min, max), ``(None, 0)`` for a missing bound.

    PyTorch's subgradients (clamp_backward, clamp_backward_min_max): self gets the gradient
    where min <= self <= max (ties included); min where self < min (and min < max); max where
    self > max (or max < min, when max wins)."""

    __slots__ = ()
    _saved_names = ("self", "min", "max")

    def backward(self, xp, g):
        needs_self, needs_min, needs_max = self.needs_grad
        return _clamp_backward(
            xp,
            g,
            self.saved_self(xp),
            self.saved_min(xp),
            self.saved_max(xp),
            needs_self,
            needs_min,
            needs_max,
        )


def _clamp_backward(xp, g, x, lo, hi, needs_self, needs_min, needs_max) -> tuple:
    """The gradients of clamp for self, min and max; a bound of None is missing. The three
    are compared in their promoted dtype, as maximum/minimum's (``_compared``)."""
    gx = gmin = gmax = None
    as_mask = (lambda m: m) if xp.arrays else wrap
    x, lo, hi = _in_compare_dtype(xp, x, lo, hi)
    if needs_self:
        keep = x >= lo if lo is not None else None
        if hi is not None:
            keep = (x <= hi) if keep is None else keep & (x <= hi)
        gx = xp.mask(as_mask(keep), g)
    if needs_min:
        below = x < lo
        gmin = xp.mask(as_mask(below & (lo < hi) if hi is not None else below), g)
    if needs_max:
        above = x > hi
        gmax = xp.mask(as_mask(above | (hi < lo) if lo is not None else above), g)
    return (gx, gmin, gmax)


class ClampMinBackward1(ClampBackward0):
    """clamp_min(self, min tensor): edges (self, min)."""

    __slots__ = ()
    _saved_names = ("self", "min")

    def backward(self, xp, g):
        needs_self, needs_min = self.needs_grad
        return _clamp_backward(
            xp, g, self.saved_self(xp), self.saved_min(xp), None, needs_self, needs_min, None
        )


class ClampMaxBackward1(Node):
    """clamp_max(self, max tensor): edges (self, max)."""

    __slots__ = ()
    _saved_names = ("self", "max")

    def backward(self, xp, g):
        needs_self, needs_max = self.needs_grad
        x, hi, as_mask = _compared(xp, self.saved_self(xp), self.saved_max(xp), g)
        return (
            xp.mask(as_mask(x <= hi), g) if needs_self else None,
            xp.mask(as_mask(x > hi), g) if needs_max else None,
        )


def _clamp_tensor(input, min, max, cls=ClampBackward0):  # noqa: A002
    if not all(b is None or isinstance(b, Tensor) for b in (min, max)):
        got = ", ".join(
            f"{k}={type(v).__name__ if not isinstance(v, Tensor) else 'Tensor'}"
            for k, v in (("max", max), ("min", min))
            if v is not None
        )
        raise TypeError(
            f"clamp() received an invalid combination of arguments - got ({got}, ), "
            f"but expected one of:\n * (Tensor input, Tensor min = None, Tensor max "
            f"= None)\n * (Tensor input, Number min = None, Number max = None)"
        )
    x = as_tensor_operand(input)
    bounds = [b for b in (min, max) if b is not None]
    dt = dtypes.result_type([x] + bounds).np
    out = x._data.astype(dt, copy=False)
    # NOTE: the bound first (see _clamp_array: a tie keeps self's value, e.g. -0.0); the
    # operands stay in PyTorch's order for the broadcast error
    # PyTorch's clamp(min=tensor) is maximum, clamp(max=tensor) minimum, clamp(min, max) one
    # kernel, minimum(maximum(self, min), max) in its vectorised body: their ties each (NOTE
    # [maximum ties]), the body's span read from the three operands
    xd = out
    lo = None if min is None else min._data.astype(dt, copy=False)
    hi = None if max is None else max._data.astype(dt, copy=False)
    loop = None if lo is None or hi is None else (xd, lo, hi)
    if lo is not None:
        out = broadcasting(lambda a, b: np.maximum(b, a), out, lo)
        out = tie_takes_second(out, xd, lo, loop)
    if hi is not None:
        prev = out
        out = broadcasting(lambda a, b: np.minimum(b, a), out, hi)
        out = tie_takes_second(out, prev, hi, loop)
    if out is x._data:
        out = out.copy()
    if not (_state.record and any(t.requires_grad for t in [x] + bounds)):
        return result(out, None)
    if cls is ClampBackward0:
        operands = (x, min, max)
    else:
        operands = (x, min if cls is ClampMinBackward1 else max)
    node = cls(tuple(edge(t) if t is not None else NO_EDGE for t in operands))
    node._saved = tuple(save(t) if t is not None else None for t in operands)
    set_broadcast_meta(node, out, *operands)
    return result(out, node)


clip = register("clip", inplace=True)(clamp)


@register(inplace=True)
def clamp_min(input, min):  # noqa: A002
    if isinstance(min, Tensor):
        return _clamp_tensor(input, min, None, ClampMinBackward1)
    return clamp(input, min=min, _cls=ClampMinBackward0)


@register(inplace=True)
def clamp_max(input, max):  # noqa: A002
    if isinstance(max, Tensor):
        return _clamp_tensor(input, None, max, ClampMaxBackward1)
    return clamp(input, max=max, _cls=ClampMaxBackward0)


def _zero_grad_node(name: str):
    def backward(self, xp, g):
        return (xp.zeros_like(g),)  # NOTE [Masked gradients]: not g * 0

    return type(name, (FlatNode,), {"__slots__": (), "backward": backward})


RoundBackward0 = _zero_grad_node("RoundBackward0")
RoundBackward1 = _zero_grad_node("RoundBackward1")  # round(x, decimals=...)
SignBackward0 = _zero_grad_node("SignBackward0")


class SgnBackward0(FlatNode):
    """PyTorch's sgn of a real tensor is its sign, but a node of its own; abs's and norm's
    backward use sgn, so their double-backward graphs hold SgnBackward0. Its gradient is
    PyTorch's efficient zero tensor, which stays zero through the products and quotients of
    later formulas (NOTE [Efficient zero gradients] in core/zeros.py)."""

    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        return (xp.efficient_zeros_like(g),)


FloorBackward0 = _zero_grad_node("FloorBackward0")
CeilBackward0 = _zero_grad_node("CeilBackward0")
TruncBackward0 = _zero_grad_node("TruncBackward0")


_NO_DECIMALS = object()


@register(expr=True, inplace=True)
def round(input, decimals: int = _NO_DECIMALS):  # noqa: A001
    cls = RoundBackward0 if decimals is _NO_DECIMALS else RoundBackward1
    d = 0 if decimals is _NO_DECIMALS else decimals
    if decimals is _NO_DECIMALS:
        _refuse(input, "round_vml_cpu", "b")
    else:
        _refuse(input, "round_cpu", "biu")
    return _unary(input, lambda a: np.round(a, d), cls, _NONE, float_only=False)


sign = register(expr=True, inplace=True)(
    unary_op("sign", sign_array, SignBackward0, _NONE, float_only=False)
)
sgn = register(expr=True, inplace=True)(
    unary_op("sgn", sign_array, SgnBackward0, _SELF_RESULT, float_only=False)
)


floor = register(expr=True, inplace=True)(
    unary_op("floor", _no_bool(np.floor, "floor_vml_cpu"), FloorBackward0, _NONE, float_only=False)
)


ceil = register(expr=True, inplace=True)(
    unary_op("ceil", _no_bool(np.ceil, "ceil_vml_cpu"), CeilBackward0, _NONE, float_only=False)
)


trunc = register()(
    unary_op("trunc", _no_bool(np.trunc, "trunc_vml_cpu"), TruncBackward0, _NONE, float_only=False)
)


# --- binary arithmetic -----------------------------------------------------------------------


def _operands(a, b, true_divide: bool = False):
    """numpy operands and result data dtype for a binary op, by PyTorch's promotion rules.

    ``a`` is a Tensor; ``b`` a Tensor or Python scalar (kept as a scalar: numpy's weak scalars
    then keep the tensor's dtype, and the scalar is no graph input).
    """
    ad = a._data
    if isinstance(b, Tensor):
        bd = b._data
        if ad.dtype == bd.dtype and (ad.dtype.kind == "f" or not true_divide):
            return ad, bd
        dt = dtypes.result_type((a, b)).np
        if true_divide and dt.kind != "f":
            dt = dtypes.get_default_dtype().np
        return ad.astype(dt, copy=False), bd.astype(dt, copy=False)
    if (
        b.__class__ is not float
        and b.__class__ is not int
        and not isinstance(b, (int, float, bool, np.number, np.bool_))
    ):
        raise TypeError(f"unsupported operand type: '{type(b).__name__}'")
    if isinstance(b, np.generic):
        b = b.item()  # a numpy scalar is a wrapped number, as a Python one (PyTorch)
    kind = ad.dtype.kind
    if kind == "f" or (
        kind in "iu"
        and isinstance(b, (int, np.integer))
        and not isinstance(b, bool)
        and not true_divide
    ):
        return ad, b
    dt = dtypes.result_type((a, b)).np
    if true_divide and dt.kind != "f":
        dt = dtypes.get_default_dtype().np
    return ad.astype(dt, copy=False), b


def _binary(a, b, fn, cls, save_a: int, save_b: int, true_divide: bool = False) -> Tensor:
    """Record ``fn(a, b)``. ``save_a``/``save_b``: 0 never, _FOR_OTHER when the other input's
    gradient uses it, _ALWAYS when both gradients do. ``b`` may be a Python scalar."""
    if a.__class__ is Tensor and b.__class__ is Tensor:
        # two plain tensors of one dtype need no coercion or promotion
        ad, bd = a._data, b._data
        if ad.dtype is not bd.dtype or (true_divide and ad.dtype.kind != "f"):
            ad, bd = _operands(a, b, true_divide)
        b_is_t = True
    else:
        if not isinstance(a, Tensor):
            a = as_tensor_operand(a)
        if isinstance(b, np.ndarray):
            b = as_tensor_operand(b)
        ad, bd = _operands(a, b, true_divide)
        b_is_t = isinstance(b, Tensor)
    try:
        out = fn(ad, bd)
    except ValueError:
        if not b_is_t:
            raise
        raise RuntimeError(broadcast_error(ad.shape, bd.shape)) from None
    if out.__class__ is not _ndarray:
        out = np.asarray(out)  # numpy hands back scalars for 0-d results
    if _state.record and (a.requires_grad or (b_is_t and b.requires_grad)):
        # edge() inlined for the common case (hot path)
        fa = a.grad_fn
        ea = fa if fa is not None and not a._output_nr else edge(a)
        if b_is_t:
            fb = b.grad_fn
            eb = fb if fb is not None and not b._output_nr else edge(b)
        else:
            eb = None
        node = cls((ea, eb))
        r = _new(Tensor)
        r._data, r.grad_fn, r.requires_grad, r._vc = out, node, True, None
        # save each operand only when a needed gradient uses it (as PyTorch does);
        # PyTorch saves `other` before `self` (pack hooks see that order).
        if b_is_t:
            sb = save(b) if save_b == _ALWAYS or (save_b and ea is not None) else None
            shape, dt = out.shape, out.dtype
            if (
                a._data.shape != shape
                or bd.shape != shape
                or a._data.dtype is not dt
                or b._data.dtype is not dt
            ):
                set_broadcast_meta(node, out, a, b)
        else:
            sb = bd if save_b else None  # a scalar is kept only when a formula reads it
            if out.dtype != ad.dtype:
                node._input_meta = ((ad.shape, a._data.dtype), None)
        sa = save(a) if save_a == _ALWAYS or (save_a and eb is not None) else None
        if sa is not None or sb is not None:
            node._saved = (sa, sb)
        return r
    return result(out, None)


def binary_op(name: str, fn, cls, save_a: int, save_b: int, true_divide: bool = False):
    """The op ``name(a, b)``: ``fn`` recording ``cls``, with ``_binary``'s saving rules.

    Operators call it directly (``Tensor.__mul__``): NOTE [Hot path]. The common cases, two
    tensors of one dtype and shape or a float tensor and a Python number, are handled right here;
    everything else (promotion, broadcasting, coercion) by ``_binary``.
    """
    _check_flat(cls, 2)

    def op(a, b):
        if TRACERS and not _depth.n:
            return call_traced_binary(name, op, a, b)
        if a.__class__ is not Tensor and not isinstance(a, Tensor):
            return _binary(a, b, fn, cls, save_a, save_b, true_divide)
        ad = a._data
        bc = b.__class__
        if bc is Tensor or (bc is not float and isinstance(b, Tensor)):
            bd = b._data
            if (
                ad.dtype is not bd.dtype
                or ad.shape != bd.shape
                or (true_divide and ad.dtype.kind != "f")
            ):
                return _binary(a, b, fn, cls, save_a, save_b, true_divide)
            b_grad = b.requires_grad
        elif (bc is float or bc is int) and (
            (dt := ad.dtype) is _F32 or dt is _F64 or dt.kind == "f"
        ):
            bd, b_grad = b, False  # numpy's weak scalars keep the tensor's dtype, as PyTorch
        else:
            return _binary(a, b, fn, cls, save_a, save_b, true_divide)
        out = fn(ad, bd)
        if out.__class__ is not _ndarray:
            out = np.asarray(out)  # numpy hands back scalars for 0-d results
        r = _new(Tensor)
        r._vc = None
        r._data = out
        if not _state.record or not (a.requires_grad or b_grad):
            r.grad_fn, r.requires_grad = None, False
            if _state.inference:
                r._inference = True  # made in inference_mode
            return r
        # NOTE [Hot path]; an input at version 0 is saved as itself (NOTE [Compact saves])
        ea = a.grad_fn
        if ea is None or a._output_nr:
            ea = edge(a)
        if b_grad:
            eb = b.grad_fn
            if eb is None or b._output_nr:
                eb = edge(b)
        else:
            eb = None
        node = _new(cls)  # a FlatNode: edges and saved values in slots (NOTE [Flat nodes])
        node._e0, node._e1 = ea, eb
        node._seq = next(_seq_counter)
        node._x = None
        r.grad_fn, r.requires_grad = node, True
        if save_a or save_b:
            # as _binary: each operand only when a needed gradient reads it, `other` first
            sb = None
            if save_b == _ALWAYS or (save_b and ea is not None):
                sb = (
                    b
                    if bc is float
                    or bc is int
                    or (b._vc is None and not _saved_hooks_stack and not b._inference)
                    else save(b)
                )
            sa = None
            if save_a == _ALWAYS or (save_a and eb is not None):
                sa = a if a._vc is None and not _saved_hooks_stack and not a._inference else save(a)
            if sa is not None or sb is not None:
                node._s0, node._s1 = sa, sb
                node._held = 2
                if TRACERS:
                    return r
                f = _getframe(1)  # note_saver, inlined as in unary_op
                code = f.f_code
                if code is _last_user[0]:
                    node._src_code, node._src_lasti = code, f.f_lasti
                else:
                    note_saver(node)
                return r
        node._held = None
        return r

    return self_traced(name, _own_code(op))


class _Binary(FlatNode):
    __slots__ = ()
    _arity = 2
    _saved_names = ("self", "other")

    def _saved_attr(self, name: str, raw: bool):
        if name == "other" and not raw and self._saved is not None:
            other = super()._saved_attr("other", raw=True)
            if isinstance(other, (int, float, bool)):
                # PyTorch shows a saved Python number as a 0-d tensor: float64, int64 or bool
                return wrap(np.asarray(other))
        return super()._saved_attr(name, raw)


class AddBackward0(_Binary):
    __slots__ = ()
    _saved_names = ()
    alpha = 1  # a node with another alpha is an instance of _with_alpha(cls)

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        return (
            g if needs_self else None,
            (g if self.alpha == 1 else g * self.alpha) if needs_other else None,
        )

    _extra_names = ("alpha",)  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"alpha": self.alpha}


def _with_alpha(cls):
    """The same node class (same name) with an ``alpha`` slot, for add/sub with alpha != 1."""
    sub = _ALPHA_CLASSES.get(cls)
    if sub is None:
        sub = _ALPHA_CLASSES[cls] = type(cls.__name__, (cls,), {"__slots__": ("alpha",)})
    return sub


_ALPHA_CLASSES: dict = {}


def _add_sub(input, other, alpha, np_fn, cls):
    if alpha == 1:
        return _binary(input, other, np_fn, cls, 0, 0)
    r = _binary(input, other, lambda x, y: np_fn(x, y * alpha), _with_alpha(cls), 0, 0)
    if r.grad_fn is not None:
        r.grad_fn.alpha = alpha
    return r


_add = binary_op("add", np.add, AddBackward0, 0, 0)


# the ops that have PyTorch's deprecated ``(Number alpha, Tensor other)`` overload (not their
# aliases: ``subtract(input, 2, other)`` is a TypeError in PyTorch)
ALPHA_FIRST = ("add", "sub")


def deprecated_alpha_first(name: str, alpha, rest: tuple):
    """PyTorch's deprecated ``add(input, alpha, other)`` overload (still used by older scripts,
    e.g. ``p.data.add_(-lr, p.grad.data)``): returns ``(other, alpha)``, with PyTorch's warning
    (the process's first use only, as PyTorch). ``name`` is what was called: ``add``, or the
    in-place ``add_`` (the warning names it)."""
    from autodiag import _warnings

    if len(rest) != 1 or isinstance(alpha, Tensor):
        raise TypeError(
            f"{name}() received an invalid combination of arguments: expected (Tensor other, *, "
            f"Number alpha) or the deprecated (Number alpha, Tensor other), got "
            f"{1 + len(rest)} positional arguments after input"
        )
    # once per process, whichever op it was (TORCH_WARN_ONCE)
    _warnings.warn_once(
        "alpha first",
        f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\n"
        f"Consider using one of the following signatures instead:\n\t{name}(Tensor other, *, "
        "Number alpha = 1)",
    )
    return rest[0], alpha


@register(inplace=True)
def add(input, other, *deprecated, alpha=1):
    if deprecated:
        other, alpha = deprecated_alpha_first("add", other, deprecated)
    if alpha == 1 and input.__class__ is Tensor:
        return _add(input, other)
    if not isinstance(input, Tensor) and alpha == 1:
        input, other = other, input  # 2 + x records AddBackward0(x, None), as PyTorch
    return _add_sub(input, other, alpha, np.add, AddBackward0)


class SubBackward0(AddBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        return (
            g if needs_self else None,
            (-g if self.alpha == 1 else g * -self.alpha) if needs_other else None,
        )


_BOOL_SUB_ERRORS = (
    "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
    "invert a mask, use the `~` or `logical_not()` operator instead.",
    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
    "`logical_xor()` operator instead.",
)


def _check_bool_sub(a, b) -> None:
    """PyTorch refuses ``-`` when either operand is bool (a Python bool counts)."""
    bools = sum(
        isinstance(x, (bool, np.bool_)) or isinstance(x, Tensor) and x._data.dtype == np.bool_
        for x in (a, b)
    )
    if bools:
        raise RuntimeError(_BOOL_SUB_ERRORS[bools - 1])


_sub = binary_op("sub", np.subtract, SubBackward0, 0, 0)


@register(inplace=True)
def sub(input, other, *deprecated, alpha=1):
    if deprecated:
        other, alpha = deprecated_alpha_first("sub", other, deprecated)
    _check_bool_sub(input, other)
    if not isinstance(input, Tensor):
        return rsub(other, input, alpha=alpha)
    if alpha == 1:
        return _sub(input, other)
    return _add_sub(input, other, alpha, np.subtract, SubBackward0)


@register(inplace=True)
def subtract(input, other, *, alpha=1):
    """``sub``'s alias, without its deprecated ``(Number alpha, Tensor other)`` overload."""
    return sub(input, other, alpha=alpha)


def _reversed_subtract(x, y):
    return np.subtract(y, x)


class RsubBackward1(Node):
    __slots__ = ("alpha",)

    def backward(self, xp, g):
        return (-g if self.alpha == 1 else g * -self.alpha,)

    def _saved_extra(self):
        return {"alpha": self.alpha}


class RsubBackward0(AddBackward0):
    """``rsub(input, other)`` with a tensor ``other``: edges in argument order (input, other)."""

    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        return (
            (-g if self.alpha == 1 else g * -self.alpha) if needs_self else None,
            g if needs_other else None,
        )


@register(method=False)
def rsub(input, other, *, alpha=1):
    """``other - alpha * input``: PyTorch's ``RsubBackward0`` (tensor ``other``, edges in
    argument order) or ``RsubBackward1`` (scalar ``other``)."""
    _check_bool_sub(input, other)
    if isinstance(other, Tensor):
        if not isinstance(input, Tensor):
            return sub(other, input, alpha=alpha)
        if alpha == 1:
            return _binary(input, other, _reversed_subtract, RsubBackward0, 0, 0)
        r = _binary(
            input, other, lambda x, y: np.subtract(y, x * alpha), _with_alpha(RsubBackward0), 0, 0
        )
        if r.grad_fn is not None:
            r.grad_fn.alpha = alpha
        return r
    if not isinstance(input, Tensor):
        input = as_tensor_operand(input)
    ad, od = _operands(input, other)
    out = np.subtract(od, ad * alpha if alpha != 1 else ad)
    if _state.record and input.requires_grad:
        node = RsubBackward1((edge(input),))
        node.alpha = alpha
        if out.dtype != ad.dtype:
            node._input_meta = ((ad.shape, input._data.dtype),)
        return result(out, node)
    return result(out, None)


class MulBackward0(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        return (
            g * self.saved_other(xp) if needs_self else None,
            g * self.saved_self(xp) if needs_other else None,
        )


_mul = binary_op("mul", np.multiply, MulBackward0, _FOR_OTHER, _FOR_OTHER)


@register(inplace=True)
def mul(input, other):
    if not isinstance(input, Tensor):
        input, other = other, input
    return _mul(input, other)


multiply = register("multiply", inplace=True)(mul)


class DivBackward0(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        b = self.saved_other(xp)
        ga = g / b if needs_self else None
        # PyTorch's div_tensor_other_backward, as written there: -grad * ((self / other) /
        # other). a / (b * b) differs at 0, inf and overflow, and in the second derivative
        gb = -g * ((self.saved_self(xp) / b) / b) if needs_other else None
        return (ga, gb)


# The quotient needs b (saved for a's gradient too) and a (for b's gradient).
_div = binary_op("div", np.true_divide, DivBackward0, _FOR_OTHER, _ALWAYS, true_divide=True)


@register(inplace=True)
def div(input, other, *, rounding_mode=None):
    if rounding_mode is not None:
        return _div_rounded(input, other, rounding_mode)
    if not isinstance(input, Tensor):
        # scalar / tensor is reciprocal(tensor) * scalar, exactly as PyTorch records it
        return mul(reciprocal(other), input)
    return _div(input, other)


divide = register("divide", inplace=True)(div)
true_divide = register("true_divide")(div)


class DivBackward2(Node):
    __slots__ = ()

    def backward(self, xp, g):
        needs = self.needs_grad  # (self,) or (self, other): a scalar other has no edge
        return (
            xp.zeros_like(g) if needs[0] else None,
            xp.zeros_like(g) if len(needs) > 1 and needs[1] else None,
        )


def _div_rounded(input, other, mode):
    if mode not in ("trunc", "floor"):
        raise RuntimeError(
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{mode}'"
        )
    is_float = any(
        isinstance(t, Tensor) and t._data.dtype.kind == "f" or isinstance(t, float)
        for t in (input, other)
    )
    if isinstance(input, Tensor):
        ad, bd = _operands(input, other, true_divide=is_float)
    else:
        bd, ad = _operands(as_tensor_operand(other), input, true_divide=is_float)
    if not is_float:
        _check_int_divisor(bd)
        q = np.floor_divide(ad, bd)
        if mode == "trunc":  # C division: round toward zero
            q = q + ((np.remainder(ad, bd) != 0) & ((ad < 0) != (bd < 0)))
        return result(np.asarray(q, dtype=np.result_type(ad, bd)), None)
    out = div_floor_array(ad, bd) if mode == "floor" else np.trunc(np.true_divide(ad, bd))
    tensors = [t for t in (input, other) if isinstance(t, Tensor)]
    if _state.record and any(t.requires_grad for t in tensors):
        node = DivBackward2(edges_of(input, other))
        set_broadcast_meta(
            node, out, *(t if isinstance(t, Tensor) else None for t in (input, other))
        )
        return result(out, node)
    return result(out, None)


def _check_int_divisor(b) -> None:
    """Integer division by zero has no IEEE answer: PyTorch raises (numpy would give 0)."""
    if np.any(np.asarray(b) == 0):
        raise RuntimeError("ZeroDivisionError")


def div_floor_array(a, b):
    """PyTorch's floating floor division (``div_floor_floating``): ``(a - fmod(a, b)) / b``,
    corrected toward the floor; unlike ``floor(a / b)`` it agrees with Python's ``//``
    (``1 // 0.1 == 9``), keeps the sign of a zero quotient, and gives ``a / b`` for ``b == 0``."""
    mod = np.fmod(a, b)
    q = (a - mod) / b
    q = np.where((mod != 0) & ((np.asarray(b) < 0) != (mod < 0)), q - 1, q)
    fl = np.floor(q)
    fl = np.where(q - fl > 0.5, fl + 1, fl)
    ratio = np.true_divide(a, b)
    out = np.where(q != 0, fl, np.copysign(np.zeros_like(ratio), ratio))
    return np.asarray(np.where(np.asarray(b) == 0, ratio, out), dtype=ratio.dtype)


def _remainder_array(a, b):
    """PyTorch's remainder: the sign of the divisor, from ``fmod`` so that a zero keeps the
    dividend's sign (remainder(-0.0, 1) is -0.0; numpy's mod gives 0.0)."""
    if np.result_type(a, b).kind in "iu":
        _check_int_divisor(b)
        return np.mod(a, b)
    m = np.fmod(a, b)
    return np.asarray(
        np.where((m != 0) & ((np.asarray(b) < 0) != (m < 0)), m + b, m), dtype=m.dtype
    )


def edges_of(*xs):
    return tuple(edge(x) if isinstance(x, Tensor) else NO_EDGE for x in xs)


def _not_implemented_backward(self, xp, g):
    raise RuntimeError(f"derivative for aten::{self.op} is not implemented")


# PyTorch records ops without a derivative formula as a node named ``NotImplemented`` whose
# backward raises; autodiag does the same rather than inventing a gradient.
NotImplementedBackward = type(
    "NotImplemented",
    (Node,),
    {
        "__slots__": ("op",),
        "backward": _not_implemented_backward,
        "name": lambda self: "torch::autograd::NotImplemented",
    },
)


@register()
def floor_divide(input, other):
    with_grad = _state.record and any(
        isinstance(t, Tensor) and t.requires_grad for t in (input, other)
    )
    grad_mode_state = _state.record
    _state.record = False
    try:
        out = div(input, other, rounding_mode="floor")._data
    finally:
        _state.record = grad_mode_state
    if with_grad:
        node = NotImplementedBackward(
            edges_of(input, other) if isinstance(other, Tensor) else edges_of(input)
        )
        node.op = "floor_divide"
        return result(out, node)
    return result(out, None)


class RemainderBackward0(IdentityBackward):
    __slots__ = ()


class RemainderBackward1(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        gb = None
        if needs_other:
            # div with rounding_mode="floor", as PyTorch: its derivative is zero, where
            # floor(a / b) would send 0 / b (NaN at b = 0) back into the divisor
            gb = -g * xp.div_floor(self.saved_self(xp), self.saved_other(xp))
        return (g if needs_self else None, gb)


@register()
def remainder(input, other):
    a = as_tensor_operand(input)
    ad, bd = _operands(a, other)
    out = broadcasting(_remainder_array, ad, bd)
    b_is_t = isinstance(other, Tensor)
    if _state.record and (a.requires_grad or b_is_t and other.requires_grad):
        if not b_is_t:
            node = RemainderBackward0((edge(a),))
            if out.dtype != ad.dtype:
                node._input_meta = ((ad.shape, a._data.dtype),)
            return result(out, node)
        node = RemainderBackward1((edge(a), edge(other)))
        # only the divisor's gradient, -g * floor(a / b), reads the operands
        node._saved = (save(a), save(other)) if other.requires_grad else (None, None)
        set_broadcast_meta(node, out, a, other)
        return result(out, node)
    return result(out, None)


def _pow_array(a: np.ndarray, e) -> np.ndarray:
    """``a ** e`` for a Python scalar ``e``, as PyTorch's pow kernel computes it.

    NOTE: PyTorch computes x ** -0.5 as rsqrt(x): -inf at -0.0 and NaN at -inf, where C's pow
    gives +inf and +0 (so also the gradient of x ** 0.5, 0.5 * x ** -0.5, there). Its float32
    and float64 kernel (pow_tensor_scalar_optimized_kernel) also multiplies out the exponents
    2, 3 and -2: ``x * x``, ``x * x * x`` and ``1 / (x * x)``, each product rounded, where
    C's pow rounds once (float32 0.10650697 ** -2 is 88.15437 in PyTorch, 88.15438 by powf;
    a cancelling second derivative shows it).
    """
    if a.dtype == _F32 or a.dtype == _F64:
        if e == -0.5:
            return np.reciprocal(np.sqrt(a))
        with np.errstate(all="ignore"):
            if e == 2:
                return a * a
            if e == 3:
                return a * a * a
            if e == -2:
                return np.reciprocal(a * a)
    elif e == -0.5 and a.dtype.kind == "f":
        return np.reciprocal(np.sqrt(a))
    return np.power(a, e)


class PowBackward0(_Unary):
    __slots__ = ("exponent",)

    def backward(self, xp, g):
        p = self.exponent
        if p == 0:
            return (xp.zeros_like(g),)
        x = self.saved_self(xp)
        if xp.arrays:
            return (g * (p * _pow_array(x, p - 1)),)
        # PyTorch's pow_backward: exponent * self.pow(exponent - 1), a C++ Scalar product
        # (MulBackward1, NOTE [Scalar overloads in formulas] in ops/pointwise2.py)
        from autodiag.ops.nn_ops import mul_scalar

        return (g * mul_scalar(x ** (p - 1), p),)

    def _saved_extra(self):
        return {"exponent": self.exponent}


class PowBackward1(Node):
    __slots__ = ()
    _saved_names = ("self", "exponent", "result")

    def backward(self, xp, g):
        needs_self, needs_exponent = self.needs_grad
        x, p = self.saved_self(xp), self.saved_exponent(xp)
        gx = gp = None
        if needs_self:
            gx = xp.mask(p != 0, g * (p * x ** (p - 1)))
        if needs_exponent:
            r = self.saved_result(xp)
            # PyTorch multiplies here (grad * where(...)): an inf grad at 0 ** p gives NaN
            gp = g * xp.mask((x != 0) | ~(p >= 0), r * xp.log(x))
        return (gx, gp)


class PowBackward2(Node):
    __slots__ = ("base",)
    _saved_names = ("result", "exponent")

    def backward(self, xp, g):
        b = self.base
        r = self.saved_result(xp)
        if b == 0:
            # PyTorch's formula (pow_backward_exponent): 0 where p >= 0, else result * log(0).
            # Written the same way so that double backward agrees too (nan, as in PyTorch).
            p = self.saved_exponent(xp)
            return (g * xp.mask(~(p >= 0), r * -math.inf),)
        # NOTE: np.log, not math.log: a negative base gives NaN (as in PyTorch), not ValueError
        return (g * (r * float(np.log(b))),)

    def _saved_extra(self):
        return {"self": self.base}


@register(expr=True, inplace=True)
def pow(input, exponent):  # noqa: A001
    if not isinstance(input, Tensor):
        return _scalar_pow(input, exponent)
    if isinstance(exponent, Tensor):
        ad, bd = _operands(input, exponent)
        with np.errstate(all="ignore"):
            out = broadcasting(np.power, ad, bd)
            if out.dtype.kind == "f":
                # NOTE: numpy's loop takes a broadcast (stride-0) exponent of 0.5 as sqrt, whose
                # sqrt(-inf) is NaN and sqrt(-0.) is -0.; pow, as PyTorch's tensor exponent
                # computes it, gives inf and 0. there
                half = (bd == 0.5) & ((ad == -np.inf) | (ad == 0))
                if half.any():
                    out = np.where(half, np.abs(ad).astype(out.dtype), out)
        if _state.record and (input.requires_grad or exponent.requires_grad):
            node = PowBackward1((edge(input), edge(exponent)))
            r = result(out, node)
            se = save(exponent)  # PyTorch saves the exponent first (pack-hook order)
            node._saved = (save(input), se, save_output(r))
            set_broadcast_meta(node, out, input, exponent)
            return r
        return result(out, None)
    ad, bd = _operands(input, exponent)
    if ad.dtype.kind in "iu" and isinstance(bd, (int, np.integer)) and bd < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    out = _pow_array(ad, bd)
    if _state.record and input.requires_grad:
        node = PowBackward0((edge(input),))
        node.exponent = exponent
        node._saved = (save(input),)
        return result(out, node)
    return result(out, None)


def _scalar_pow(base, exponent: Tensor):
    if not isinstance(exponent, Tensor):
        exponent = as_tensor_operand(exponent)
    ed, bd = _operands(exponent, base)
    if ed.dtype.kind in "iu" and isinstance(bd, (int, np.integer)) and (ed < 0).any():
        # integer powers with negative exponents truncate toward zero, as PyTorch computes
        # them (1 ** -n = 1, (-1) ** -n = +-1, else 0); numpy refuses them
        with np.errstate(all="ignore"):
            f = np.power(float(bd), ed.astype(np.float64))
        out = np.where(ed < 0, np.trunc(f), np.power(bd, np.maximum(ed, 0))).astype(ed.dtype)
    else:
        out = np.power(bd, ed)
    if out.__class__ is not np.ndarray or out.dtype != ed.dtype:
        out = np.asarray(out, dtype=ed.dtype if ed.dtype.kind == "f" else None)
    if _state.record and exponent.requires_grad:
        node = PowBackward2((edge(exponent),))
        node.base = base
        r = result(out, node)
        se = save(exponent)  # PyTorch saves the exponent first (pack-hook order), always
        node._saved = (save_output(r), se)
        return r
    return result(out, None)


def _compared(xp, a, b, g):
    """maximum/minimum's saved operands as arrays, in the dtype PyTorch's backward compares
    them in (its type promotion: a float64 0-d -0.41 next to a float32 -0.41 is a float32 tie,
    where numpy would compare the two in float64); the masks are constants, wrapped as
    tensors for a recorded backward."""
    a, b = _in_compare_dtype(xp, a, b)
    return a, b, (lambda m: m) if xp.arrays else wrap


def _in_compare_dtype(xp, *operands):
    """The operands (None: absent) as arrays in PyTorch's promoted dtype of them."""
    arrays = [t if t is None or xp.arrays else t._data for t in operands]
    kinds = {t.dtype for t in arrays if t is not None}
    if len(kinds) == 1:
        return arrays
    dt = dtypes.result_type([wrap(t) for t in arrays if t is not None]).np
    return [t if t is None else t.astype(dt, copy=False) for t in arrays]


class MaximumBackward0(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        a, b, as_mask = _compared(xp, self.saved_self(xp), self.saved_other(xp), g)
        needs_self, needs_other = self.needs_grad
        # PyTorch: where(a == b, g / 2, g).masked_fill_(a < b, 0); NaN keeps the gradient
        split = xp.where(as_mask(a == b), g / 2, g)
        return (
            xp.mask(as_mask(~(a < b)), split) if needs_self else None,
            xp.mask(as_mask(~(a > b)), split) if needs_other else None,
        )


class MinimumBackward0(_Binary):
    __slots__ = ()

    def backward(self, xp, g):
        a, b, as_mask = _compared(xp, self.saved_self(xp), self.saved_other(xp), g)
        needs_self, needs_other = self.needs_grad
        split = xp.where(as_mask(a == b), g / 2, g)
        return (
            xp.mask(as_mask(~(a > b)), split) if needs_self else None,
            xp.mask(as_mask(~(a < b)), split) if needs_other else None,
        )


def _min_max(input, other, fn, cls):
    a = as_tensor_operand(input)
    b = as_tensor_operand(other)
    ad, bd = _operands(a, b)
    out = tie_takes_second(broadcasting(fn, ad, bd), ad, bd)  # NOTE [maximum ties]
    if _state.record and (a.requires_grad or b.requires_grad):
        node = cls((edge(a), edge(b)))
        node._saved = (save(a), save(b))
        set_broadcast_meta(node, out, a, b)
        return result(out, node)
    return result(out, None)


# NOTE: PyTorch's scalar maximum(a, b) returns a on ties (maximum(-0.0, 0.0) is -0.0); numpy's
# returns its second argument, so the operands go in swapped; its vectorised loop returns b
# (NOTE [maximum ties] in ops/_vector_ties.py).
@register(expr=True)
def maximum(input, other):
    return _min_max(input, other, lambda a, b: np.maximum(b, a), MaximumBackward0)


@register(expr=True)
def minimum(input, other):
    return _min_max(input, other, lambda a, b: np.minimum(b, a), MinimumBackward0)


class WhereBackward0(Node):
    __slots__ = ()
    _saved_names = ("condition",)

    def backward(self, xp, g):
        c = self.saved_condition(xp)
        needs_self, needs_other = self.needs_grad
        return (xp.mask(c, g) if needs_self else None, xp.mask(~c, g) if needs_other else None)


@register(expr=True)
def where(condition, input=None, other=None):
    if input is None and other is None:
        return tuple(result(i, None) for i in np.nonzero(as_tensor_operand(condition)._data))
    cond = as_tensor_operand(condition)
    if cond._data.dtype != np.bool_:
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor "
            f"with dtype {cond.dtype.name.capitalize()}"
        )
    ta, tb = isinstance(input, Tensor), isinstance(other, Tensor)
    if ta and tb:
        a, b = input, other
        ad, bd = _operands(a, b)
    elif ta:
        a, b = input, None
        ad, bd = _operands(a, other)
    elif tb:
        a, b = None, other
        bd, ad = _operands(b, input)
    else:
        a = as_tensor_operand(input)
        b = None
        ad, bd = _operands(a, other)
    out = broadcasting(np.where, cond._data, ad, bd)
    if out.dtype != (ad.dtype if isinstance(ad, np.ndarray) else bd.dtype):
        out = out.astype(ad.dtype if isinstance(ad, np.ndarray) else bd.dtype)
    ra = ta and input.requires_grad
    rb = tb and other.requires_grad
    if _state.record and (ra or rb):
        node = WhereBackward0((edge(a) if ta else NO_EDGE, edge(b) if tb else NO_EDGE))
        node._saved = (save(cond),)
        set_broadcast_meta(node, out, a if ta else None, b if tb else None)
        return result(out, node)
    return result(out, None)


# --- comparisons and logic (never differentiable) -------------------------------------------


def _compare(fn):
    def op(input, other):
        a = as_tensor_operand(input)
        if isinstance(other, Tensor):
            ad, bd = _operands(a, other)
        else:
            ad, bd = a._data, other
        return result(np.asarray(broadcasting(fn, ad, bd)), None)

    return op


eq = register("eq")(_compare(np.equal))
ne = register("ne")(_compare(np.not_equal))
gt = register("gt")(_compare(np.greater))
ge = register("ge")(_compare(np.greater_equal))
lt = register("lt")(_compare(np.less))
le = register("le")(_compare(np.less_equal))
greater, greater_equal, less, less_equal = (
    register("greater")(_compare(np.greater)),
    register("greater_equal")(_compare(np.greater_equal)),
    register("less")(_compare(np.less)),
    register("less_equal")(_compare(np.less_equal)),
)
not_equal = register("not_equal")(_compare(np.not_equal))


def _logical(fn, bitwise):
    def op(input, other):
        a = as_tensor_operand(input)
        b = as_tensor_operand(other)
        if bitwise and (a._data.dtype.kind == "f" or b._data.dtype.kind == "f"):
            raise RuntimeError(f"\"{fn.__name__}_cpu\" not implemented for 'Float'")
        return result(np.asarray(broadcasting(fn, a._data, b._data)), None)

    return op


logical_and = register("logical_and")(_logical(np.logical_and, False))
logical_or = register("logical_or")(_logical(np.logical_or, False))
logical_xor = register("logical_xor")(_logical(np.logical_xor, False))
bitwise_and = register("bitwise_and")(_logical(np.bitwise_and, True))
bitwise_or = register("bitwise_or")(_logical(np.bitwise_or, True))
bitwise_xor = register("bitwise_xor")(_logical(np.bitwise_xor, True))


@register()
def logical_not(input):
    return result(np.logical_not(as_tensor_operand(input)._data), None)


@register()
def bitwise_not(input):
    d = as_tensor_operand(input)._data
    if d.dtype.kind == "f":
        raise RuntimeError("\"bitwise_not_cpu\" not implemented for 'Float'")
    return result(np.invert(d), None)


@register()
def isnan(input):
    return result(np.isnan(as_tensor_operand(input)._data), None)


@register()
def isinf(input):
    return result(np.isinf(as_tensor_operand(input)._data), None)


@register()
def isfinite(input):
    return result(np.isfinite(as_tensor_operand(input)._data), None)


@register()
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    check_broadcast(a._data.shape, b._data.shape)
    return result(np.isclose(a._data, b._data, rtol=rtol, atol=atol, equal_nan=equal_nan), None)


@register()
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    check_broadcast(a._data.shape, b._data.shape)
    return bool(np.allclose(a._data, b._data, rtol=rtol, atol=atol, equal_nan=equal_nan))


@register()
def equal(input, other) -> bool:
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    return a._data.shape == b._data.shape and bool(np.array_equal(a._data, b._data))
