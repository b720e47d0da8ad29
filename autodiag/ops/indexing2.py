"""The indexing and scattering ops real programs call (issue 20): ``nonzero argwhere
masked_select take take_along_dim``, the ``index_*`` family (``index_add index_copy index_fill
index_put``), the ``scatter`` family (``scatter scatter_add scatter_reduce``), ``masked_scatter``
and ``put``, with their in-place twins (``index_add_`` ...).

Each forward is one vectorised numpy call (``np.add.at`` and friends for the accumulating ones:
they add in index order, as PyTorch's CPU kernels do, so sums of repeated indices round the
same). Each backward is PyTorch's formula from derivatives.yaml; under create_graph it is
written with the recorded ops (``gather``, ``index_select``, ``scatter`` ...), so double backward
records what PyTorch's would.
"""

from __future__ import annotations

import numpy as np

from autodiag import _warnings
from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    broadcast_error,
    edge,
    register,
    result,
    save,
    save_output,
    wrap,
    wrap_dim,
)
from autodiag.ops._scalar_convert import checked_scalar
from autodiag.ops.pointwise import NotImplementedBackward
from autodiag.tensor import Tensor

_INT_INDEX = "iu"


def _shape_str(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _scalar_name(a: np.ndarray) -> str:
    from autodiag import dtypes

    return dtypes.from_numpy_dtype(a.dtype).scalar_name


def _tensor_arg(x, op: str, arg: str, pos: int) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{op}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}"
        )
    return x


def _grad_needed(*ts) -> bool:
    return _state.record and any(isinstance(t, Tensor) and t.requires_grad for t in ts)


def _at_least_1d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1) if a.ndim == 0 else a


# NOTE [Flat ufunc.at]: numpy's ``ufunc.at`` with one 1-D integer index runs a fast loop
# (numpy >= 1.25); with several index arrays, slices or a multi-dim target it takes a generic
# path several times slower (scatter_add of 1e6 elements into (1000, 100): 13 ms against 3).
# ``_at`` turns any index into positions in the flattened target first: the same elements,
# combined in the same (C) order, which is the order PyTorch's CPU kernels add in, so sums of
# repeated indices round alike.


def _at(ufunc, out: np.ndarray, index, values) -> None:
    """``ufunc.at(out, index, values)`` through one flat index (NOTE [Flat ufunc.at])."""
    if out.ndim <= 1 and not isinstance(index, tuple) or not out.flags.c_contiguous:
        ufunc.at(out, index, values)
        return
    if (
        isinstance(index, tuple)
        and len(index) == out.ndim
        and all(isinstance(k, np.ndarray) and k.dtype.kind in "iu" for k in index)
    ):
        # one integer array per dim, in range (the scatter family's grid): the positions
        # are a sum of strides, cheaper than the fancy index below
        step, pos = 1, 0
        for k in range(out.ndim - 1, -1, -1):
            pos = index[k] * step + pos
            step *= out.shape[k]
    else:
        pos = np.arange(out.size, dtype=np.intp).reshape(out.shape)[index]
    pos = np.broadcast_to(pos, np.broadcast_shapes(np.shape(pos), np.shape(values)))
    ufunc.at(out.reshape(-1), pos.reshape(-1), np.broadcast_to(values, pos.shape).reshape(-1))


# ---------------------------------------------------------------------------------------------
# nonzero, argwhere
# ---------------------------------------------------------------------------------------------


@register()
def nonzero(input, *, out=None, as_tuple: bool = False):
    """The indices of the nonzero elements: an ``(n, ndim)`` int64 tensor, or with
    ``as_tuple=True`` one 1-D tensor per dim (what ``x[x != 0]`` indexes with).

    >>> import autodiag as torch
    >>> torch.tensor([[0.0, 1.0], [2.0, 0.0]]).nonzero()
    tensor([[0, 1],
            [1, 0]])
    """
    if out is not None:
        raise NotImplementedError("nonzero: the 'out' argument is not supported")
    d = _tensor_arg(input, "nonzero", "input", 1)._data
    if as_tuple:
        if d.ndim == 0:  # PyTorch: a 0-d tensor reads as a 1-element 1-D one
            return (wrap(np.zeros(1 if d.item() else 0, dtype=np.int64)),)
        return tuple(wrap(np.ascontiguousarray(c, dtype=np.int64)) for c in np.nonzero(d))
    return wrap(np.ascontiguousarray(np.argwhere(d), dtype=np.int64))


@register()
def argwhere(input):
    """``nonzero(input)``: the ``(n, ndim)`` indices of the nonzero elements.

    >>> import autodiag as torch
    >>> torch.argwhere(torch.tensor([0, 3, 0, 5]))
    tensor([[1],
            [3]])
    """
    return nonzero(input)


# ---------------------------------------------------------------------------------------------
# masked_select, masked_scatter
# ---------------------------------------------------------------------------------------------


def _broadcast_pair(a: np.ndarray, b: np.ndarray) -> tuple:
    try:
        return np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise RuntimeError(broadcast_error(a.shape, b.shape)) from None


class MaskedSelectBackward0(Node):
    """The gradient goes back to the selected positions (zeros elsewhere), summed back over
    the dims ``input`` was broadcast along (the engine's ``_input_meta``)."""

    __slots__ = ("shape",)
    _saved_names = ("mask",)

    def backward(self, xp, g):
        m = self.saved_mask(xp)
        if xp.arrays:
            z = np.zeros(self.shape, dtype=g.dtype)
            z[np.broadcast_to(m, self.shape)] = g
            return (z,)
        mb = wrap(np.broadcast_to(m._data, self.shape))
        return (masked_scatter(wrap(np.zeros(self.shape, g._data.dtype)), mb, g),)


@register()
def masked_select(input, mask):
    """The elements of ``input`` where ``mask`` (bool, broadcast with ``input``) is True, as a
    1-D tensor.

    >>> import autodiag as torch
    >>> x = torch.tensor([[1.0, -2.0], [-3.0, 4.0]])
    >>> x.masked_select(x > 0)
    tensor([1., 4.])
    """
    x = _tensor_arg(input, "masked_select", "input", 1)
    m = _tensor_arg(mask, "masked_select", "mask", 2)
    d, md = x._data, m._data
    if md.dtype != np.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = _broadcast_pair(md, d)
    out = np.broadcast_to(d, shape)[np.broadcast_to(md, shape)]
    if _grad_needed(x):
        node = MaskedSelectBackward0((edge(x),))
        node.shape = shape
        if shape != d.shape:
            node._input_meta = ((d.shape, d.dtype),)
        node._saved = (save(m),)
        return result(out, node)
    return result(out, None)


class MaskedScatterBackward0(Node):
    """self: ``grad.masked_fill(mask, 0)``; source: the masked elements of ``grad`` in order,
    zero-padded to ``source``'s size (``masked_scatter_backward``)."""

    __slots__ = ("src_shape",)
    _saved_names = ("mask",)

    def backward(self, xp, g):
        m = self.saved_mask(xp)
        needs_self, needs_source = self.needs_grad
        gs = gsrc = None
        n = int(np.prod(self.src_shape))
        if xp.arrays:
            mb = np.broadcast_to(m, g.shape)
            if needs_self:
                gs = np.where(mb, np.zeros((), g.dtype), g)
            if needs_source:
                sel = g[mb]
                flat = np.zeros(n, dtype=g.dtype)
                flat[: sel.size] = sel
                gsrc = flat.reshape(self.src_shape)
            return (gs, gsrc)
        if needs_self:
            gs = g.masked_fill(m, 0)
        if needs_source:
            sel = masked_select(g, m)
            k = sel._data.size
            if k < n:
                from autodiag.ops.shape import cat

                sel = cat([sel, wrap(np.zeros(n - k, dtype=g._data.dtype))])
            gsrc = sel.reshape(self.src_shape)
        return (gs, gsrc)


@register(inplace=True)
def masked_scatter(input, mask, source):
    """``input`` with the positions where ``mask`` is True filled, in order, from the first
    elements of ``source``.

    >>> import autodiag as torch
    >>> x = torch.zeros(2, 2)
    >>> x.masked_scatter(torch.tensor([[True, False], [True, True]]), torch.tensor([1.0, 2, 3]))
    tensor([[1., 0.],
            [2., 3.]])
    """
    x = _tensor_arg(input, "masked_scatter", "input", 1)
    m = _tensor_arg(mask, "masked_scatter", "mask", 2)
    s = _tensor_arg(source, "masked_scatter", "source", 3)
    d, md, sd = x._data, m._data, s._data
    if md.dtype != np.bool_:
        raise RuntimeError(
            "masked_scatter_ only supports boolean masks, but got mask with dtype "
            f"{_scalar_name(md)}"
        )
    if sd.dtype != d.dtype:
        raise RuntimeError(
            "masked_scatter: expected self and source to have same dtypes but got"
            f"{_scalar_name(d)} and {_scalar_name(sd)}"
        )
    shape = _broadcast_pair(md, d)
    mb = np.broadcast_to(md, shape)
    k = int(np.count_nonzero(mb))
    if k > sd.size:
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out = np.array(np.broadcast_to(d, shape))
    out[mb] = sd.reshape(-1)[:k]
    if _grad_needed(x, s):
        node = MaskedScatterBackward0((edge(x), edge(s)))
        node.src_shape = sd.shape
        if shape != d.shape:
            node._input_meta = ((d.shape, d.dtype), None)
        node._saved = (save(m),)
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# take, put, take_along_dim
# ---------------------------------------------------------------------------------------------


def _flat_index(index, op: str, n: int) -> np.ndarray:
    """A long index into a tensor of ``n`` elements, wrapped (negative counts from the end)."""
    ix = _tensor_arg(index, op, "index", 2)._data
    if ix.dtype != np.int64:
        raise RuntimeError(f"{op}(): Expected a long tensor for index, but got {_scalar_name(ix)}")
    if ix.size:
        lo, hi = int(ix.min()), int(ix.max())
        for bad in (lo, hi):
            if not -n <= bad < n:
                raise IndexError(
                    f"out of range: tried to access index {bad} on a tensor of {n} elements."
                )
    return np.where(ix < 0, ix + n, ix) if ix.size and lo < 0 else ix


class TakeBackward0(Node):
    """``zeros_like(self).put_(index, grad, accumulate=True)`` (``take_backward``)."""

    __slots__ = ()
    _saved_names = ("self", "index")

    def backward(self, xp, g):
        x, idx = self.saved_self(xp), self.saved_index(xp)
        if xp.arrays:
            z = np.zeros(x.size, dtype=g.dtype)
            np.add.at(z, _wrapped(idx, x.size), g)
            return (z.reshape(x.shape),)
        return (put(wrap(np.zeros_like(x._data)), idx, g, accumulate=True),)


def _wrapped(ix: np.ndarray, n: int) -> np.ndarray:
    return np.where(ix < 0, ix + n, ix) if ix.size and ix.min() < 0 else ix


@register()
def take(input, index):
    """The elements of ``input`` read as a 1-D tensor at ``index`` (long; negative counts from
    the end), in ``index``'s shape.

    >>> import autodiag as torch
    >>> torch.tensor([[1, 2], [3, 4]]).take(torch.tensor([0, 3, -1]))
    tensor([1, 4, 4])
    """
    x = _tensor_arg(input, "take", "input", 1)
    d = x._data
    ix = _flat_index(index, "take", d.size)
    out = d.reshape(-1)[ix]
    if _grad_needed(x):
        node = TakeBackward0((edge(x),))
        node._saved = (save(x), save(index))
        return result(out, node)
    return result(out, None)


class PutBackward0(Node):
    """self: ``grad`` (accumulate) or ``grad.put(index, zeros_like(source))``; source:
    ``grad.take(index).reshape_as(source)``."""

    __slots__ = ("accumulate", "src_shape")
    _saved_names = ("index",)

    def backward(self, xp, g):
        idx = self.saved_index(xp)
        needs_self, needs_source = self.needs_grad
        gs = gsrc = None
        if xp.arrays:
            n = g.size
            ix = _wrapped(idx, n).reshape(-1)
            if needs_self:
                gs = g
                if not self.accumulate:
                    gs = np.array(g)
                    gs.reshape(-1)[ix] = 0
            if needs_source:
                gsrc = g.reshape(-1)[ix].reshape(self.src_shape)
            return (gs, gsrc)
        if needs_self:
            gs = g
            if not self.accumulate:
                gs = put(g, idx, wrap(np.zeros(self.src_shape, g._data.dtype)))
        if needs_source:
            gsrc = take(g, idx).reshape(self.src_shape)
        return (gs, gsrc)

    def _saved_extra(self):
        return {"accumulate": self.accumulate}


@register(inplace=True)
def put(input, index, source, accumulate: bool = False):
    """``input`` with the elements at ``index`` (into it read as 1-D) replaced by ``source``'s,
    or added to them with ``accumulate=True``.

    >>> import autodiag as torch
    >>> torch.zeros(2, 2).put(torch.tensor([0, 3]), torch.tensor([5.0, 6.0]))
    tensor([[5., 0.],
            [0., 6.]])
    """
    x = _tensor_arg(input, "put", "input", 1)
    s = _tensor_arg(source, "put", "source", 3)
    d, sd = x._data, s._data
    ix = _tensor_arg(index, "put", "index", 2)._data
    if ix.dtype != np.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {_scalar_name(ix)}")
    if sd.dtype != d.dtype:
        raise RuntimeError(
            "put_(): self and source expected to have the same dtype, but got self.dtype = "
            f"{_scalar_name(d)} and source.dtype = {_scalar_name(sd)}"
        )
    if sd.size != ix.size:
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but got "
            f"source.numel() = {sd.size}, index.numel() = {ix.size}"
        )
    flat_ix = _flat_index(index, "put_", d.size).reshape(-1)
    out = d.copy()
    flat = out.reshape(-1)
    if accumulate:
        np.add.at(flat, flat_ix, sd.reshape(-1))
    else:
        flat[flat_ix] = sd.reshape(-1)
    if _grad_needed(x, s):
        node = PutBackward0((edge(x), edge(s)))
        node.accumulate, node.src_shape = bool(accumulate), sd.shape
        node._saved = (save(as_tensor_operand(index)),)
        return result(out, node)
    return result(out, None)


@register()
def take_along_dim(input, indices, dim=None):
    """``gather`` with ``indices`` broadcast against ``input`` in every dim but ``dim`` (the
    flattened tensor when ``dim`` is None): what ``argsort``/``argmax(keepdim=True)`` results
    index with. Recorded as PyTorch records it: ``expand`` then ``gather`` (``view`` then
    ``gather`` without a dim).

    >>> import autodiag as torch
    >>> x = torch.tensor([[10.0, 30.0, 20.0]])
    >>> torch.take_along_dim(x, x.argsort(dim=1), dim=1)
    tensor([[10., 20., 30.]])
    """
    from autodiag.ops.shape import gather

    x = _tensor_arg(input, "take_along_dim", "input", 1)
    i = _tensor_arg(indices, "take_along_dim", "indices", 2)
    if i._data.dtype.kind not in _INT_INDEX:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if i._data.dtype != np.int64:
        i = wrap(i._data.astype(np.int64))
    if dim is None:
        return gather(x.view(-1), 0, i.view(-1))
    if x.ndim != i.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but got {x.ndim} dimensions for input, and {i.ndim} dimensions for "
            "indices"
        )
    dim = wrap_dim(dim, max(x.ndim, 1))
    if x.ndim == 0:
        return gather(x, 0, i)
    xs, js = list(x._data.shape), list(i._data.shape)
    xs[dim] = js[dim]
    i_shape = _broadcast_shapes(tuple(xs), tuple(js))
    js = list(js)
    js[dim] = x._data.shape[dim]
    x_shape = _broadcast_shapes(tuple(js), x._data.shape)
    return gather(x.expand(x_shape), dim, i.expand(i_shape))


def _broadcast_shapes(a: tuple, b: tuple) -> tuple:
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        raise RuntimeError(broadcast_error(a, b)) from None


# ---------------------------------------------------------------------------------------------
# index_add, index_copy, index_fill: slices along one dim
# ---------------------------------------------------------------------------------------------


def _vector_index(index, op: str, kinds: str, dtype_error: str, error=RuntimeError):
    ix = _tensor_arg(index, op, "index", 3)._data
    if ix.dtype.kind not in kinds:
        raise error(dtype_error.format(_scalar_name(ix)))
    if ix.ndim > 1:
        raise IndexError(
            f"{op}(): Index is supposed to be a vector, but got dim: {ix.ndim} with type: "
            f"{_scalar_name(ix)} and size: {_shape_str(ix.shape)}"
        )
    return ix.reshape(-1).astype(np.int64, copy=False)


def _check_range(ix: np.ndarray, n: int, dim: int, prefix: str = "", error=RuntimeError):
    """PyTorch's bounds check, naming the first index out of range in its loop's order."""
    if ix.size and (ix.min() < 0 or ix.max() >= n):
        flat = ix.reshape(-1)
        bad = int(flat[np.argmax((flat < 0) | (flat >= n))])
        raise error(f"{prefix}index {bad} is out of bounds for dimension {dim} with size {n}")


def _check_source(op: str, d: np.ndarray, sd: np.ndarray, dim: int, ix: np.ndarray) -> None:
    ds, ss = _at_least_1d(d).shape, _at_least_1d(sd).shape
    # index_add wants as many dims (0-d and 1-d do not mix, as they do in index_copy)
    if (
        op == "index_add_"
        and d.ndim != sd.ndim
        or len(ds) != len(ss)
        or any(a != b for k, (a, b) in enumerate(zip(ds, ss)) if k != dim)
    ):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {_shape_str(d.shape)} source.shape = "
            f"{_shape_str(sd.shape)}"
        )
    if ix.size != ss[dim]:
        raise RuntimeError(
            f"{op}(): Number of indices ({ix.size}) should be equal to source.size(dim): "
            f"({ss[dim]}), for dim: {dim}"
        )


def _along(a: np.ndarray, dim: int) -> np.ndarray:
    """``a`` (at least 1-D) with ``dim`` first: a view, so writes reach ``a``."""
    return np.moveaxis(_at_least_1d(a), dim, 0)


def _index_select(xp, g, dim: int, idx):
    if xp.arrays:
        return np.take(_at_least_1d(g), idx, axis=dim)
    from autodiag.ops.shape import index_select

    return index_select(g, dim, idx)


def _reshaped(xp, g, shape):
    if tuple(g.shape) == tuple(shape):
        return g
    return xp.reshape(g, shape)


class IndexAddBackward0(Node):
    """self: ``grad``; source: ``grad.index_select(dim, index)`` times ``alpha``."""

    __slots__ = ("dim", "alpha", "src_shape")
    # PyTorch saves ``source`` when it needs a gradient (for its dims): listed, version-checked
    _saved_names = ("index", "source")
    _extra_names = ("dim", "alpha", "source_dim")

    def backward(self, xp, g):
        needs_self, needs_source = self.needs_grad
        gsrc = None
        if needs_source:
            gsrc = _index_select(xp, g, self.dim, self.saved_index(xp))
            gsrc = _reshaped(xp, gsrc, self.src_shape)
            if self.alpha != 1:
                gsrc = gsrc * self.alpha
        return (g if needs_self else None, gsrc)

    def _saved_extra(self):
        return {"dim": self.dim, "alpha": self.alpha, "source_dim": len(self.src_shape)}


_INDEX_ADD_DTYPE = "index_add_(): Expected dtype int32/int64 for index but got: {}"


@register(inplace=True)
def index_add(input, dim: int, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added to the slices ``index`` along ``dim`` (repeated
    indices add up).

    >>> import autodiag as torch
    >>> torch.zeros(3).index_add(0, torch.tensor([0, 2, 0]), torch.tensor([1.0, 2.0, 3.0]))
    tensor([4., 0., 2.])
    """
    x = _tensor_arg(input, "index_add", "input", 1)
    s = _tensor_arg(source, "index_add", "source", 4)
    d, sd = x._data, s._data
    ix = _vector_index(index, "index_add_", _INT_INDEX, _INDEX_ADD_DTYPE)
    dim = wrap_dim(dim, max(d.ndim, 1))
    if sd.dtype != d.dtype:
        raise RuntimeError(
            f"index_add_(): self ({_scalar_name(d)}) and source ({_scalar_name(sd)}) must "
            "have the same scalar type"
        )
    _check_source("index_add_", d, sd, dim, ix)
    n = _at_least_1d(d).shape[dim]
    _check_range(ix, n, dim)
    out = d.copy()
    src = _at_least_1d(sd)
    if alpha != 1:
        src = src * checked_scalar(alpha, d.dtype, "index_add")
    _at(np.add, _at_least_1d(out), (slice(None),) * dim + (ix,), src)
    if _grad_needed(x, s):
        node = IndexAddBackward0((edge(x), edge(s)))
        node.dim, node.alpha, node.src_shape = dim, alpha, sd.shape
        node._saved = (save(wrap(ix)), save(s) if s.requires_grad else None)
        return result(out, node)
    return result(out, None)


class IndexCopyBackward0(Node):
    """self: ``grad.index_fill(dim, index, 0)``; source: ``grad.index_select(dim, index)``."""

    __slots__ = ("dim", "src_shape")
    _saved_names = ("index",)

    def backward(self, xp, g):
        idx = self.saved_index(xp)
        needs_self, needs_source = self.needs_grad
        gs = gsrc = None
        if needs_self:
            if xp.arrays:
                gs = np.array(g)
                _along(gs, self.dim)[idx] = 0
            else:
                gs = index_fill(g, self.dim, idx, 0)
        if needs_source:
            gsrc = _reshaped(xp, _index_select(xp, g, self.dim, idx), self.src_shape)
        return (gs, gsrc)

    def _saved_extra(self):
        return {"dim": self.dim}


@register(inplace=True)
def index_copy(input, dim: int, index, source):
    """``input`` with the slices ``index`` along ``dim`` replaced by ``source``'s slices.

    >>> import autodiag as torch
    >>> torch.zeros(3, 2).index_copy(0, torch.tensor([2, 0]), torch.ones(2, 2))
    tensor([[1., 1.],
            [0., 0.],
            [1., 1.]])
    """
    x = _tensor_arg(input, "index_copy", "input", 1)
    s = _tensor_arg(source, "index_copy", "source", 4)
    d, sd = x._data, s._data
    ix = _vector_index(
        index, "index_copy_", "i", "index_copy_(): Expected a long tensor for index, but got {}"
    )
    if as_tensor_operand(index)._data.dtype != np.int64:
        raise RuntimeError(
            "index_copy_(): Expected a long tensor for index, but got "
            f"{_scalar_name(as_tensor_operand(index)._data)}"
        )
    dim = wrap_dim(dim, max(d.ndim, 1))
    if sd.dtype != d.dtype:
        raise RuntimeError(
            f"index_copy_(): self and source expected to have the same dtype, but got (self) "
            f"{_scalar_name(d)} and (source) {_scalar_name(sd)}"
        )
    _check_source("index_copy_", d, sd, dim, ix)
    n = _at_least_1d(d).shape[dim]
    _check_range(ix, n, dim, "index_copy_(): ", IndexError)
    out = d.copy()
    _along(out, dim)[ix] = _along(sd, dim)
    if _grad_needed(x, s):
        node = IndexCopyBackward0((edge(x), edge(s)))
        node.dim, node.src_shape = dim, sd.shape
        node._saved = (save(wrap(ix)),)
        return result(out, node)
    return result(out, None)


class IndexFillBackward0(Node):
    """self: ``grad.index_fill(dim, index, 0)``."""

    __slots__ = ("dim",)
    _saved_names = ("index",)

    def backward(self, xp, g):
        idx = self.saved_index(xp)
        needs = self.needs_grad
        if xp.arrays:
            gs = np.array(g)
            _along(gs, self.dim)[idx] = 0
        else:
            gs = index_fill(g, self.dim, idx, 0)
        if len(needs) == 1:
            return (gs,)
        gv = None
        if needs[1]:
            # value: the filled slices' gradient, each slice once (PyTorch's _unique(index))
            u = np.unique(idx if xp.arrays else idx._data)
            gv = _index_select(xp, g, self.dim, u if xp.arrays else wrap(u)).sum()
        return (gs if needs[0] else None, gv)

    def _saved_extra(self):
        return {"dim": self.dim}


class IndexFillBackward1(IndexFillBackward0):
    """index_fill with a 0-d tensor value: the value gets the filled slices' gradient."""

    __slots__ = ()


@register(inplace=True)
def index_fill(input, dim: int, index, value):
    """``input`` with the slices ``index`` along ``dim`` set to ``value`` (a number or a 0-d
    tensor; negative indices count from the end).

    >>> import autodiag as torch
    >>> torch.zeros(2, 3).index_fill(1, torch.tensor([0, -1]), 7.0)
    tensor([[7., 0., 7.],
            [7., 0., 7.]])
    """
    x = _tensor_arg(input, "index_fill", "input", 1)
    d = x._data
    ixd = _tensor_arg(index, "index_fill", "index", 3)._data
    if ixd.dtype != np.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if ixd.ndim > 1:
        raise IndexError(
            f"index_fill_(): Index is supposed to be a vector, but got dim: {ixd.ndim} with "
            f"type: Long and size: {_shape_str(ixd.shape)}"
        )
    dim = wrap_dim(dim, max(d.ndim, 1))
    n = _at_least_1d(d).shape[dim]
    ix = ixd.reshape(-1)
    if ix.size:
        lo, hi = int(ix.min()), int(ix.max())
        if lo < -n or hi >= n:
            bad = lo if lo < -n else hi
            raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {n}")
        ix = _wrapped(ix, n)
    if isinstance(value, Tensor):
        if value._data.ndim != 0:
            raise RuntimeError(
                "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value._data.ndim} dimension(s)."
            )
        v = checked_scalar(value._data.item(), d.dtype, "index_fill")
    else:
        v = checked_scalar(value, d.dtype, "index_fill")
    out = d.copy()
    _along(out, dim)[ix] = v
    v_grad = isinstance(value, Tensor) and value.requires_grad
    if _grad_needed(x) or (_state.record and v_grad):
        if isinstance(value, Tensor):
            node = IndexFillBackward1((edge(x), edge(value)))
        else:
            node = IndexFillBackward0((edge(x),))
        node.dim = dim
        node._saved = (save(wrap(ix)),)
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# index_put
# ---------------------------------------------------------------------------------------------


def _put_index(indices, shape: tuple) -> tuple:
    """``indices`` (a tuple or list of tensors) as a numpy index, checked as PyTorch does."""
    if isinstance(indices, Tensor) or not isinstance(indices, (tuple, list)):
        raise TypeError(
            "index_put(): argument 'indices' (position 2) must be tuple of Tensors, not "
            f"{type(indices).__name__}"
        )
    arrays = []
    for k, t in enumerate(indices):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"expected Tensor as element {k} in argument 1, but got {type(t).__name__}"
            )
        a = t._data
        if a.dtype.kind not in "biu":
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if a.dtype == np.uint8:
            _warnings.warn(
                "indexing with dtype torch.uint8 is now deprecated, please use a dtype "
                "torch.bool instead."
            )
            a = a.astype(bool)
        arrays.append(a)
    used = sum(a.ndim if a.dtype == np.bool_ else 1 for a in arrays)
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)} (got {used})")
    dim = 0
    for a in arrays:
        if a.dtype == np.bool_:
            for k in range(a.ndim):
                if a.shape[k] != shape[dim + k]:
                    raise IndexError(
                        f"The shape of the mask {_shape_str(a.shape)} at index {k} does not "
                        f"match the shape of the indexed tensor {_shape_str(shape)} at index "
                        f"{dim + k}"
                    )
            dim += a.ndim
        else:
            n = shape[dim]
            if a.size and (a.min() < -n or a.max() >= n):
                bad = int(a.min()) if a.min() < -n else int(a.max())
                raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {n}")
            dim += 1
    return tuple(arrays)


class IndexPutBackward0(Node):
    """self: ``grad`` (accumulate) or ``grad.index_put(indices, zeros_like(values))``; values:
    ``grad[indices]``, summed back to ``values``' shape."""

    __slots__ = ("index", "accumulate", "values_shape")

    def backward(self, xp, g):
        needs_self, needs_values = self.needs_grad
        gs = gv = None
        if needs_self:
            gs = g
            if not self.accumulate:
                if xp.arrays:
                    gs = np.array(g)
                    gs[self.index] = 0
                else:
                    zeros = wrap(np.zeros(self.values_shape, g._data.dtype))
                    gs = index_put(g, tuple(wrap(a) for a in self.index), zeros)
        if needs_values:
            gv = xp.sum_to(g[self.index], self.values_shape)
        return (gs, gv)

    def _saved_extra(self):
        return {"accumulate": self.accumulate}


@register(inplace=True)
def index_put(input, indices, values, accumulate: bool = False):
    """``input[indices] = values`` out of place (``accumulate=True``: ``+=``, repeated indices
    adding up); ``indices`` is a tuple of long or bool tensors.

    >>> import autodiag as torch
    >>> i = torch.tensor([0, 0, 2])
    >>> torch.zeros(3).index_put((i,), torch.tensor([1.0, 2.0, 3.0]), accumulate=True)
    tensor([3., 0., 3.])
    """
    x = _tensor_arg(input, "index_put", "input", 1)
    v = _tensor_arg(values, "index_put", "values", 3)
    d, vd = x._data, v._data
    index = _put_index(indices, d.shape)
    if vd.dtype != d.dtype:
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{_scalar_name(d)} for the destination and {_scalar_name(vd)} for the source."
        )
    out = d.copy()
    region = out[index].shape
    try:
        vb = np.broadcast_to(vd, region)
    except ValueError:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {_shape_str(vd.shape)} cannot be "
            f"broadcast to indexing result of shape {_shape_str(region)}"
        ) from None
    if accumulate:
        _at(np.add, out, index, vb)
    else:
        out[index] = vb
    if _grad_needed(x, v):
        node = IndexPutBackward0((edge(x), edge(v)))
        node.index, node.accumulate, node.values_shape = index, bool(accumulate), vd.shape
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# scatter, scatter_add, scatter_reduce
# ---------------------------------------------------------------------------------------------


def _scatter_checks(d: np.ndarray, dim, index, src, op: str = "scatter") -> tuple:
    """PyTorch's scatter checks; ``(dim, index array, src array or None)``."""
    ix = _tensor_arg(index, op, "index", 3)._data
    dim = wrap_dim(dim, max(d.ndim, 1))
    if ix.dtype.kind not in _INT_INDEX:
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index")
    sd = src._data if isinstance(src, Tensor) else None
    if sd is not None and sd.dtype != d.dtype:
        raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype")
    ix = ix.astype(np.int64, copy=False)
    if ix.size == 0:
        return dim, ix, sd
    if max(ix.ndim, 1) != max(d.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if sd is not None and max(ix.ndim, 1) != max(sd.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    i1, d1 = _at_least_1d(ix).shape, _at_least_1d(d).shape
    s1 = _at_least_1d(sd).shape if sd is not None else None
    bad = any(i1[k] > d1[k] for k in range(len(i1)) if k != dim)
    if s1 is not None:
        bad = bad or any(i1[k] > s1[k] for k in range(len(i1)))
    if bad:
        raise RuntimeError(
            f"Expected index {_shape_str(ix.shape)} to be no larger than self "
            f"{_shape_str(d.shape)} apart from dimension {dim}"
            + (f" and to be no larger size than src {_shape_str(sd.shape)}" if s1 else "")
        )
    _check_range(ix, d1[dim], dim)
    return dim, ix, sd


def _grid(ix: np.ndarray, dim: int) -> tuple:
    """The numpy index of the positions ``scatter`` writes: ``index`` in ``dim``, each
    element's own coordinate in the other dims."""
    grid = list(np.indices(ix.shape, sparse=True))
    grid[dim] = ix
    return tuple(grid)


def _corner(a: np.ndarray, shape: tuple) -> np.ndarray:
    """The leading ``shape`` block of ``a`` (src may be larger than the index)."""
    if a.shape == shape:
        return a
    return a[tuple(slice(0, s) for s in shape)]


def _scatter_array(d, dim, ix, src, reduce=None) -> np.ndarray:
    """``d`` (copied) with ``src`` (an array or a 0-d value) scattered at ``ix`` along dim."""
    out = np.array(d)
    if ix.size == 0:
        return out
    o, i = _at_least_1d(out), _at_least_1d(ix)
    s = _corner(_at_least_1d(src), i.shape) if src.ndim else src
    g = _grid(i, dim)
    if reduce is None:
        o[g] = s
    elif reduce == "add":
        _at(np.add, o, g, np.broadcast_to(s, i.shape))
    else:
        _at(np.multiply, o, g, np.broadcast_to(s, i.shape))
    return out


def _gather(xp, a, dim: int, idx):
    if xp.arrays:
        if idx.size == 0:
            return np.zeros(idx.shape, a.dtype)
        i = _at_least_1d(idx)
        return np.take_along_axis(_corner(_at_least_1d(a), _fit(a, i, dim)), i, dim).reshape(
            idx.shape
        )
    from autodiag.ops.shape import gather

    return gather(a, dim, idx)


def _fit(a: np.ndarray, i: np.ndarray, dim: int) -> tuple:
    s = list(_at_least_1d(a).shape)
    return tuple(s[k] if k == dim else i.shape[k] for k in range(len(s)))


def _check_src_grad(node, idx, src_shape) -> bool:
    """The src gradient of the scatter family is ``grad.gather(dim, index)``: the index's
    shape, which PyTorch's engine refuses for a src larger than the index, unless src's shape
    expands to it: an index with no element along a dim where src has one. True then: PyTorch's
    engine sums that empty gradient to src's shape, zeros (``_src_grad``)."""
    shape = tuple(idx.shape)
    src_shape = tuple(src_shape)
    if shape == src_shape:
        return False
    if len(shape) == len(src_shape) and all(a == b or b == 1 for a, b in zip(shape, src_shape)):
        return True
    if shape != src_shape:
        raise RuntimeError(
            f"Function {node.name()} returned an invalid gradient at index 1 - got "
            f"{_shape_str(shape)} but expected shape compatible with {_shape_str(src_shape)}"
        )


def _src_grad(xp, g_src, src_shape, reduced: bool):
    """The src gradient as PyTorch's engine passes it on: ``g_src``, or its sum to src's shape
    (zeros: it is empty) when ``_check_src_grad`` said so."""
    if not reduced or g_src is None:
        return g_src
    zeros = np.zeros(tuple(src_shape), (g_src if xp.arrays else g_src._data).dtype)
    return zeros if xp.arrays else wrap(zeros)


def _scatter_zero(xp, g, dim, idx):
    """``g.scatter(dim, index, 0)``."""
    if xp.arrays:
        return _scatter_array(g, dim, idx, np.zeros((), g.dtype))
    return scatter(g, dim, idx, 0)


class ScatterBackward0(Node):
    """self: ``grad.scatter(dim, index, 0)``; src: ``grad.gather(dim, index)``."""

    __slots__ = ("dim", "src_shape")
    _saved_names = ("index",)

    def backward(self, xp, g):
        idx = self.saved_index(xp)
        needs_self, needs_src = self.needs_grad
        reduced = needs_src and _check_src_grad(self, idx, self.src_shape)
        return (
            _scatter_zero(xp, g, self.dim, idx) if needs_self else None,
            _src_grad(xp, _gather(xp, g, self.dim, idx), self.src_shape, reduced)
            if needs_src
            else None,
        )

    def _saved_extra(self):
        return {"dim": self.dim}


class ScatterBackward1(Node):
    """scatter of a number: self: ``grad.scatter(dim, index, 0)``."""

    __slots__ = ("dim",)
    _saved_names = ("index",)

    def backward(self, xp, g):
        return (_scatter_zero(xp, g, self.dim, self.saved_index(xp)),)

    def _saved_extra(self):
        return {"dim": self.dim}


_SCATTER_REDUCE_WARNING = (
    "The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in "
    "a future PyTorch release. Use torch.scatter_reduce instead for more reduction options."
)


@register(inplace=True)
def scatter(input, dim: int, index, src=None, value=None, *, reduce=None):
    """``input`` with ``src``'s elements (or a number) written along ``dim`` at ``index``:
    ``out[index[i][j]][j] = src[i][j]`` for ``dim=0``. ``reduce="add"``/``"multiply"``
    combines instead (no gradient, as in PyTorch).

    >>> import autodiag as torch
    >>> torch.zeros(2, 3).scatter(0, torch.tensor([[1, 0, 1]]), torch.tensor([[5.0, 6, 7]]))
    tensor([[0., 6., 0.],
            [5., 0., 7.]])
    """
    x = _tensor_arg(input, "scatter", "input", 1)
    if src is None:
        if value is None:
            raise TypeError("scatter() missing 1 required positional argument: 'src'")
        src = value
    d = x._data
    if reduce is not None and reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    if isinstance(src, Tensor):
        if reduce is not None:
            _warnings.warn_once("scatter reduce", _SCATTER_REDUCE_WARNING)
        dim, ix, sd = _scatter_checks(d, dim, index, src)
        out = _scatter_array(d, dim, ix, sd, reduce)
        edges = (x, src)
    else:
        dim, ix, _ = _scatter_checks(d, dim, index, None)
        out = _scatter_array(d, dim, ix, checked_scalar(src, d.dtype, "scatter"), reduce)
        edges = (x,)
    if not _grad_needed(*edges):
        return result(out, None)
    if reduce is not None:
        node = NotImplementedBackward(tuple(edge(t) for t in edges))
        node.op = "scatter"
        return result(out, node)
    node = (ScatterBackward0 if len(edges) == 2 else ScatterBackward1)(
        tuple(edge(t) for t in edges)
    )
    node.dim = dim
    if len(edges) == 2:
        node.src_shape = src._data.shape
    node._saved = (save(wrap(ix)),)
    return result(out, node)


class ScatterAddBackward0(Node):
    """self: ``grad``; src: ``grad.gather(dim, index)``."""

    __slots__ = ("dim", "src_shape")
    _saved_names = ("index",)

    def backward(self, xp, g):
        needs_self, needs_src = self.needs_grad
        reduced = needs_src and _check_src_grad(self, self.saved_index(xp), self.src_shape)
        return (
            g if needs_self else None,
            _src_grad(xp, _gather(xp, g, self.dim, self.saved_index(xp)), self.src_shape, reduced)
            if needs_src
            else None,
        )

    def _saved_extra(self):
        return {"dim": self.dim}


@register(inplace=True)
def scatter_add(input, dim: int, index, src):
    """``input`` with ``src``'s elements added along ``dim`` at ``index`` (repeated indices
    add up, in index order as PyTorch's CPU kernel adds).

    >>> import autodiag as torch
    >>> torch.zeros(3).scatter_add(0, torch.tensor([0, 2, 0]), torch.tensor([1.0, 2.0, 3.0]))
    tensor([4., 0., 2.])
    """
    x = _tensor_arg(input, "scatter_add", "input", 1)
    s = _tensor_arg(src, "scatter_add", "src", 4)
    d = x._data
    dim, ix, sd = _scatter_checks(d, dim, index, s)
    out = _scatter_array(d, dim, ix, sd, "add")
    if _grad_needed(x, s):
        node = ScatterAddBackward0((edge(x), edge(s)))
        node.dim, node.src_shape = dim, sd.shape
        node._saved = (save(wrap(ix)),)
        return result(out, node)
    return result(out, None)


_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")
# PyTorch's forward also takes "max" and "min" (its backward then refuses them, as here)
_ALIASES = {"max": "amax", "min": "amin"}


def _scatter_reduce_array(d, dim, ix, sd, reduce: str, include_self: bool) -> np.ndarray:
    out = np.array(d)
    if ix.size == 0:
        return out
    o, i = _at_least_1d(out), _at_least_1d(ix)
    s = _corner(_at_least_1d(sd), i.shape)
    g = _grid(i, dim)
    if not include_self:
        if reduce in ("sum", "mean"):
            fill = 0
        elif reduce == "prod":
            fill = 1
        elif d.dtype.kind == "f":
            fill = -np.inf if reduce == "amax" else np.inf
        elif d.dtype.kind == "b":
            fill = reduce == "amin"
        else:
            info = np.iinfo(d.dtype)
            fill = info.min if reduce == "amax" else info.max
        o[g] = fill
    if reduce in ("sum", "mean"):
        _at(np.add, o, g, s)
    elif reduce == "prod":
        _at(np.multiply, o, g, s)
    elif reduce == "amax":
        _at(np.maximum, o, g, s)
    else:
        _at(np.minimum, o, g, s)
    if reduce == "mean":
        count = np.full(o.shape, 1 if include_self else 0, dtype=np.int64)
        _at(np.add, count, g, 1)
        count = np.maximum(count, 1)
        if o.dtype.kind == "f":
            o[...] = o / count.astype(o.dtype)
        else:
            o[...] = np.floor_divide(o, count.astype(o.dtype))
    return out


def _scatter_reduce_xp(xp, a, dim, idx, src, reduce, include_self):
    if xp.arrays:
        return _scatter_reduce_array(a, dim, idx, src, reduce, include_self)
    return scatter_reduce(a, dim, idx, src, reduce, include_self=include_self)


def _scatter_add_xp(xp, a, dim, idx, src):
    if xp.arrays:
        return _scatter_array(a, dim, idx, src, "add")
    return scatter_add(a, dim, idx, src)


def _masked_fill_xp(xp, a, mask, value):
    if xp.arrays:
        return np.where(mask, np.asarray(value, a.dtype), a)
    return a.masked_fill(mask, value)


def _as_dtype(xp, mask, like):
    if xp.arrays:
        return mask.astype(like.dtype)
    return mask.to(like.dtype)


class ScatterReduceBackward0(Node):
    """PyTorch's ``scatter_reduce_backward``: sum and mean route the gradient as scatter_add
    does (divided by the counts for mean); prod divides the product by each factor (zeros
    handled apart); amax/amin share it evenly among the elements equal to the result."""

    __slots__ = ("dim", "reduce", "include_self")
    _saved_names = ("self", "index", "src", "result")

    def backward(self, xp, g):
        dim, reduce, include_self = self.dim, self.reduce, self.include_self
        if reduce not in _REDUCTIONS:
            raise RuntimeError(
                "Expected 'reduce' to be one of 'sum', 'prod', 'mean', 'amax', 'amin' but got "
                f"{reduce}."
            )
        x, idx = self.saved_self(xp), self.saved_index(xp)
        src, res = self.saved_src(xp), self.saved_result(xp)
        needs_self, needs_src = self.needs_grad
        if reduce in ("amax", "amin") and tuple(src.shape) != tuple(idx.shape):
            # PyTorch's formula compares src with the gathered result: shapes that clash (an
            # empty index where src has 1 broadcasts)
            try:
                np.broadcast_shapes(tuple(src.shape), tuple(idx.shape))
            except ValueError:
                raise RuntimeError(broadcast_error(tuple(src.shape), tuple(idx.shape))) from None
        # (amax/amin: the gradient's shape is src's broadcast with the index's, checked below)
        minmax = reduce in ("amax", "amin")
        reduced = needs_src and not minmax and _check_src_grad(self, idx, src.shape)
        gs = gsrc = None
        if reduce == "sum":
            gs, gsrc = g, _gather(xp, g, dim, idx)
        elif reduce == "mean":
            ones_like = _ones_like if xp.arrays else _ones_like_t
            n = ones_like(g) if include_self else ones_like(g) * 0
            n = _scatter_add_xp(xp, n, dim, idx, ones_like(src))
            n = _masked_fill_xp(xp, n, n == 0, 1)
            gs = g / n
            gsrc = _gather(xp, g, dim, idx) / _gather(xp, n, dim, idx)
        elif reduce == "prod":
            masked_self = _masked_fill_xp(xp, x, x == 0, 1)
            masked_self_result = _scatter_reduce_xp(
                xp, masked_self, dim, idx, src, reduce, include_self
            )
            gs = g * masked_self_result / masked_self
            src_zero = src == 0
            zeros = (_ones_like if xp.arrays else _ones_like_t)(x) * 0
            num_zeros = _gather(
                xp, _scatter_add_xp(xp, zeros, dim, idx, _as_dtype(xp, src_zero, x)), dim, idx
            )
            single_zero = src_zero & (num_zeros == 1)
            masked_src = _masked_fill_xp(xp, src, single_zero, 1)
            masked_src_result = _scatter_reduce_xp(
                xp, x, dim, idx, masked_src, reduce, include_self
            )
            gsrc = xp.where(
                single_zero,
                _gather(xp, g * masked_src_result, dim, idx),
                _gather(xp, g * res, dim, idx) / _masked_fill_xp(xp, src, src_zero, 1),
            )
        else:  # amax, amin
            value = _gather(xp, res, dim, idx)
            self_is_result = _as_dtype(xp, x == res, x)
            src_is_result = _as_dtype(xp, src == value, x)
            n = _scatter_add_xp(xp, self_is_result, dim, idx, src_is_result)
            distributed = g / n
            gs = self_is_result * distributed
            gsrc = src_is_result * _gather(xp, distributed, dim, idx)
            reduced = needs_src and _check_src_grad(self, gsrc, src.shape)
        if not include_self and needs_self:
            gs = _scatter_zero(xp, gs, dim, idx)
        gsrc = _src_grad(xp, gsrc, src.shape, reduced) if needs_src else None
        return (gs if needs_self else None, gsrc)

    def _saved_extra(self):
        return {"dim": self.dim, "reduce": self.reduce, "include_self": self.include_self}


def _ones_like(a):
    return np.ones_like(a)


def _ones_like_t(t):
    return wrap(np.ones_like(t._data))


@register(inplace=True)
def scatter_reduce(input, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """``input`` with ``src``'s elements reduced into it along ``dim`` at ``index``:
    ``reduce`` is ``"sum" "prod" "mean" "amax" "amin"``; ``include_self=False`` leaves
    ``input``'s own values out of the positions written.

    >>> import autodiag as torch
    >>> src = torch.tensor([1.0, 5.0, 3.0])
    >>> torch.zeros(2).scatter_reduce(0, torch.tensor([0, 0, 1]), src, "amax", include_self=False)
    tensor([5., 3.])
    """
    x = _tensor_arg(input, "scatter_reduce", "input", 1)
    s = _tensor_arg(src, "scatter_reduce", "src", 4)
    if reduce not in _REDUCTIONS and reduce not in _ALIASES:
        raise RuntimeError(
            "reduce argument must be either sum, prod, mean, amax or amin, got " + str(reduce)
        )
    d = x._data
    dim, ix, sd = _scatter_checks(d, dim, index, s, "scatter")
    out = _scatter_reduce_array(d, dim, ix, sd, _ALIASES.get(reduce, reduce), bool(include_self))
    if _grad_needed(x, s):
        node = ScatterReduceBackward0((edge(x), edge(s)))
        node.dim, node.reduce, node.include_self = dim, reduce, bool(include_self)
        r = result(out, node)
        node._saved = (save(x), save(wrap(ix)), save(s), save_output(r))
        return r
    return result(out, None)


@register("index_put_")  # Tensor.index_put_ is the twin inplace.make_twins binds later
def _index_put_(input, indices, values, accumulate: bool = False):
    """``torch.index_put_``: ``input.index_put_(indices, values, accumulate)``."""
    return input.index_put_(indices, values, accumulate)
