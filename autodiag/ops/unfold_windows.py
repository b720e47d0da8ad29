"""``Tensor.unfold(dimension, size, step)``: every window of ``size`` elements along
``dimension``, ``step`` apart, as a view (a new last dim holds each window). Not
``nn.functional.unfold`` (im2col, ops/conv.py).

The gradient adds each window back where it came from (PyTorch's ``unfold_backward``): windows
overlap when ``step < size``, so the sum runs over the ``size`` offsets inside a window, each
one a strided slice of the input (vectorised over the windows and every other dim).
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, register, result, wrap_dim
from autodiag.ops.shape import _make_view

__all__ = ["unfold"]


def _windows(d: np.ndarray, dim: int, size: int, step: int) -> np.ndarray:
    """The windows of ``d`` as a writable strided view (writes through, as PyTorch's view)."""
    if d.ndim == 0:  # PyTorch: a 0-d tensor is one element along dim 0
        return np.lib.stride_tricks.as_strided(d, (size,), (d.itemsize,))
    shape = list(d.shape)
    strides = list(d.strides)
    shape[dim] = (d.shape[dim] - size) // step + 1
    strides[dim] = d.strides[dim] * step
    return np.lib.stride_tricks.as_strided(
        d, tuple(shape) + (size,), tuple(strides) + (d.strides[dim],)
    )


def _unfold_backward_array(g: np.ndarray, in_shape: tuple, dim: int, size: int, step: int):
    out = np.zeros(in_shape, dtype=g.dtype)
    if not in_shape:  # 0-d input: g holds `size` (0 or 1) copies of the one element
        out[...] = g.sum()
        return out
    n = g.shape[dim]
    if n == 0 or size == 0:
        return out
    target = np.moveaxis(out, dim, -1)  # a view: writes land in out
    windows = np.moveaxis(g, dim, -2)  # (..., n windows, size)
    stop = step * (n - 1) + 1
    for k in range(size):  # offsets inside a window; each slice is one element per window
        target[..., k : k + stop : step] += windows[..., k]
    return out


class UnfoldBackward0(Node):
    __slots__ = ("in_shape", "dimension", "size", "step")

    def backward(self, xp, g):
        return (unfold_backward(xp, g, self.in_shape, self.dimension, self.size, self.step),)

    def _saved_extra(self):
        return {
            "self_sym_sizes": self.in_shape,
            "dimension": self.dimension,
            "size": self.size,
            "step": self.step,
        }


class UnfoldBackwardBackward0(Node):
    """``unfold_backward``'s own gradient: the windows of the incoming gradient."""

    __slots__ = ("dimension", "size", "step")

    def backward(self, xp, g):
        if xp.arrays:
            return (_windows(g, self.dimension, self.size, self.step),)
        return (unfold(g, self.dimension, self.size, self.step),)

    def _saved_extra(self):
        return {"dim": self.dimension, "size": self.size, "step": self.step}


def unfold_backward(xp, g, in_shape, dim, size, step):
    gd = g if xp.arrays else g._data
    z = _unfold_backward_array(gd, in_shape, dim, size, step)
    if xp.arrays:
        return z
    node = None
    if _state.record and g.requires_grad:
        node = UnfoldBackwardBackward0((edge(g),))
        node.dimension, node.size, node.step = dim, size, step
    return result(z, node)


@register(home="Tensor")
def unfold(input, dimension: int, size: int, step: int):
    """The windows of ``size`` elements along ``dimension``, ``step`` apart, as a view with the
    window in a new last dim (``Tensor.unfold``; recorded as ``UnfoldBackward0``).

    >>> import autodiag as torch
    >>> torch.arange(5.).unfold(0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    """
    d = input._data
    dim = wrap_dim(dimension, d.ndim)
    max_size = 1 if d.ndim == 0 else d.shape[dim]
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if size > max_size:
        raise RuntimeError(
            f"maximum size for tensor at dimension {dim} is {max_size} but size is {size}"
        )
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    node = None
    if _state.record and input.requires_grad:
        node = UnfoldBackward0((edge(input),))
        node.in_shape, node.dimension, node.size, node.step = d.shape, dim, size, step
    return _make_view(input, _windows(d, dim, size, step), node)
