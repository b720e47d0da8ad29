"""More pooling: ``max_pool3d`` (``MaxPool3DWithIndicesBackward0``), ``avg_pool3d``
(``AvgPool3DBackward0``) and ``adaptive_max_pool1d/2d`` (``AdaptiveMaxPool2DBackward0``).

The same pieces as ops/pooling.py's 2-d ops, written for any number of spatial dims: windows
from convolution's geometry (ops/conv.py), a max's gradient scattered to the element each
window picked (flat index in its input plane, as PyTorch returns it), an average's spread by
``col2im``; under ``create_graph`` the gradient is recorded as PyTorch's
``<Op>BackwardBackward0`` (NOTE [Pooling double backward] in ops/pooling.py).
"""

from __future__ import annotations

import math

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import ARRAY, _state, edge, register, result, save, wrap
from autodiag.ops.conv import Geometry, pad_array
from autodiag.ops.pooling import (
    _avg_pool,
    _AvgPoolBackward,
    _check_divisor,
    _defaults,
    _overlapping,
    _planes,
    _pool_geometry,
    _PoolingBackwardBackward,
    _scatter_to_planes,
    _shape,
    recorded_gradient,
)
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# max_pool3d
# ---------------------------------------------------------------------------------------------


def _window_max_nd(d: np.ndarray, geom: Geometry):
    """``(N, C, *size)`` -> (maximum of each window, flat plane index of the element picked),
    picked as PyTorch's kernels pick it: the first element inside the image starts the
    window, an element replaces the maximum when larger or NaN (ties keep the first, the last
    NaN wins). One strided view per kernel offset: no copy of the windows."""
    nd = len(geom.kernel)
    padded = pad_array(d, geom.lo, geom.hi, -np.inf)
    size = d.shape[2:]
    starts = [np.arange(o) * s - p for o, s, p in zip(geom.out, geom.stride, geom.lo)]
    # a window's first offset inside the image, per dim (padding comes before it)
    first = [-(-np.maximum(-st, 0) // dl) for st, dl in zip(starts, geom.dilation)]
    grid = np.ix_(*first)
    first_flat = np.ravel_multi_index(grid, geom.kernel) if nd else 0
    pick = np.empty(d.shape[:2] + tuple(geom.out), dtype=np.int32)
    pick[...] = first_flat
    best = np.full(pick.shape, -np.inf, dtype=d.dtype)
    has_nan = d.dtype.kind == "f" and bool(np.isnan(d).any())
    for k, offset in enumerate(np.ndindex(*geom.kernel)):
        view = padded[
            (Ellipsis,)
            + tuple(
                slice(i * dl, i * dl + (o - 1) * s + 1, s)
                for i, dl, o, s in zip(offset, geom.dilation, geom.out, geom.stride)
            )
        ]
        better = view > best
        if has_nan:
            better |= np.isnan(view)
        pick += better * (np.int32(k) - pick)
        np.maximum(best, view, out=best)  # NaN propagates: the value PyTorch returns too
    # kernel offset -> its displacement in the flat input plane from the window's start
    offsets = np.array(list(np.ndindex(*geom.kernel)), dtype=np.int64).reshape(-1, nd)
    plane_strides = np.array(
        [math.prod(size[i + 1 :]) for i in range(nd)], dtype=np.int64
    )  # row-major strides of the input plane
    shift = (offsets * np.array(geom.dilation) * plane_strides).sum(1)
    start = sum(
        st.reshape((-1,) + (1,) * (nd - 1 - i)) * ps
        for i, (st, ps) in enumerate(zip(starts, plane_strides))
    )
    return best, start + shift[pick]


class MaxPool3DWithIndicesBackward0(Node):
    """Each output's gradient goes to the input element its window picked (``result1``)."""

    __slots__ = ("geom", "ceil_mode", "in_shape")
    _saved_names = ("self", "result1")

    def backward(self, xp, g):
        idx = self.saved_result1(ARRAY)
        gd = g if xp.arrays else g._data
        nd = len(self.geom.kernel)
        unbatched = len(self.in_shape) == nd + 1
        plane = math.prod(self.in_shape[-nd:])
        if unbatched:
            gd, idx = gd[None], idx[None]
        gx = _scatter_to_planes(gd, idx, plane, not _overlapping(self.geom)).reshape(self.in_shape)
        return (
            recorded_gradient(
                xp, MaxPool3DWithIndicesBackwardBackward0, g, self.saved_self(xp), gx,
                indices=idx, out_shape=_shape(g),
            ),
        )  # fmt: skip

    def _saved_extra(self):
        gm = self.geom
        return {
            "kernel_size": gm.kernel,
            "stride": gm.stride,
            "padding": gm.lo,
            "dilation": gm.dilation,
            "ceil_mode": self.ceil_mode,
        }


class MaxPool3DWithIndicesBackwardBackward0(_PoolingBackwardBackward):
    """The adjoint of max_pool3d's gradient: the incoming gradient read at the indices."""

    __slots__ = ("indices", "out_shape")

    def _pool(self, gg):
        idx = self.indices
        n, c = idx.shape[:2]
        picked = gg.reshape(n, c, -1).gather(2, wrap(idx.reshape(n, c, -1)))
        return picked.reshape(self.out_shape)


@register(method=False)
def max_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """The maximum of each window of ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) input, one
    ``MaxPool3DWithIndicesBackward0`` node; ``return_indices`` also gives the flat index of
    each maximum in its input volume (as ``torch.nn.functional.max_pool3d``).

    >>> import autodiag as torch
    >>> x = torch.arange(8.0).reshape(1, 1, 2, 2, 2).requires_grad_()
    >>> y = torch.max_pool3d(x, 2)
    >>> y.flatten().tolist(), y.grad_fn.name()
    ([7.0], 'MaxPool3DWithIndicesBackward0')
    """
    k, s, p, dl = _defaults(kernel_size, stride, padding, dilation, 3, "max_pool3d")
    d = _planes(input, "max_pool3d", 3)
    geom = _pool_geometry("max_pool3d", d.shape[2:], k, s, p, dl, ceil_mode, d.shape[:2])
    out, idx = _window_max_nd(d, geom)
    if input._data.ndim == 4:
        out, idx = out[0], idx[0]
    indices = wrap(np.ascontiguousarray(idx, dtype=np.int64))
    out = np.ascontiguousarray(out)
    if _state.record and input.requires_grad:
        node = MaxPool3DWithIndicesBackward0((edge(input),))
        node.geom, node.ceil_mode, node.in_shape = geom, bool(ceil_mode), input._data.shape
        node._saved = (save(input), save(indices))
        out = result(out, node)
    else:
        out = result(out, None)
    return (out, indices) if return_indices else out


# ---------------------------------------------------------------------------------------------
# avg_pool3d
# ---------------------------------------------------------------------------------------------


class AvgPool3DBackward0(_AvgPoolBackward):
    __slots__ = ()


class AvgPool3DBackwardBackward0(_PoolingBackwardBackward):
    """The adjoint of avg_pool3d's gradient: avg_pool3d itself."""

    __slots__ = ("args",)

    def _pool(self, gg):
        return avg_pool3d(gg, *self.args)


AvgPool3DBackward0._double = AvgPool3DBackwardBackward0


@register(method=False, home="nn.functional")
def avg_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    """The mean of each window of ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) input, one
    ``AvgPool3DBackward0`` node (as ``torch.nn.functional.avg_pool3d``).

    >>> import autodiag as torch
    >>> torch.nn.functional.avg_pool3d(torch.arange(8.0).reshape(1, 1, 2, 2, 2), 2).flatten()
    tensor([3.5000])
    """
    k, s, p, _ = _defaults(kernel_size, stride, padding, 1, 3, "avg_pool3d")
    _check_divisor(divisor_override)
    d = _planes(input, "avg_pool3d", 3)
    size = d.shape[2:]
    if any(n < kk for n, kk in zip(size, k)):
        raise RuntimeError(
            f"input image (T: {size[0]} H: {size[1]} W: {size[2]}) smaller than kernel size "
            f"(kT: {k[0]} kH: {k[1]} kW: {k[2]})"
        )
    geom = _pool_geometry("avg_pool3d", size, k, s, p, (1, 1, 1), ceil_mode, d.shape[:2])
    return _avg_pool(
        input, d, geom, ceil_mode, count_include_pad, divisor_override, AvgPool3DBackward0
    )


# ---------------------------------------------------------------------------------------------
# adaptive_max_pool1d/2d
# ---------------------------------------------------------------------------------------------


def _adaptive_bounds(n: int, o: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's adaptive windows: output i covers floor(i*n/o) .. ceil((i+1)*n/o) - 1."""
    i = np.arange(o)
    return (i * n) // o, -((-(i + 1) * n) // o)


def _adaptive_max(d: np.ndarray, size: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(N, C, H, W)`` -> (each adaptive window's max, its flat index in the plane). Windows
    differ in size: every offset up to the largest window is read, clamped to the window's
    last element (re-reading an element never changes the pick: only larger or NaN wins)."""
    (sh, eh), (sw, ew) = (_adaptive_bounds(n, o) for n, o in zip(d.shape[-2:], size))
    width = d.shape[-1]
    best = idx = None
    for a in range(int((eh - sh).max())):
        rows = np.minimum(sh + a, eh - 1)
        for b in range(int((ew - sw).max())):
            cols = np.minimum(sw + b, ew - 1)
            view = d[..., rows[:, None], cols[None, :]]
            flat = rows[:, None] * width + cols[None, :]
            if best is None:
                best = view.copy()
                idx = np.broadcast_to(flat, view.shape).copy()
                continue
            better = (view > best) | np.isnan(view)
            best = np.where(better, view, best)
            idx = np.where(better, flat, idx)
    return best, idx


class AdaptiveMaxPool2DBackward0(Node):
    """Each output's gradient goes to the element its window picked (``result1``); adaptive
    windows may overlap, so the contributions add up."""

    __slots__ = ("in_shape",)
    _saved_names = ("self", "result1")

    def backward(self, xp, g):
        idx = self.saved_result1(ARRAY)
        gd = g if xp.arrays else g._data
        unbatched = len(self.in_shape) == 3
        plane = math.prod(self.in_shape[-2:])
        if unbatched:
            gd, idx = gd[None], idx[None]
        gx = _scatter_to_planes(gd, idx, plane, False).reshape(self.in_shape)
        return (
            recorded_gradient(
                xp, AdaptiveMaxPool2DBackwardBackward0, g, self.saved_self(xp), gx,
                indices=idx, out_shape=_shape(g),
            ),
        )  # fmt: skip


class AdaptiveMaxPool2DBackwardBackward0(MaxPool3DWithIndicesBackwardBackward0):
    """The adjoint of adaptive_max_pool2d's gradient: the incoming gradient at the indices."""

    __slots__ = ()


def _adaptive_max_pool2d(input, size, op: str):
    d = input._data
    if d.ndim not in (3, 4):
        raise RuntimeError(
            f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: "
            f"[{', '.join(map(str, d.shape))}]"
        )
    for i in range(d.ndim - 2, d.ndim):
        if d.shape[i] == 0:
            raise RuntimeError(
                "adaptive_max_pool2d(): Expected input to have non-zero size for non-batch "
                f"dimensions, but input has sizes [{', '.join(map(str, d.shape))}] with "
                f"dimension {i} being empty"
            )
    if d.dtype.kind != "f":
        raise RuntimeError(f"\"{op}\" not implemented for '{input.dtype.scalar_name}'")
    if any(o < 0 for o in size):
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0")
    planes = d if d.ndim == 4 else d[None]
    if 0 in size:
        out = np.empty(planes.shape[:2] + tuple(size), dtype=d.dtype)
        idx = np.empty(out.shape, dtype=np.int64)
    else:
        out, idx = _adaptive_max(planes, size)
    if d.ndim == 3:
        out, idx = out[0], idx[0]
    indices = wrap(np.ascontiguousarray(idx, dtype=np.int64))
    out = np.ascontiguousarray(out)
    if _state.record and input.requires_grad:
        node = AdaptiveMaxPool2DBackward0((edge(input),))
        node.in_shape = d.shape
        node._saved = (save(input), save(indices))
        return result(out, node), indices
    return result(out, None), indices


def _output_size(output_size, input: Tensor, n: int, op: str) -> tuple:
    """PyTorch's ``_list_with_default``: an int repeats; None keeps the input's size."""
    if isinstance(output_size, (int, np.integer)):
        return (int(output_size),) * n
    sizes = tuple(output_size)
    if len(sizes) != n:
        raise ValueError(f"Input dimension should be at least {len(sizes) + 1}")
    shape = input._data.shape
    return tuple(shape[-n + i] if v is None else int(v) for i, v in enumerate(sizes))


@register(method=False, home="nn.functional")
def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """The maximum over ``output_size`` windows that tile each input plane (PyTorch's
    floor/ceil boundaries), one ``AdaptiveMaxPool2DBackward0`` node.

    >>> import autodiag as torch
    >>> torch.nn.functional.adaptive_max_pool2d(torch.arange(16.0).reshape(1, 1, 4, 4), 2)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])
    """
    size = _output_size(output_size, input, 2, "adaptive_max_pool2d")
    out, idx = _adaptive_max_pool2d(input, size, "adaptive_max_pool2d")
    return (out, idx) if return_indices else out


@register(method=False)
def adaptive_max_pool1d(input, output_size):
    """``(output, indices)``: adaptive_max_pool2d over an added dim of size 1, as PyTorch
    records it (``UnsqueezeBackward0``, ``AdaptiveMaxPool2DBackward0``, ``SqueezeBackward1``).
    (``torch.nn.functional.adaptive_max_pool1d`` returns the indices on request only.)

    >>> import autodiag as torch
    >>> torch.adaptive_max_pool1d(torch.tensor([[1.0, 3.0, 2.0, 0.0, 5.0]]), 2)
    (tensor([[3., 5.]]), tensor([[1, 4]]))
    """
    d = input._data
    if d.ndim not in (2, 3):
        raise RuntimeError(
            f"Expected 2 to 3 dimensions, but got {d.ndim}-dimensional tensor for argument #1 "
            "'self' (while checking arguments for adaptive_max_pool1d)"
        )
    size = _output_size(output_size, input, 1, "adaptive_max_pool1d")
    out, idx = _adaptive_max_pool2d(input.unsqueeze(-2), (1,) + size, "adaptive_max_pool2d")
    return out.squeeze(-2), wrap(idx._data.squeeze(-2))
