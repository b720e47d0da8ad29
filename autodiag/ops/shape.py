"""Shape ops, views and indexing: view/reshape, squeeze/unsqueeze, transpose/permute, expand,
repeat, ``__getitem__``, cat/stack/split/chunk, gather, clone, dtype conversion.

Views (``view``, ``reshape`` of contiguous data, ``squeeze``, ``unsqueeze``, ``transpose``,
``permute``, ``expand``, basic indexing, ``split``/``chunk``) share their base's numpy buffer and
version counter (NOTE [Version counters] in core/graph.py) and set ``_base``.
"""

from __future__ import annotations

import weakref

import numpy as np

from autodiag import _device, _warnings, dtypes
from autodiag.core.graph import FlatNode, Node
from autodiag.ops._core import (
    IdentityBackward,
    _state,
    as_tensor_operand,
    broadcasting,
    edge,
    normalize_dims,
    register,
    result,
    save,
    set_broadcast_meta,
    wrap_dim,
)
from autodiag.ops._scalar_convert import checked_scalar
from autodiag.ops.views import creation_meta, register_view
from autodiag.tensor import Tensor, bind_alias, vc_of
from autodiag.trace.events import traced

_weakref = weakref.ref


def _make_view(x: Tensor, data: np.ndarray, node, multi_output: bool = False) -> Tensor:
    """A view of ``x`` (NOTE [Views and in-place] in views.py)."""
    vc = vc_of(x)
    t = Tensor._make(data, node, node is not None, vc)
    t._base = x._base if x._base is not None else x
    if multi_output or x._creation or not _state.record or _state.inference:
        meta = creation_meta(x, multi_output)
        if meta:
            t._creation = meta
    if len(vc) == 3 and len(vc[2]) < 63:
        vc[2].append(_weakref(t))  # register_view's usual case, inlined
    else:
        register_view(vc, t)
    if x._inference:
        t._inference = True
    elif _state.inference:
        # NOTE: a view of a normal tensor made in inference_mode is a normal tensor (PyTorch):
        # is_inference() False, writable in place outside the mode
        t.__dict__.pop("_inference", None)
    return t


class _ShapeNode(FlatNode):  # NOTE [Flat nodes]
    __slots__ = ("in_shape",)

    def backward(self, xp, g):
        return (xp.reshape(g, self.in_shape),)

    _extra_names = ("self_sym_sizes",)  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"self_sym_sizes": self.in_shape}


class ViewBackward0(_ShapeNode):
    __slots__ = ()


class ReshapeAliasBackward0(_ShapeNode):
    __slots__ = ()


class UnsafeViewBackward0(_ShapeNode):
    __slots__ = ()


class SqueezeBackward0(_ShapeNode):
    __slots__ = ()


class SqueezeBackward1(_ShapeNode):
    __slots__ = ()


class SqueezeBackward4(_ShapeNode):
    __slots__ = ()


class SqueezeBackward2(_ShapeNode):  # squeeze(dims: tuple), as PyTorch names it
    __slots__ = ()


class UnsqueezeBackward0(_ShapeNode):
    __slots__ = ()


def _shape_op(x: Tensor, data: np.ndarray, cls, is_view: bool = True) -> Tensor:
    node = None
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.in_shape = x._data.shape
    if is_view:
        return _make_view(x, data, node)
    return result(data, node)


def _infer_shape(shape, numel: int) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"invalid shape dimension {s}")
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(
                f"shape '[{', '.join(map(str, shape))}]' is invalid for input of size {numel}"
            )
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(
            f"shape '[{', '.join(map(str, shape))}]' is invalid for input of size {numel}"
        )
    return shape


@register(home="Tensor")
def view(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], dtypes.dtype):
        raise NotImplementedError("autodiag: view(dtype) is not supported")
    d = input._data
    shape = _infer_shape(shape, d.size)
    try:
        out = d.view()
        out.shape = shape  # raises when a copy would be needed, as torch's view does
    except AttributeError:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at "
            "least one dimension spans across two contiguous subspaces). Use "
            ".reshape(...) instead."
        ) from None
    return _shape_op(input, out, ViewBackward0)


@register()
def reshape(input, *shape):
    x = as_tensor_operand(input)
    d = x._data
    shape = _infer_shape(shape, d.size)
    # PyTorch: a contiguous input is viewed (ViewBackward0); a strided one that can still be
    # viewed is aliased (ReshapeAliasBackward0); otherwise it is copied (CloneBackward0) and the
    # copy viewed (UnsafeViewBackward0). numpy's "reshape without copy" test plays computeStride.
    if d.flags.c_contiguous:
        return _shape_op(x, d.reshape(shape), ViewBackward0)
    out = d.view()
    try:
        out.shape = shape
    except AttributeError:
        pass
    else:
        return _shape_op(x, out, ReshapeAliasBackward0)
    c = clone(x)
    return _shape_op(c, c._data.reshape(shape), UnsafeViewBackward0, is_view=False)


@register(home="Tensor")
def view_as(input, other):
    return view(input, other.shape)


@register(home="Tensor")
def reshape_as(input, other):
    return reshape(input, other.shape)


@register()
def flatten(input, start_dim: int = 0, end_dim: int = -1):
    d = input._data
    if d.ndim == 0:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, d.ndim), wrap_dim(end_dim, d.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input
    # the flattened size itself, not -1: with a size-0 dim elsewhere -1 is undetermined
    return reshape(input, d.shape[:s] + (int(np.prod(d.shape[s : e + 1])),) + d.shape[e + 1 :])


@register()
def unflatten(input, dim: int, sizes):
    d = input._data
    if d.ndim == 0:
        wrap_dim(dim, 0)  # IndexError outside [-1, 0]
        # PyTorch's own wording (its dim wrapping fails inside unflatten)
        raise RuntimeError(
            f"unflatten got an unexpected error:\nDimension specified as {dim} "
            f"but tensor has no dimensions"
        )
    dim = wrap_dim(dim, d.ndim)
    sizes = tuple(int(s) for s in sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    n = d.shape[dim]
    known = int(np.prod([s for s in sizes if s != -1]))
    if sizes.count(-1) > 1:
        raise RuntimeError("unflatten got an unexpected error:\nonly one dimension can be inferred")
    if known != n if -1 not in sizes else (known == 0 or n % known):
        raise RuntimeError(
            f"unflatten: Provided sizes [{', '.join(map(str, sizes))}] don't "
            f"multiply up to the size of dim {dim} ({n}) in the input tensor"
        )
    if -1 in sizes:  # inferred here: next to a size-0 dim a reshape could not
        sizes = tuple(n // known if s == -1 else s for s in sizes)
    # splitting one dim is always a view (ViewBackward0, also on a strided input)
    return view(input, d.shape[:dim] + sizes + d.shape[dim + 1 :])


@register()
def squeeze(input, dim=None, *, _cls=None):
    d = input._data
    if dim is None:
        return _shape_op(input, d.reshape([s for s in d.shape if s != 1]), SqueezeBackward0)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(wrap_dim(x, d.ndim) for x in dims)
    keep = [s for i, s in enumerate(d.shape) if not (i in dims and s == 1)]
    cls = _cls or (SqueezeBackward1 if isinstance(dim, int) else SqueezeBackward2)
    return _shape_op(input, d.reshape(keep), cls)


@register()
def unsqueeze(input, dim: int):
    d = input._data
    dim = wrap_dim(dim, d.ndim + 1)
    return _shape_op(input, np.expand_dims(d, dim), UnsqueezeBackward0)


class TransposeBackward0(FlatNode):  # NOTE [Flat nodes]
    __slots__ = ("dim0", "dim1")

    def backward(self, xp, g):
        return (
            xp.mT(g) if (self.dim0, self.dim1) == (-2, -1) else _swap(xp, g, self.dim0, self.dim1),
        )

    _extra_names = ("dim0", "dim1")  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"dim0": self.dim0, "dim1": self.dim1}


def _swap(xp, g, d0, d1):
    if xp.arrays:
        # a 0-d tensor accepts dims 0 and -1 (nothing to swap); numpy has no axis 0 there
        return np.swapaxes(g, d0, d1) if g.ndim else g
    return g.transpose(d0, d1)


class TBackward0(FlatNode):  # NOTE [Flat nodes]
    __slots__ = ()

    def backward(self, xp, g):
        return (_swap(xp, g, 0, 1) if g.ndim == 2 else g,)


@register()
def transpose(input, dim0: int, dim1: int):
    d = input._data
    d0, d1 = wrap_dim(dim0, d.ndim), wrap_dim(dim1, d.ndim)
    node = None
    if _state.record and input.requires_grad:
        node = TransposeBackward0((edge(input),))
        node.dim0, node.dim1 = d0, d1
    return _make_view(input, np.swapaxes(d, d0, d1) if d.ndim else d.view(), node)


swapaxes = register("swapaxes")(transpose)
swapdims = register("swapdims")(transpose)


@register()
def t(input):
    d = input._data
    if d.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {d.ndim}D")
    node = TBackward0((edge(input),)) if _state.record and input.requires_grad else None
    return _make_view(input, d.T, node)


class PermuteBackward0(FlatNode):  # NOTE [Flat nodes]
    __slots__ = ("dims",)

    def backward(self, xp, g):
        inv = tuple(np.argsort(self.dims))
        return (xp.permute(g, inv),)

    _extra_names = ("dims",)  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"dims": self.dims}


@register()
def permute(input, *dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    d = input._data
    if len(dims) != d.ndim:
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does "
            f"not match the length of the desired ordering of dimensions i.e. "
            f"input.dim() = {d.ndim} is not equal to len(dims) = {len(dims)}"
        )
    dims = tuple(wrap_dim(x, d.ndim) for x in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    node = None
    if _state.record and input.requires_grad:
        node = PermuteBackward0((edge(input),))
        node.dims = dims
    return _make_view(input, d.transpose(dims), node)


class FlipBackward0(Node):
    __slots__ = ("dims",)

    def backward(self, xp, g):
        return (xp.flip(g, self.dims),)

    def _saved_extra(self):
        return {"dims": self.dims}


@register()
def flip(input, *dims):
    """Reverse the order of elements along ``dims`` (a copy, as in PyTorch).

    >>> import autodiag as ad
    >>> ad.tensor([1., 2., 3.]).flip(0)
    tensor([3., 2., 1.])
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    d = input._data
    dims = normalize_dims(dims, d.ndim)  # PyTorch's errors for repeated and out-of-range dims
    node = None
    if _state.record and input.requires_grad:
        node = FlipBackward0((edge(input),))
        node.dims = dims
    return result(np.flip(d, dims).copy() if dims else d.copy(), node)


def _T(self):
    d = self._data
    if d.ndim == 2:
        return permute(self, 1, 0)
    # NOTE: PyTorch records a PermuteBackward0 even for 0-d and 1-d tensors (a no-op view)
    return permute(self, tuple(range(d.ndim - 1, -1, -1)))


Tensor.T = property(_T)


def _mT(self):
    nd = self._data.ndim
    if nd == 0:
        # NOTE: PyTorch returns the tensor itself (deprecated; a warning says so)
        _warnings.warn(
            "Tensor.mT is deprecated on 0-D tensors. This function is the identity in these cases.",
            UserWarning,
        )
        return self
    if nd == 1:
        raise RuntimeError(
            "tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor."
        )
    return transpose(self, -2, -1)


Tensor.mT = property(_mT)


class ExpandBackward0(FlatNode):  # NOTE [Flat nodes]
    __slots__ = ("in_shape",)

    def backward(self, xp, g):
        return (xp.sum_to(g, self.in_shape),)

    _extra_names = ("self_sym_sizes",)  # NOTE [Saved attributes]

    def _saved_extra(self):
        return {"self_sym_sizes": self.in_shape}


@register(home="Tensor")
def expand(input, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    d = input._data
    if len(sizes) < d.ndim:
        dims = ", ".join(map(str, d.shape))
        raise RuntimeError(
            f"expand({input.dtype.legacy_type_name}{{[{dims}]}}, "
            f"size=[{', '.join(map(str, sizes))}]): the number of sizes provided "
            f"({len(sizes)}) must be greater or equal to the number of dimensions "
            f"in the tensor ({d.ndim})"
        )
    lead = len(sizes) - d.ndim
    shape = tuple(d.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
    for i in range(d.ndim):
        if d.shape[i] != 1 and d.shape[i] != shape[i + lead]:
            raise RuntimeError(
                f"The expanded size of the tensor ({shape[i + lead]}) must match "
                f"the existing size ({d.shape[i]}) at non-singleton dimension "
                f"{i + lead}.  Target sizes: [{', '.join(map(str, sizes))}].  "
                f"Tensor sizes: [{', '.join(map(str, d.shape))}]"
            )
    node = None
    if _state.record and input.requires_grad:
        node = ExpandBackward0((edge(input),))
        node.in_shape = d.shape
    return _make_view(input, np.broadcast_to(d, shape, subok=True), node)


# --- diagonal and movedim (einsum's repeated labels) -----------------------------------------


def _diagonal_array(d: np.ndarray, offset: int, d1: int, d2: int) -> np.ndarray:
    """The diagonal of ``d`` over dims d1, d2 as a writable view, the diagonal dim last.

    NOTE: numpy's own ``diagonal`` is a read-only view; ``x.diagonal().fill_(0)`` must write
    into x (PyTorch), so the view is built from strides: the start moved ``offset`` along d2
    (or ``-offset`` along d1), one step of both dims per diagonal element.
    """
    n1, n2 = d.shape[d1], d.shape[d2]
    s1, s2 = (0, offset) if offset >= 0 else (-offset, 0)
    length = max(0, min(n1 - s1, n2 - s2))
    if length:
        start = [slice(None)] * d.ndim
        start[d1], start[d2] = slice(s1, None), slice(s2, None)
        d = d[tuple(start)]
    keep = [i for i in range(d.ndim) if i not in (d1, d2)]
    shape = tuple(d.shape[i] for i in keep) + (length,)
    strides = tuple(d.strides[i] for i in keep) + (d.strides[d1] + d.strides[d2],)
    return np.lib.stride_tricks.as_strided(d, shape, strides)


class DiagonalBackward0(Node):
    __slots__ = ("in_shape", "offset", "dim1", "dim2")

    def backward(self, xp, g):
        return (diagonal_backward(xp, g, self.in_shape, self.offset, self.dim1, self.dim2),)

    def _saved_extra(self):
        return {
            "self_sym_sizes": self.in_shape,
            "offset": self.offset,
            "dim1": self.dim1,
            "dim2": self.dim2,
        }


class DiagonalBackwardBackward0(Node):
    __slots__ = ("offset", "dim1", "dim2")

    def backward(self, xp, g):
        if xp.arrays:
            return (_diagonal_array(g, self.offset, self.dim1, self.dim2),)
        return (diagonal(g, self.offset, self.dim1, self.dim2),)


def diagonal_backward(xp, g, shape, offset, d1, d2):
    """Zeros of ``shape`` with ``g`` on the diagonal (PyTorch's ``diagonal_backward``)."""
    gd = g if xp.arrays else g._data
    z = np.zeros(shape, dtype=gd.dtype)
    _diagonal_array(z, offset, d1, d2)[...] = gd
    if xp.arrays:
        return z
    node = None
    if _state.record and g.requires_grad:
        node = DiagonalBackwardBackward0((edge(g),))
        node.offset, node.dim1, node.dim2 = offset, d1, d2
    return result(z, node)


@register()
def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal over ``dim1``, ``dim2`` (shifted by ``offset``) as a view, in the last dim.

    >>> import autodiag as torch
    >>> torch.arange(9.).reshape(3, 3).diagonal()
    tensor([0., 4., 8.])
    """
    x = as_tensor_operand(input)
    d = x._data
    d1, d2 = wrap_dim(dim1, d.ndim), wrap_dim(dim2, d.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    node = None
    if _state.record and x.requires_grad:
        node = DiagonalBackward0((edge(x),))
        node.in_shape, node.offset, node.dim1, node.dim2 = d.shape, offset, d1, d2
    return _make_view(x, _diagonal_array(d, offset, d1, d2), node)


@register()
def movedim(input, source, destination):
    """``input`` with dims ``source`` moved to positions ``destination`` (a permute).

    >>> import autodiag as torch
    >>> torch.zeros(2, 3, 4).movedim(0, -1).shape
    torch.Size([3, 4, 2])
    """
    x = as_tensor_operand(input)
    nd = x._data.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({src} dims) "
            f"should contain the same number of dims as destination ({dst} dims)"
        )
    src = [wrap_dim(s, nd) for s in src]
    dst = [wrap_dim(s, nd) for s in dst]
    for name, dims in (("source", src), ("destination", dst)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({dims})")
    if nd == 0:
        return _shape_op(x, x._data.view(), AliasBackward0)  # PyTorch: self.alias()
    perm = [-1] * nd
    for s, t in zip(src, dst):
        perm[t] = s
    rest = iter(i for i in range(nd) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return permute(x, perm)


moveaxis = register("moveaxis")(movedim)


@register(home="Tensor")
def expand_as(input, other):
    return expand(input, other.shape)


@register()
def broadcast_to(input, size):
    return expand(input, size)


class RepeatBackward0(Node):
    __slots__ = ("repeats", "in_shape")

    def backward(self, xp, g):
        reps = self.repeats
        if 0 in reps:
            # PyTorch's repeat_backward: constant zeros (nothing flows back through them)
            return (xp.zeros(self.in_shape, g),)
        lead = len(reps) - len(self.in_shape)
        shape = (1,) * lead + tuple(self.in_shape)
        split = []
        for r, s in zip(reps, shape):
            split += [r, s]
        g = xp.reshape(g, tuple(split))
        g = xp.sum(g, tuple(range(0, 2 * len(reps), 2)))
        return (xp.reshape(g, self.in_shape),)

    def _saved_extra(self):
        return {"repeats": self.repeats}


@register(home="Tensor")
def repeat(input, *repeats):
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)):
        repeats = tuple(repeats[0])
    d = input._data
    if len(repeats) < d.ndim:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number "
            "of dimensions of tensor"
        )
    out = np.tile(d.reshape((1,) * (len(repeats) - d.ndim) + d.shape), repeats)
    if _state.record and input.requires_grad:
        node = RepeatBackward0((edge(input),))
        node.repeats, node.in_shape = tuple(repeats), d.shape
        return result(out, node)
    return result(out, None)


# --- embedding a gradient back into its input's shape ----------------------------------------


class _EmbedNode(Node):
    """Backward of an embed (zeros with ``g`` written at ``index``): read ``g`` back."""

    __slots__ = ("index",)

    def backward(self, xp, g):
        return (g[self.index],)


SelectBackwardBackward0 = type("SelectBackwardBackward0", (_EmbedNode,), {"__slots__": ()})
SliceBackwardBackward0 = type("SliceBackwardBackward0", (_EmbedNode,), {"__slots__": ()})
IndexPutBackward0 = type("IndexPutBackward0", (_EmbedNode,), {"__slots__": ()})


def embed(xp, g, shape, index, accumulate: bool, cls=IndexPutBackward0):
    """Zeros of ``shape`` with ``g`` written (or added, for repeated indices) at ``index``."""
    gd = g if xp.arrays else g._data
    z = np.zeros(shape, dtype=gd.dtype)
    if accumulate:
        np.add.at(z, index, gd)
    else:
        z[index] = gd
    if xp.arrays:
        return z
    if _state.record and g.requires_grad:
        node = cls((edge(g),))
        node.index = index
        return result(z, node)
    return result(z, None)


def scatter_into_zeros(xp, g, dim: int, idx, shape):
    """Adjoint of ``gather(x, dim, idx)``: add ``g`` into zeros of ``shape`` at ``idx``."""
    idx = idx if xp.arrays else idx._data
    if idx.size == 0:  # an empty index of any shape (gather allows it): nothing is added
        nothing = tuple(np.zeros(0, dtype=np.int64) for _ in shape or (1,))
        z = embed(xp, xp.reshape(g, (0,)), shape or (1,), nothing, True)
        return z if shape else xp.reshape(z, ())
    if len(shape) <= 1 and idx.ndim <= 1:
        # 0-d and 1-d tensors mix freely in gather (PyTorch): work on 1-d views
        flat = embed(
            xp, xp.reshape(g, (idx.size,)), (shape[0] if shape else 1,), (idx.reshape(-1),), True
        )
        return xp.reshape(flat, shape)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[dim] = idx
    return embed(xp, g, shape, tuple(grid), True)


# --- indexing ---------------------------------------------------------------------------------


class SelectBackward0(Node):
    __slots__ = ("in_shape", "index")

    def backward(self, xp, g):
        return (embed(xp, g, self.in_shape, self.index, False, SelectBackwardBackward0),)


class SliceBackward0(SelectBackward0):
    __slots__ = ()

    def backward(self, xp, g):
        return (embed(xp, g, self.in_shape, self.index, False, SliceBackwardBackward0),)


class IndexBackward0(SelectBackward0):
    __slots__ = ("accumulate",)

    def backward(self, xp, g):
        return (embed(xp, g, self.in_shape, self.index, self.accumulate),)


def _basic(x: Tensor, index: tuple, cls) -> Tensor:
    d = x._data
    out = d[index]
    if type(out) is not np.ndarray:
        # NOTE: an integer for every dim gives a numpy scalar, a copy; x[i] must be a 0-d view
        # (x[i] += 1, x[i].add_(1) write into x)
        out = d[index + (Ellipsis,)]
    node = None
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.in_shape, node.index = d.shape, index
    return _make_view(x, out, node)


@register()
def select(input, dim: int, index: int):
    d = input._data
    if d.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = wrap_dim(dim, d.ndim)
    n = d.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {n}")
    return _basic(input, (slice(None),) * dim + (index % n,), SelectBackward0)


@register()
def narrow(input, dim: int, start: int, length: int):
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    dim = wrap_dim(dim, input.ndim)
    return _basic(input, (slice(None),) * dim + (slice(start, start + length),), SliceBackward0)


def _to_index_array(item):
    if isinstance(item, Tensor):
        a = item._data
    else:
        a = np.asarray(item)
    if a.dtype.kind not in "biu":
        if a.size == 0:
            return a.astype(np.int64)
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return a


def getitem(self: Tensor, index, _cls=None):
    """``tensor[index]``: basic parts as views (Select/Slice/Unsqueeze nodes, one per index
    element like PyTorch), then at most one advanced-indexing step (IndexBackward0)."""
    # NOTE: PyTorch skips a full slice (start 0, stop >= size, step 1, as written) inside a
    # tuple index, but a lone slice (x[:], x[0:]) always records SliceBackward0.
    lone = isinstance(index, slice)
    if not isinstance(index, tuple):
        index = (index,)
    n_used = 0
    for it in index:
        if it is None or it is Ellipsis or isinstance(it, (bool, np.bool_)):
            continue  # a bool adds a dim of its own (below)
        if isinstance(it, (Tensor, np.ndarray)) and it.dtype in (dtypes.bool, np.bool_):
            n_used += it.ndim
        else:
            n_used += 1
    if n_used > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
    if Ellipsis in [i for i in index if not isinstance(i, (Tensor, np.ndarray, list))]:
        pos = [
            k
            for k, i in enumerate(index)
            if i is Ellipsis and not isinstance(i, (Tensor, np.ndarray, list))
        ][0]
        index = index[:pos] + (slice(None),) * (self.ndim - n_used) + index[pos + 1 :]
    t = self
    dim = 0
    adv = []  # (dim, array) in order
    for it in index:
        if it is None:
            t = unsqueeze(t, dim)
            dim += 1
        elif isinstance(it, (bool, np.bool_)):
            # PyTorch: unsqueeze, then index the new dim with [0] (True) or [] (False)
            t = unsqueeze(t, dim)
            adv.append((dim, np.zeros(1 if it else 0, dtype=np.int64)))
            dim += 1
        elif isinstance(it, (int, np.integer)) or (
            isinstance(it, Tensor) and it.ndim == 0 and it._data.dtype.kind in "iu" and not adv
        ):
            t = select(t, dim, int(it))
        elif isinstance(it, slice):
            n = t._data.shape[dim]
            start, stop, step = it.indices(n)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            full = (
                it.start in (None, 0) and (it.stop is None or it.stop >= n) and it.step in (None, 1)
            )
            if lone or not full:
                t = _basic(t, (slice(None),) * dim + (slice(start, stop, step),), SliceBackward0)
            dim += 1
        else:
            arr = _to_index_array(it)
            adv.append((dim, arr))
            dim += arr.ndim if arr.dtype == np.bool_ else 1
    if not adv:
        if t is self:  # x[:] and x[...] are views too
            return _shape_op(self, self._data.view(), AliasBackward0)
        return t
    full: list = []
    dim = 0
    for adim, arr in adv:
        while dim < adim:
            full.append(slice(None))
            dim += 1
        if arr.ndim == 0 and arr.dtype == np.bool_:
            full.append(bool(arr))  # x[True] after an unsqueeze
            dim += 1
            continue
        full.append(arr)
        dim += arr.ndim if arr.dtype == np.bool_ else 1
    full_t = tuple(full)
    d = t._data
    try:
        out = d[full_t]
    except IndexError as e:
        raise IndexError(str(e).replace("axis", "dimension")) from None
    if d.flags.c_contiguous and not out.flags.c_contiguous:
        # NOTE: numpy lays out x[:, idx] with the indexed dim outermost ((1, 3) strides for a
        # (3, 3) result); PyTorch's index of a contiguous tensor is contiguous, so its result
        # flattens as a view (ViewBackward0, not UnsafeViewBackward0)
        out = np.ascontiguousarray(out)
    if _state.record and t.requires_grad:
        node = (_cls or IndexBackward0)((edge(t),))
        node.in_shape, node.index = d.shape, full_t
        node.accumulate = any(
            a.dtype != np.bool_ for a in (x for x in full_t if isinstance(x, np.ndarray))
        )
        return result(out, node)
    return result(np.array(out), None)


class AliasBackward0(_ShapeNode):
    __slots__ = ()


def _alias_of(t: Tensor) -> Tensor:
    # torch.Tensor(t): PyTorch's t.alias() (Tensor.__new__ calls it; tensor.py sits below ops)
    return _shape_op(t, t._data.view(), AliasBackward0)


bind_alias(_alias_of)


Tensor.__getitem__ = traced("__getitem__", getitem)


# --- joining and splitting -------------------------------------------------------------------


class CatBackward0(Node):
    __slots__ = ("dim", "sizes")

    def backward(self, xp, g):
        out, start = [], 0
        for (size, keep), needs in zip(self.sizes, self.needs_grad):
            if keep:
                idx = (slice(None),) * self.dim + (slice(start, start + size),)
                out.append(g[idx])
            elif needs:
                out.append(xp.zeros((0,), g))  # a skipped 1-D empty input: an empty gradient
            else:
                out.append(None)
            start += size
        return tuple(out)

    def _saved_extra(self):
        return {"dim": self.dim}


@register(method=False)
def cat(tensors, dim: int = 0):
    ts = [as_tensor_operand(t) for t in tensors]
    if not ts:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    # PyTorch skips 1-D empty tensors in cat (legacy behaviour)
    nd = max(t.ndim for t in ts)
    if nd == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    dt = dtypes.result_type(ts).np
    datas = [t._data.astype(dt, copy=False) for t in ts if not (t.ndim == 1 and t.numel() == 0)]
    # PyTorch wraps dim against the tensors it does not skip: with none, any dim goes
    dim = wrap_dim(dim, nd) if datas else 0
    ref = next(t for t in ts if not (t.ndim == 1 and t.numel() == 0)) if datas else ts[0]
    for i, t in enumerate(ts):
        if t.ndim == 1 and t.numel() == 0:
            continue
        if t.ndim != ref.ndim:
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}"
            )
        for k in range(t.ndim):
            if k != dim and t._data.shape[k] != ref._data.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {dim}. "
                    f"Expected size {ref._data.shape[k]} but got size "
                    f"{t._data.shape[k]} for tensor number {i} in the list."
                )
    out = np.concatenate(datas, axis=dim) if datas else np.zeros((0,), dt)
    if _state.record and any(t.requires_grad for t in ts):
        node = CatBackward0(tuple(edge(t) for t in ts))
        node.dim = dim
        node.sizes = tuple(
            (
                0 if (t.ndim == 1 and t.numel() == 0) else t._data.shape[dim],
                t.requires_grad and not (t.ndim == 1 and t.numel() == 0),
            )
            for t in ts
        )
        metas = tuple((t._data.shape, t._data.dtype) for t in ts)
        if any(m[1] != out.dtype for m in metas):
            node._input_meta = tuple((None, m[1]) for m in metas)
        return result(out, node)
    return result(out, None)


concat = register("concat", method=False)(cat)
concatenate = register("concatenate", method=False)(cat)


class StackBackward0(Node):
    __slots__ = ("dim",)

    def backward(self, xp, g):
        n = g.shape[self.dim]
        needs = self.needs_grad  # one per stacked tensor
        return tuple(g[(slice(None),) * self.dim + (i,)] if needs[i] else None for i in range(n))

    def _saved_extra(self):
        return {"dim": self.dim}


@register(method=False)
def stack(tensors, dim: int = 0):
    ts = [as_tensor_operand(t) for t in tensors]
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(ts):
        if t._data.shape != ts[0]._data.shape:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got "
                f"[{', '.join(map(str, ts[0]._data.shape))}] at entry 0 and "
                f"[{', '.join(map(str, t._data.shape))}] at entry {i}"
            )
    dim = wrap_dim(dim, ts[0].ndim + 1)
    dt = dtypes.result_type(ts).np
    out = np.stack([t._data.astype(dt, copy=False) for t in ts], axis=dim)
    if out.ndim not in (4, 5):
        # PyTorch's cat (stack's) output is contiguous unless its inputs suggest channels-last
        # (4 or 5 dims); numpy's follows its inputs' layout (a stack of mT's was transposed,
        # and a reshape of it then a copy, UnsafeViewBackward0, not PyTorch's view)
        out = np.ascontiguousarray(out)
    if _state.record and any(t.requires_grad for t in ts):
        node = StackBackward0(tuple(edge(t) for t in ts))
        node.dim = dim
        if any(t._data.dtype != dt for t in ts):
            node._input_meta = tuple((None, t._data.dtype) for t in ts)
        return result(out, node)
    return result(out, None)


class SplitBackward0(Node):
    """Backward of split/chunk: one node, several outputs; missing grads are zeros."""

    __slots__ = ("dim", "sizes", "in_shape", "_num_outputs")

    def _apply(self, xp, grads):
        parts = []
        for g, size in zip(grads, self.sizes):
            if g is None:
                shape = list(self.in_shape)
                shape[self.dim] = size
                ref = next(x for x in grads if x is not None)
                g = xp.zeros(tuple(shape), ref)
            parts.append(g)
        if xp.arrays:
            return (np.concatenate(parts, axis=self.dim),)
        return (cat(parts, self.dim),)

    def _saved_extra(self):
        return {"dim": self.dim, "split_sizes": self.sizes}


class SplitWithSizesBackward0(SplitBackward0):
    __slots__ = ()


@register()
def split(tensor, split_size_or_sections, dim: int = 0):
    d = tensor._data
    if d.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    dim = wrap_dim(dim, d.ndim)
    n = d.shape[dim]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
        if s == 0 and n:
            raise RuntimeError(
                f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
            )
        # as ATen: at least one piece (an empty dim splits into one empty piece)
        count = max(-(-n // s), 1) if s else 1
        sizes = [s] * (count - 1) + [n - s * (count - 1)]
        cls = SplitBackward0
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {n} "
                f"(input tensor's size at dimension {dim}), but got "
                f"split_sizes=[{', '.join(map(str, sizes))}]"
            )
        cls = SplitWithSizesBackward0
    node = None
    if _state.record and tensor.requires_grad:
        node = cls((edge(tensor),))
        node.dim, node.sizes, node.in_shape = dim, tuple(sizes), d.shape
        node._num_outputs = len(sizes)
    outs, start = [], 0
    for i, size in enumerate(sizes):
        part = d[(slice(None),) * dim + (slice(start, start + size),)]
        t = _make_view(tensor, part, node, multi_output=True)
        if node is not None:
            t._output_nr = i
        outs.append(t)
        start += size
    return tuple(outs)


@register()
def chunk(input, chunks: int, dim: int = 0):
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input._data.shape[wrap_dim(dim, input.ndim)]
    if n == 0:
        return split(input, [0] * chunks, dim)  # ATen: ``chunks`` empty pieces
    return split(input, -(-n // chunks), dim)


class UnbindBackward0(Node):
    """One node, one output per slice: the gradient is the stack of the slices' gradients."""

    __slots__ = ("dim", "in_shape", "_num_outputs")

    def _apply(self, xp, grads):
        shape = self.in_shape[: self.dim] + self.in_shape[self.dim + 1 :]
        ref = next(x for x in grads if x is not None)
        parts = [xp.zeros(shape, ref) if g is None else g for g in grads]
        if xp.arrays:
            return (np.stack(parts, axis=self.dim),)
        return (stack(parts, self.dim),)

    def _saved_extra(self):
        return {"dim": self.dim}


@register()
def unbind(input, dim: int = 0):
    d = input._data
    if d.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    dim = wrap_dim(dim, d.ndim)
    node = None
    if _state.record and input.requires_grad:
        node = UnbindBackward0((edge(input),))
        node.dim, node.in_shape, node._num_outputs = dim, d.shape, d.shape[dim]
    outs = []
    for i in range(d.shape[dim]):
        # (the Ellipsis keeps a 0-d slice a numpy view, not a scalar copy)
        t = _make_view(input, d[(slice(None),) * dim + (i, Ellipsis)], node, multi_output=True)
        if node is not None:
            t._output_nr = i
        outs.append(t)
    return tuple(outs)


class GatherBackward0(Node):
    """Saves ``self`` as PyTorch does (its backward reads only the shape, but a write into the
    input after gather fails the backward's version check there too)."""

    __slots__ = ("dim", "in_shape")
    _saved_names = ("self", "index")

    def backward(self, xp, g):
        return (scatter_into_zeros(xp, g, self.dim, self.saved_index(xp), self.in_shape),)

    def _saved_extra(self):
        return {"dim": self.dim}


@register()
def gather(input, dim: int, index):
    d = input._data
    idx = as_tensor_operand(index)
    dim = wrap_dim(dim, d.ndim)
    ix = idx._data
    if ix.size == 0:
        # NOTE: PyTorch checks nothing more for an empty index (dtype, number of dims, sizes):
        # the result is empty in the index's shape
        out = np.empty(ix.shape, dtype=d.dtype)
        if _state.record and input.requires_grad:
            node = GatherBackward0((edge(input),))
            node.dim, node.in_shape = dim, d.shape
            node._saved = (save(input), save(idx))
            return result(out, node)
        return result(out, None)
    if ix.dtype != np.int64:
        raise RuntimeError("gather(): Expected dtype int64 for index")
    if ix.ndim != d.ndim and (ix.ndim > 1 or d.ndim > 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    n = d.shape[dim] if d.ndim else 1
    if ix.ndim == d.ndim:
        for k in range(d.ndim):
            if k != dim and ix.shape[k] > d.shape[k]:
                raise RuntimeError(
                    f"Size does not match at dimension {k} expected index "
                    f"[{', '.join(map(str, ix.shape))}] to be no larger than self "
                    f"[{', '.join(map(str, d.shape))}] apart from dimension {dim}"
                )
    if ix.size and (ix.min() < 0 or ix.max() >= n):
        bad = ix.min() if ix.min() < 0 else ix.max()
        raise RuntimeError(f"index {bad} is out of bounds for dimension {dim} with size {n}")
    if d.ndim <= 1 and ix.ndim <= 1:
        # 0-d and 1-d tensors mix freely (PyTorch): the result has the index's shape
        out = d.reshape(-1)[ix.reshape(-1)].reshape(ix.shape)
    else:
        # the index may be smaller than the input in the other dims: gather from that corner
        # (take_along_axis alone would broadcast the index instead)
        corner = tuple(slice(None) if k == dim else slice(0, s) for k, s in enumerate(ix.shape))
        out = np.take_along_axis(d[corner], ix, axis=dim)
    if _state.record and input.requires_grad:
        node = GatherBackward0((edge(input),))
        node.dim, node.in_shape = dim, d.shape
        node._saved = (save(input), save(idx))
        return result(out, node)
    return result(np.asarray(out), None)


class IndexSelectBackward0(IndexBackward0):
    __slots__ = ()


@register()
def index_select(input, dim: int, index):
    d = input._data
    idx = as_tensor_operand(index)._data
    if idx.dtype.kind not in "iu":
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if idx.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    dim = wrap_dim(dim, d.ndim)
    idx = idx.reshape(-1)  # a 0-d index selects like a 1-element one (PyTorch)
    if d.ndim == 0 and idx.size != 1:
        raise RuntimeError(
            f"index_select(): Index to scalar can have only 1 value, got {idx.size} value(s)"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= (d.shape[dim] if d.ndim else 1)):
        raise IndexError("index out of range in self")
    if d.ndim:
        return getitem(input, (slice(None),) * dim + (idx,), _cls=IndexSelectBackward0)
    node = None
    if _state.record and input.requires_grad:
        node = IndexSelectBackward0((edge(input),))
        node.in_shape, node.index, node.accumulate = (), (), False
    return result(d.copy(), node)


class MaskedFillBackward0(Node):
    """masked_fill with a Python scalar value: one input."""

    __slots__ = ()
    _saved_names = ("mask",)

    def backward(self, xp, g):
        m = self.saved_mask(xp)
        return (xp.mask(~m, g),)  # NOTE [Masked gradients]


class MaskedFillBackward1(Node):
    """masked_fill with a 0-d tensor value: the value gets the masked gradient (summed to 0-d
    by the engine)."""

    __slots__ = ()
    _saved_names = ("mask",)

    def backward(self, xp, g):
        m = self.saved_mask(xp)
        needs_self, needs_value = self.needs_grad
        return (xp.mask(~m, g) if needs_self else None, xp.mask(m, g) if needs_value else None)


@register(inplace=True)
def masked_fill(input, mask, value):
    out = _masked_fill(input, mask, value)
    if out.grad_fn is not None and out._data.dtype.kind not in "fc":
        # PyTorch's set_history refuses an integer output that would require grad (an int
        # tensor filled with a float value that requires grad); masked_fill_ writes it in place
        # without that check (the tensor then requires grad, as PyTorch's does)
        raise RuntimeError(f"Autograd not support dtype: {out.dtype.scalar_name}")
    return out


def _masked_fill(input, mask, value):
    """masked_fill without the dtype check of its out-of-place output: masked_fill_'s
    computation (ops/inplace.py ``inplace_compute``)."""
    m = as_tensor_operand(mask)
    if isinstance(value, Tensor):
        if value._data.ndim != 0:
            raise RuntimeError(
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value._data.ndim} dimension(s)."
            )
        # PyTorch reads the tensor's number (value.item()) and converts it checked, as a number
        v = checked_scalar(value._data.item(), input._data.dtype, "masked_fill")
    else:
        v = checked_scalar(value, input._data.dtype, "masked_fill")
    out = broadcasting(np.where, m._data, v, input._data)
    v_grad = isinstance(value, Tensor) and value.requires_grad
    if _state.record and (input.requires_grad or v_grad):
        if isinstance(value, Tensor):
            node = MaskedFillBackward1((edge(input), edge(value)))
            set_broadcast_meta(node, out, input, value)
        else:
            node = MaskedFillBackward0((edge(input),))
            set_broadcast_meta(node, out, input)
        node._saved = (save(m),)
        return result(out, node)
    return result(out, None)


masked_fill.inplace_compute = _masked_fill
# PyTorch's masked_fill_ takes the value tensor's number (value.item()): only the mask is read
# as an array, so a value sharing the written memory is no overlap (x.masked_fill_(m, x[0]))
masked_fill.inplace_reads = lambda mask, value: (mask,)


# --- copies and dtype conversion -------------------------------------------------------------


class CloneBackward0(IdentityBackward):
    __slots__ = ()


@register()
def clone(input, *, memory_format=None):
    d = input._data
    out = np.array(d, copy=True, order="C")
    node = CloneBackward0((edge(input),)) if _state.record and input.requires_grad else None
    return result(out, node)


@register(home="Tensor")
def contiguous(input, memory_format=None):
    if input._data.flags.c_contiguous:
        return input
    return clone(input)


class ToCopyBackward0(IdentityBackward):
    __slots__ = ()  # the engine casts the gradient back to the input dtype (_input_meta)


def _to_dtype(x: Tensor, dt: dtypes.dtype, copy: bool = False) -> Tensor:
    d = x._data
    if d.dtype == dt.np and not copy:
        return x
    out = d.astype(dt.np)
    if _state.record and x.requires_grad and dt.is_floating_point:
        node = ToCopyBackward0((edge(x),))
        node._input_meta = ((d.shape, d.dtype),)
        return result(out, node)
    return result(out, None)


@register(home="Tensor")
def to(input, *args, **kwargs):
    dt = kwargs.get("dtype")
    copy = kwargs.get("copy", False)
    _device.check(kwargs.get("device"))
    for a in args:
        if isinstance(a, dtypes.dtype):
            dt = a
        elif isinstance(a, Tensor):
            dt = a.dtype
        elif isinstance(a, (str, _device.device, int)) and not isinstance(a, bool):
            _device.check(a)  # the CPU, or a clear error
        elif a is not None and not isinstance(a, bool):  # bools: non_blocking, copy
            raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
    if dt is None:
        return clone(input) if copy else input
    return _to_dtype(input, dt, copy)


def _caster(dt):
    def cast(self, memory_format=None):
        return _to_dtype(self, dt)

    return cast


# ``x.float()``, ...: the dtype casts, by method name (a sparse tensor has them too)
CASTS = (
    ("float", dtypes.float32),
    ("double", dtypes.float64),
    ("half", dtypes.float16),
    ("long", dtypes.int64),
    ("int", dtypes.int32),
    ("bool", dtypes.bool),
    ("short", dtypes.int16),
)
for _n, _dt in CASTS:
    setattr(Tensor, _n, _caster(_dt))


@register(home="Tensor")
def type_as(input, other):
    return _to_dtype(input, other.dtype)


def _type(self, dtype=None):
    if dtype is None:
        return self.dtype.legacy_type_name
    if isinstance(dtype, str):  # x.type("torch.DoubleTensor")
        dtype = next((d for d in dtypes._BY_NP.values() if d.legacy_type_name == dtype), dtype)
    if not isinstance(dtype, dtypes.dtype):
        dtype = getattr(dtype, "dtype", dtype)  # x.type(torch.DoubleTensor)
    if not isinstance(dtype, dtypes.dtype):
        raise ValueError(f"invalid type: {dtype!r}")
    return _to_dtype(self, dtype)


Tensor.type = _type
Tensor.cpu = lambda self: self


def _cuda(self, *args, **kwargs):
    raise AssertionError(_device.NO_CUDA)


Tensor.cuda = _cuda
