"""Statistics public programs call (issue 20, cover16b): ``aminmax``, ``var_mean``,
``std_mean``, ``msort``, ``dist``, ``cov``, ``corrcoef``, ``bincount``, ``histc``, ``unique``,
``unique_consecutive``.

NOTE [Paired reductions]: ``var_mean``, ``std_mean`` and ``aminmax`` are one PyTorch node with
two outputs (``VarMeanBackward0`` ...) whose gradient is the sum of its two reductions'
gradients. Their values and formulas are the single reductions' (ops/reduction.py): each
computes them by running those reductions, keeps their nodes off the graph (held by the pair's
node, released with it), and sums their backward for the outputs that received a gradient, so
the numbers and double backward are exactly ``var``'s and ``mean``'s.

``cov`` and ``corrcoef`` are PyTorch composites, written here with the same ops in the same
order, so their graphs carry PyTorch's nodes.
"""

from __future__ import annotations

import warnings
from collections import namedtuple

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, register, result, wrap
from autodiag.tensor import Tensor


def _return_repr(self) -> str:
    fields = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
    return f"torch.return_types.{type(self).__name__}(\n{fields})"


AminmaxResult = namedtuple("aminmax", ["min", "max"])
AminmaxResult.__repr__ = _return_repr


def _tensor(name: str, x, pos: int = 1, arg: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}"
        )
    return x


# ---------------------------------------------------------------------------------------------
# Paired reductions: var_mean, std_mean, aminmax (NOTE [Paired reductions])
# ---------------------------------------------------------------------------------------------


class _PairBackward(Node):
    __slots__ = ("_num_outputs", "parts", "attrs")

    def _apply(self, xp, grads):
        total = None
        for g, part in zip(grads, self.parts):
            if g is None or part is None:
                continue
            (gx,) = part.backward(xp, g)
            total = gx if total is None else total + gx
        return (total,)  # None when neither output received a gradient: no contribution

    def _release(self, freed) -> None:
        for part in self.parts:
            if part is not None:
                part._release(freed)

    def _saved_extra(self):
        return dict(self.attrs)


class VarMeanBackward0(_PairBackward):
    __slots__ = ()


class StdMeanBackward0(_PairBackward):
    __slots__ = ()


class AminmaxBackward0(_PairBackward):
    __slots__ = ()


def _pair(x: Tensor, first: Tensor, second: Tensor, cls, attrs: dict):
    """The two outputs as one node ``cls`` holding both reductions' nodes."""
    a, b = first.grad_fn, second.grad_fn
    if a is None:
        return result(first._data, None), result(second._data, None)
    node = cls((edge(x),))
    node.parts, node._num_outputs, node.attrs = (a, b), 2, attrs
    r0, r1 = result(first._data, node), result(second._data, node)
    r1._output_nr = 1
    return r0, r1


@register(method=False)
def var_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """``(var(input, ...), mean(input, ...))`` as one node (``VarMeanBackward0``).

    >>> import autodiag as torch
    >>> torch.var_mean(torch.tensor([1.0, 2.0, 3.0]))
    (tensor(1.), tensor(2.))
    """
    from autodiag.ops.reduction import mean, var

    x = _tensor("var_mean", input)
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    v = var(x, dim, unbiased, keepdim, correction=correction)
    m = mean(x, dim, keepdim) if dim is not None else _mean_all(x, keepdim)
    return _pair(x, v, m, VarMeanBackward0, _pair_attrs(v, dim, keepdim))


@register(method=False)
def std_mean(input, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """``(std(input, ...), mean(input, ...))`` as one node (``StdMeanBackward0``).

    >>> import autodiag as torch
    >>> torch.std_mean(torch.tensor([1.0, 2.0, 3.0]))
    (tensor(1.), tensor(2.))
    """
    from autodiag.ops.reduction import mean, std

    x = _tensor("std_mean", input)
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    s = std(x, dim, unbiased, keepdim, correction=correction)
    m = mean(x, dim, keepdim) if dim is not None else _mean_all(x, keepdim)
    return _pair(x, s, m, StdMeanBackward0, _pair_attrs(s, dim, keepdim))


def _mean_all(x, keepdim):
    from autodiag.ops.reduction import mean

    if keepdim:
        return mean(x, tuple(range(x.dim())), True)
    return mean(x)


def _pair_attrs(r, dim, keepdim):
    fn = r.grad_fn
    corr = getattr(fn, "correction", None)
    return {"dim": dim, "correction": corr, "keepdim": keepdim}


@register()
def aminmax(input, *, dim=None, keepdim: bool = False):
    """``(amin, amax)`` over ``dim`` (one int) or everything, as one node.

    >>> import autodiag as torch
    >>> torch.aminmax(torch.tensor([3.0, -1.0, 2.0]))
    torch.return_types.aminmax(
    min=tensor(-1.),
    max=tensor(3.))
    """
    from autodiag.ops.reduction import amax, amin

    x = _tensor("aminmax", input)
    d = x._data
    if dim is None:
        if d.size == 0:
            raise RuntimeError(
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                "no identity."
            )
        dims = tuple(range(d.ndim))
        lo, hi = amin(x, dims, keepdim), amax(x, dims, keepdim)
    else:
        if d.ndim and d.shape[dim] == 0:
            raise IndexError(f"aminmax(): Expected reduction dim {dim} to have non-zero size.")
        lo, hi = amin(x, dim, keepdim), amax(x, dim, keepdim)
    lo, hi = _pair(x, lo, hi, AminmaxBackward0, {"dim": dim, "keepdim": keepdim})
    return AminmaxResult(lo, hi)


# ---------------------------------------------------------------------------------------------
# msort, dist
# ---------------------------------------------------------------------------------------------


@register()
def msort(input):
    """``sort(input, dim=0).values`` (``SortBackward0``).

    >>> import autodiag as torch
    >>> torch.msort(torch.tensor([[3.0, 1.0], [2.0, 4.0]]))
    tensor([[2., 1.],
            [3., 4.]])
    """
    from autodiag.ops.selection import sort

    return sort(_tensor("msort", input), 0).values


class DistBackward0(Node):
    __slots__ = ("p",)
    _saved_names = ("self", "other", "result")
    _extra_names = ("p",)

    def backward(self, xp, g):
        # norm_backward(grad, self - other, p, result), and its negation for other
        a, b, r = self.saved_self(xp), self.saved_other(xp), self.saved_result(xp)
        diff = a - b
        p = self.p
        if p == 0:
            gd = xp.zeros_like(diff * g)
        elif p == 1:
            gd = xp.sign(diff) * g
        elif p == 2:
            gd = xp.mask(r != 0, diff * (g / r))
        elif p == float("inf") or p == float("-inf"):
            mask = diff.__abs__() == r
            count = xp.sum(mask * 1.0, tuple(range(mask.ndim)), keepdim=False)
            gd = xp.sign(diff) * (mask * 1.0) * (g / count)
        else:
            ad = xp.abs(diff)
            gd = xp.mask(r != 0, diff * ad ** (p - 2) * g / r ** (p - 1))
        needs_a, needs_b = self.needs_grad
        return (gd if needs_a else None, -gd if needs_b else None)

    def _saved_extra(self):
        return {"p": self.p}


@register()
def dist(input, other, p=2):
    """The ``p``-norm of ``input - other`` (``DistBackward0``).

    >>> import autodiag as torch
    >>> torch.dist(torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0]))
    tensor(5.)
    """
    from autodiag.core import grad_mode
    from autodiag.ops._core import save, save_output, set_broadcast_meta
    from autodiag.ops.reduction import norm

    a = _tensor("dist", input)
    b = _tensor("dist", other, 2, "other")
    if isinstance(p, Tensor):
        p = p.item()
    with grad_mode.no_grad():
        diff = a - b
        r = norm(diff, float(p))
    out = r._data
    if _state.record and (a.requires_grad or b.requires_grad):
        node = DistBackward0((edge(a), edge(b)))
        node.p = float(p)
        set_broadcast_meta(node, diff._data, a, b)
        rr = result(out, node)
        node._saved = (save(a), save(b), save_output(rr))
        return rr
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# cov, corrcoef (PyTorch's composites, op for op)
# ---------------------------------------------------------------------------------------------


@register()
def cov(input, *, correction: int = 1, fweights=None, aweights=None):
    """The covariance matrix of the variables in ``input``'s rows (observations in columns).

    >>> import autodiag as torch
    >>> torch.cov(torch.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]))
    tensor([[ 1., -1.],
            [-1.,  1.]])
    """
    from autodiag.ops.linalg import mm

    x = _tensor("cov", input)
    d = x._data
    if d.ndim > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{d.ndim} dimensions"
        )
    if d.dtype.kind == "b":
        raise RuntimeError("cov(): bool dtype is not supported for input")
    if fweights is not None or aweights is not None:
        raise NotImplementedError(
            "cov: fweights and aweights are not supported by autodiag (pass neither)"
        )
    inp = x.view(1, -1) if d.ndim < 2 else x
    n_obs = inp.shape[1]
    w_sum = wrap(np.array(n_obs, dtype=np.int64))
    avg = inp.sum(1) / w_sum
    norm_factor = n_obs - correction
    if norm_factor <= 0:
        warnings.warn(
            "cov(): degrees of freedom is <= 0. Correction should be strictly less than the "
            "number of observations.",
            UserWarning,
            stacklevel=3,
        )
        norm_factor = 0
    # PyTorch: norm_factor = w_sum - correction, a 0-d int64 tensor (a constant: no edge)
    nf = wrap(np.array(norm_factor, dtype=np.int64))
    centered = inp - avg.unsqueeze(1)
    c = mm(centered, centered.t())
    return (c / nf).squeeze()


@register()
def corrcoef(input):
    """Pearson correlation coefficients of ``input``'s rows, clipped to [-1, 1].

    >>> import autodiag as torch
    >>> torch.corrcoef(torch.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]))
    tensor([[ 1., -1.],
            [-1.,  1.]])
    """
    from autodiag.ops.pointwise import clip, sqrt

    x = _tensor("corrcoef", input)
    if x._data.ndim > 2:
        raise RuntimeError(
            "corrcoef(): expected input to have two or fewer dimensions but got an input with "
            f"{x._data.ndim} dimensions"
        )
    c = cov(x)
    if c.dim() == 0:
        return c / c
    dg = c.diagonal()
    stddev = sqrt(dg)
    c = c / stddev.view(-1, 1)
    c = c / stddev.view(1, -1)
    return clip(c, -1, 1)


# ---------------------------------------------------------------------------------------------
# bincount, histc (no gradient)
# ---------------------------------------------------------------------------------------------


@register()
def bincount(input, weights=None, minlength: int = 0):
    """How often each value 0..max occurs in a 1-d non-negative int tensor (``weights``: their
    sums instead).

    >>> import autodiag as torch
    >>> torch.bincount(torch.tensor([0, 2, 2]))
    tensor([1, 0, 2])
    """
    x = _tensor("bincount", input)
    d = x._data
    if d.dtype.kind not in "iu":
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{x.dtype.scalar_name}'")
    if d.ndim != 1 or (d.size and d.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is None:
        return result(np.bincount(d, minlength=minlength).astype(np.int64), None)
    w = _tensor("bincount", weights, 2, "weights")
    wd = w._data
    if wd.ndim != 1 or wd.shape[0] != d.shape[0]:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    # PyTorch: float weights keep their dtype, others count in double
    out_dt = wd.dtype if wd.dtype.kind == "f" else np.float64
    out = np.bincount(d, weights=wd.astype(np.float64), minlength=minlength)
    node = None
    if _state.record and w.requires_grad:
        # PyTorch has no derivative for it: a NotImplemented node whose backward raises (the
        # weights' gradient was dropped, so a loss adding other terms backpropagated without it)
        from autodiag.ops.pointwise import NotImplementedBackward

        node = NotImplementedBackward((edge(w),))
        node.op = "bincount"
    return result(out.astype(out_dt), node)


@register()
def histc(input, bins: int = 100, min=0, max=0):  # noqa: A002 - PyTorch's names
    """A histogram of ``bins`` equal bins over [min, max] (the data's range when both are 0);
    values outside are ignored.

    >>> import autodiag as torch
    >>> torch.histc(torch.tensor([1.0, 2.0, 1.0]), bins=4, min=0, max=3)
    tensor([0., 2., 1., 0.])
    """
    x = _tensor("histc", input)
    d = x._data
    if d.dtype.kind != "f":
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{x.dtype.scalar_name}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    t = d.dtype.type
    lo, hi = t(min), t(max)
    if lo == hi and d.size:
        lo, hi = d.min(), d.max()
    if lo == hi:
        lo, hi = lo - t(1), hi + t(1)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc(): range of [{lo}, {hi}] is not finite")
    if lo > hi:
        raise RuntimeError("torch.histc(): max must be larger than min")
    flat = d.ravel()
    keep = (flat >= lo) & (flat <= hi)
    v = flat[keep]
    # ATen's histogramdd (linear interpolation): pos = (elt - lo) * bins / (hi - lo), the top edge
    # in the last bin
    pos = ((v - lo) * t(bins) / (hi - lo)).astype(np.int64)
    pos = np.minimum(pos, bins - 1)
    out = np.bincount(pos, minlength=bins).astype(d.dtype)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# unique, unique_consecutive
# ---------------------------------------------------------------------------------------------


class Unique2Backward0(Node):
    __slots__ = ()

    def backward(self, xp, g):
        raise NotImplementedError("the derivative for '_unique2' is not implemented.")


class UniqueDimBackward0(Node):
    __slots__ = ()

    def backward(self, xp, g):
        raise NotImplementedError("the derivative for 'unique_dim' is not implemented.")


class UniqueConsecutiveBackward0(Node):
    __slots__ = ()

    def backward(self, xp, g):
        raise NotImplementedError("the derivative for 'unique_consecutive' is not implemented.")


def _values(x: Tensor, out: np.ndarray, cls) -> Tensor:
    if _state.record and x.requires_grad:
        return result(out, cls((edge(x),)))
    return result(out, None)


def _unique_out(x, vals, inv, counts, return_inverse, return_counts, cls):
    out = [_values(x, np.ascontiguousarray(vals), cls)]
    if return_inverse:
        out.append(wrap(np.asarray(inv, dtype=np.int64)))
    if return_counts:
        out.append(wrap(np.asarray(counts, dtype=np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


@register()
def unique(
    input,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,  # noqa: A002
    dim=None,
):
    """The distinct values (sorted), optionally the inverse indices and the counts; with
    ``dim``, the distinct slices along it.

    >>> import autodiag as torch
    >>> torch.unique(torch.tensor([3, 1, 3, 2]), return_counts=True)
    (tensor([1, 2, 3]), tensor([1, 1, 2]))
    """
    x = _tensor("unique", input)
    d = x._data
    if dim is None:
        flat = d.ravel()
        vals, inv, counts = np.unique(
            flat, return_inverse=True, return_counts=True, equal_nan=False
        )
        inv = inv.reshape(d.shape)
        return _unique_out(x, vals, inv, counts, return_inverse, return_counts, Unique2Backward0)
    from autodiag.size import wrap_dim

    k = wrap_dim(dim, d.ndim)
    if d.shape[k] == 0 or d.size == 0:
        vals, inv, counts = d, np.zeros(d.shape[k], np.int64), np.zeros(0, np.int64)
        return _unique_out(x, vals, inv, counts, return_inverse, return_counts, UniqueDimBackward0)
    vals, inv, counts = np.unique(d, return_inverse=True, return_counts=True, axis=k)
    return _unique_out(
        x, vals, inv.reshape(-1), counts, return_inverse, return_counts, UniqueDimBackward0
    )


@register()
def unique_consecutive(input, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """Collapse runs of equal consecutive values (or slices along ``dim``).

    >>> import autodiag as torch
    >>> torch.unique_consecutive(torch.tensor([1, 1, 2, 2, 3, 1]))
    tensor([1, 2, 3, 1])
    """
    x = _tensor("unique_consecutive", input)
    d = x._data
    if dim is None:
        flat = d.ravel()
        if flat.size == 0:
            return _unique_out(
                x,
                flat,
                np.zeros(d.shape, np.int64),
                np.zeros(0, np.int64),
                return_inverse,
                return_counts,
                UniqueConsecutiveBackward0,
            )
        change = np.concatenate([[True], flat[1:] != flat[:-1]])
        vals = flat[change]
        inv = (np.cumsum(change) - 1).reshape(d.shape)
        starts = np.flatnonzero(change)
        counts = np.diff(np.append(starts, flat.size))
        return _unique_out(
            x, vals, inv, counts, return_inverse, return_counts, UniqueConsecutiveBackward0
        )
    from autodiag.size import wrap_dim

    k = wrap_dim(dim, d.ndim)
    moved = np.moveaxis(d, k, 0)
    n = moved.shape[0]
    if n == 0:
        return _unique_out(
            x,
            d,
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            return_inverse,
            return_counts,
            UniqueConsecutiveBackward0,
        )
    rows = moved.reshape(n, -1)
    change = np.concatenate([[True], np.any(rows[1:] != rows[:-1], axis=1)])
    vals = np.moveaxis(moved[change], 0, k)
    inv = np.cumsum(change) - 1
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, n))
    return _unique_out(
        x, vals, inv, counts, return_inverse, return_counts, UniqueConsecutiveBackward0
    )


# ---------------------------------------------------------------------------------------------
# quantile, nanquantile (PyTorch's composite, op for op)
# ---------------------------------------------------------------------------------------------

# NOTE [Quantile graph]: ATen's quantile sorts (a flatten, or unsqueeze + transpose to move the
# dim last, first), views the sorted values as (*out, n), gathers the values at the ranks
# below and above, lerps them with constant weights, then reshapes the result with in-place
# view ops (``squeeze_``, and ``unsqueeze_``/``transpose_`` for a 1-D q), recorded as
# SqueezeBackward4 / UnsqueezeBackward1 / TransposeBackward1. Their out-of-place twins compute
# the same views and gradients; ``_renamed`` gives their nodes the in-place overloads' names.

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
_RENAMED: dict = {}


def _renamed(t: Tensor, name: str) -> Tensor:
    fn = t.grad_fn
    if fn is not None:
        base = type(fn)
        cls = _RENAMED.get((base, name))
        if cls is None:
            cls = _RENAMED[(base, name)] = type(name, (base,), {"__slots__": ()})
        fn.__class__ = cls
    return t


def _quantile(name, input, q, dim, keepdim, interpolation, ignore_nan):
    x = _tensor(name, input)
    d = x._data
    if d.size == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if d.dtype not in (np.float32, np.float64):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(
            f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest. "
            f"Got {interpolation}"
        )
    if isinstance(q, Tensor):
        qd = q._data
        if qd.ndim > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
        if qd.dtype != d.dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
        scalar_q = qd.ndim == 0
    else:
        if not 0 <= q <= 1:  # a Python number: PyTorch's own message, with the value
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
        qd = np.asarray(q, dtype=d.dtype)
        scalar_q = True
    if not np.all((qd >= 0) & (qd <= 1)):
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    q1 = qd.reshape(-1).astype(d.dtype)
    if dim is None:
        s = x.flatten().sort().values
        out = (1,) * d.ndim if keepdim else ()
    else:
        from autodiag.size import wrap_dim

        k = wrap_dim(dim, max(d.ndim, 1))
        if d.ndim == 0 or k == d.ndim - 1:
            s = x.sort().values
        else:
            s = x.unsqueeze(-1).transpose(k, -1).sort().values
        shape = list(d.shape)
        if d.ndim:
            if keepdim:
                shape[k] = 1
            else:
                del shape[k]
        out = tuple(shape)
    n = s._data.size // max(int(np.prod(out)), 1) if s._data.size else 0
    s = s.view(*out, n) if out else s.view(n)
    sd = s._data
    t = d.dtype.type
    if ignore_nan:
        valid = (~np.isnan(sd)).sum(-1, keepdims=True).astype(d.dtype)
        ranks = q1 * (valid - t(1))
        ranks = np.where(ranks < 0, t(0), ranks)
    else:
        last = t(n - 1)
        ranks, has_nan = np.broadcast_arrays(q1 * last, np.isnan(sd).any(-1, keepdims=True))
        ranks = np.where(has_nan, last, ranks)
    ranks = np.asarray(ranks, dtype=d.dtype)
    if interpolation == "lower":
        ranks = np.floor(ranks)
    elif interpolation == "higher":
        ranks = np.ceil(ranks)
    elif interpolation == "nearest":
        ranks = np.round(ranks)  # half to even, as at::round
    below = ranks.astype(np.int64)
    v = s.gather(-1, wrap(below))
    if interpolation in ("linear", "midpoint"):
        w = np.full_like(ranks, 0.5) if interpolation == "midpoint" else ranks - below
        w = wrap(np.asarray(w, dtype=d.dtype))
        if interpolation == "linear" and isinstance(q, Tensor) and q.requires_grad:
            # PyTorch's weights are ranks - ranks_below, with ranks = q * (n - 1) (or the
            # count of non-NaN - 1), masked where NaN decides: a graph to q, whose gradient is
            # (above - below) * (n - 1) (it was dropped: q.grad None)
            q_ranks = q.reshape(-1)
            if ignore_nan:
                q_ranks = q_ranks * wrap(valid - t(1))
                q_ranks = q_ranks.masked_fill(wrap(q_ranks._data < 0), 0.0)
            else:
                q_ranks = (q_ranks * (n - 1)).expand(*ranks.shape)
                q_ranks = q_ranks.masked_fill(wrap(np.asarray(has_nan)), float(n - 1))
            w = q_ranks - wrap(below)
        above = np.ceil(ranks).astype(np.int64)
        v = v.lerp(s.gather(-1, wrap(above)), w)
    if scalar_q:
        return _renamed(v.squeeze(-1), "SqueezeBackward4")
    v = _renamed(v.unsqueeze(0), "UnsqueezeBackward1")
    v = _renamed(v.transpose(0, -1), "TransposeBackward1")
    return _renamed(v.squeeze(-1), "SqueezeBackward4")


@register()
def quantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """The ``q``-th quantiles (a number or a 1-D tensor) of ``input`` or along ``dim``.

    >>> import autodiag as torch
    >>> torch.quantile(torch.tensor([1.0, 2.0, 3.0, 4.0]), 0.5)
    tensor(2.5000)
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation, False)


@register()
def nanquantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """``quantile`` ignoring NaN (NaN only where a slice is all NaN).

    >>> import autodiag as torch
    >>> torch.nanquantile(torch.tensor([1.0, float("nan"), 3.0]), 0.5)
    tensor(2.)
    """
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)


# ---------------------------------------------------------------------------------------------
# cdist
# ---------------------------------------------------------------------------------------------

# NOTE [cdist paths]: PyTorch computes p = 2 distances between more than 25 rows through
# ``_euclidean_dist`` (|a|^2 - 2 a.b + |b|^2 by one matmul, ``EuclideanDistBackward0``, then a
# view), everything else through ``_cdist_forward`` (``CdistBackward0``: each pair's sum of
# |a_k - b_k|^p in column order). Both are followed here, as PyTorch picks them
# (``compute_mode``), so values, nodes and gradients are that path's.

_CDIST_MODES = {
    "use_mm_for_euclid_dist_if_necessary": 0,
    "use_mm_for_euclid_dist": 1,
    "donot_use_mm_for_euclid_dist": 2,
}


def _cdist_rows(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """``_cdist_forward``'s values: per pair, |a_k - b_k|^p summed in column order."""
    t = a.dtype.type
    diff = a[..., :, None, :] - b[..., None, :, :]  # (*, P, R, M)
    agg = np.zeros(diff.shape[:-1], a.dtype)
    with np.errstate(all="ignore"):
        for k in range(diff.shape[-1]):
            dk = np.abs(diff[..., k])
            if p == 0:
                agg = agg + np.minimum(np.ceil(dk), t(1))
            elif p == 1:
                agg = agg + dk
            elif p == 2:
                agg = agg + dk * dk
            elif p == np.inf:
                agg = np.maximum(agg, dk)
            else:
                agg = agg + np.power(dk, t(p))
        if p == 2:
            agg = np.sqrt(agg)
        elif p not in (0, 1, np.inf):
            agg = np.power(agg, t(1.0 / p))
    return agg.astype(a.dtype, copy=False)


class CdistBackwardBackward0(Node):
    __slots__ = ()

    def backward(self, xp, g):
        raise NotImplementedError("the derivative for '_cdist_backward' is not implemented.")


def _cdist_grad(g, a, b, r, p):
    """``_cdist_backward(grad, x1, x2, p, result)``: the gradient for ``a`` (arrays)."""
    diff = a[..., :, None, :] - b[..., None, :, :]
    gg = g[..., None]
    rr = r[..., None]
    with np.errstate(all="ignore"):
        if p == 0:
            out = np.zeros_like(diff)
        elif p == 1:
            out = gg * np.sign(diff)
        elif p == 2:
            out = np.where(rr == 0, 0, gg * diff / rr)
        elif p == np.inf:
            out = gg * np.sign(diff) * (np.abs(diff) == rr)
        elif p < 2:
            out = np.where(
                (rr == 0) | (diff == 0),
                0,
                gg * np.sign(diff) * np.abs(diff) ** (p - 1) / rr ** (p - 1),
            )
        else:
            out = np.where(rr == 0, 0, gg * diff * np.abs(diff) ** (p - 2) / rr ** (p - 1))
    return out.sum(-2).astype(a.dtype, copy=False)


class CdistBackward0(Node):
    __slots__ = ("p",)
    _saved_names = ("x1", "x2", "result")
    _extra_names = ("p",)

    def backward(self, xp, g):
        x1, x2, r = self.saved_x1(xp), self.saved_x2(xp), self.saved_result(xp)
        arrays = xp.arrays
        gd, ad_, bd, rd = (g, x1, x2, r) if arrays else (g._data, x1._data, x2._data, r._data)
        needs1, needs2 = self.needs_grad
        g1 = _cdist_grad(gd, ad_, bd, rd, self.p) if needs1 else None
        g2 = (
            _cdist_grad(np.swapaxes(gd, -1, -2), bd, ad_, np.swapaxes(rd, -1, -2), self.p)
            if needs2
            else None
        )
        if arrays:
            return (g1, g2)
        deps = [t for t in (g, x1, x2) if t.requires_grad]

        def lift(v):
            if v is None:
                return None
            if deps and _state.record:
                return result(np.asarray(v), CdistBackwardBackward0(tuple(edge(t) for t in deps)))
            return result(np.asarray(v), None)

        return (lift(g1), lift(g2))

    def _saved_extra(self):
        return {"p": self.p}


class EuclideanDistBackward0(Node):
    __slots__ = ()
    _saved_names = ("x1", "x2", "result")

    def backward(self, xp, g):
        # _euclidean_dist_backward: ratio = grad / res (0 where res == 0);
        # x1 * ratio.sum(-1, keepdim) - ratio @ x2, x2 * ratio.sum(-2).unsqueeze(-1) - ratio^T @ x1
        x1, x2, r = self.saved_x1(xp), self.saved_x2(xp), self.saved_result(xp)
        with np.errstate(all="ignore"):
            ratio = xp.mask(r != 0, g / r)
        needs1, needs2 = self.needs_grad
        g1 = g2 = None
        if needs1:
            g1 = x1 * xp.sum(ratio, (ratio.ndim - 1,), keepdim=True) - xp.matmul(ratio, x2)
        if needs2:
            s = xp.sum(ratio, (ratio.ndim - 2,), keepdim=False)
            s = s[..., None] if xp.arrays else s.unsqueeze(-1)
            g2 = x2 * s - xp.matmul(xp.mT(ratio), x1)
        return (g1, g2)


def _euclidean_dist(a: Tensor, b: Tensor) -> Tensor:
    from autodiag.ops._core import save, save_output
    from autodiag.ops._products import matmul_array

    x1, x2 = a._data, b._data
    n1 = np.square(x1).sum(-1, keepdims=True)
    n2 = np.square(x2).sum(-1, keepdims=True)
    left = np.concatenate([x1 * x1.dtype.type(-2), n1, np.ones_like(n1)], -1)
    right = np.concatenate([x2, np.ones_like(n2), n2], -1)
    out = matmul_array(left, np.swapaxes(right, -1, -2))
    out = np.sqrt(np.maximum(out, out.dtype.type(0))).astype(x1.dtype, copy=False)
    if _state.record and (a.requires_grad or b.requires_grad):
        node = EuclideanDistBackward0((edge(a), edge(b)))
        r = result(out, node)
        node._saved = (save(a), save(b), save_output(r))
        return r
    return result(out, None)


@register(method=False)
def cdist(x1, x2, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary"):
    """Pairwise ``p``-norm distances between the rows of ``x1`` and ``x2`` (batched).

    >>> import autodiag as torch
    >>> torch.cdist(torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 4.0], [0.0, 1.0]]))
    tensor([[5., 1.]])
    """
    from autodiag.ops._core import save, save_output

    a = _tensor("cdist", x1, 1, "x1")
    b = _tensor("cdist", x2, 2, "x2")
    ad_, bd = a._data, b._data
    for name, d in (("X1", ad_), ("X2", bd)):
        if d.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {d.ndim}D")
    for name, t in (("X1", a), ("X2", b)):
        if t._data.dtype.kind != "f":
            raise RuntimeError(
                f"cdist only supports floating-point dtypes, {name} got: {t.dtype.scalar_name}"
            )
    if ad_.shape[-1] != bd.shape[-1]:
        raise RuntimeError(
            "X1 and X2 must have the same number of columns. X1: "
            f"{ad_.shape[-1]} X2: {bd.shape[-1]}"
        )
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if ad_.dtype != bd.dtype:
        raise RuntimeError(
            "X1 and X2 must have the same dtype: X1 got "
            f"{a.dtype.scalar_name}, X2 got {b.dtype.scalar_name}"
        )
    mode = _CDIST_MODES[compute_mode]
    r1, r2, c = ad_.shape[-2], bd.shape[-2], ad_.shape[-1]
    batch = tuple(np.broadcast_shapes(ad_.shape[:-2], bd.shape[:-2]))
    p = float(p)
    if ad_.size and bd.size and p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        prod = int(np.prod(batch)) if batch else 1
        if prod == 1:
            ea, eb = a, b
        else:
            ea = a.expand(*batch, r1, c).contiguous().view(prod, r1, c)
            eb = b.expand(*batch, r2, c).contiguous().view(prod, r2, c)
        return _euclidean_dist(ea, eb).view(*batch, r1, r2)
    aa = np.broadcast_to(ad_, batch + (r1, c))
    bb = np.broadcast_to(bd, batch + (r2, c))
    out = np.ascontiguousarray(_cdist_rows(aa, bb, p))
    if _state.record and (a.requires_grad or b.requires_grad):
        node = CdistBackward0((edge(a), edge(b)))
        node.p = p
        node._input_meta = ((ad_.shape, ad_.dtype), (bd.shape, bd.dtype))  # sum batch expansion
        r = result(out, node)
        node._saved = (save(a), save(b), save_output(r))
        return r
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# renorm
# ---------------------------------------------------------------------------------------------


def _slice_norm(xp, x, p, dims):
    """``linalg_vector_norm(x, p, dims, keepdim=True)`` in the vocabulary ``xp``."""
    ax = xp.abs(x)
    if p == float("inf"):
        return ax.max(axis=dims, keepdims=True) if xp.arrays else ax.amax(dims, keepdim=True)
    if p == 1:
        return xp.sum(ax, dims, keepdim=True)
    return xp.sum(ax**p, dims, keepdim=True) ** (1.0 / p)


class RenormBackward0(Node):
    __slots__ = ("p", "dim", "maxnorm", "dims")
    _saved_names = ("self",)
    _extra_names = ("p", "dim", "maxnorm")

    def backward(self, xp, g):
        # renorm_backward (FunctionsManual.cpp)
        x = self.saved_self(xp)
        p, dims, maxnorm = self.p, self.dims, self.maxnorm
        norm = _slice_norm(xp, x, p, dims)
        go = xp.sum(x * g, dims, keepdim=True)
        with np.errstate(all="ignore"):
            if p == 2:
                nb = xp.mask(norm != 0, x * (go / norm))
            elif p == 1:
                nb = xp.sign(x) * go
            elif p == float("inf"):
                mask = xp.abs(x) == norm
                count = xp.sum(mask * 1.0, dims, keepdim=True)
                nb = xp.sign(x) * (mask * 1.0) * (go / count)
            else:
                nb = xp.mask(norm != 0, x * xp.abs(x) ** (p - 2) * go / norm ** (p - 1))
            invnorm = 1.0 / (norm + 1e-7)
            factor = invnorm * maxnorm
            out = factor * g - (factor * invnorm) * nb
        return (xp.where(norm > maxnorm, out, g),)

    def _saved_extra(self):
        return {"p": self.p, "dim": self.dim, "maxnorm": self.maxnorm}


@register(inplace=False)
def renorm(input, p, dim: int, maxnorm):
    """Each slice along ``dim`` scaled to ``p``-norm at most ``maxnorm`` (``RenormBackward0``).

    >>> import autodiag as torch
    >>> torch.renorm(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 2, 0, 1.0)
    tensor([[0.6000, 0.8000],
            [0.3000, 0.4000]])
    """
    from autodiag.ops._core import save
    from autodiag.size import wrap_dim

    x = _tensor("renorm", input)
    d = x._data
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if d.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {d.ndim} dimensions")
    if d.dtype.kind != "f":
        raise RuntimeError(f"renorm: expected a floating point tensor, got {x.dtype.scalar_name}")
    k = wrap_dim(dim, d.ndim)
    dims = tuple(i for i in range(d.ndim) if i != k)
    p = float(p)
    acc = d.astype(np.float64)  # PyTorch's norm here is in the accumulate type (double)
    with np.errstate(all="ignore"):
        norm = _slice_norm(_NumpyVocab, acc, p, dims) if d.size else acc
        factor = np.where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0).astype(d.dtype)
    out = np.asarray(d * factor, dtype=d.dtype)
    if _state.record and x.requires_grad:
        node = RenormBackward0((edge(x),))
        node.p, node.dim, node.maxnorm, node.dims = p, k, float(maxnorm), dims
        r = result(out, node)
        node._saved = (save(x),)
        return r
    return result(out, None)


class _NumpyVocab:
    arrays = True
    abs = staticmethod(np.abs)

    @staticmethod
    def sum(a, dims, keepdim=False):
        return a.sum(axis=dims, keepdims=keepdim)


# ---------------------------------------------------------------------------------------------
# mode
# ---------------------------------------------------------------------------------------------

# NOTE [Mode ties]: ATen's CPU mode sorts (value, index) pairs with ``std::sort`` comparing the
# values only, then takes the first longest run and the index of its *last* pair: which index
# among equal values that is depends on how libstdc++'s introsort moves equal elements. The
# sort is ported step for step (``_libstdcxx_sort``: median-of-three pivot, unguarded
# partition, insertion sort below 16 elements), so the index, and the gradient it receives, is
# PyTorch's. The heapsort fallback (recursion deeper than 2 log2 n, which these pivots reach
# only on crafted inputs) is not ported: it raises NotImplementedError rather than guess.

_Mode = namedtuple("mode", ["values", "indices"])
_Mode.__repr__ = lambda self: (
    f"torch.return_types.mode(\nvalues={self.values!r},\nindices={self.indices!r})"
)


def _libstdcxx_sort(v: list) -> list:
    """The index order ``std::sort`` leaves for values ``v`` (comparing ``v[i] < v[j]``)."""
    a = list(range(len(v)))

    def less(i, j):
        return v[i] < v[j]

    def insertion(first, last):
        for i in range(first + 1, last):
            x = a[i]
            if less(x, a[first]):
                a[first + 1 : i + 1] = a[first:i]
                a[first] = x
            else:
                unguarded_insert(i)

    def unguarded_insert(k):
        x = a[k]
        j = k - 1
        while less(x, a[j]):
            a[k] = a[j]
            k = j
            j -= 1
        a[k] = x

    def median_to_first(result, i, j, k):
        if less(a[i], a[j]):
            if less(a[j], a[k]):
                a[result], a[j] = a[j], a[result]
            elif less(a[i], a[k]):
                a[result], a[k] = a[k], a[result]
            else:
                a[result], a[i] = a[i], a[result]
        elif less(a[i], a[k]):
            a[result], a[i] = a[i], a[result]
        elif less(a[j], a[k]):
            a[result], a[k] = a[k], a[result]
        else:
            a[result], a[j] = a[j], a[result]

    def partition(first, last, pivot):
        while True:
            while less(a[first], a[pivot]):
                first += 1
            last -= 1
            while less(a[pivot], a[last]):
                last -= 1
            if not first < last:
                return first
            a[first], a[last] = a[last], a[first]
            first += 1

    n = len(a)
    if n > 1:
        stack = [(0, n, 2 * (n.bit_length() - 1))]
        while stack:  # the introsort loop: recurse right, iterate left (no recursion)
            first, last, depth = stack.pop()
            while last - first > 16:
                if depth == 0:
                    raise NotImplementedError(
                        "mode: this input drives std::sort into its heapsort fallback, which "
                        "autodiag does not reproduce (NOTE [Mode ties])"
                    )
                depth -= 1
                mid = first + (last - first) // 2
                median_to_first(first, first + 1, mid, last - 1)
                cut = partition(first + 1, last, first)
                stack.append((cut, last, depth))
                last = cut
        if n > 16:
            insertion(0, 16)
            for i in range(16, n):
                unguarded_insert(i)
        else:
            insertion(0, n)
    return a


def _mode_rows(rows: np.ndarray):
    vals = np.empty(rows.shape[0], rows.dtype)
    idx = np.empty(rows.shape[0], np.int64)
    for r, row in enumerate(rows):
        v = row.tolist()
        order = _libstdcxx_sort(v)
        best = best_i = None
        best_f = run = 0
        n = len(order)
        for i in range(n):
            run += 1
            if i == n - 1 or v[order[i]] != v[order[i + 1]]:
                if run > best_f:
                    best, best_i, best_f = v[order[i]], order[i], run
                run = 0
        vals[r], idx[r] = best, best_i
    return vals, idx


def _mode_backward_class():
    from autodiag.ops.reduction import MaxBackward0

    return type("ModeBackward0", (MaxBackward0,), {"__slots__": ()})


_MODE_NODE: list = []


@register()
def mode(input, dim: int = -1, keepdim: bool = False):
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and
    the index PyTorch reports for it (NOTE [Mode ties]).

    >>> import autodiag as torch
    >>> torch.mode(torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0])).values
    tensor(1.)
    """
    from autodiag.ops.stats import _along_dim, _select_result

    x = _tensor("mode", input)
    if not _MODE_NODE:
        _MODE_NODE.append(_mode_backward_class())
    rows, k = _along_dim(x, dim, "mode()")
    return _select_result(x, k, keepdim, rows, _mode_rows, _MODE_NODE[0], _Mode)
