"""More shape ops real programs call (issue 20): stacking and splitting (``hstack vstack dstack
column_stack row_stack hsplit vsplit dsplit tensor_split split_with_sizes``), ``tile fliplr
flipud rot90 ravel atleast_1d/2d/3d broadcast_tensors broadcast_shapes meshgrid
cartesian_prod combinations block_diag diff sum_to_size``, index helpers (``tril_indices
triu_indices unravel_index isin searchsorted bucketize``), the products ``kron inner tensordot
vdot addmv addr addbmm`` and ``pixel_shuffle``/``pixel_unshuffle``.

Where PyTorch's op is a composite (its graph records the parts: ``hstack`` is ``cat``,
``tensor_split`` returns ``slice`` views, ``diff`` is ``narrow`` and ``sub``), ours is built
from the same parts, so values, views, version counters and node names follow. The rest have a
node of their own, PyTorch's formula from derivatives.yaml beside it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    broadcast_error,
    edge,
    register,
    result,
    save,
    set_broadcast_meta,
    wrap,
    wrap_dim,
)
from autodiag.size import Size
from autodiag.tensor import Tensor


def _tensors(tensors, op: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (tuple, list)):
        raise TypeError(
            f"{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
            f"{type(tensors).__name__}"
        )
    return list(tensors)


def _varargs(tensors: tuple) -> list:
    """``f(a, b)`` or ``f([a, b])``, as PyTorch's atleast_*/broadcast_tensors/meshgrid take."""
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        return list(tensors[0])
    return list(tensors)


# ---------------------------------------------------------------------------------------------
# atleast_1d / 2d / 3d
# ---------------------------------------------------------------------------------------------


def _atleast(tensors: tuple, fn):
    ts = _varargs(tensors)
    if len(tensors) == 1 and isinstance(tensors[0], Tensor):
        return fn(tensors[0])
    return tuple(fn(t) for t in ts)


def _al1(t):
    return t.reshape(1) if t.ndim == 0 else t


def _al2(t):
    if t.ndim == 0:
        return t.reshape(1, 1)
    return t.unsqueeze(0) if t.ndim == 1 else t


def _al3(t):
    if t.ndim == 0:
        return t.reshape(1, 1, 1)
    if t.ndim == 1:
        return t.unsqueeze(0).unsqueeze(-1)
    return t.unsqueeze(-1) if t.ndim == 2 else t


@register(method=False)
def atleast_1d(*tensors):
    """The tensor itself, or a 1-element 1-D view of a 0-d one (a tuple for several).

    >>> import autodiag as torch
    >>> torch.atleast_1d(torch.tensor(2.0))
    tensor([2.])
    """
    return _atleast(tensors, _al1)


@register(method=False)
def atleast_2d(*tensors):
    """At least 2 dims: a 1-D tensor becomes a row (``unsqueeze(0)``).

    >>> import autodiag as torch
    >>> torch.atleast_2d(torch.tensor([1.0, 2.0])).shape
    torch.Size([1, 2])
    """
    return _atleast(tensors, _al2)


@register(method=False)
def atleast_3d(*tensors):
    """At least 3 dims: ``(n,)`` becomes ``(1, n, 1)``, ``(m, n)`` becomes ``(m, n, 1)``.

    >>> import autodiag as torch
    >>> torch.atleast_3d(torch.ones(2, 3)).shape
    torch.Size([2, 3, 1])
    """
    return _atleast(tensors, _al3)


# ---------------------------------------------------------------------------------------------
# stacking
# ---------------------------------------------------------------------------------------------


def _cat(ts, dim):
    from autodiag.ops.shape import cat

    return cat(ts, dim)


@register(method=False)
def hstack(tensors):
    """Join along dim 1 (dim 0 for 1-D tensors): ``cat`` of their ``atleast_1d``.

    >>> import autodiag as torch
    >>> torch.hstack([torch.ones(2, 1), torch.zeros(2, 2)])
    tensor([[1., 0., 0.],
            [1., 0., 0.]])
    """
    ts = [_al1(t) for t in _tensors(tensors, "hstack")]
    if not ts:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return _cat(ts, 0 if ts[0].ndim == 1 else 1)


@register(method=False)
def vstack(tensors):
    """Join along dim 0, 1-D tensors as rows: ``cat`` of their ``atleast_2d``.

    >>> import autodiag as torch
    >>> torch.vstack([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])])
    tensor([[1., 2.],
            [3., 4.]])
    """
    ts = [_al2(t) for t in _tensors(tensors, "vstack")]
    if not ts:
        raise RuntimeError("vstack expects a non-empty TensorList")
    return _cat(ts, 0)


row_stack = register("row_stack", method=False)(vstack)


@register(method=False)
def dstack(tensors):
    """Join along dim 2: ``cat`` of their ``atleast_3d``.

    >>> import autodiag as torch
    >>> torch.dstack([torch.ones(2), torch.zeros(2)]).shape
    torch.Size([1, 2, 2])
    """
    ts = [_al3(t) for t in _tensors(tensors, "dstack")]
    if not ts:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return _cat(ts, 2)


@register(method=False)
def column_stack(tensors):
    """Join as columns: 0-d and 1-D tensors become ``(n, 1)`` columns, then ``cat`` on dim 1.

    >>> import autodiag as torch
    >>> torch.column_stack([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])])
    tensor([[1., 3.],
            [2., 4.]])
    """
    ts = _tensors(tensors, "column_stack")
    if not ts:
        raise RuntimeError("column_stack expects a non-empty TensorList")
    return _cat([t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in ts], 1)


# ---------------------------------------------------------------------------------------------
# splitting: views (SliceBackward0 each, as PyTorch's tensor_split records them)
# ---------------------------------------------------------------------------------------------


@register()
def tensor_split(input, indices_or_sections, dim: int = 0):
    """Split into ``n`` near-equal views (the first ``size % n`` one longer), or at the given
    indices, along ``dim``.

    >>> import autodiag as torch
    >>> [t.tolist() for t in torch.arange(5).tensor_split(2)]
    [[0, 1, 2], [3, 4]]
    """
    from autodiag.ops.shape import SliceBackward0, _basic

    if input.ndim == 0:
        raise RuntimeError(
            "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims"
        )
    dim = wrap_dim(dim, input.ndim)
    n = input._data.shape[dim]
    sec = indices_or_sections
    if isinstance(sec, Tensor):
        if sec._data.dtype != np.int64:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to have dtype of long, but "
                f"got {sec.dtype.scalar_name}"
            )
        if sec.ndim > 1:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                f"one-dimensional tensor, but got a tensor with {sec.ndim} dims"
            )
        sec = int(sec._data) if sec.ndim == 0 else [int(v) for v in sec._data]
    if isinstance(sec, (numbers.Integral, np.integer)) and not isinstance(sec, bool):
        sections = int(sec)
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        small, extra = divmod(n, sections)
        bounds, start = [], 0
        for i in range(sections):
            size = small + (1 if i < extra else 0)
            bounds.append((start, start + size))
            start += size
    else:
        idx = [int(v) for v in sec]
        bounds, start = [], 0
        for i in idx + [n]:
            bounds.append((start, i))
            start = i
    outs = []
    for a, b in bounds:
        # PyTorch's slice clamps the bounds into [0, n] (and an end before the start to it)
        a = min(max(a if a >= 0 else a + n, 0), n)
        b = min(max(b if b >= 0 else b + n, a), n)
        outs.append(_basic(input, (slice(None),) * dim + (slice(a, b),), SliceBackward0))
    return tuple(outs)


def _directional_split(name: str, input, sec, dim: int, need: int):
    if input.ndim < need:
        raise RuntimeError(
            f"torch.{name} requires a tensor with at least {need} dimension, but got a tensor "
            f"with {input.ndim} dimensions!"
        )
    if isinstance(sec, (numbers.Integral, np.integer)) and not isinstance(sec, bool):
        size = input._data.shape[dim]
        if sec == 0 or size % sec:
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                f"dimension {size} is not divisible by the split_size {sec}!"
            )
    return tensor_split(input, sec, dim)


@register()
def hsplit(input, indices_or_sections):
    """``tensor_split`` along dim 1 (dim 0 for 1-D tensors); a number of sections must
    divide the size.

    >>> import autodiag as torch
    >>> [t.shape for t in torch.ones(2, 4).hsplit(2)]
    [torch.Size([2, 2]), torch.Size([2, 2])]
    """
    return _directional_split("hsplit", input, indices_or_sections, 0 if input.ndim == 1 else 1, 1)


@register()
def vsplit(input, indices_or_sections):
    """``tensor_split`` along dim 0 of a tensor of at least 2 dims.

    >>> import autodiag as torch
    >>> [t.shape for t in torch.ones(4, 2).vsplit([1])]
    [torch.Size([1, 2]), torch.Size([3, 2])]
    """
    return _directional_split("vsplit", input, indices_or_sections, 0, 2)


@register()
def dsplit(input, indices_or_sections):
    """``tensor_split`` along dim 2 of a tensor of at least 3 dims.

    >>> import autodiag as torch
    >>> len(torch.ones(1, 2, 4).dsplit(2))
    2
    """
    return _directional_split("dsplit", input, indices_or_sections, 2, 3)


@register()
def split_with_sizes(input, split_sizes, dim: int = 0):
    """``split`` with a list of sizes (``SplitWithSizesBackward0``).

    >>> import autodiag as torch
    >>> [t.tolist() for t in torch.arange(4).split_with_sizes([1, 3])]
    [[0], [1, 2, 3]]
    """
    from autodiag.ops.shape import split

    if isinstance(split_sizes, (numbers.Integral, np.integer)):
        raise TypeError(
            "split_with_sizes(): argument 'split_sizes' (position 1) must be tuple of ints, "
            f"not {type(split_sizes).__name__}"
        )
    return split(input, list(split_sizes), dim)


# ---------------------------------------------------------------------------------------------
# tile, fliplr, flipud, rot90, ravel
# ---------------------------------------------------------------------------------------------


@register()
def tile(input, *dims):
    """Repeat the tensor ``dims`` times per dim (leading 1s added to the shorter of the two):
    ``repeat`` (``RepeatBackward0``).

    >>> import autodiag as torch
    >>> torch.tensor([1, 2]).tile(2)
    tensor([1, 2, 1, 2])
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(int(d) for d in dims)
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return input.repeat(dims)


@register()
def fliplr(input):
    """Reverse the columns (dim 1): ``flip(1)``.

    >>> import autodiag as torch
    >>> torch.tensor([[1, 2], [3, 4]]).fliplr()
    tensor([[2, 1],
            [4, 3]])
    """
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip(1)


@register()
def flipud(input):
    """Reverse the rows (dim 0): ``flip(0)``.

    >>> import autodiag as torch
    >>> torch.tensor([1, 2, 3]).flipud()
    tensor([3, 2, 1])
    """
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip(0)


class Rot90Backward0(Node):
    __slots__ = ("k", "dims")

    def backward(self, xp, g):
        if xp.arrays:
            return (np.ascontiguousarray(np.rot90(g, -self.k, self.dims)),)
        return (rot90(g, -self.k, self.dims),)

    def _saved_extra(self):
        return {"k": self.k, "dims": self.dims}


@register()
def rot90(input, k: int = 1, dims=(0, 1)):
    """Rotate by ``k`` quarter turns in the plane of ``dims`` (from the first towards the
    second), a copy.

    >>> import autodiag as torch
    >>> torch.tensor([[1, 2], [3, 4]]).rot90()
    tensor([[2, 4],
            [1, 3]])
    """
    d = input._data
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if d.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {d.ndim}")
    d0, d1 = (wrap_dim(x, d.ndim) for x in dims)
    if d0 == d1:
        raise RuntimeError(
            f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}"
        )
    k = int(k)
    out = np.ascontiguousarray(np.rot90(d, k, (d0, d1)))
    if _state.record and input.requires_grad:
        node = Rot90Backward0((edge(input),))
        node.k, node.dims = k, (d0, d1)
        return result(out, node)
    return result(out, None)


@register()
def ravel(input):
    """The elements as a 1-D tensor: ``contiguous().view(-1)``, a view of a contiguous tensor.

    >>> import autodiag as torch
    >>> torch.tensor([[1, 2], [3, 4]]).t().ravel()
    tensor([1, 3, 2, 4])
    """
    return input.contiguous().view(-1)


# ---------------------------------------------------------------------------------------------
# broadcasting, grids, combinations
# ---------------------------------------------------------------------------------------------


@register(method=False)
def broadcast_shapes(*shapes):
    """The shape the given shapes broadcast to.

    >>> import autodiag as torch
    >>> torch.broadcast_shapes((3, 1), (4,))
    torch.Size([3, 4])
    """
    acc: tuple = ()
    for i, s in enumerate(shapes):
        s = (int(s),) if isinstance(s, (numbers.Integral, np.integer)) else tuple(s)
        try:
            acc = np.broadcast_shapes(acc, s)
        except ValueError:
            k = next(
                k
                for k in range(1, min(len(acc), len(s)) + 1)
                if acc[-k] != s[-k] and acc[-k] != 1 and s[-k] != 1
            )
            raise RuntimeError(
                f"Attempting to broadcast a dimension of length {s[-k]} at {-k}! Mismatching "
                f"argument at index {i} had {s}; but expected shape should be broadcastable "
                f"to {list(acc)}"
            ) from None
    return Size(acc)


@register(method=False)
def broadcast_tensors(*tensors):
    """The tensors expanded to their common shape (each one already of it returned as is).

    >>> import autodiag as torch
    >>> a, b = torch.broadcast_tensors(torch.ones(2, 1), torch.zeros(3))
    >>> a.shape, b.shape
    (torch.Size([2, 3]), torch.Size([2, 3]))
    """
    ts = _varargs(tensors)
    shape: tuple = ()
    for t in ts:
        try:
            shape = np.broadcast_shapes(shape, t._data.shape)
        except ValueError:
            raise RuntimeError(broadcast_error(shape, t._data.shape)) from None
    return tuple(t if t._data.shape == shape else t.expand(shape) for t in ts)


@register(method=False)
def meshgrid(*tensors, indexing: str | None = None):
    """Coordinate grids of 0-d/1-D tensors: ``indexing="ij"`` (matrix, the default) or
    ``"xy"`` (Cartesian: the first two dims swapped). Each grid is an expanded view.

    >>> import autodiag as torch
    >>> x, y = torch.meshgrid(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), indexing="ij")
    >>> x.shape
    torch.Size([2, 3])
    """
    from autodiag import _warnings

    ts = _varargs(tensors)
    if indexing is None:
        _warnings.warn(
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument."
        )
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(
            f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}'
        )
    if not ts:
        raise RuntimeError("torch.meshgrid: Expected at least one tensor")
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(
                f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t!r}"
            )
    for t in ts[1:]:
        if t.dtype != ts[0].dtype:
            raise RuntimeError(
                "torch.meshgrid: Expected all tensors in the tensor list to have the same dtype"
            )
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.numel() for t in ts)
    grids = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        grids.append(t.view(view).expand(shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


@register(method=False)
def cartesian_prod(*tensors):
    """All tuples of one element from each 1-D tensor, as rows (the tensor itself for one).

    >>> import autodiag as torch
    >>> torch.cartesian_prod(torch.tensor([1, 2]), torch.tensor([3, 4]))
    tensor([[1, 3],
            [1, 4],
            [2, 3],
            [2, 4]])
    """
    from autodiag.ops.shape import stack

    ts = _varargs(tensors)
    for t in ts:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([g.flatten() for g in grids], 1)


@register(method=False)
def combinations(input, r: int = 2, with_replacement: bool = False):
    """The length-``r`` combinations of a 1-D tensor's elements, as rows (``itertools``'
    order); ``with_replacement=True`` repeats elements.

    >>> import autodiag as torch
    >>> torch.combinations(torch.tensor([1, 2, 3]))
    tensor([[1, 2],
            [1, 3],
            [2, 3]])
    """
    from autodiag.ops.indexing2 import masked_select
    from autodiag.ops.shape import stack

    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return wrap(np.empty((0,), dtype=input._data.dtype))
    n = input.numel()
    grids = meshgrid(*([input] * r), indexing="ij")
    idx = np.indices((n,) * r)
    mask = np.ones((n,) * r, dtype=bool)
    for a, b in zip(idx[:-1], idx[1:]):
        mask &= (a <= b) if with_replacement else (a < b)
    m = wrap(mask)
    return stack([masked_select(g, m) for g in grids], 1)


# ---------------------------------------------------------------------------------------------
# block_diag
# ---------------------------------------------------------------------------------------------


class BlockDiagBackward0(Node):
    """Each input's gradient is its block of ``grad``."""

    __slots__ = ("blocks",)  # (row, col, shape as the input had it) per input

    def backward(self, xp, g):
        out = []
        for (r, c, shape), needs in zip(self.blocks, self.needs_grad):
            if not needs:
                out.append(None)
                continue
            rows = shape[0] if len(shape) == 2 else 1
            cols = shape[-1] if len(shape) >= 1 else 1
            block = g[r : r + rows, c : c + cols]
            out.append(block if len(shape) == 2 else xp.reshape(block, shape))
        return tuple(out)


@register(method=False)
def block_diag(*tensors):
    """The tensors (0-d, 1-D as a row, or 2-D) on the diagonal of a block matrix.

    >>> import autodiag as torch
    >>> torch.block_diag(torch.ones(1, 2), torch.tensor(5.0))
    tensor([[1., 1., 0.],
            [0., 0., 5.]])
    """
    from autodiag import dtypes

    ts = list(tensors)
    for i, t in enumerate(ts):
        if t.ndim > 2:
            raise RuntimeError(
                f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} "
                f"has {t.ndim} dimensions"
            )
    if not ts:
        return wrap(np.empty((1, 0), dtype=dtypes.get_default_dtype().np))
    mats = [t._data.reshape(1, -1) if t.ndim < 2 else t._data for t in ts]
    dt = dtypes.result_type(ts).np if len(ts) > 1 else ts[0]._data.dtype
    rows, cols = sum(m.shape[0] for m in mats), sum(m.shape[1] for m in mats)
    out = np.zeros((rows, cols), dtype=dt)
    blocks, r, c = [], 0, 0
    for t, m in zip(ts, mats):
        out[r : r + m.shape[0], c : c + m.shape[1]] = m
        blocks.append((r, c, t._data.shape))
        r, c = r + m.shape[0], c + m.shape[1]
    if _state.record and any(t.requires_grad for t in ts):
        node = BlockDiagBackward0(tuple(edge(t) for t in ts))
        node.blocks = tuple(blocks)
        if any(t._data.dtype != dt for t in ts):
            node._input_meta = tuple((None, t._data.dtype) for t in ts)
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# diff, sum_to_size
# ---------------------------------------------------------------------------------------------


@register()
def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first):
    ``narrow(1, len-1) - narrow(0, len-1)``, repeated (``logical_xor`` for bool).

    >>> import autodiag as torch
    >>> torch.tensor([1.0, 4.0, 9.0, 16.0]).diff()
    tensor([3., 5., 7.])
    """
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    dim = wrap_dim(dim, input.ndim)
    x = input
    if prepend is not None or append is not None:
        parts = []
        for extra in (prepend, append):
            if extra is None:
                parts.append(None)
                continue
            e = extra if isinstance(extra, Tensor) else wrap(np.asarray(extra))
            if e.ndim == 0:  # PyTorch expands a 0-d prepend/append to one slice
                shape = list(x.shape)
                shape[dim] = 1
                e = e.expand(shape)
            parts.append(e)
        x = _cat([p for p in (parts[0], x, parts[1]) if p is not None], dim)
    for _ in range(n):
        size = x._data.shape[dim]
        if size == 0:
            break
        a, b = x.narrow(dim, 1, size - 1), x.narrow(dim, 0, size - 1)
        x = a.logical_xor(b) if x._data.dtype == np.bool_ else a - b
    return x


@register(home="Tensor")
def sum_to_size(input, *size):
    """Sum over the dims that ``size`` broadcasts (``x.sum_to_size(1, n)`` keeps the column
    sums): the adjoint of ``expand``.

    >>> import autodiag as torch
    >>> torch.ones(2, 3).sum_to_size(1, 3)
    tensor([[2., 2., 2.]])
    """
    from autodiag.ops.reduction import sum_to

    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    shape = input._data.shape
    ok = len(size) <= len(shape) and all(s == t or s == 1 for s, t in zip(size[::-1], shape[::-1]))
    if not ok:
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    return sum_to(input, size)


# ---------------------------------------------------------------------------------------------
# index helpers (no gradient)
# ---------------------------------------------------------------------------------------------


def _tri_indices(row, col, offset, dtype, np_fn):
    from autodiag import dtypes

    dt = (dtype or dtypes.int64).np
    if row < 0 or col < 0:
        raise RuntimeError(
            f"row must be non-negative, got{row}"
            if row < 0
            else f"col must be non-negative, got{col}"
        )
    r, c = np_fn(row, offset, col)
    return wrap(np.stack([r, c]).astype(dt).reshape(2, -1))


@register(method=False)
def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None):
    """The ``(2, n)`` coordinates of the lower triangle of a ``row x col`` matrix.

    >>> import autodiag as torch
    >>> torch.tril_indices(2, 2)
    tensor([[0, 1, 1],
            [0, 0, 1]])
    """
    return _tri_indices(int(row), int(col), int(offset), dtype, np.tril_indices)


@register(method=False)
def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None):
    """The ``(2, n)`` coordinates of the upper triangle of a ``row x col`` matrix.

    >>> import autodiag as torch
    >>> torch.triu_indices(2, 2)
    tensor([[0, 0, 1],
            [0, 1, 1]])
    """
    return _tri_indices(int(row), int(col), int(offset), dtype, np.triu_indices)


@register(method=False)
def unravel_index(indices, shape):
    """Flat indices as one coordinate tensor per dim of ``shape``.

    >>> import autodiag as torch
    >>> torch.unravel_index(torch.tensor([5, 7]), (3, 4))
    (tensor([1, 1]), tensor([1, 3]))
    """
    if not isinstance(indices, Tensor):  # PyTorch reads indices.is_complex() first
        raise AttributeError(f"'{type(indices).__name__}' object has no attribute 'is_complex'")
    ix = indices._data
    if ix.dtype.kind not in "iu" or ix.dtype == np.bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {wrap(ix).dtype}")
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    elif isinstance(shape, (list, tuple)):
        for s in shape:
            if not isinstance(s, (numbers.Integral, np.integer)):
                raise TypeError(
                    f"expected 'shape' sequence to only contain ints, but got {type(s)}"
                )
        shape = tuple(int(s) for s in shape)
    else:
        raise TypeError(f"expected 'shape' to be int or sequence of ints, but got {type(shape)}")
    if any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got " + str(tuple(shape)))
    if not shape:
        return ()
    if ix.size and 0 in shape:
        raise RuntimeError("ZeroDivisionError")
    # NOTE: as PyTorch's _unravel_index, floor division by the strides then modulo each size:
    # no range check, an index out of range wraps (8 in (2, 4) is (0, 0); -1 is the last)
    ix = ix.astype(np.int64)
    out, stride = [], 1
    for size in reversed(shape):
        out.append(np.floor_divide(ix, stride) % size if ix.size else ix.copy())
        stride *= size
    return tuple(wrap(np.asarray(c, dtype=np.int64)) for c in reversed(out))


def _as_array(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


@register(method=False)
def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """Whether each element of ``elements`` is in ``test_elements`` (a bool tensor of
    ``elements``' shape).

    >>> import autodiag as torch
    >>> torch.isin(torch.tensor([1, 2, 3]), torch.tensor([2, 5]))
    tensor([False,  True, False])
    """
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() received an invalid combination of arguments")
    a, b = _as_array(elements), _as_array(test_elements)
    return wrap(np.asarray(np.isin(a, b, invert=invert)))


def _sorted_search(seq: np.ndarray, values: np.ndarray, right: bool, dt) -> np.ndarray:
    side = "right" if right else "left"
    if seq.ndim <= 1:
        return np.searchsorted(seq, values, side=side).astype(dt)
    if seq.shape[:-1] != values.shape[:-1]:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
            "dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}"
        )
    s2 = seq.reshape(-1, seq.shape[-1])
    v2 = values.reshape(-1, values.shape[-1])
    out = (
        np.stack([np.searchsorted(s, v, side=side) for s, v in zip(s2, v2)])
        if len(s2)
        else (np.zeros(v2.shape, np.int64))
    )
    return out.reshape(values.shape).astype(dt)


@register(method=False)
def searchsorted(
    sorted_sequence,
    input,
    *,
    out_int32: bool = False,
    right: bool = False,
    side=None,
    sorter=None,
    out=None,
):
    """Where each value of ``input`` would go in ``sorted_sequence`` (its last dim) to keep
    it sorted: the first such index, or the last with ``right=True`` / ``side="right"``.

    >>> import autodiag as torch
    >>> torch.searchsorted(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([3.0, 4.0]))
    tensor([1, 2])
    """
    if out is not None:
        raise NotImplementedError("searchsorted: the 'out' argument is not supported")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(
                f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}"
            )
        if right and side == "left":
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of "
                "left while right was True"
            )
        right = side == "right"
    seq = _as_array(sorted_sequence)
    vals = _as_array(input)
    if sorter is not None:
        srt = _as_array(sorter)
        seq = np.take_along_axis(seq, srt, -1) if seq.ndim else seq
    dt = np.int32 if out_int32 else np.int64
    scalar = not isinstance(input, Tensor)
    res = _sorted_search(seq, vals if not scalar else np.asarray(vals).reshape(()), right, dt)
    return wrap(np.asarray(res))


@register(method=False)
def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False, out=None):
    """The bucket of each element of ``input`` among the sorted 1-D ``boundaries``:
    ``boundaries[i-1] < x <= boundaries[i]`` (``<=``/``<`` with ``right=True``).

    >>> import autodiag as torch
    >>> torch.bucketize(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 3.0, 5.0]))
    tensor([1, 2])
    """
    if out is not None:
        raise NotImplementedError("bucketize: the 'out' argument is not supported")
    b = _as_array(boundaries)
    if b.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({b.ndim})")
    dt = np.int32 if out_int32 else np.int64
    return wrap(
        np.asarray(
            np.searchsorted(b, _as_array(input), side="right" if right else "left").astype(dt)
        )
    )


# ---------------------------------------------------------------------------------------------
# products: kron, inner, tensordot (composites), vdot, addmv, addr, addbmm (nodes)
# ---------------------------------------------------------------------------------------------


@register(method=False)
def tensordot(a, b, dims=2, out=None):
    """Sum the products over ``dims`` of ``a`` and ``b`` (a number: ``a``'s last and ``b``'s
    first that many; or two lists): ``permute``, ``reshape``, ``mm``, ``view``, as PyTorch.

    >>> import autodiag as torch
    >>> torch.tensordot(torch.ones(2, 3), torch.ones(3, 4), dims=1).shape
    torch.Size([2, 4])
    """
    if out is not None:
        raise NotImplementedError("tensordot: the 'out' argument is not supported")
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (numbers.Integral, np.integer)):
        k = int(dims)
        if k < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={k}")
        if k > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={k}")
        da, db = list(range(a.ndim - k, a.ndim)), list(range(k))
    else:
        da, db = dims
        da = [da] if isinstance(da, (numbers.Integral, np.integer)) else list(da)
        db = [db] if isinstance(db, (numbers.Integral, np.integer)) else list(db)
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [wrap_dim(d, a.ndim) for d in da]
    db = [wrap_dim(d, b.ndim) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[x]} in dim "
                f"{x} and second has size {b.shape[y]} in dim {y}"
            )
    ra = [d for d in range(a.ndim) if d not in da]
    rb = [d for d in range(b.ndim) if d not in db]
    size = math.prod(a.shape[d] for d in da)
    if a.ndim == 1 and b.ndim == 1 and len(da) == 1:
        return a.permute([0]).dot(b.permute([0])).view(())  # PyTorch takes dot here
    pa = a.permute(ra + da).reshape(math.prod(a.shape[d] for d in ra), size)
    pb = b.permute(db + rb).reshape(size, math.prod(b.shape[d] for d in rb))
    out_shape = [a.shape[d] for d in ra] + [b.shape[d] for d in rb]
    return pa.mm(pb).view(out_shape)


@register(expr=True)
def inner(input, other):
    """The sums of products over the last dims (``tensordot(input, other, ([-1], [-1]))``;
    a product for a 0-d operand).

    >>> import autodiag as torch
    >>> torch.inner(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    tensor(11.)
    """
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(
            f"inner() the last dimension must match on both input tensors but got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    return tensordot(input, other, ([-1], [-1]))


@register(expr=True)
def kron(input, other):
    """The Kronecker product: every element of ``input`` times all of ``other``, as blocks.

    >>> import autodiag as torch
    >>> torch.kron(torch.eye(2), torch.tensor([[1.0, 2.0]]))
    tensor([[1., 2., 0., 0.],
            [0., 0., 1., 2.]])
    """
    from autodiag.ops.shape import UnsafeViewBackward0, _shape_op

    def unsafe_view(t, shape):  # PyTorch's _unsafe_view: a reshape recorded as a copy's
        return _shape_op(t, t._data.reshape(shape), UnsafeViewBackward0, is_view=False)

    nd = max(input.ndim, other.ndim)
    ash = (1,) * (nd - input.ndim) + tuple(input.shape)
    bsh = (1,) * (nd - other.ndim) + tuple(other.shape)
    a = unsafe_view(input, sum(((s, 1) for s in ash), ()))
    b = unsafe_view(other, sum(((1, s) for s in bsh), ()))
    return unsafe_view(a * b, tuple(x * y for x, y in zip(ash, bsh)))


class VdotBackward0(Node):
    """self: ``grad * other``; other: ``grad * self`` (real tensors: no conjugate)."""

    __slots__ = ()
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        return (
            g * self.saved_other(xp) if needs_self else None,
            g * self.saved_self(xp) if needs_other else None,
        )


@register(expr=True)
def vdot(input, other):
    """The dot product of two 1-D tensors (the first conjugated: complex tensors are not
    supported, so it is ``dot``).

    >>> import autodiag as torch
    >>> torch.vdot(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    tensor(11.)
    """
    a, b = input._data, other._data
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.size}] and src [{b.size}] to have "
            f"the same number of elements, but got {a.size} and {b.size} elements respectively"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            "dot : expected both vectors to have same dtype, but found "
            f"{input.dtype.scalar_name} and {other.dtype.scalar_name}"
        )
    out = np.asarray(np.dot(a, b))
    if _state.record and (input.requires_grad or other.requires_grad):
        node = VdotBackward0((edge(input), edge(other)))
        node._saved = (save(input), save(other))
        return result(out, node)
    return result(out, None)


def _scaled(g, s):
    return g if s == 1 else g * s


class AddmvBackward0(Node):
    """self: ``beta * grad``; mat: ``alpha * grad.outer(vec)``; vec: ``alpha * mat.t() @
    grad``."""

    __slots__ = ("alpha", "beta")
    _saved_names = ("mat", "vec")

    def backward(self, xp, g):
        needs_self, needs_mat, needs_vec = self.needs_grad
        gs = _scaled(g, self.beta) if needs_self else None
        gm = gv = None
        if needs_mat:
            v = self.saved_vec(xp)
            gm = _scaled(np.outer(g, v) if xp.arrays else g.outer(v), self.alpha)
        if needs_vec:
            m = self.saved_mat(xp)
            gv = _scaled(m.T @ g if xp.arrays else m.t().mv(g), self.alpha)
        return (gs, gm, gv)

    def _saved_extra(self):
        return {"alpha": self.alpha, "beta": self.beta}


def _check_scalars(name, *ts):
    dt = ts[0]._data.dtype
    for t in ts[1:]:
        if t._data.dtype != dt:
            raise RuntimeError(
                f"expected m1 and m2 to have the same dtype, but got: {ts[0].dtype} != {t.dtype}"
            )


def _beta_term(input, beta, out):
    """``beta * input`` broadcast to ``out``'s shape (beta 0 ignores NaN/inf in input)."""
    d = input._data
    if beta == 0:
        return np.zeros_like(out)
    b = np.broadcast_to(d, out.shape)
    return b if beta == 1 else b * beta


@register(inplace=True)
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``.

    >>> import autodiag as torch
    >>> torch.addmv(torch.ones(2), torch.eye(2), torch.tensor([2.0, 3.0]))
    tensor([3., 4.])
    """
    m, v = mat._data, vec._data
    if m.ndim != 2 or v.ndim != 1:
        raise RuntimeError(
            f"vector + matrix @ vector expected, got {input.ndim}, {m.ndim}, {v.ndim}"
        )
    if m.shape[1] != v.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0] if input.ndim else 1}), mat "
            f"({m.shape[0]}x{m.shape[1]}), vec ({v.shape[0]})"
        )
    _check_scalars("addmv", mat, vec)
    prod = m @ v
    try:
        np.broadcast_shapes(input._data.shape, prod.shape)
    except ValueError:
        raise RuntimeError(
            f"size mismatch, got input ({input.shape[0] if input.ndim else 1}), mat "
            f"({m.shape[0]}x{m.shape[1]}), vec ({v.shape[0]})"
        ) from None
    out = _beta_term(input, beta, prod) + (prod if alpha == 1 else prod * alpha)
    out = np.asarray(out, dtype=m.dtype)
    if _state.record and any(t.requires_grad for t in (input, mat, vec)):
        node = AddmvBackward0((edge(input), edge(mat), edge(vec)))
        node.alpha, node.beta = alpha, beta
        node._saved = (save(mat), save(vec))
        set_broadcast_meta(node, out, input, mat, vec)
        return result(out, node)
    return result(out, None)


class AddrBackward0(Node):
    """self: ``beta * grad``; vec1: ``alpha * grad @ vec2``; vec2: ``alpha * grad.t() @
    vec1``."""

    __slots__ = ("alpha", "beta")
    _saved_names = ("vec1", "vec2")

    def backward(self, xp, g):
        needs_self, needs_v1, needs_v2 = self.needs_grad
        gs = _scaled(g, self.beta) if needs_self else None
        g1 = g2 = None
        if needs_v1:
            v2 = self.saved_vec2(xp)
            g1 = _scaled(g @ v2 if xp.arrays else g.mv(v2), self.alpha)
        if needs_v2:
            v1 = self.saved_vec1(xp)
            g2 = _scaled(g.T @ v1 if xp.arrays else g.t().mv(v1), self.alpha)
        return (gs, g1, g2)

    def _saved_extra(self):
        return {"alpha": self.alpha, "beta": self.beta}


@register(inplace=True)
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``.

    >>> import autodiag as torch
    >>> torch.addr(torch.zeros(2, 2), torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    tensor([[3., 4.],
            [6., 8.]])
    """
    a, b = vec1._data, vec2._data
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(
            f"addr: Expected 1-D argument vec1, but got {a.ndim}-D"
            if a.ndim != 1
            else f"addr: Expected 1-D argument vec2, but got {b.ndim}-D"
        )
    prod = np.outer(a, b)
    try:
        np.broadcast_shapes(input._data.shape, prod.shape)
    except ValueError:
        raise RuntimeError(broadcast_error(input._data.shape, prod.shape)) from None
    out = np.asarray(
        _beta_term(input, beta, prod) + (prod if alpha == 1 else prod * alpha), dtype=prod.dtype
    )
    if _state.record and any(t.requires_grad for t in (input, vec1, vec2)):
        node = AddrBackward0((edge(input), edge(vec1), edge(vec2)))
        node.alpha, node.beta = alpha, beta
        node._saved = (save(vec1), save(vec2))
        set_broadcast_meta(node, out, input, vec1, vec2)
        return result(out, node)
    return result(out, None)


class AddbmmBackward0(Node):
    """self: ``beta * grad``; batch1: ``alpha * grad @ batch2^T`` per batch; batch2:
    ``alpha * batch1^T @ grad`` per batch."""

    __slots__ = ("alpha", "beta", "batches")
    _saved_names = ("batch1", "batch2")

    def backward(self, xp, g):
        needs_self, needs_b1, needs_b2 = self.needs_grad
        gs = _scaled(g, self.beta) if needs_self else None
        g1 = g2 = None
        if xp.arrays:
            if needs_b1:
                g1 = _scaled(np.matmul(g, np.swapaxes(self.saved_batch2(xp), 1, 2)), self.alpha)
            if needs_b2:
                g2 = _scaled(np.matmul(np.swapaxes(self.saved_batch1(xp), 1, 2), g), self.alpha)
            return (gs, g1, g2)
        ge = g.unsqueeze(0).expand((self.batches,) + tuple(g.shape))
        if needs_b1:
            g1 = _scaled(ge.bmm(self.saved_batch2(xp).transpose(1, 2)), self.alpha)
        if needs_b2:
            g2 = _scaled(self.saved_batch1(xp).transpose(1, 2).bmm(ge), self.alpha)
        return (gs, g1, g2)

    def _saved_extra(self):
        return {"alpha": self.alpha, "beta": self.beta}


@register(inplace=True)
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]``.

    >>> import autodiag as torch
    >>> torch.addbmm(torch.zeros(2, 2), torch.ones(3, 2, 1), torch.ones(3, 1, 2))
    tensor([[3., 3.],
            [3., 3.]])
    """
    b1, b2 = batch1._data, batch2._data
    if b1.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if b1.shape[0] != b2.shape[0]:
        raise RuntimeError(
            f"batch1 and batch2 must have same number of batches, got {b1.shape[0]} and "
            f"{b2.shape[0]}"
        )
    if b1.shape[2] != b2.shape[1]:
        raise RuntimeError(
            f"Incompatible matrix sizes for bmm ({b1.shape[1]}x{b1.shape[2]} and "
            f"{b2.shape[1]}x{b2.shape[2]})"
        )
    prod = np.matmul(b1, b2)
    # PyTorch adds the batches' products one after the other
    acc = np.zeros(prod.shape[1:], dtype=prod.dtype)
    for k in range(prod.shape[0]):
        acc += prod[k]
    try:
        np.broadcast_shapes(input._data.shape, acc.shape)
    except ValueError:
        raise RuntimeError(broadcast_error(input._data.shape, acc.shape)) from None
    out = np.asarray(
        _beta_term(input, beta, acc) + (acc if alpha == 1 else acc * alpha), dtype=acc.dtype
    )
    if _state.record and any(t.requires_grad for t in (input, batch1, batch2)):
        node = AddbmmBackward0((edge(input), edge(batch1), edge(batch2)))
        node.alpha, node.beta, node.batches = alpha, beta, b1.shape[0]
        node._saved = (save(batch1), save(batch2))
        set_broadcast_meta(node, out, input)
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# pixel_shuffle / pixel_unshuffle
# ---------------------------------------------------------------------------------------------


def _shuffle(d: np.ndarray, r: int) -> np.ndarray:
    *lead, c, h, w = d.shape
    oc = c // (r * r)
    x = d.reshape(*lead, oc, r, r, h, w)
    n = len(lead)
    x = x.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return np.ascontiguousarray(x).reshape(*lead, oc, h * r, w * r)


def _unshuffle(d: np.ndarray, r: int) -> np.ndarray:
    *lead, c, h, w = d.shape
    oh, ow = h // r, w // r
    x = d.reshape(*lead, c, oh, r, ow, r)
    n = len(lead)
    x = x.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return np.ascontiguousarray(x).reshape(*lead, c * r * r, oh, ow)


class PixelShuffleBackward0(Node):
    __slots__ = ("factor",)

    def backward(self, xp, g):
        if xp.arrays:
            return (_unshuffle(g, self.factor),)
        return (pixel_unshuffle(g, self.factor),)

    def _saved_extra(self):
        return {"upscale_factor": self.factor}


class PixelUnshuffleBackward0(Node):
    __slots__ = ("factor",)

    def backward(self, xp, g):
        if xp.arrays:
            return (_shuffle(g, self.factor),)
        return (pixel_shuffle(g, self.factor),)

    def _saved_extra(self):
        return {"downscale_factor": self.factor}


@register(method=False)
def pixel_shuffle(input, upscale_factor: int):
    """``(*, C * r^2, H, W)`` to ``(*, C, H * r, W * r)``: each group of ``r^2`` channels
    becomes an ``r x r`` block of pixels.

    >>> import autodiag as torch
    >>> torch.pixel_shuffle(torch.arange(4.0).view(1, 4, 1, 1), 2)
    tensor([[[[0., 1.],
              [2., 3.]]]])
    """
    d = input._data
    r = int(upscale_factor)
    if d.ndim < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
            f"{d.ndim} dimension(s)"
        )
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    if d.shape[-3] % (r * r):
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
            f"square of upscale_factor, but input.size(-3)={d.shape[-3]} is not divisible by "
            f"{r * r}"
        )
    out = _shuffle(d, r)
    if _state.record and input.requires_grad:
        node = PixelShuffleBackward0((edge(input),))
        node.factor = r
        return result(out, node)
    return result(out, None)


@register(method=False)
def pixel_unshuffle(input, downscale_factor: int):
    """The inverse of ``pixel_shuffle``: ``(*, C, H * r, W * r)`` to ``(*, C * r^2, H, W)``.

    >>> import autodiag as torch
    >>> torch.pixel_unshuffle(torch.arange(4.0).view(1, 1, 2, 2), 2).flatten()
    tensor([0., 1., 2., 3.])
    """
    d = input._data
    r = int(downscale_factor)
    if d.ndim < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input "
            f"with {d.ndim} dimension(s)"
        )
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    for k, name in ((-2, "height"), (-1, "width")):
        if d.shape[k] % r:
            raise RuntimeError(
                f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but "
                f"input.size({k})={d.shape[k]} is not divisible by {r}"
            )
    out = _unshuffle(d, r)
    if _state.record and input.requires_grad:
        node = PixelUnshuffleBackward0((edge(input),))
        node.factor = r
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# Tensor attributes: nbytes, itemsize, storage_offset
# ---------------------------------------------------------------------------------------------


def _storage_offset(self) -> int:
    """The offset of the first element in the storage, in elements (0 unless a view)."""
    base = self._base
    d = self._data
    if base is None or not d.size:
        return 0
    start = d.__array_interface__["data"][0] - base._data.__array_interface__["data"][0]
    return start // d.itemsize


Tensor.nbytes = property(lambda self: self._data.size * self._data.itemsize)
Tensor.itemsize = property(lambda self: self._data.itemsize)
Tensor.storage_offset = _storage_offset


# ---------------------------------------------------------------------------------------------
# In-place view ops: t_ transpose_ swapaxes_ swapdims_ squeeze_ unsqueeze_
# ---------------------------------------------------------------------------------------------
# They change the tensor's shape and strides, not its elements: PyTorch bumps the version
# counter (a tensor saved for backward then fails its check) and records the op as the
# tensor's new grad_fn (``TBackward1``, ``TransposeBackward1``, ``SqueezeBackward3/4/5``,
# ``UnsqueezeBackward1``), with an edge to its old history.


def _make_inplace_view_nodes():
    from autodiag.ops.shape import TBackward0, TransposeBackward0, _ShapeNode

    named = {}
    for name, base in (
        ("TBackward1", TBackward0),
        ("TransposeBackward1", TransposeBackward0),
        ("SqueezeBackward3", _ShapeNode),
        ("SqueezeBackward4", _ShapeNode),
        ("SqueezeBackward5", _ShapeNode),
        ("UnsqueezeBackward1", _ShapeNode),
    ):
        named[name] = type(name, (base,), {"__slots__": (), "__module__": __name__})
    return named


_NODES = _make_inplace_view_nodes()
TBackward1 = _NODES["TBackward1"]
TransposeBackward1 = _NODES["TransposeBackward1"]
SqueezeBackward3 = _NODES["SqueezeBackward3"]
SqueezeBackward4 = _NODES["SqueezeBackward4"]
SqueezeBackward5 = _NODES["SqueezeBackward5"]
UnsqueezeBackward1 = _NODES["UnsqueezeBackward1"]


def _has_views(t) -> bool:
    vc = t._vc
    return vc is not None and len(vc) > 2 and any(r() is not None for r in vc[2])


def _inplace_view(self, name: str, data: np.ndarray, cls, **attrs):
    from autodiag.ops.inplace import bump_version, check_inplace

    recording = _state.record and self.requires_grad
    check_inplace(self, name, recording)
    if recording and (self._base is not None or _has_views(self)):
        # NOTE: the view machinery (NOTE [Views and in-place] in views.py) locates a view in
        # its base by the base's layout, which this op changes: refused rather than risk a
        # wrong gradient
        raise NotImplementedError(
            f"{name}: an in-place view op on a tensor that requires grad and is a view or has "
            f"views is not supported; use the out-of-place {name[:-1]} instead"
        )
    node = None
    if recording:
        node = cls((edge(self),))
        for k, v in attrs.items():
            setattr(node, k, v)
    self._data = data
    bump_version(self, name)
    if node is not None:
        self.grad_fn = node
        if self._output_nr:
            self._output_nr = 0
    return self


def _t_(self):
    """In-place ``t()``: the tensor itself, transposed (``TBackward1``)."""
    d = self._data
    if d.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {d.ndim}D")
    return _inplace_view(self, "t_", d.T, TBackward1)


def _transpose_(self, dim0: int, dim1: int):
    """In-place ``transpose(dim0, dim1)`` (``TransposeBackward1``)."""
    d = self._data
    d0, d1 = wrap_dim(dim0, d.ndim), wrap_dim(dim1, d.ndim)
    data = np.swapaxes(d, d0, d1) if d.ndim else d
    return _inplace_view(self, "transpose_", data, TransposeBackward1, dim0=d0, dim1=d1)


def _squeeze_(self, dim=None):
    """In-place ``squeeze`` (``SqueezeBackward3``; 4 with a dim, 5 with dims)."""
    d = self._data
    if dim is None:
        keep, cls = [s for s in d.shape if s != 1], SqueezeBackward3
    else:
        one = isinstance(dim, (numbers.Integral, np.integer))
        dims = (dim,) if one else tuple(dim)
        dims = tuple(wrap_dim(x, max(d.ndim, 1)) for x in dims)
        keep = [s for i, s in enumerate(d.shape) if not (i in dims and s == 1)]
        cls = SqueezeBackward4 if one else SqueezeBackward5
    return _inplace_view(self, "squeeze_", d.reshape(keep), cls, in_shape=d.shape)


def _unsqueeze_(self, dim: int):
    """In-place ``unsqueeze(dim)`` (``UnsqueezeBackward1``)."""
    d = self._data
    data = np.expand_dims(d, wrap_dim(dim, d.ndim + 1))
    return _inplace_view(self, "unsqueeze_", data, UnsqueezeBackward1, in_shape=d.shape)


def _bind_inplace_views():
    from autodiag.trace.events import traced

    for name, fn in (
        ("t_", _t_),
        ("transpose_", _transpose_),
        ("swapaxes_", _transpose_),
        ("swapdims_", _transpose_),
        ("squeeze_", _squeeze_),
        ("unsqueeze_", _unsqueeze_),
    ):
        setattr(Tensor, name, traced(name, fn))


_bind_inplace_views()
