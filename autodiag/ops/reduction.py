"""Reductions (sum, mean, prod, max/min, var/std, norm, logsumexp) and softmax.

Reduction gradients "un-reduce": reinsert the reduced dims and broadcast back
(``xp.expand_dims_to``). Ties in max/min/amax/amin share the gradient as PyTorch does: evenly for
full reductions and amax/amin, all to the selected index for ``max(dim)``.
"""

from __future__ import annotations

import builtins
import math
import warnings
from collections import namedtuple

import numpy as np

from autodiag import _warnings, dtypes
from autodiag.core.graph import FlatNode, Node
from autodiag.ops._cascade import cascade_mean, cascade_sum
from autodiag.ops._core import (
    ARRAY,
    _state,
    as_tensor_operand,
    edge,
    normalize_dims,
    register,
    result,
    rounded_once,
    save,
    save_output,
    scan_array,
    set_broadcast_meta,
    wrap,
    wrap_dim,
)
from autodiag.tensor import Tensor


def _reduced_shape_dims(x: Tensor, dim, keepdim: bool):
    if isinstance(dim, (tuple, list)) and not dim:
        dim = None  # NOTE: PyTorch reduces over every dim for dim=() and dim=[]
    dims = normalize_dims(dim, x._data.ndim)
    return dims, (() if keepdim else dims)


def check_reducible(name: str, d: np.ndarray, dims, full: bool, exc=RuntimeError) -> None:
    """Reductions without an identity (max, amin, argmax, ...) refuse to reduce over nothing,
    with PyTorch's errors: ``exc`` for a full reduction of an empty tensor, IndexError naming
    the first empty dim otherwise (numpy would raise a ValueError of its own)."""
    if full:
        if d.size == 0:
            tail = (
                "" if exc is IndexError else (" Specify the reduction dim with the 'dim' argument.")
            )
            raise exc(
                f"{name}(): Expected reduction dim to be specified for input.numel() == 0.{tail}"
            )
        return
    for k in sorted(dims, reverse=True):  # PyTorch names the last empty one
        if d.shape[k] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {k} to have non-zero size.")


class _Reduce(FlatNode):  # NOTE [Flat nodes]
    """A reduction over ``dims``; ``unreduce`` = dims to reinsert (empty with keepdim)."""

    __slots__ = ("dims", "unreduce", "in_shape")
    _saved_names = ("self",)

    def expand(self, xp, g):
        return xp.expand_dims_to(g, self.unreduce, self.in_shape)

    def unsqueeze(self, xp, g):
        """``g`` with the reduced dims put back as size 1 (PyTorch's unsqueeze_multiple): the
        formula's broadcast then sums the double backward's terms in PyTorch's order."""
        if not self.unreduce:
            return g
        return xp.reshape(g, tuple(1 if i in self.dims else s for i, s in enumerate(self.in_shape)))

    _extra_names = ("dim", "self_sym_sizes")  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"dim": self.dims, "self_sym_sizes": self.in_shape}


def c_order(a: np.ndarray) -> np.ndarray:
    """PyTorch allocates the result of a reduction (and of softmax, cumsum) contiguous whatever
    the input's layout; numpy's follows the input's memory order (a permuted input's sum is not
    contiguous, and ``.contiguous()`` or ``.view`` after it would differ)."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _record_reduce(cls, x, out, dims, unreduce, saves=()):
    node = cls((edge(x),))
    node.dims, node.unreduce, node.in_shape = dims, unreduce, x._data.shape
    r = result(out, node)
    if saves:
        node._saved = tuple(save_output(r) if s == "result" else save(x) for s in saves)
    return r


class SumBackward0(_Reduce):
    __slots__ = ()
    _saved_names = ()

    def backward(self, xp, g):
        return (self.expand(xp, g),)


class SumBackward1(SumBackward0):
    __slots__ = ()


def _sum_dtype(d: np.ndarray):
    return np.int64 if d.dtype.kind in "biu" else None


@register(expr=True)
def sum(input, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A001
    x = as_tensor_operand(input)
    d = x._data
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    npdt = dtypes.to_np(dtype) if dtype is not None else _sum_dtype(d)
    if npdt is not None and npdt != d.dtype:
        d = d.astype(npdt)
    # PyTorch's order of additions (NOTE [Cascade sums])
    out = c_order(cascade_sum(d, dims, keepdim))
    if _state.record and x.requires_grad:
        return _record_reduce(SumBackward0 if dim is None else SumBackward1, x, out, dims, unreduce)
    return result(out, None)


def sum_to(g: Tensor, shape: tuple) -> Tensor:
    """Differentiable reduction of ``g`` to ``shape`` (the adjoint of broadcasting)."""
    shape = tuple(shape)
    if tuple(g._data.shape) == shape:
        return g
    if not shape:
        return sum(g)  # PyTorch's sum_to: SumBackward0, not a view of a keepdim sum
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and g._data.shape[i + lead] != 1
    )
    if dims:
        g = sum(g, dims, keepdim=True)
    return g.reshape(shape) if tuple(g._data.shape) != shape else g


class MeanBackward0(_Reduce):
    __slots__ = ("count",)
    _saved_names = ()

    def backward(self, xp, g):
        return (self.expand(xp, g / self.count),)


class MeanBackward1(MeanBackward0):
    __slots__ = ()


@register(expr=True)
def mean(input, dim=None, keepdim: bool = False, *, dtype=None):
    x = as_tensor_operand(input)
    d = x._data
    if d.dtype.kind != "f" and dtype is None:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a "
            f"floating point or complex dtype. Got: {x.dtype.scalar_name}"
        )
    if dtype is not None:
        d = d.astype(dtypes.to_np(dtype))
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    out = c_order(cascade_mean(d, dims, keepdim))  # sum / count, the sum in PyTorch's order
    if _state.record and x.requires_grad:
        r = _record_reduce(MeanBackward0 if dim is None else MeanBackward1, x, out, dims, unreduce)
        r.grad_fn.count = builtins.max(int(np.prod([d.shape[i] for i in dims])), 1) if d.ndim else 1
        return r
    return result(out, None)


class ProdBackward0(_Reduce):
    """PyTorch's prod_backward, branch for branch: ``grad * (result / self)`` without zeros;
    with zeros the exclusive products of ``prod_safe_zeros_backward`` (cumprods from both
    ends), whose derivative is then cumprod's (NOTE [Products with zeros])."""

    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        r = self.saved_result(xp)  # read (version-checked) as PyTorch unpacks it, used or not
        if x.ndim == 0:
            return (g,)
        g, r = self.expand(xp, g), self.expand(xp, r)
        zeros = int(np.count_nonzero((x if xp.arrays else x._data) == 0))
        if zeros == 0:
            return (g * (r / x),)
        if len(self.dims) == 1 and self.__class__ is ProdBackward1:
            return (_prod_safe_zeros(xp, g, x, self.dims[0]),)
        if zeros > 1 and xp.arrays:
            return (xp.zeros_like(x),)  # no grad mode: PyTorch's zeros_like(input)
        flat = _prod_safe_zeros(xp, g.reshape(-1), x.reshape(-1), 0)
        return (flat.reshape(x.shape),)


# NOTE [Products with zeros]
# d prod(x) / d x_k is the product of the others, and result / x_k is 0/0 at a zero.
# PyTorch's prod_safe_zeros_backward writes it as ``grad * (exclusive_normal *
# exclusive_reverse)``: the cumprod of [1, x_0, .., x_{n-2}] times the reversed cumprod of
# [x_1, .., x_{n-1}, 1]. We build it from the same ops (cat, cumprod, flip) so that under
# create_graph its derivative is the one PyTorch's engine computes, through cumprod's backward,
# with the same inf * 0 = nan where an input is inf or the products overflow.


def _prod_safe_zeros(xp, g, x, dim: int):
    """PyTorch's prod_safe_zeros_backward(grad, input, dim); ``g`` has ``x``'s shape."""
    n = x.shape[dim]
    if math.prod(x.shape) == 0 or n == 1:
        return g
    if xp.arrays:
        ones = np.ones(x.shape[:dim] + (1,) + x.shape[dim + 1 :], dtype=g.dtype)
        cat = np.concatenate
        normal = ARRAY.cumprod(cat([ones, x[(slice(None),) * dim + (slice(0, n - 1),)]], dim), dim)
        rest = np.flip(x[(slice(None),) * dim + (slice(1, n),)], dim)
        reverse = np.flip(ARRAY.cumprod(cat([ones, rest], dim), dim), dim)
        return g * (normal * reverse)
    from autodiag.ops.shape import cat

    ones = wrap(
        np.ones(tuple(x.shape[:dim]) + (1,) + tuple(x.shape[dim + 1 :]), dtype=g._data.dtype)
    )
    normal = cumprod(cat([ones, x.narrow(dim, 0, n - 1)], dim), dim)
    rest = x.narrow(dim, 1, n - 1).flip(dim)
    reverse = cumprod(cat([ones, rest], dim), dim).flip(dim)
    return g * (normal * reverse)


class ProdBackward1(ProdBackward0):
    __slots__ = ()


@register(expr=True)
def prod(input, dim=None, keepdim: bool = False, *, dtype=None):
    x = as_tensor_operand(input)
    d = x._data
    if dim is not None and not isinstance(dim, (int, np.integer)):
        raise TypeError("prod(): argument 'dim' must be int")
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    npdt = dtypes.to_np(dtype) if dtype is not None else _sum_dtype(d)
    out = c_order(np.asarray(d.prod(axis=dims, keepdims=keepdim, dtype=npdt)))
    if _state.record and x.requires_grad:
        return _record_reduce(
            ProdBackward0 if dim is None else ProdBackward1,
            x,
            out,
            dims,
            unreduce,
            ("self", "result"),
        )
    return result(out, None)


# --- cumsum / cumprod -------------------------------------------------------------------------


def _reversed_cumsum(xp, w, dim: int):
    """``w.flip(dim).cumsum(dim).flip(dim)``: each element plus all after it along ``dim``."""
    return xp.flip(xp.cumsum(xp.flip(w, (dim,)), dim), (dim,))


class CumsumBackward0(Node):
    __slots__ = ("dim",)

    def backward(self, xp, g):
        # PyTorch's cumsum_backward
        if math.prod(g.shape) <= 1 or g.shape[self.dim] == 1:
            return (g,)
        return (_reversed_cumsum(xp, g, self.dim),)

    def _saved_extra(self):
        return {"dim": self.dim}


class CumprodBackward0(Node):
    __slots__ = ("dim",)
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # PyTorch's cumprod_backward: without zeros, reversed_cumsum(result * grad) / self;
        # with zeros an O(n) select formula without grad mode, and with it (create_graph) the
        # O(n^2) sum of omitted products, whose own derivative is cumprod's second derivative
        x, out = self.saved_self(xp), self.saved_result(xp)
        dim = self.dim
        if math.prod(x.shape) <= 1 or x.shape[dim] == 1:
            return (g,)
        w = out * g
        if not bool(((x if xp.arrays else x._data) == 0).any()):
            return (_reversed_cumsum(xp, w, dim) / x,)
        if xp.arrays:
            return (_cumprod_backward_zeros(g, x, out, w, dim),)
        return (_cumprod_backward_omitted(g, x, dim),)

    def _saved_extra(self):
        return {"dim": self.dim}


def _cumprod_backward_zeros(g, x, out, w, dim: int) -> np.ndarray:
    """cumprod's gradient where ``x`` has zeros, without grad mode (PyTorch's masks): before
    the first zero z1 of a slice, reversed_cumsum(result * grad) / x; at z1, prod(x[:z1]) times
    the sum of grad * cumprod(x) over (z1, z2); 0 after it."""
    zero = g.dtype.type(0)
    grad_input = np.zeros(x.shape, dtype=g.dtype)
    count = np.cumsum(x == 0, axis=dim)
    mask = count == 0
    with np.errstate(all="ignore"):
        before = _reversed_cumsum(ARRAY, np.where(mask, w, zero), dim) / x
    grad_input[mask] = before[mask]
    mask = count == 1
    first = np.argmax(mask, axis=dim, keepdims=True)  # 0 where a slice has no zero
    first_mask = np.zeros_like(mask)
    np.put_along_axis(first_mask, first, True, axis=dim)
    first_mask &= mask
    mask &= ~first_mask
    with np.errstate(all="ignore"):
        between = (
            ARRAY.cumprod(np.where(mask, x, x.dtype.type(1)), dim) * np.where(count != 1, zero, g)
        ).sum(axis=dim, keepdims=True)
        upto = np.take_along_axis(out, np.maximum(first - 1, 0), axis=dim)
        at_zero = between * np.where(first == 0, upto.dtype.type(1), upto)
    grad_input[first_mask] = np.broadcast_to(at_zero, x.shape)[first_mask]
    return grad_input


def _cumprod_backward_omitted(g: Tensor, x: Tensor, dim: int) -> Tensor:
    """cumprod's gradient under grad mode, zeros or not: for each k, the sum over j >= k of
    grad[j] * prod(x[:k]) * prod(x[k+1:j+1]) (PyTorch's omitted products, recorded ops)."""
    from autodiag.ops.shape import cat, stack

    n = x.shape[dim]
    ones = wrap(
        np.ones(tuple(x.shape[:dim]) + (1,) + tuple(x.shape[dim + 1 :]), dtype=g._data.dtype)
    )
    cols = []
    for k in range(n):
        if k == 0:
            omitted = cat([ones, cumprod(x.narrow(dim, 1, n - 1), dim)], dim)
        elif k == n - 1:
            omitted = prod(x.narrow(dim, 0, k), dim, keepdim=True)
        else:
            until = prod(x.narrow(dim, 0, k), dim, keepdim=True)
            after = cumprod(x.narrow(dim, k + 1, n - k - 1), dim)
            omitted = cat([until, until.expand_as(after) * after], dim)
        cols.append(sum(g.narrow(dim, k, n - k) * omitted, dim))
    return stack(cols, dim)


def _scan(name: str, fn, cls, input, dim, dtype):
    x = as_tensor_operand(input)
    d = x._data
    dim = wrap_dim(dim, d.ndim)
    if dtype is not None:
        d = d.astype(dtypes.to_np(dtype))  # cast inside the op, as PyTorch does (no ToCopy)
    elif d.dtype.kind in "biu":
        d = d.astype(np.int64)  # PyTorch accumulates integers and bools in int64
    out = c_order(scan_array(fn, d, dim)) if d.ndim else d.copy()
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.dim = dim
        set_broadcast_meta(node, out, x)  # the gradient goes back in the input's dtype
        r = result(out, node)
        if cls is CumprodBackward0:
            node._saved = (save(x), save_output(r))
        return r
    return result(out, None)


@register()
def cumsum(input, dim: int, *, dtype=None):
    """Cumulative sums along ``dim``.

    >>> import autodiag as ad
    >>> ad.tensor([1., 2., 3.]).cumsum(0)
    tensor([1., 3., 6.])
    """
    return _scan("cumsum", np.cumsum, CumsumBackward0, input, dim, dtype)


@register()
def cumprod(input, dim: int, *, dtype=None):
    """Cumulative products along ``dim``.

    >>> import autodiag as ad
    >>> ad.tensor([1., 2., 3.]).cumprod(0)
    tensor([1., 2., 6.])
    """
    return _scan("cumprod", np.cumprod, CumprodBackward0, input, dim, dtype)


# --- max / min --------------------------------------------------------------------------------

_MaxMin = namedtuple("return_types", ["values", "indices"])


class MaxBackward1(_Reduce):
    """Full max/min: the gradient is shared evenly among tied maxima."""

    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # PyTorch's evenly_distribute_backward: a NaN maximum selects the NaNs; the gradient is
        # a select (NOTE [Masked gradients]), so g = inf does not leak NaN into the others
        x, r = self.saved_self(xp), self.saved_result(xp)
        keep = xp.isnan(x) if np.isnan(r if xp.arrays else r._data) else x == r
        count = int(keep.sum()) if xp.arrays else keep.sum()
        return (xp.mask(keep, g / count),)


class MinBackward1(MaxBackward1):
    __slots__ = ()


class MaxBackward0(Node):
    """max/min along a dim: the gradient goes to the selected index."""

    __slots__ = ("dim", "keepdim", "in_shape")
    _saved_names = ("indices",)

    def backward(self, xp, g):
        idx = self.saved_indices(xp)
        from autodiag.ops.shape import scatter_into_zeros

        if not self.keepdim:
            g = (
                xp.expand_dims_to(g, (self.dim,), g.shape[: self.dim] + (1,) + g.shape[self.dim :])
                if xp.arrays
                else g.unsqueeze(self.dim)
            )
            idx = np.expand_dims(idx, self.dim) if xp.arrays else idx.unsqueeze(self.dim)
        return (scatter_into_zeros(xp, g, self.dim, idx, self.in_shape),)


class MinBackward0(MaxBackward0):
    __slots__ = ()


def _max_min(input, dim, keepdim, other, np_red, np_arg, full_cls, dim_cls, pair_fn, name):
    x = as_tensor_operand(input)
    if isinstance(dim, Tensor) and other is None:
        return pair_fn(x, dim)
    if other is not None:
        return pair_fn(x, other)
    d = x._data
    if dim is None:
        if d.size == 0:
            raise RuntimeError(
                f"{name}(): Expected reduction dim to be specified for "
                f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                f"argument."
            )
        out = np.asarray(np_red(d))
        if _state.record and x.requires_grad:
            return _record_reduce(
                full_cls, x, out, tuple(range(d.ndim)), tuple(range(d.ndim)), ("self", "result")
            )
        return result(out, None)
    dim = wrap_dim(dim, d.ndim)
    if d.ndim:
        check_reducible(name, d, (dim,), False)
    idx = np.asarray(np_arg(d, axis=dim)) if d.ndim else np.zeros((), dtype=np.int64)
    idx = idx.astype(np.int64)
    vals = np.take_along_axis(d, np.expand_dims(idx, dim), dim) if d.ndim else d.copy()
    if not keepdim and d.ndim:
        vals = vals.squeeze(dim)
    elif keepdim and d.ndim:
        idx = np.expand_dims(idx, dim)
    indices = wrap(idx)
    if _state.record and x.requires_grad:
        node = dim_cls((edge(x),))
        node.dim, node.keepdim, node.in_shape = dim, keepdim, d.shape
        node._saved = (save(indices),)
        return _MaxMin(result(vals, node), indices)
    return _MaxMin(result(vals, None), indices)


@register(expr=True)
def max(input, dim=None, keepdim: bool = False, *, other=None):  # noqa: A001
    from autodiag.ops.pointwise import maximum

    return _max_min(
        input, dim, keepdim, other, np.max, np.argmax, MaxBackward1, MaxBackward0, maximum, "max"
    )


@register(expr=True)
def min(input, dim=None, keepdim: bool = False, *, other=None):  # noqa: A001
    from autodiag.ops.pointwise import minimum

    return _max_min(
        input, dim, keepdim, other, np.min, np.argmin, MinBackward1, MinBackward0, minimum, "min"
    )


class AmaxBackward0(_Reduce):
    """amax/amin: the gradient is shared evenly among ties within each reduced slice."""

    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        r = self.expand(xp, self.saved_result(xp))
        mask = x == r
        # the count is summed with keepdim, so it broadcasts back without reinserting dims
        count = xp.broadcast_to(xp.sum(mask * 1.0, self.dims, keepdim=True), self.in_shape)
        return (self.expand(xp, g) * mask / count,)


class AminBackward0(AmaxBackward0):
    __slots__ = ()


def _amax_amin(input, dim, keepdim, np_red, cls, name):
    x = as_tensor_operand(input)
    dims, unreduce = _reduced_shape_dims(x, () if dim == () else dim, keepdim)
    if dim == ():
        dims, unreduce = _reduced_shape_dims(x, None, keepdim)
    check_reducible(name, x._data, dims, dim == () or dim is None)
    out = c_order(np.asarray(np_red(x._data, axis=dims, keepdims=keepdim)))
    if _state.record and x.requires_grad:
        return _record_reduce(cls, x, out, dims, unreduce, ("self", "result"))
    return result(out, None)


@register(expr=True)
def amax(input, dim=(), keepdim: bool = False):
    return _amax_amin(input, dim, keepdim, np.max, AmaxBackward0, "amax")


@register(expr=True)
def amin(input, dim=(), keepdim: bool = False):
    return _amax_amin(input, dim, keepdim, np.min, AminBackward0, "amin")


@register()
def argmax(input, dim=None, keepdim: bool = False):
    d = as_tensor_operand(input)._data
    if dim is None:
        check_reducible("argmax", d, (), True, IndexError)
        out = np.asarray(np.argmax(d))
        return result(out.reshape((1,) * d.ndim) if keepdim else out, None)
    dim = wrap_dim(dim, d.ndim)
    if d.ndim:
        check_reducible("argmax", d, (dim,), False)
    return result(np.asarray(np.argmax(d, axis=dim if d.ndim else None, keepdims=keepdim)), None)


@register()
def argmin(input, dim=None, keepdim: bool = False):
    d = as_tensor_operand(input)._data
    if dim is None:
        check_reducible("argmin", d, (), True, IndexError)
        out = np.asarray(np.argmin(d))
        return result(out.reshape((1,) * d.ndim) if keepdim else out, None)
    dim = wrap_dim(dim, d.ndim)
    if d.ndim:
        check_reducible("argmin", d, (dim,), False)
    return result(np.asarray(np.argmin(d, axis=dim if d.ndim else None, keepdims=keepdim)), None)


def _any_all(input, dim, keepdim: bool, np_red):
    d = as_tensor_operand(input)._data
    if dim is None:
        dims = None
    elif isinstance(dim, (tuple, list)):
        dims = tuple(wrap_dim(k, d.ndim) for k in dim)
    else:
        dims = wrap_dim(dim, d.ndim)
    out = np.asarray(np_red(d, axis=dims, keepdims=keepdim and dims is not None))
    if keepdim and dims is None:
        out = out.reshape((1,) * d.ndim)
    # NOTE: PyTorch keeps uint8 for uint8 inputs (a legacy of byte masks); bool otherwise
    return result(c_order(out.astype(np.uint8 if d.dtype == np.uint8 else np.bool_)), None)


@register("any")
def any_(input, dim=None, keepdim: bool = False):
    """True where any element (along ``dim``) is nonzero; no gradient."""
    return _any_all(input, dim, keepdim, np.any)


@register("all")
def all_(input, dim=None, keepdim: bool = False):
    """True where every element (along ``dim``) is nonzero; no gradient."""
    return _any_all(input, dim, keepdim, np.all)


# --- var / std / norm / logsumexp -------------------------------------------------------------


def _correction(unbiased, correction) -> float:
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


class VarBackward0(_Reduce):
    __slots__ = ("correction", "n", "whole")

    def backward(self, xp, g):
        return (self.var_backward(xp, g),)

    def var_backward(self, xp, g):
        """PyTorch's var_backward: ``2 / (n - correction) * grad * (x - mean)``. A reduction of
        the whole tensor with no degrees of freedom left gives inf (NaN where x == mean) rather
        than a signed or NaN factor; with ``dim`` the factor is taken as it comes (negative when
        correction > n), exactly as PyTorch does."""
        x = self.saved_self(xp)
        if xp.arrays and x.size == 0:
            return np.zeros_like(x)  # nothing to differentiate (numpy's mean of it would warn)
        if self.whole:
            mu = x.mean() if xp.arrays else x.mean()
            dof = self.n - self.correction
            if dof <= 0:
                # in x's dtype: Python scalars in where() would be the default dtype, and a
                # float32 factor would win over a 0-d float64 grad (PyTorch's promotion)
                xd, md = (x, mu) if xp.arrays else (x._data, mu._data)
                factor = np.where(xd == md, math.nan, math.inf).astype(xd.dtype)
                return g * (factor if xp.arrays else wrap(factor))
        else:
            mu = (
                x.mean(axis=self.dims, keepdims=True)
                if xp.arrays
                else x.mean(self.dims, keepdim=True)
            )
            dof = self.n - self.correction
            # unsqueezed, not expanded: ``factor * g`` is summed before it is scaled in the
            # double backward (PyTorch's order: inf * (sum of terms), not a sum of infinities)
            g = self.unsqueeze(xp, g)
        factor = 2.0 / dof if dof else math.copysign(math.inf, dof)
        return factor * g * (x - mu)

    def _saved_extra(self):
        return {"dim": self.dims, "correction": self.correction}


class StdBackward0(VarBackward0):
    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # PyTorch's std_backward: var_backward of grad / (2 * std), zeroed where std == 0
        r = self.saved_result(xp)
        return (self.var_backward(xp, xp.mask(r != 0, g / (2 * r))),)


def _var_std(input, dim, unbiased, keepdim, correction, cls, sqrt: bool):
    x = as_tensor_operand(input)
    if isinstance(dim, bool):  # var(True) is var(unbiased=True)
        unbiased, dim = dim, None
    c = _correction(unbiased, correction)
    d = x._data
    if d.dtype.kind not in "fc":
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    n = int(np.prod([d.shape[i] for i in dims])) if d.ndim else 1
    # NOTE: PyTorch counts n as input numel / output numel: 0 for an empty input, whatever dims
    if (n if d.size else 0) - c <= 0:
        name = "std" if sqrt else "var"
        _warnings.warn(
            f"{name}(): degrees of freedom is <= 0. Correction should be strictly less "
            f"than the reduction factor (input numel divided by output numel).",
            UserWarning,
        )
    # NOTE: PyTorch accumulates float32 in float64 here (a float32 sum of squares overflows past
    # ~1.8e19), and divides by max(0, n - correction): inf, or NaN for a zero sum.
    acc = d.astype(np.float64) if d.dtype.kind == "f" and d.dtype.itemsize < 8 else d
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty slice is NaN
        if d.size and d.size == n and d.dtype == np.float32:
            # NOTE: one output (PyTorch's std_var_all_cpu): the mean is self.mean() in the
            # input's dtype (a float32 sum can overflow: std of [-3e38, -3e38, 1] is inf), then
            # the squares are summed in double around it. Not for float64: its squares are not
            # summed in PyTorch's order either, so the last digit differs anyway, and PyTorch's
            # mean costs 1.6-2.6x numpy's on small inputs (review, session 14)
            m = acc.dtype.type(cascade_mean(d))
        else:
            m = acc.mean(axis=dims, keepdims=True)
        ss = np.square(acc - m).sum(axis=dims, keepdims=keepdim)
    with np.errstate(all="ignore"):
        out = np.true_divide(ss, builtins.max(0, n - c))
    if sqrt:
        out = np.sqrt(out)
    out = c_order(np.asarray(out, dtype=d.dtype))
    if _state.record and x.requires_grad:
        r = _record_reduce(cls, x, out, dims, unreduce, ("self", "result") if sqrt else ("self",))
        r.grad_fn.correction, r.grad_fn.whole = c, dim is None or d.ndim == 0
        # NOTE: with dim=() PyTorch reduces everything, but its var_backward counts the elements
        # of the listed dims: none, so n = 1 and 2 / (1 - correction). Kept, to give its numbers.
        r.grad_fn.n = 1 if isinstance(dim, (tuple, list)) and not dim else n
        return r
    return result(out, None)


@register(expr=True)
def var(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return _var_std(input, dim, unbiased, keepdim, correction, VarBackward0, False)


@register(expr=True)
def std(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return _var_std(input, dim, unbiased, keepdim, correction, StdBackward0, True)


class LinalgVectorNormBackward0(_Reduce):
    __slots__ = ("ord",)
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # PyTorch's norm_backward, form by form: selects where it masks (masked_fill), products
        # where it multiplies (NOTE [Masked gradients])
        p = self.ord
        if p == 0:
            return (None,)  # PyTorch's gradient is undefined: none reaches the input
        x = self.saved_self(xp)
        r = self.expand(xp, self.saved_result(xp))
        g = self.expand(xp, g)
        if p == 1:
            return (xp.sgn(x) * g,)
        if p == 2:
            return (g * xp.mask(r != 0, x / r),)
        if p in (math.inf, -math.inf):
            # the entries at the max (min) |x|, NaN ones when the norm is NaN, share the grad
            at = (xp.abs(x) == r) | (xp.isnan(x) & xp.isnan(r))
            at = at.astype(x.dtype) if xp.arrays else at.to(x.dtype)
            count = xp.sum(at, self.dims, keepdim=True)
            return (xp.sgn(x) * ((g / count) * at),)  # PyTorch's order of products
        if p < 1:
            scaled = xp.sgn(x) * xp.mask(x != 0, xp.abs(x) ** (p - 1))
            return (scaled * g * r ** (1 - p),)
        scaled = xp.sgn(x) * xp.abs(x) ** (p - 1) if p < 2 else x * xp.abs(x) ** (p - 2)
        return (scaled * xp.mask(r != 0, g / r ** (p - 1)),)

    def _saved_extra(self):
        return {"ord": self.ord, "dim": self.dims}


@register(expr=True)
def norm(input, p="fro", dim=None, keepdim: bool = False, dtype=None):
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise NotImplementedError(f"autodiag: norm with p='{p}' is not supported")
    return vector_norm(input, p, dim, keepdim)


def vector_norm(x, ord=2, dim=None, keepdim: bool = False):  # noqa: A002
    x = as_tensor_operand(x)
    d = x._data
    if d.dtype.kind != "f":
        raise RuntimeError(
            f"linalg.vector_norm: Expected a floating point or complex tensor as "
            f"input. Got {x.dtype.scalar_name}"
        )
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    if ord in (float("inf"), float("-inf")) and d.size == 0:
        # NOTE: max/min have no identity; PyTorch's message (its missing space included)
        p = "inf" if ord > 0 else "-inf"
        if dim is None:
            raise RuntimeError(
                f"linalg.vector_norm cannot compute the {p} norm on an empty "
                f"tensor because the operation does not have an identity"
            )
        for k in dim if isinstance(dim, (tuple, list)) else (dim,):  # in the order given
            k = wrap_dim(k, d.ndim)
            if d.shape[k] == 0:
                raise RuntimeError(
                    f"linalg.vector_norm cannot compute the {p} norm on the "
                    f"dimension {k}because this dimension is empty and the "
                    f"operation does not have an identity"
                )
    a = np.abs(d)
    if ord != 0 and builtins.all(d.shape[i] == 1 for i in dims):
        # NOTE: PyTorch's norm of a single element is its absolute value, with no power taken
        # (float32 norm(p=3) of 3e19 is 3e19, not inf); larger reductions overflow as PyTorch's
        out = a if keepdim else a.reshape(tuple(s for i, s in enumerate(d.shape) if i not in dims))
    elif ord == float("inf"):
        out = a.max(axis=dims, keepdims=keepdim)
    elif ord == float("-inf"):
        out = a.min(axis=dims, keepdims=keepdim)
    elif ord == 0:
        out = (a != 0).sum(axis=dims, keepdims=keepdim).astype(d.dtype)
    elif ord == 2:
        out = np.sqrt((d * d).sum(axis=dims, keepdims=keepdim))
    else:
        out = (a**ord).sum(axis=dims, keepdims=keepdim) ** (1.0 / ord)
    out = c_order(np.asarray(out, dtype=d.dtype))
    if _state.record and x.requires_grad:
        r = _record_reduce(LinalgVectorNormBackward0, x, out, dims, unreduce, ("self", "result"))
        r.grad_fn.ord = ord
        return r
    return result(out, None)


class LogsumexpBackward0(_Reduce):
    __slots__ = ()
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        x = self.saved_self(xp)
        r = self.expand(xp, self.saved_result(xp))
        return (self.expand(xp, g) * xp.exp(x - r),)


@register(expr=True)
def logsumexp(input, dim, keepdim: bool = False):
    x = as_tensor_operand(input)
    d = x._data if x._data.dtype.kind == "f" else x._data.astype(dtypes.get_default_dtype().np)
    if isinstance(dim, (tuple, list)) and not dim:
        # PyTorch 2.13 fails here too (with "output with shape [] doesn't match the broadcast
        # shape [1]"); reducing over everything, as other reductions do, would be a guess
        raise RuntimeError("logsumexp(): dim=() is not supported; pass the dims to reduce")
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    m = d.max(axis=dims, keepdims=True) if d.size else np.zeros((1,) * d.ndim, d.dtype)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.exp(d - m).sum(axis=dims, keepdims=True)) + m
    if not keepdim:
        out = out.squeeze(dims) if dims else out
    out = c_order(np.asarray(out, dtype=d.dtype))
    if _state.record and x.requires_grad:
        return _record_reduce(LogsumexpBackward0, x, out, dims, unreduce, ("self", "result"))
    return result(out, None)


# --- softmax -------------------------------------------------------------------------------


class SoftmaxBackward0(Node):
    __slots__ = ("dim",)
    _saved_names = ("result",)

    def backward(self, xp, g):
        r = self.saved_result(xp)
        return (_softmax_backward_data(xp, g, r, self.dim, SoftmaxBackwardDataBackward0),)

    def _saved_extra(self):
        return {"dim": self.dim}


class LogSoftmaxBackward0(SoftmaxBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        # NOTE: recorded from sub/mul/sum nodes, not as LogSoftmaxBackwardDataBackward0: that
        # node's derivative (log_softmax_double_backward) did not round as PyTorch's in float32
        # (7 fuzz classes of last-bit second derivatives in 6,000 programs, from none)
        r = self.saved_result(xp)
        s = g.sum(axis=self.dim, keepdims=True) if xp.arrays else g.sum(self.dim, keepdim=True)
        return (g - xp.exp(r) * s,)


# NOTE [Recorded softmax backward]
# PyTorch's softmax gradient is an op of its own, ``_softmax_backward_data(grad_output, output,
# dim)``, recorded under create_graph as SoftmaxBackwardDataBackward0 with edges (grad_output,
# output), whose derivative along the output is FunctionsManual.cpp's softmax_double_backward.
# Recorded from mul/sub/sum nodes instead, the same derivative comes out in other terms: other
# rounding, and a product that overflows in PyTorch's order (grad_output * grad, -inf) stays
# finite in ours, where PyTorch's gradient is NaN.


class _SoftmaxBackwardDataBackward(Node):
    __slots__ = ("dim",)
    _saved_names = ("grad_output", "output")

    def backward(self, xp, gg):
        needs_grad_output, needs_output = self.needs_grad
        go, out = self.saved_grad_output(xp), self.saved_output(xp)
        return (
            _softmax_backward_data(xp, gg, out, self.dim, type(self))
            if needs_grad_output
            else None,
            self._output_gradient(xp, gg, go, out, self.dim) if needs_output else None,
        )

    def _saved_extra(self):
        return {"dim": self.dim}


class SoftmaxBackwardDataBackward0(_SoftmaxBackwardDataBackward):
    __slots__ = ()

    @staticmethod
    def _array(g, r, dim):
        # PyTorch's _softmax_backward_data: result * (grad - sum(grad * result)), in this order
        if dim is None or dim == r.ndim - 1 or r.dtype.kind != "f" or r.dtype.itemsize < 4:
            return r * (g - (g * r).sum(axis=dim, keepdims=True))
        return r * (g - _fused_dot(g, r, dim))

    @staticmethod
    def _output_gradient(xp, gg, go, out, dim):
        # softmax_double_backward(grad=gg, grad_output=go, dim, output=out)
        return go * gg - xp.sum(out * go, dim, True) * gg - go * xp.sum(out * gg, dim, True)


def _fused_dot(g: np.ndarray, r: np.ndarray, dim: int) -> np.ndarray:
    """``sum(g * r, dim, keepdim=True)`` as PyTorch's softmax backward kernel for a dim other
    than the last (``_vec_softmax_backward``) computes it: from 0, one fused multiply-add per
    step along ``dim`` (``sum += grad * output``, which its AVX2 build contracts into an FMA).
    Rounded twice, a cancelling sum keeps other noise (1e23 against PyTorch's 0, 879 of 2,000
    random float64 (1, 2, 3) cases along dim 1 differed in the last bit; 0 emulated)."""
    from autodiag.ops._avx_mathfun import fma32
    from autodiag.ops.rng import fma64

    dt = np.result_type(g, r)
    fma = fma64 if dt == np.float64 else fma32
    gm, rm = np.moveaxis(g, dim, 0), np.moveaxis(r, dim, 0)
    acc = np.zeros(np.broadcast_shapes(gm.shape[1:], rm.shape[1:]), dtype=dt)
    n = gm.shape[0] if gm.shape[0] > 1 else rm.shape[0]  # (``max`` is this module's op)
    for k in range(n):
        acc = fma(gm[k if gm.shape[0] > 1 else 0], rm[k if rm.shape[0] > 1 else 0], acc)
    return np.expand_dims(np.asarray(acc, dtype=dt), dim)


def _softmax_backward_data(xp, g, r, dim, cls):
    """``cls``'s forward (the softmax gradient of ``g`` given the output ``r``);
    under create_graph recorded as ``cls`` (NOTE [Recorded softmax backward])."""
    if xp.arrays:
        return cls._array(g, r, dim)
    out = cls._array(g._data, r._data, dim)
    if _state.record and (g.requires_grad or r.requires_grad):
        node = cls((edge(g), edge(r)))
        node.dim = dim
        node._saved = (save(g), save(r))
        set_broadcast_meta(node, out, g, r)
        return result(out, node)
    return result(out, None)


def _softmax_like(input, dim, dtype, cls, log: bool):
    x = as_tensor_operand(input)
    if dim is None:
        dim = 0 if x.ndim in (0, 1, 3) else 1  # PyTorch's legacy implicit dim (with a warning)
    if dtype is not None:
        x = x.to(dtype)  # a recorded cast (ToCopyBackward0), as PyTorch casts before softmax
    d = x._data
    if d.dtype.kind != "f":
        raise RuntimeError(
            f"\"softmax_lastdim_kernel_impl\" not implemented for '{x.dtype.scalar_name}'"
        )
    dim = wrap_dim(dim, d.ndim)
    ax = dim if d.ndim else None
    # NOTE: an infinite maximum is subtracted as it is, as PyTorch does: a row holding +inf is
    # all NaN (inf - inf), a row of -inf too; logsumexp is the one that guards infinities.
    m = d.max(axis=ax, keepdims=True) if d.size else d
    z = d - m
    if log:
        out = z - np.log(np.exp(z).sum(axis=ax, keepdims=True))
    else:
        e = _softmax_exp(z) if z.size <= _ROUNDED_EXP_SIZE else np.exp(z)
        s = e.sum(axis=ax, keepdims=True)
        # NOTE [softmax rounding]
        out = e * (1 / s) if ax is None or ax == d.ndim - 1 else e / s
    out = c_order(np.asarray(out, dtype=d.dtype))
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.dim = ax
        r = result(out, node)
        node._saved = (save_output(r),)
        return r
    return result(out, None)


# NOTE [softmax rounding]
# PyTorch's CPU softmax along the last dim (_vec_softmax_lastdim) multiplies each exp by the
# reciprocal of their sum; along another dim (_vec_softmax) it divides by the sum. Its float32
# exp (SLEEF, 1 ulp) is mostly the correctly rounded one, which numpy's float32 exp misses for
# ~40% of values: computed in float64 and rounded once instead. Measured on normal(0, 3) rows
# against torch 2.13: float32 (1000, 3) along the last dim, 33% of elements an ulp off before,
# 6% after; float64 19% before, 5% after (its exp stays numpy's: the rest is exp's last bit and
# the sums' SIMD lanes). A second derivative that cancels shows those bits. The float64 exp
# costs ~13x numpy's float32 one (4 ms for 512k elements, where all of softmax took 6 ms), so
# tensors beyond _ROUNDED_EXP_SIZE elements keep numpy's float32 exp.
_softmax_exp = rounded_once(np.exp)
_ROUNDED_EXP_SIZE = 1 << 16


@register(expr=True)
def softmax(input, dim=None, dtype=None):
    return _softmax_like(input, dim, dtype, SoftmaxBackward0, False)


@register(expr=True)
def log_softmax(input, dim=None, dtype=None):
    return _softmax_like(input, dim, dtype, LogSoftmaxBackward0, True)
