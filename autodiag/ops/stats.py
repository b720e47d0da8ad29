"""Reductions and scans public programs reach for: ``count_nonzero``, ``nansum``,
``nanmean``, ``median``/``nanmedian`` (full, or values and indices along a dim),
``kthvalue``, ``cummax``/``cummin``, ``logcumsumexp``, and the trapezoid rule
(``trapezoid``, ``trapz``, ``cumulative_trapezoid``, PyTorch's composites of sums and slices).

Which element a selecting reduction picks decides where its gradient goes, so ties are
resolved as PyTorch's CPU kernels resolve them (NOTE [Selection ties]).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from autodiag import dtypes
from autodiag.core.graph import Node
from autodiag.ops._cascade import cascade_sum
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    edge,
    register,
    result,
    save,
    save_output,
    wrap,
    wrap_dim,
)
from autodiag.ops.nn_ops import div_scalar, mul_scalar
from autodiag.ops.pointwise import _no_kernel, isnan, logical_not
from autodiag.ops.reduction import (
    MaxBackward0,
    MaxBackward1,
    _record_reduce,
    _reduced_shape_dims,
    c_order,
    check_reducible,
)
from autodiag.ops.reduction import sum as _sum
from autodiag.ops.shape import scatter_into_zeros
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# count_nonzero, nansum, nanmean
# ---------------------------------------------------------------------------------------------


@register()
def count_nonzero(input, dim=None):
    """The number of non-zero elements (over ``dim``), as int64.

    >>> import autodiag as torch
    >>> torch.tensor([[0.0, 1.0], [2.0, 0.0]]).count_nonzero(dim=0)
    tensor([1, 1])
    """
    x = as_tensor_operand(input)
    dims, _ = _reduced_shape_dims(x, dim, False)
    return wrap(np.asarray(np.count_nonzero(x._data, axis=dims), dtype=np.int64))


class NansumBackward0(Node):
    __slots__ = ("dims", "unreduce", "in_shape")
    _saved_names = ("self",)

    def backward(self, xp, g):
        # PyTorch's nansum_backward: the gradient expanded, times (not selected by) ~isnan(self)
        x = self.saved_self(xp)
        g = xp.expand_dims_to(g, self.unreduce, self.in_shape)
        return (g * ~xp.isnan(x) if xp.arrays else g * logical_not(isnan(x)),)

    def _saved_extra(self):
        return {"dim": self.dims, "keepdim": not self.unreduce, "self_sym_sizes": self.in_shape}


@register()
def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):
    """The sum, NaN counted as zero.

    >>> import autodiag as torch
    >>> torch.tensor([1.0, float("nan"), 2.0]).nansum()
    tensor(3.)
    """
    x = as_tensor_operand(input)
    d = x._data
    dims, unreduce = _reduced_shape_dims(x, dim, keepdim)
    npdt = dtypes.to_np(dtype) if dtype is not None else np.int64 if d.dtype.kind in "biu" else None
    if npdt is not None and npdt != d.dtype:
        d = d.astype(npdt)
    if d.dtype.kind == "f":
        d = np.where(np.isnan(d), d.dtype.type(0), d)
    out = c_order(np.asarray(cascade_sum(d, dims, keepdim)))
    if _state.record and x.requires_grad:
        node = NansumBackward0((edge(x),))
        node.dims, node.unreduce, node.in_shape = dims, unreduce, x._data.shape
        node._saved = (save(x),)
        return result(out, node)
    return result(out, None)


@register()
def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):
    """The mean of the non-NaN elements (PyTorch's composite: ``nansum / count``).

    >>> import autodiag as torch
    >>> torch.tensor([1.0, float("nan"), 2.0]).nanmean()
    tensor(1.5000)
    """
    x = as_tensor_operand(input)
    if x._data.dtype.kind != "f":
        raise RuntimeError(
            "nanmean(): expected input to have floating point or complex dtype but got "
            f"{x.dtype.scalar_name}"
        )
    factor = _sum(logical_not(isnan(x)), dim, keepdim)
    return nansum(x, dim, keepdim, dtype=dtype).div(factor)


# ---------------------------------------------------------------------------------------------
# median, nanmedian, kthvalue
# ---------------------------------------------------------------------------------------------

# NOTE [Selection ties]
# median and kthvalue along a dim return an index, and the gradient goes to that element
# alone, so where values tie the index must be PyTorch's. Its CPU median partitions indices
# with the order (value, index) (a strict total order: the pick is the k-th of a stable sort,
# whatever the algorithm), NaN last for nanmedian; an all-NaN row has no such order, and gets
# libstdc++'s nth_element (ported below) over equivalent elements. kthvalue runs Sedgewick's
# quickselect (ATen's quick_select_template) on value copies, whose pick among ties depends on
# the partitioning; it is ported step by step. A full median (no dim) returns no index: its
# gradient is shared evenly among the elements equal to it (MedianBackward0).

_Median = namedtuple("median", ["values", "indices"])
_Nanmedian = namedtuple("nanmedian", ["values", "indices"])
_Kthvalue = namedtuple("kthvalue", ["values", "indices"])
_Cummax = namedtuple("cummax", ["values", "indices"])
_Cummin = namedtuple("cummin", ["values", "indices"])

for _t in (_Median, _Nanmedian, _Kthvalue, _Cummax, _Cummin):
    _t.__repr__ = lambda self: (
        f"torch.return_types.{type(self).__name__}(\nvalues={self.values!r},\n"
        f"indices={self.indices!r})"
    )


class MedianBackward0(MaxBackward1):
    __slots__ = ()


class NanmedianBackward0(MaxBackward1):
    __slots__ = ()


class MedianBackward1(MaxBackward0):
    __slots__ = ()


class NanmedianBackward1(MaxBackward0):
    __slots__ = ()


class KthvalueBackward0(MaxBackward0):
    __slots__ = ()


def _nth_element_equivalent(n: int, k: int) -> int:
    """libstdc++'s ``nth_element`` over ``n`` indices that all compare equivalent (an all-NaN
    row of nanmedian): the index it leaves at position ``k``. With no element less than
    another, introselect's partitions and the final insertion sort only move elements by the
    swaps below."""
    idx = list(range(n))
    first, last = 0, n
    depth = 2 * int(math.log2(n)) if n else 0
    while last - first > 3:
        if depth == 0:
            raise NotImplementedError(
                "nanmedian: an all-NaN slice this long is not supported (PyTorch's heap "
                "selection is not reproduced); drop the NaN slices first"
            )
        depth -= 1
        mid = first + (last - first) // 2
        # __move_median_to_first(first, first+1, mid, last-1): no comparison holds
        idx[first], idx[mid] = idx[mid], idx[first]
        # __unguarded_partition(first+1, last, pivot=first): nothing compares less
        lo, hi = first + 1, last
        while True:
            hi -= 1
            if not lo < hi:
                break
            idx[lo], idx[hi] = idx[hi], idx[lo]
            lo += 1
        cut = lo
        if cut <= k:
            first = cut
        else:
            last = cut
    # the insertion sort moves nothing among equivalent elements
    return idx[k]


def _median_rows(rows: np.ndarray, ignore_nan: bool):
    """Values and indices of PyTorch's CPU median along the last axis of a 2-D array."""
    n = rows.shape[1]
    vals = np.empty(rows.shape[0], dtype=rows.dtype)
    idx = np.empty(rows.shape[0], dtype=np.int64)
    nan = np.isnan(rows) if rows.dtype.kind == "f" else np.zeros(rows.shape, bool)
    order = np.argsort(rows, axis=1, kind="stable")  # (value, index); NaN last
    for r in range(rows.shape[0]):
        num_nan = int(nan[r].sum())
        if not ignore_nan and num_nan:
            i = int(np.argmax(nan[r]))  # the first NaN, as PyTorch's find_if
        elif ignore_nan and num_nan == n:
            i = _nth_element_equivalent(n, 0)
        else:
            k = (n - (num_nan if ignore_nan else 0) - 1) // 2
            i = int(order[r, k])
        vals[r], idx[r] = rows[r, i], i
    return vals, idx


def _full_median(d: np.ndarray, ignore_nan: bool):
    if d.size == 0:
        return np.asarray(np.nan, dtype=d.dtype)
    flat = d.reshape(-1)
    nan = np.isnan(flat) if flat.dtype.kind == "f" else np.zeros(flat.shape, bool)
    if nan.any() and (not ignore_nan or nan.all()):
        return np.asarray(np.nan, dtype=d.dtype)
    k = (flat.size - int(nan.sum()) - 1) // 2
    return np.asarray(np.sort(flat)[k], dtype=d.dtype)  # NaN sorts last


def _along_dim(x: Tensor, dim, name: str):
    """``x``'s data with ``dim`` moved last and flattened to rows (a 0-d tensor is one row)."""
    d = x._data
    if d.ndim == 0:
        wrap_dim(dim, 0)
        return d.reshape(1, 1), 0
    dim = wrap_dim(dim, d.ndim)
    check_reducible(name, d, (dim,), False)
    rows = np.moveaxis(d, dim, -1).reshape(-1, d.shape[dim]) if d.size else None
    return rows, dim


def _select_result(x, dim, keepdim, rows, pick, cls, ret):
    """Assemble ``pick(rows)``'s values and indices into ``x``'s shape without ``dim``."""
    d = x._data
    if d.ndim == 0:
        vals, idx = pick(rows)
        vals, idx = vals.reshape(()), idx.reshape(())
    else:
        out_shape = d.shape[:dim] + d.shape[dim + 1 :]
        if rows is None:
            vals, idx = np.empty(out_shape, d.dtype), np.empty(out_shape, np.int64)
        else:
            vals, idx = pick(rows)
            vals, idx = vals.reshape(out_shape), idx.reshape(out_shape)
        if keepdim:
            vals, idx = np.expand_dims(vals, dim), np.expand_dims(idx, dim)
    indices = wrap(c_order(idx))
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.dim, node.keepdim, node.in_shape = dim, keepdim or d.ndim == 0, d.shape
        node._saved = (save(indices),)
        return ret(result(c_order(vals), node), indices)
    return ret(result(c_order(vals), None), indices)


def _median(input, dim, keepdim, ignore_nan: bool):
    x = as_tensor_operand(input)
    name = "nanmedian" if ignore_nan else "median"
    if dim is None:
        out = _full_median(x._data, ignore_nan)
        if _state.record and x.requires_grad:
            nd = tuple(range(x._data.ndim))
            cls = NanmedianBackward0 if ignore_nan else MedianBackward0
            return _record_reduce(cls, x, out, nd, nd, ("self", "result"))
        return result(out, None)
    rows, dim = _along_dim(x, dim, "median()")
    cls = NanmedianBackward1 if ignore_nan else MedianBackward1
    ret = _Nanmedian if ignore_nan else _Median
    del name
    return _select_result(x, dim, keepdim, rows, lambda r: _median_rows(r, ignore_nan), cls, ret)


@register()
def median(input, dim=None, keepdim: bool = False):
    """The lower median; along ``dim``, its values and indices (NaN wins, as in PyTorch).

    >>> import autodiag as torch
    >>> torch.tensor([3.0, 1.0, 2.0, 4.0]).median()
    tensor(2.)
    """
    return _median(input, dim, keepdim, ignore_nan=False)


@register()
def nanmedian(input, dim=None, keepdim: bool = False):
    """The lower median of the non-NaN elements; along ``dim``, values and indices.

    >>> import autodiag as torch
    >>> torch.tensor([3.0, float("nan"), 1.0]).nanmedian()
    tensor(1.)
    """
    return _median(input, dim, keepdim, ignore_nan=True)


def _gt_or_nan(a, b) -> bool:
    return (a != a and b == b) or a > b


def _quick_select(vals: list, idx: list, k: int) -> None:
    """ATen's quick_select_template (Sedgewick's partitioning, median-of-three pivot),
    in place on ``vals`` and their ``idx``: afterwards position ``k`` holds the k-th smallest
    (NaN largest) and, among ties, the element ATen's kthvalue picks (NOTE [Selection ties])."""

    def swap(i, j):
        vals[i], vals[j] = vals[j], vals[i]
        idx[i], idx[j] = idx[j], idx[i]

    lo, hi = 0, len(vals) - 1
    while True:
        if hi <= lo:
            return
        if hi == lo + 1:
            if _gt_or_nan(vals[lo], vals[hi]):
                swap(lo, hi)
            return
        p = (lo + hi) >> 1
        swap(p, lo + 1)
        if _gt_or_nan(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if _gt_or_nan(vals[lo], vals[hi]):
            swap(lo, hi)
        if _gt_or_nan(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j = lo + 1, hi
        piv = vals[lo]
        while True:
            i += 1
            while _gt_or_nan(piv, vals[i]):
                i += 1
            j -= 1
            while _gt_or_nan(vals[j], piv):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


def _kth_rows(rows: np.ndarray, k: int):
    vals = np.empty(rows.shape[0], dtype=rows.dtype)
    idx = np.empty(rows.shape[0], dtype=np.int64)
    for r in range(rows.shape[0]):
        v, ix = rows[r].tolist(), list(range(rows.shape[1]))
        _quick_select(v, ix, k - 1)
        vals[r], idx[r] = v[k - 1], ix[k - 1]
    return vals, idx


@register()
def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest element along ``dim`` and its index.

    >>> import autodiag as torch
    >>> torch.tensor([3.0, 1.0, 2.0]).kthvalue(2)
    torch.return_types.kthvalue(
    values=tensor(2.),
    indices=tensor(2))
    """
    x = as_tensor_operand(input)
    d = x._data
    k = int(k)
    wdim = wrap_dim(dim, max(d.ndim, 1))
    n = d.shape[wdim] if d.ndim else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {wdim}")
    rows, dim = _along_dim(x, dim, "kthvalue()")
    return _select_result(
        x, dim, keepdim, rows, lambda r: _kth_rows(r, k), KthvalueBackward0, _Kthvalue
    )


# ---------------------------------------------------------------------------------------------
# cummax, cummin
# ---------------------------------------------------------------------------------------------


class CummaxBackward0(Node):
    __slots__ = ("dim", "self_sym_sizes")
    _saved_names = ("indices",)

    def backward(self, xp, g):
        # PyTorch's cummaxmin_backward: zeros.scatter_add(dim, indices, grad)
        if math.prod(self.self_sym_sizes) == 0:
            return (g,)
        idx = self.saved_indices(xp)
        return (scatter_into_zeros(xp, g, self.dim, idx, self.self_sym_sizes),)

    def _saved_extra(self):
        return {"dim": self.dim}


class CumminBackward0(CummaxBackward0):
    __slots__ = ()


def _cum_extreme(input, dim, better, cls, ret, name):
    x = as_tensor_operand(input)
    d = x._data
    if d.ndim == 0:
        wrap_dim(dim, 0)
        vals, idx = d.copy(), np.zeros((), dtype=np.int64)
    else:
        dim = wrap_dim(dim, d.ndim)
        a = np.moveaxis(d, dim, 0)
        vals = np.empty_like(a)
        idx = np.empty(a.shape, dtype=np.int64)
        if a.shape[0]:
            best, at = a[0].copy(), np.zeros(a.shape[1:], dtype=np.int64)
            isf = a.dtype.kind == "f"
            for i in range(a.shape[0]):
                cur = a[i]
                # ATen's cummax_cummin_helper: take the new element when it is NaN or >= (<=)
                # the running one (ties, and a NaN after a NaN, move the index forward)
                take = better(cur, best)
                if isf:
                    take = take | np.isnan(cur)
                best = np.where(take, cur, best)
                at = np.where(take, i, at)
                vals[i], idx[i] = best, at
        vals, idx = np.moveaxis(vals, 0, dim), np.moveaxis(idx, 0, dim)
    vals, idx = c_order(np.asarray(vals)), c_order(np.asarray(idx))
    indices = wrap(idx)
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.dim, node.self_sym_sizes = (dim if d.ndim else 0), d.shape
        node._saved = (save(indices),)
        return ret(result(vals, node), indices)
    return ret(result(vals, None), indices)


@register()
def cummax(input, dim: int):
    """The running maximum along ``dim`` and where it was found (the last of ties).

    >>> import autodiag as torch
    >>> torch.tensor([1.0, 3.0, 2.0]).cummax(0).values
    tensor([1., 3., 3.])
    """
    return _cum_extreme(input, dim, np.greater_equal, CummaxBackward0, _Cummax, "cummax")


@register()
def cummin(input, dim: int):
    """The running minimum along ``dim`` and where it was found (the last of ties).

    >>> import autodiag as torch
    >>> torch.tensor([3.0, 1.0, 2.0]).cummin(0).values
    tensor([3., 1., 1.])
    """
    return _cum_extreme(input, dim, np.less_equal, CumminBackward0, _Cummin, "cummin")


# ---------------------------------------------------------------------------------------------
# logcumsumexp
# ---------------------------------------------------------------------------------------------


def _reversed_logcumsumexp(xp, a, dim: int):
    if xp.arrays:
        return np.flip(_logcumsumexp_array(np.flip(a, dim), dim), dim)
    return logcumsumexp(a.flip((dim,)), dim).flip((dim,))


class LogcumsumexpBackward0(Node):
    __slots__ = ("dim",)
    _saved_names = ("self", "result")

    def backward(self, xp, g):
        # PyTorch's logcumsumexp_backward: the reversed cumulative sum of grad * exp(x -
        # result), in log space, split by the sign of grad so that every log is of a positive
        x, r = self.saved_self(xp), self.saved_result(xp)
        gd = g if xp.arrays else g._data
        if gd.ndim == 0 or gd.size == 0:
            return (g,)
        dim = self.dim
        lowest = np.finfo(gd.dtype).min
        if xp.arrays:
            with np.errstate(divide="ignore"):
                log_abs = np.log(np.abs(g))
            pos = np.where(g > 0, log_abs, lowest)
            neg = np.where(g < 0, log_abs, lowest)
            with np.errstate(over="ignore", invalid="ignore"):
                out_pos = np.exp(_reversed_logcumsumexp(xp, pos - r, dim) + x)
                out_neg = np.exp(_reversed_logcumsumexp(xp, neg - r, dim) + x)
            return (out_pos - out_neg,)
        log_abs = g.abs().log()
        pos = xp.where(g > 0, log_abs, lowest)
        neg = xp.where(g < 0, log_abs, lowest)
        out_pos = (_reversed_logcumsumexp(xp, pos - r, dim) + x).exp()
        out_neg = (_reversed_logcumsumexp(xp, neg - r, dim) + x).exp()
        return (out_pos - out_neg,)

    def _saved_extra(self):
        return {"dim": self.dim}


def _logcumsumexp_array(a: np.ndarray, dim: int) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.logaddexp.accumulate(a, axis=dim) if a.size else a.copy()


@register()
def logcumsumexp(input, dim: int):
    """``log(cumsum(exp(input)))`` along ``dim``, without overflow.

    >>> import autodiag as torch
    >>> torch.tensor([0.0, 0.0]).logcumsumexp(0)
    tensor([0.0000, 0.6931])
    """
    x = as_tensor_operand(input)
    d = x._data
    if d.dtype.kind != "f":
        raise _no_kernel("logcumsumexp_out_cpu", d.dtype)
    dim = wrap_dim(dim, max(d.ndim, 1))
    out = c_order(_logcumsumexp_array(d, dim) if d.ndim else d.copy())
    if _state.record and x.requires_grad:
        node = LogcumsumexpBackward0((edge(x),))
        node.dim = dim if d.ndim else 0
        r = result(out, node)
        node._saved = (save(x), save_output(r))
        return r
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# The trapezoid rule (PyTorch's composites, op for op: the same graph)
# ---------------------------------------------------------------------------------------------


def _dx_along(y: Tensor, x: Tensor, dim: int) -> Tensor:
    """``x``'s spacing along ``dim``, shaped to broadcast against ``y`` (ATen's x_viewed)."""
    if x.ndim == 1:
        if x.shape[0] != y.shape[dim]:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
        shape = [1] * y.ndim
        shape[dim] = x.shape[0]
        x = x.view(shape)
    elif x.ndim < y.ndim:
        x = x.view((1,) * (y.ndim - x.ndim) + tuple(x.shape))
    n = x.shape[dim]
    return x.narrow(dim, 1, n - 1) - x.narrow(dim, 0, n - 1)


def _float_samples(y) -> Tensor:
    # integer samples: PyTorch's composite promotes at the first product with 0.5 (float32
    # for the default dtype); computing in that dtype from the start gives its numbers
    y = as_tensor_operand(y)
    if y._data.dtype.kind != "f":
        y = wrap(y._data.astype(dtypes.get_default_dtype().np))
    return y


def _trapezoid(y, x, dx, dim, name: str):
    y = _float_samples(y)
    if y.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    dim = wrap_dim(dim, y.ndim)
    n = y.shape[dim]
    if n == 0:
        shape = tuple(s for i, s in enumerate(y.shape) if i != dim)
        return wrap(np.zeros(shape, dtype=y._data.dtype))
    if x is not None:
        if not isinstance(x, Tensor):
            dx, x = x, None
        else:
            spacing = _dx_along(y, x, dim)
            total = ((y.narrow(dim, 1, n - 1) + y.narrow(dim, 0, n - 1)) * spacing).sum(dim)
            return div_scalar(total, 2.0)
    dx = 1 if dx is None else dx
    # ATen: (y.sum(dim) - (y.select(dim, 0) + y.select(dim, -1)) * 0.5) * dx, whose Scalar
    # products record MulBackward1
    ends = mul_scalar(y.select(dim, 0) + y.select(dim, -1), 0.5)
    return mul_scalar(y.sum(dim) - ends, dx)


@register(method=False)
def trapezoid(y, x=None, *, dx=None, dim: int = -1):
    """The trapezoid rule along ``dim``: spacing ``dx``, or sample points ``x``.

    >>> import autodiag as torch
    >>> torch.trapezoid(torch.tensor([1.0, 2.0, 3.0]))
    tensor(4.)
    """
    if x is not None and dx is not None:
        raise TypeError("trapezoid() received an invalid combination of arguments")
    return _trapezoid(y, x, dx, dim, "trapezoid")


@register(method=False)
def trapz(y, x=None, *, dx=None, dim: int = -1):
    """``trapezoid``'s older name."""
    if x is not None and dx is not None:
        raise TypeError("trapz() received an invalid combination of arguments")
    return _trapezoid(y, x, dx, dim, "trapz")


@register(method=False)
def cumulative_trapezoid(y, x=None, *, dx=None, dim: int = -1):
    """The running trapezoid rule along ``dim`` (one value fewer than ``y`` has).

    >>> import autodiag as torch
    >>> torch.cumulative_trapezoid(torch.tensor([1.0, 2.0, 3.0]))
    tensor([1.5000, 4.0000])
    """
    y = as_tensor_operand(y)
    if y.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    dim = wrap_dim(dim, y.ndim)
    n = y.shape[dim]
    if n == 0:
        return wrap(np.zeros(y.shape, dtype=y._data.dtype))
    if isinstance(x, Tensor):
        spacing = _dx_along(y, x, dim)
        both = (y.narrow(dim, 0, n - 1) + y.narrow(dim, 1, n - 1)) * spacing
        return div_scalar(both.cumsum(dim), 2.0)
    dx = 1 if x is None and dx is None else dx if dx is not None else x
    return mul_scalar(y.narrow(dim, 0, n - 1) + y.narrow(dim, 1, n - 1), dx / 2.0).cumsum(dim)
