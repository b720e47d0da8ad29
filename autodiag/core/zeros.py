"""PyTorch's efficient zero tensor, as a numpy array kind (NOTE [Efficient zero gradients]).

NOTE [Efficient zero gradients]
PyTorch's SgnBackward0 (abs's and norm's derivative, for a real input) returns
``at::_efficientzerotensor``: a zero tensor whose dispatch key makes a product or quotient with
it zero again (``zero * inf`` and ``zero / 0`` are zero), and whose views (expand, reshape) stay
zero; adding it to a tensor gives that tensor, and any other op sees ordinary zeros (``-zero`` is
``-0.``, ``zero.sum()`` is ``0.``). So in a double backward through ``abs``, the gradient that
reaches the ops before it is zero even where their formulas multiply by inf or divide by 0.

``ZeroArray`` is that kind for the backward engine: an ndarray subclass holding zeros whose
``multiply`` (with any operand) and ``divide`` (as the dividend) return a ``ZeroArray`` of the
broadcast shape and the result dtype, ``add`` of two of them one too; ``zero + x`` is ``x`` and
``zero - x`` is ``-x`` exactly (``-0.`` stays ``-0.``); ``x / zero`` is inf for every ``x`` and
``zero / zero`` NaN, ordinary arrays (PyTorch's ``div_zerotensor``). numpy's views (reshape,
transpose, basic indexing, ``broadcast_to(subok=True)``) keep the subclass; every other ufunc
(``negative``, reductions) and numpy function (``empty_like``, ``ones_like``, ``copy``,
``concatenate``, advanced indexing) computes on the plain zeros and returns an ordinary array,
as PyTorch's fallback materializes, so code that fills an ``empty_like`` of a gradient works.
Where a gradient leaves the engine (``.grad``, ``autograd.grad``'s results, hooks, retained
gradients) ``materialize`` turns it into ordinary zeros, so the user never holds one (PyTorch's
ZeroTensor is immutable; ours would silently stay "zero" after an in-place write), and writing
into one raises.
"""

from __future__ import annotations

import numpy as np

IMMUTABLE = (
    "ZeroTensors are immutable. Please use the materialized zero tensor obtained using "
    ".clone() if you want a mutable tensor."
)


_SPECIAL = (np.multiply, np.divide, np.add, np.subtract)


class ZeroArray(np.ndarray):
    """Zeros that stay zero through products and quotients (PyTorch's ZeroTensor)."""

    __slots__ = ()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        if out is not None and any(o.__class__ is ZeroArray for o in out):
            raise RuntimeError(IMMUTABLE)
        plain = tuple(_plain(a) for a in inputs)
        if out is None and method == "__call__" and ufunc in _SPECIAL:
            # numpy's own result type and shape, without computing inf * 0
            dt = ufunc.resolve_dtypes(tuple(_dtype_of(a) for a in plain) + (None,))[-1]
            shape = np.broadcast_shapes(*(np.shape(a) for a in plain))
            zero = [a.__class__ is ZeroArray for a in inputs]
            if ufunc is np.divide and zero[1]:
                # PyTorch's div_zerotensor: 0 / zero is NaN, x / zero is inf whatever x is
                # (-1, 0 or NaN), both ordinary tensors
                return np.full(shape, np.nan if zero[0] else np.inf, dtype=dt)
            if ufunc is np.multiply or all(zero) or (ufunc is np.divide and zero[0]):
                return np.zeros(shape, dtype=dt).view(ZeroArray)
            if ufunc is not np.divide:
                # zero + x is x, zero - x is -x: exactly (x = -0. stays -0.), as PyTorch's
                other = plain[1] if zero[0] else plain[0]
                if ufunc is np.subtract and zero[0]:
                    other = np.negative(other)
                return np.array(np.broadcast_to(other, shape), dtype=dt)
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        return getattr(ufunc, method)(*plain, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        # numpy's functions (empty_like, copy, concatenate, ...) see ordinary zeros and return
        # ordinary arrays, as PyTorch's ZeroTensor fallback materializes: a fresh array is
        # mutable and need not hold zeros (empty_like then a write, ones_like); a view
        # (broadcast_to, reshape, transpose) stays a ZeroArray. Writing into one raises.
        if func is np.copyto and _first(args, kwargs, "dst").__class__ is ZeroArray:
            raise RuntimeError(IMMUTABLE)
        zeros = [a for a in _arrays(args) if a.__class__ is ZeroArray]
        return _fresh_plain(super().__array_function__(func, types, args, kwargs), zeros)

    def __getitem__(self, key):
        # a copy (advanced indexing) is an ordinary array, a view (basic indexing) stays one
        return _fresh_plain(super().__getitem__(key), (self,))

    def __setitem__(self, key, value):
        raise RuntimeError(IMMUTABLE)


def _first(args, kwargs, name):
    return args[0] if args else kwargs.get(name)


def _arrays(args):
    for a in args:
        if a.__class__ is tuple or a.__class__ is list:  # concatenate, stack
            yield from a
        else:
            yield a


def _fresh_plain(r, zeros):
    if r.__class__ is ZeroArray:
        return r if any(np.may_share_memory(r, z) for z in zeros) else r.view(np.ndarray)
    if r.__class__ is tuple or r.__class__ is list:  # split, broadcast_arrays
        return r.__class__(_fresh_plain(x, zeros) for x in r)
    return r


def _plain(a):
    return a.view(np.ndarray) if a.__class__ is ZeroArray else a


def _dtype_of(a):
    # Python scalars are numpy's weak scalars (NEP 50): the array operand decides the dtype
    t = type(a)
    return t if t is int or t is float or t is complex else np.asarray(a).dtype


def zeros_like(a: np.ndarray) -> ZeroArray:
    """An efficient zero gradient shaped and typed as ``a``."""
    return np.zeros(a.shape, dtype=a.dtype).view(ZeroArray)


# Nodes whose PyTorch formula sees an efficient zero gradient as ordinary zeros (its kernel is
# not one of ZeroTensor's: threshold_backward, sum_to_size, index_put, a copy, an in-place
# op, ...), measured on torch 2.13: for each op, ``op(x).sgn()``'s backward, with a hook on the
# op's node telling whether the gradient it returns is still ``_is_zerotensor()``. Their
# formulas here may be written with products (``mean``: ``expand(grad) / n``), so the engine
# materializes what they receive (``Node.__init_subclass__`` wraps their ``_apply``). The nodes
# PyTorch keeps it through (sum, view ops, exp, mul, div, amax, var, ...) need nothing: their
# formulas are products and views here too.
MATERIALIZED_BY = frozenset(
    {
        "BmmBackward0",
        "CeilBackward0",
        "ClampBackward0",
        "ClampBackward1",
        "ClampMaxBackward0",
        "ClampMaxBackward1",
        "ClampMinBackward0",
        "ClampMinBackward1",
        "CumprodBackward0",
        "CumsumBackward0",
        "EmbeddingBackward0",
        "ExpandBackward0",
        "FlipBackward0",
        "FloorBackward0",
        "GatherBackward0",
        "GeluBackward0",
        "IndexBackward0",
        "IndexSelectBackward0",
        "LeakyReluBackward0",
        "LogSoftmaxBackward0",
        "MaskedFillBackward0",
        "MaxBackward0",
        "MaxBackward1",
        "MaximumBackward0",
        "MeanBackward0",
        "MeanBackward1",
        "MinBackward0",
        "MinBackward1",
        "MinimumBackward0",
        "MmBackward0",
        "MseLossBackward0",
        "NativeLayerNormBackward0",
        "NegBackward0",
        "NllLossBackward0",
        "ReciprocalBackward0",
        "ReluBackward0",
        "RepeatBackward0",
        "RoundBackward0",
        "RoundBackward1",
        "RsubBackward0",
        "RsubBackward1",
        "SelectBackward0",
        "SigmoidBackward0",
        "SignBackward0",
        "SliceBackward0",
        "SoftmaxBackward0",
        "SoftplusBackward0",
        "SplitBackward0",
        "SplitWithSizesBackward0",
        "TanhBackward0",
        "ToCopyBackward0",
        "TruncBackward0",
        "UnbindBackward0",
        "WhereBackward0",
    }
)


def materializing(apply):
    """``Node._apply`` that first turns efficient zero gradients into ordinary zeros."""

    def _apply(self, xp, grads):
        return apply(self, xp, [materialize_grad(g) for g in grads])

    return _apply


def materialize_grad(g):
    """An incoming gradient (array, Tensor or None) with ordinary zeros for efficient ones (a
    Tensor keeps its graph: its array is replaced)."""
    if g is None:
        return g
    d = getattr(g, "_data", g)  # a Tensor (the core does not import the class)
    if d.__class__ is ZeroArray:
        if d is g:
            return materialize(g)
        g._data = materialize(d)
    return g


def materialize(a):
    """``a`` as an ordinary array (new ordinary zeros for a ZeroArray, which may be a view
    shared with other gradients): where a gradient leaves the engine."""
    return np.zeros(a.shape, dtype=a.dtype) if a.__class__ is ZeroArray else a
