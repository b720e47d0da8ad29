"""Diagonals and small matrix ops: ``diag_embed``, ``diag``, ``diagflat``, ``trace``,
``ger`` and ``cross``.

``diag`` and ``diagflat`` are PyTorch's composites: a vector's ``diag`` is ``diag_embed``
(``DiagEmbedBackward0``), a matrix's a copy of its diagonal (``DiagonalBackward0_copy``), and
``diagflat`` is ``diag_embed`` of a flattening view (``ViewBackward0`` under it).
"""

from __future__ import annotations

import numpy as np

from autodiag import _warnings, dtypes
from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    check_broadcast,
    edge,
    register,
    result,
    save,
    set_broadcast_meta,
    wrap_dim,
)
from autodiag.ops.linalg import outer
from autodiag.ops.shape import DiagonalBackward0, _diagonal_array, diagonal, diagonal_backward
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# diag_embed / diag / diagflat
# ---------------------------------------------------------------------------------------------


class DiagEmbedBackward0(Node):
    __slots__ = ("offset", "dim1", "dim2")

    def backward(self, xp, g):
        # derivatives.yaml: grad.diagonal(offset, dim1, dim2)
        if xp.arrays:
            return (_diagonal_array(g, self.offset, self.dim1, self.dim2).copy(),)
        return (diagonal(g, self.offset, self.dim1, self.dim2),)

    def _saved_extra(self):
        return {"offset": self.offset, "dim1": self.dim1, "dim2": self.dim2}


@register()
def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """A tensor whose diagonals (over ``dim1``, ``dim2``) are ``input``'s last dim.

    >>> import autodiag as torch
    >>> torch.diag_embed(torch.tensor([1.0, 2.0]))
    tensor([[1., 0.],
            [0., 2.]])
    """
    x = as_tensor_operand(input)
    d = x._data
    nd = d.ndim + 1
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (d.shape[-1] if d.ndim else 1) + abs(int(offset))
    rest = list(d.shape[:-1])
    shape = []
    for i in range(nd):
        shape.append(n if i in (d1, d2) else rest.pop(0))
    out = np.zeros(shape, dtype=d.dtype)
    _diagonal_array(out, int(offset), d1, d2)[...] = d if d.ndim else d.reshape(1)
    if _state.record and x.requires_grad:
        node = DiagEmbedBackward0((edge(x),))
        node.offset, node.dim1, node.dim2 = int(offset), d1, d2
        return result(out, node)
    return result(out, None)


class DiagonalBackward0_copy(DiagonalBackward0):  # noqa: N801 - PyTorch's name
    """``diag`` of a matrix: the diagonal copied out (``diagonal_copy``), not a view."""

    __slots__ = ()


@register()
def diag(input, diagonal: int = 0):
    """A vector's diagonal matrix, or a matrix's diagonal (shifted by ``diagonal``).

    >>> import autodiag as torch
    >>> torch.diag(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([1., 4.])
    """
    x = as_tensor_operand(input)
    d = x._data
    if d.ndim == 1:
        return diag_embed(x, diagonal, 0, 1)
    if d.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {d.ndim}D")
    out = _diagonal_array(d, int(diagonal), 0, 1).copy()
    if _state.record and x.requires_grad:
        node = DiagonalBackward0_copy((edge(x),))
        node.in_shape, node.offset, node.dim1, node.dim2 = d.shape, int(diagonal), 0, 1
        return result(out, node)
    return result(out, None)


@register()
def diagflat(input, offset: int = 0):
    """The flattened ``input`` on a diagonal of a square matrix.

    >>> import autodiag as torch
    >>> torch.diagflat(torch.tensor([[1.0], [2.0]]))
    tensor([[1., 0.],
            [0., 2.]])
    """
    x = as_tensor_operand(input)
    return diag_embed(x.contiguous().view(-1), offset, 0, 1)


# ---------------------------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------------------------


class TraceBackward0(Node):
    __slots__ = ("self_sym_sizes",)

    def backward(self, xp, g):
        # PyTorch's trace_backward: zeros with grad on the main diagonal
        shape = self.self_sym_sizes
        k = min(shape)
        g_diag = np.broadcast_to(g, (k,)) if xp.arrays else g.expand(k)
        return (diagonal_backward(xp, g_diag, shape, 0, 0, 1),)

    def _saved_extra(self):
        return {"self_sym_sizes": self.self_sym_sizes}


# ``torch.trace``: under ``import autodiag as torch`` the name ``trace`` is the tracing API
# (autodiag.trace), so the op is ``Tensor.trace`` and, through the ``import torch`` alias,
# ``torch.trace`` (torch_alias.SHADOWED_OPS).
@register(method=True)
def trace(input):
    """The sum of a matrix's main diagonal.

    >>> import autodiag as torch
    >>> torch.tensor([[1.0, 2.0], [3.0, 4.0]]).trace()
    tensor(5.)
    """
    x = as_tensor_operand(input)
    d = x._data
    if d.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {d.ndim}")
    diag_ = _diagonal_array(d, 0, 0, 1)
    if d.dtype.kind in "biu":
        out = np.asarray(diag_.sum(dtype=np.int64))
    else:
        out = np.asarray(diag_.sum(), dtype=d.dtype)
    if _state.record and x.requires_grad:
        node = TraceBackward0((edge(x),))
        node.self_sym_sizes = d.shape
        return result(out, node)
    return result(out, None)


# ``ger`` is PyTorch's deprecated name of ``outer`` (the same graph: MulBackward0 over a view)
ger = register("ger")(outer)


# ---------------------------------------------------------------------------------------------
# cross
# ---------------------------------------------------------------------------------------------


class LinalgCrossBackward0(Node):
    __slots__ = ("dim",)
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        # derivatives.yaml: self: linalg_cross(other, grad, dim); other: linalg_cross(grad, self)
        needs_self, needs_other = self.needs_grad
        a, b = self.saved_self(xp), self.saved_other(xp)
        if xp.arrays:
            return (
                _cross_array(b, g, self.dim) if needs_self else None,
                _cross_array(g, a, self.dim) if needs_other else None,
            )
        return (
            cross(b, g, dim=self.dim) if needs_self else None,
            cross(g, a, dim=self.dim) if needs_other else None,
        )

    def _saved_extra(self):
        return {"dim": self.dim}


def _cross_array(a, b, dim: int):
    a, b = np.broadcast_arrays(a, b)  # the result has the broadcast shape (linalg_cross)
    a0, a1, a2 = (np.take(a, i, axis=dim) for i in range(3))
    b0, b1, b2 = (np.take(b, i, axis=dim) for i in range(3))
    return np.stack((a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0), axis=dim)


@register()
def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (by default, the first dim of size 3).

    >>> import autodiag as torch
    >>> torch.cross(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]), dim=0)
    tensor([0., 0., 1.])
    """
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    if not isinstance(other, Tensor):
        raise TypeError(
            f"cross(): argument 'other' (position 2) must be Tensor, not {type(other).__name__}"
        )
    if a.ndim != b.ndim:
        raise RuntimeError(
            f"linalg.cross: inputs must have the same number of dimensions. Got {a.ndim} and "
            f"{b.ndim}"
        )
    check_broadcast(a._data.shape, b._data.shape)
    nd = a.ndim
    if dim is None:
        _warnings.warn_once(
            "cross without dim",
            "Using torch.cross without specifying the dim arg is deprecated.\nPlease "
            "either pass the dim explicitly or simply use torch.linalg.cross.\nThe default "
            "value of dim will change to agree with that of linalg.cross in a future release.",
        )
        shape = np.broadcast_shapes(a._data.shape, b._data.shape)
        dims = [i for i, s in enumerate(shape) if s == 3]
        if not dims:
            raise RuntimeError("no dimension of size 3 in input")
        dim = dims[0]
    dim = wrap_dim(dim, nd)
    sa = (1,) * (nd - a.ndim) + a._data.shape
    sb = (1,) * (nd - b.ndim) + b._data.shape
    na, nb = sa[dim], sb[dim]
    if na != 3 or nb != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {na} and {nb}"
        )
    dt = dtypes.result_type((a, b)).np
    out = _cross_array(a._data.astype(dt, copy=False), b._data.astype(dt, copy=False), dim)
    if _state.record and (a.requires_grad or b.requires_grad):
        node = LinalgCrossBackward0((edge(a), edge(b)))
        node.dim = dim
        set_broadcast_meta(node, out, a, b)
        node._saved = (save(a), save(b))
        return result(out, node)
    return result(out, None)
