"""Ops that pick, order or move elements: ``tril``/``triu``, ``sort``/``argsort``/``topk``,
``roll`` and ``repeat_interleave``.

Each forward sits above its Node. ``sort`` and ``topk`` route the gradient back to the positions
they picked (PyTorch's ``value_selecting_reduction_backward``: a scatter into zeros), so their
backward is itself differentiable; ``repeat_interleave`` is recorded as the composite PyTorch
records (``unsqueeze``/``expand``/``clone``/``view``, or ``index_select`` for tensor repeats).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from autodiag.core.graph import Node
from autodiag.core.zeros import ZeroArray
from autodiag.ops._core import _state, as_tensor_operand, edge, register, result, save, wrap
from autodiag.size import wrap_dim
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# tril / triu
# ---------------------------------------------------------------------------------------------


class TrilBackward0(Node):
    __slots__ = ("diagonal",)

    def backward(self, xp, g):
        return (_tri(g, self.diagonal, np.tril) if xp.arrays else tril(g, self.diagonal),)

    def _saved_extra(self):
        return {"diagonal": self.diagonal}


class TriuBackward0(TrilBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        return (_tri(g, self.diagonal, np.triu) if xp.arrays else triu(g, self.diagonal),)


def _tri(a: np.ndarray, k: int, np_fn) -> np.ndarray:
    # NOTE: np.tril multiplies by a 0/1 mask (inf * 0 = nan); PyTorch selects, so do we
    n, m = a.shape[-2:]
    keep = np_fn(np.ones((n, m), dtype=bool), k)
    return np.where(keep, a, np.zeros((), dtype=a.dtype))


def _tri_op(name: str, input, diagonal, np_fn, cls) -> Tensor:
    d = input._data
    if d.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    diagonal = int(diagonal)
    out = _tri(d, diagonal, np_fn)
    if _state.record and input.requires_grad:
        node = cls((edge(input),))
        node.diagonal = diagonal
        return result(out, node)
    return result(out, None)


@register(inplace=True)
def tril(input, diagonal: int = 0):
    """The lower triangle of the last two dims (elements above ``diagonal`` become 0).

    >>> import autodiag as torch
    >>> torch.ones(2, 3).tril()
    tensor([[1., 0., 0.],
            [1., 1., 0.]])
    """
    return _tri_op("tril", input, diagonal, np.tril, TrilBackward0)


@register(inplace=True)
def triu(input, diagonal: int = 0):
    """The upper triangle of the last two dims (elements below ``diagonal`` become 0).

    >>> import autodiag as torch
    >>> torch.ones(2, 3).triu(1)
    tensor([[0., 1., 1.],
            [0., 0., 1.]])
    """
    return _tri_op("triu", input, diagonal, np.triu, TriuBackward0)


# ---------------------------------------------------------------------------------------------
# sort / argsort / topk
# ---------------------------------------------------------------------------------------------

_Sort = namedtuple("sort", ["values", "indices"])
_Topk = namedtuple("topk", ["values", "indices"])


class SortBackward0(Node):
    """The gradient goes back to the position each value came from."""

    __slots__ = ("dim", "self_sym_sizes")
    _saved_names = ("indices",)

    def backward(self, xp, g):
        from autodiag.ops.shape import scatter_into_zeros

        idx = self.saved_indices(xp)
        return (scatter_into_zeros(xp, g, self.dim, idx, self.self_sym_sizes),)

    def _saved_extra(self):
        return {"dim": self.dim, "self_sym_sizes": self.self_sym_sizes}


class TopkBackward0(SortBackward0):
    __slots__ = ()


def _order(d: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """Stable sort order along ``dim`` as PyTorch's CPU sort gives it: NaN sorts above every
    number, ties keep their input order (also descending)."""
    if not descending:
        return np.argsort(d, axis=dim, kind="stable")
    # a stable ascending sort of the reversed array, reversed back: descending, and ties in
    # increasing index order (negating would overflow integers and misplace NaN)
    n = d.shape[dim]
    rev = np.argsort(np.flip(d, dim), axis=dim, kind="stable")
    return np.flip(n - 1 - rev, dim)


_TOPK_REPLAYED = 1 << 16  # elements of rows replayed (~1.3 us each), at most


def _topk_order(d: np.ndarray, dim: int, largest: bool, k: int, sorted_: bool) -> np.ndarray:
    """The first ``k`` indices along ``dim`` in PyTorch's topk order (NOTE [topk ties] in
    ops/_stl_select.py): the stable order where it is PyTorch's (a sorted result over rows
    without equal values), else libstdc++'s algorithms replayed row by row."""
    idx = np.take(_order(d, dim, largest), np.arange(k), axis=dim)
    n = d.shape[dim]
    if k == 0 or n < 2:
        return idx
    rows = np.moveaxis(d, dim, -1).reshape(-1, n)
    if sorted_:
        with np.errstate(invalid="ignore"):
            s = np.sort(rows, axis=1)
            redo = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if rows.dtype.kind == "f":
            redo |= np.isnan(rows).sum(axis=1) > 1
        if not redo.any():
            return idx
    else:
        redo = np.ones(rows.shape[0], dtype=bool)
    if int(redo.sum()) * n > _TOPK_REPLAYED:
        return idx  # too costly in Python: the stable order (README 'Where autodiag differs')
    from autodiag.ops._stl_select import topk_row

    out = np.moveaxis(idx, dim, -1).reshape(-1, k).copy()
    for r in np.nonzero(redo)[0]:
        out[r] = topk_row(rows[r].tolist(), k, largest, sorted_)
    shape = np.moveaxis(idx, dim, -1).shape
    return np.moveaxis(out.reshape(shape), -1, dim)


def _sorted(
    input, dim: int, descending: bool, k: int | None, cls, ret, name: str, sorted_: bool = True
):
    x = as_tensor_operand(input)
    d = x._data
    if d.dtype.kind == "c":
        raise RuntimeError(f"{name}(): complex tensors are not supported")
    if d.ndim == 0:
        dim = wrap_dim(dim, 0)  # PyTorch's range for a 0-d tensor: [-1, 0]
        if k is not None and k > 1:
            raise RuntimeError("selected index k out of range")
        idx = np.zeros((), dtype=np.int64)
        vals = d.copy()
    else:
        dim = wrap_dim(dim, d.ndim)
        if k is not None and not 0 <= k <= d.shape[dim]:
            raise RuntimeError("selected index k out of range")
        if k is None:
            idx = _order(d, dim, descending).astype(np.int64)
        else:
            idx = _topk_order(d, dim, descending, k, sorted_).astype(np.int64)
        vals = np.take_along_axis(d, idx, dim)
    indices = wrap(idx)
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.dim, node.self_sym_sizes = dim, d.shape
        node._saved = (save(indices),)
        return ret(result(vals, node), indices)
    return ret(result(vals, None), indices)


@register()
def sort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """``(values, indices)`` sorted along ``dim``; ties keep their order (NaN sorts last).

    >>> import autodiag as torch
    >>> torch.tensor([3.0, 1.0, 2.0]).sort()
    torch.return_types.sort(
    values=tensor([1., 2., 3.]),
    indices=tensor([1, 2, 0]))
    """
    return _sorted(input, dim, descending, None, SortBackward0, _Sort, "sort")


@register()
def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False):
    """The indices that sort ``input`` along ``dim`` (``sort(...).indices``)."""
    d = as_tensor_operand(input)._data
    if d.ndim == 0:
        wrap_dim(dim, 0)  # PyTorch's range for a 0-d tensor: [-1, 0]
        return wrap(np.zeros((), dtype=np.int64))
    return wrap(_order(d, wrap_dim(dim, d.ndim), descending).astype(np.int64))


@register()
def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices.

    >>> import autodiag as torch
    >>> torch.tensor([1.0, 4.0, 2.0]).topk(2).values
    tensor([4., 2.])
    """
    return _sorted(input, dim, largest, int(k), TopkBackward0, _Topk, "topk", bool(sorted))


# --- PyTorch's repr of its return types ---------------------------------------------------------

for _t in (_Sort, _Topk):
    _t.__repr__ = lambda self: (
        f"torch.return_types.{type(self).__name__}(\nvalues={self.values!r},\n"
        f"indices={self.indices!r})"
    )


# ---------------------------------------------------------------------------------------------
# roll
# ---------------------------------------------------------------------------------------------


class RollBackward0(Node):
    __slots__ = ("shifts", "dims")

    def backward(self, xp, g):
        back = tuple(-s for s in self.shifts)
        if xp.arrays:
            return (_roll_array(g, back, self.dims) if g.size else g,)
        return (roll(g, back, self.dims or None),)

    def _saved_extra(self):
        return {"shifts": self.shifts, "dims": self.dims}


def _roll_array(a: np.ndarray, shifts: tuple, dims: tuple) -> np.ndarray:
    if a.__class__ is ZeroArray:
        return a  # an efficient zero gradient (SgnBackward0's) rolled: np.roll would write it
    if not dims:  # rolled as if flattened
        return np.roll(a.reshape(-1), shifts[0]).reshape(a.shape)
    return np.roll(a, shifts, dims)


@register()
def roll(input, shifts, dims=None):
    """Rotate elements along ``dims`` by ``shifts`` (the flattened tensor when ``dims`` is
    None).

    >>> import autodiag as torch
    >>> torch.tensor([1, 2, 3]).roll(1)
    tensor([3, 1, 2])
    """
    d = input._data
    shifts = (int(shifts),) if isinstance(shifts, (int, np.integer)) else tuple(map(int, shifts))
    if dims is None or dims == () or dims == []:
        dims = ()
    else:
        dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims and len(shifts) != 1 or dims and len(shifts) != len(dims):
        raise RuntimeError(
            f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
        )
    if dims and d.size:  # PyTorch returns an empty tensor's copy before it reads the dims
        dims = tuple(wrap_dim(k, d.ndim) for k in dims)
    out = _roll_array(d, shifts, dims) if d.size else d.copy()
    if _state.record and input.requires_grad:
        node = RollBackward0((edge(input),))
        node.shifts, node.dims = shifts, dims
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# repeat_interleave
# ---------------------------------------------------------------------------------------------


def _repeats_index(counts: np.ndarray) -> np.ndarray:
    """``repeat_interleave(counts)``: each index ``i`` repeated ``counts[i]`` times."""
    if counts.ndim != 1:
        raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
    if counts.size and counts.min() < 0:
        raise RuntimeError("repeats can not be negative")
    return np.repeat(np.arange(counts.size, dtype=np.int64), counts)


@register()
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times along ``dim`` (of the flattened tensor when
    ``dim`` is None); ``repeat_interleave(counts)`` alone gives ``[0]*counts[0] + [1]*...``.

    >>> import autodiag as torch
    >>> torch.tensor([1, 2]).repeat_interleave(2)
    tensor([1, 1, 2, 2])
    """
    if repeats is None:  # torch.repeat_interleave(repeats)
        counts = as_tensor_operand(input)._data
        if counts.dtype.kind not in "iu":
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        return wrap(_repeats_index(counts))
    x = input
    if dim is None:
        x, dim = x.flatten(), 0
    dim = wrap_dim(dim, x.ndim)
    if isinstance(repeats, Tensor):
        r = repeats._data
        if r.dtype.kind not in "iu":
            raise RuntimeError("repeats has to be Long or Int tensor")
        if r.ndim == 0 or r.size == 1:
            repeats = int(r.reshape(-1)[0])
            r = np.full(x.shape[dim], repeats, dtype=np.int64)
        elif r.ndim == 1 and r.size != x.shape[dim]:
            raise RuntimeError(
                "repeats must have the same size as input along dim, but got repeats.size(0) = "
                f"{r.size} and input.size(0) = {x.shape[dim]}"
            )
        # PyTorch: index_select with the repeated indices (IndexSelectBackward0)
        return x.index_select(dim, wrap(_repeats_index(r)))
    repeats = int(repeats)
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    # PyTorch's composite for an int: unsqueeze, expand, clone, view
    shape = tuple(x.shape)
    big = shape[: dim + 1] + (repeats,) + shape[dim + 1 :]
    out_shape = shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1 :]
    return x.unsqueeze(dim + 1).expand(big).clone().view(out_shape)
