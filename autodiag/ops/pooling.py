"""Pooling: ``max_pool1d/2d`` (``MaxPool2DWithIndicesBackward0``), ``avg_pool2d``
(``AvgPool2DBackward0``) and ``adaptive_avg_pool2d`` (``AdaptiveAvgPool2DBackward0``).

Windows come from the same geometry as convolution's (ops/conv.py): a strided, dilated view
padded with -inf (max) or 0 (average). A max's gradient goes to the one input element each
window picked (PyTorch's indices, flat over the input plane); an average's is spread over the
window by ``fold``. Both formulas serve first-order backward and ``create_graph=True``.
"""

from __future__ import annotations

import math

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import ARRAY, _state, edge, register, result, save, wrap
from autodiag.ops.conv import Geometry, col2im, pad_array, windows
from autodiag.tensor import Tensor


def _ints(v, n: int, name: str, op: str) -> tuple:
    """``v`` as ``n`` ints, as PyTorch's pooling ops read kernel_size/stride/padding/dilation."""
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise RuntimeError(f"{op}: {name} must either be a single int, or a tuple of {n} ints")
        return tuple(int(i) for i in v)
    return (int(v),) * n


def _pool_geometry(op, size, kernel, stride, padding, dilation, ceil_mode, lead) -> Geometry:
    """PyTorch's ``pooling_output_shape`` and its checks."""
    if any(s == 0 for s in stride):
        raise RuntimeError("stride should not be zero")
    if any(k <= 0 for k in kernel):
        raise RuntimeError(
            f"kernel size should be greater than zero, but got kH: {kernel[0]} kW: {kernel[-1]}"
        )
    if any(d <= 0 for d in dilation):
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilationH: {dilation[0]} "
            f"dilationW: {dilation[-1]}"
        )
    for k, p, d in zip(kernel, padding, dilation):
        if p < 0 or p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(
                f"pad should be at most half of effective kernel size, but got pad={p}, "
                f"kernel_size={k} and dilation={d}"
            )
    out = []
    for n, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1  # the last window must start inside the image or its left padding
        out.append(o)
    if min(out) <= 0:
        c = lead[-1] if lead else 1
        raise RuntimeError(
            f"Given input size: ({c}x{'x'.join(map(str, size))}). Calculated output size: "
            f"({c}x{'x'.join(map(str, out))}). Output size is too small"
        )
    return Geometry(tuple(kernel), tuple(stride), tuple(dilation), tuple(padding), size, tuple(out))


def _planes(x: Tensor, op: str, nd: int) -> np.ndarray:
    """The input as ``(N, C, *spatial)`` (an unbatched input gets N = 1)."""
    d = x._data
    if d.ndim not in (nd + 1, nd + 2) or any(s == 0 for s in d.shape[-nd - 1 :]):
        raise RuntimeError(
            f"non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input"
        )
    if d.dtype.kind != "f":
        raise RuntimeError(f"\"{op}\" not implemented for '{x.dtype.scalar_name}'")
    return d if d.ndim == nd + 2 else d[None]


def _shape(a) -> tuple:
    return a.shape if isinstance(a, np.ndarray) else a._data.shape


# ---------------------------------------------------------------------------------------------
# max_pool
# ---------------------------------------------------------------------------------------------


def _scatter_to_planes(g: np.ndarray, idx: np.ndarray, plane: int, unique: bool) -> np.ndarray:
    """Zeros of ``(*idx.shape[:2], plane)`` with ``g`` added at the flat plane indices ``idx``.
    ``unique``: no two windows overlap, so no element is picked twice (a plain write);
    otherwise the contributions add up."""
    n, c = idx.shape[:2]
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape(n, c, *(1,) * (idx.ndim - 2))
    if unique:
        flat = np.zeros(n * c * plane, dtype=g.dtype)
        flat[(idx + base).ravel()] = g.ravel()
        return flat.reshape(n, c, plane)
    flat = np.bincount((idx + base).ravel(), weights=g.ravel(), minlength=n * c * plane)
    return flat.astype(g.dtype, copy=False).reshape(n, c, plane)


def _overlapping(geom: Geometry) -> bool:
    return any(s < d * (k - 1) + 1 for s, d, k in zip(geom.stride, geom.dilation, geom.kernel))


class MaxPool2DWithIndicesBackward0(Node):
    """Each output's gradient goes to the input element its window picked (``result1``)."""

    __slots__ = ("geom", "ceil_mode", "in_shape")
    _saved_names = ("self", "result1")

    def backward(self, xp, g):
        idx = self.saved_result1(ARRAY)
        gd = g if xp.arrays else g._data
        unbatched = len(self.in_shape) == 3
        plane = math.prod(self.in_shape[-2:])
        if unbatched:
            gd, idx = gd[None], idx[None]
        gx = _scatter_to_planes(gd, idx, plane, not _overlapping(self.geom))
        gx = gx.reshape(self.in_shape)
        return (
            recorded_gradient(
                xp, MaxPool2DWithIndicesBackwardBackward0, g, self.saved_self(xp), gx,
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


# NOTE [Pooling double backward]
# A pooling op's input gradient is linear in the incoming gradient and, given the windows
# (and, for max, the picked indices), independent of the input. Under create_graph it is
# recorded as PyTorch's ``<Op>BackwardBackward0`` node with edges (grad_output, self): the
# gradient flowing back to grad_output is the adjoint of the gradient map, which is the
# pooling itself (a gather at the indices for max); the one to self is zeros, as PyTorch's.


class _PoolingBackwardBackward(Node):
    __slots__ = ("in_shape",)

    def _pool(self, gg):  # pragma: no cover - each subclass has one
        raise NotImplementedError

    def backward(self, xp, gg):
        _, needs_self = self.needs_grad
        out = self._pool(wrap(gg) if xp.arrays else gg)
        if xp.arrays:
            out = out._data
        zeros = None
        if needs_self:
            z = np.zeros(self.in_shape, dtype=_dtype(gg))
            zeros = z if xp.arrays else wrap(z)
        return (out, zeros)


def _dtype(a):
    return a.dtype if isinstance(a, np.ndarray) else a._data.dtype


def recorded_gradient(xp, cls, g, x, gx: np.ndarray, **attrs):
    """A pooling op's input gradient ``gx``: the array itself for first-order backward, a
    Tensor recorded as ``cls`` (edges: grad_output, self) under create_graph (NOTE [Pooling
    double backward])."""
    if xp.arrays:
        return gx
    if _state.record and (g.requires_grad or x.requires_grad):
        node = cls((edge(g), edge(x)))
        node.in_shape = x._data.shape
        for k, v in attrs.items():
            setattr(node, k, v)
        return result(gx, node)
    return result(gx, None)


class MaxPool2DWithIndicesBackwardBackward0(_PoolingBackwardBackward):
    """The adjoint of max_pool's gradient: the incoming gradient read at the indices."""

    __slots__ = ("indices", "out_shape")

    def _pool(self, gg):
        idx = self.indices
        n, c = idx.shape[:2]
        picked = gg.reshape(n, c, -1).gather(2, wrap(idx.reshape(n, c, -1)))
        return picked.reshape(self.out_shape)


def _window_max(d: np.ndarray, geom: Geometry):
    """The maximum of each window and the flat index (in its input plane) of the element
    picked, as PyTorch's kernel picks it: a window starts at its first element inside the
    image, then an element replaces the maximum when it is larger or NaN (the last NaN wins;
    ties keep the first). One pass per kernel offset over strided views: no copy of the
    windows.

    NOTE: branch-free updates (``maximum``, ``pick += better * (k - pick)``): a masked copy
    (``copyto(where=)``) is several times slower on real data, whose masks are random."""
    padded = pad_array(d, geom.lo, geom.hi, -np.inf)
    width = d.shape[-1]
    kh, kw = geom.kernel
    (dh, dw), (o1, o2) = geom.dilation, geom.out
    # the row/column where each window starts (padding included), and its first offset inside
    starts = [np.arange(o) * s - p for o, s, p in zip(geom.out, geom.stride, geom.lo)]
    first = [-(-np.maximum(-st, 0) // dl) for st, dl in zip(starts, geom.dilation)]
    small = np.int16 if kh * kw > 127 else np.int8
    pick = np.empty(d.shape[:2] + (o1, o2), dtype=small)
    pick[...] = (first[0][:, None] * kw + first[1][None, :]).astype(small)
    best = np.full(pick.shape, -np.inf, dtype=d.dtype)
    has_nan = d.dtype.kind == "f" and bool(np.isnan(d).any())
    for k, (i, j) in enumerate(np.ndindex(kh, kw)):
        view = padded[
            ...,
            i * dh : i * dh + (o1 - 1) * geom.stride[0] + 1 : geom.stride[0],
            j * dw : j * dw + (o2 - 1) * geom.stride[1] + 1 : geom.stride[1],
        ]
        better = view > best
        if has_nan:
            better |= np.isnan(view)
        pick += better * (small(k) - pick)
        np.maximum(best, view, out=best)  # NaN propagates: the value PyTorch returns too
    # offset k = (i, j) -> its displacement in the input plane from the window's start
    ii, jj = np.divmod(np.arange(kh * kw), kw)
    shift = ii * dh * width + jj * dw
    idx = (starts[0][:, None] * width + starts[1][None, :]) + shift[pick]
    zero = best == 0
    if zero.any():
        # numpy's maximum keeps either zero of a tie (0. vs -0.); PyTorch's the first, which
        # ``pick`` holds: read the sign there
        plane = d.reshape(d.shape[:2] + (-1,))
        picked = np.take_along_axis(plane, idx.reshape(idx.shape[:2] + (-1,)), axis=2)
        best = np.where(zero, picked.reshape(best.shape), best)
    return best, idx


def _max_pool2d_with_indices(x: Tensor, kernel, stride, padding, dilation, ceil_mode, op):
    d = _planes(x, op, 2)
    geom = _pool_geometry(
        op, d.shape[2:], kernel, stride, padding, dilation, ceil_mode, d.shape[:2]
    )
    out, idx = _window_max(d, geom)
    if x._data.ndim == 3:
        out, idx = out[0], idx[0]
    indices = wrap(np.ascontiguousarray(idx, dtype=np.int64))
    if _state.record and x.requires_grad:
        node = MaxPool2DWithIndicesBackward0((edge(x),))
        node.geom, node.ceil_mode, node.in_shape = geom, bool(ceil_mode), x._data.shape
        node._saved = (save(x), save(indices))
        return result(np.ascontiguousarray(out), node), indices
    return result(np.ascontiguousarray(out), None), indices


def _defaults(kernel_size, stride, padding, dilation, nd, op):
    k = _ints(kernel_size, nd, "kernel_size", op)
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else stride
    return (
        k,
        _ints(s, nd, "stride", op),
        _ints(padding, nd, "padding", op),
        _ints(dilation, nd, "dilation", op),
    )


@register(method=False)
def max_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """The maximum of each window of ``(N, C, H, W)`` (or ``(C, H, W)``) input, one
    ``MaxPool2DWithIndicesBackward0`` node; ``return_indices`` also gives the flat index of
    each maximum in its input plane (as ``torch.nn.functional.max_pool2d``).

    >>> import autodiag as torch
    >>> x = torch.arange(16.0).reshape(1, 1, 4, 4).requires_grad_()
    >>> y = torch.max_pool2d(x, 2)
    >>> y.tolist(), y.grad_fn.name()
    ([[[[5.0, 7.0], [13.0, 15.0]]]], 'MaxPool2DWithIndicesBackward0')
    """
    k, s, p, d = _defaults(kernel_size, stride, padding, dilation, 2, "max_pool2d")
    out, idx = _max_pool2d_with_indices(input, k, s, p, d, ceil_mode, "max_pool2d")
    return (out, idx) if return_indices else out


@register(method=False)
def max_pool1d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """The maximum of each window of ``(N, C, L)`` (or ``(C, L)``) input: max_pool2d over an
    added dim of size 1, as PyTorch records it (``UnsqueezeBackward0``,
    ``MaxPool2DWithIndicesBackward0``, ``SqueezeBackward1``).

    >>> import autodiag as torch
    >>> torch.max_pool1d(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
    tensor([[3., 2.]])
    """
    xd = input._data
    if xd.ndim not in (2, 3):
        raise RuntimeError(
            f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size "
            f"for input, but got:[{', '.join(map(str, xd.shape))}]"
        )
    k, s, p, d = _defaults(kernel_size, stride, padding, dilation, 1, "max_pool1d")
    out, idx = _max_pool2d_with_indices(
        input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, (1,) + d, ceil_mode, "max_pool1d"
    )
    if return_indices:
        return out.squeeze(-2), wrap(idx._data.squeeze(-2))
    if not (_state.record and input.requires_grad):
        # PyTorch's CPU max_pool1d without autograd (max_pool1d_impl) returns a fresh tensor,
        # not the squeeze view of max_pool1d_with_indices: an in-place op on it then records
        # its own node (LerpBackward0), not a view's (AsStridedBackward0)
        return wrap(np.ascontiguousarray(out._data.squeeze(-2)))
    return out.squeeze(-2)


# ---------------------------------------------------------------------------------------------
# avg_pool2d
# ---------------------------------------------------------------------------------------------


def _avg_divisor(geom: Geometry, count_include_pad: bool, divisor_override, dtype):
    """Each output's divisor (PyTorch's avg_pool kernels, any number of dims): its window's size
    clipped to the padded input, or, without ``count_include_pad``, to the input itself."""
    if divisor_override is not None:
        return np.asarray(divisor_override, dtype=dtype)
    out = np.ones((), dtype=np.int64)
    for n, k, s, p, o in zip(geom.size, geom.kernel, geom.stride, geom.lo, geom.out):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        size = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        out = np.multiply.outer(out, size)
    return out.astype(dtype)


class _AvgPoolBackward(Node):
    """Each output's gradient, divided by its divisor, spread over its window (``col2im``);
    ``_double``: the node class of its own gradient (set below each subclass)."""

    __slots__ = ("geom", "ceil_mode", "count_include_pad", "divisor_override", "divisor")
    _saved_names = ("self",)
    _double: type

    def backward(self, xp, g):
        geom = self.geom
        gd = g if xp.arrays else g._data
        unbatched = gd.ndim == len(geom.kernel) + 1
        if unbatched:
            gd = gd[None]
        n, c = gd.shape[:2]
        k, L = geom.numel_kernel, math.prod(geom.out)
        share = (gd / self.divisor).reshape(n, c, 1, L)
        cols = np.broadcast_to(share, (n, c, k, L)).reshape(n, c * k, L)
        gx = col2im(cols, geom).astype(gd.dtype, copy=False)
        if unbatched:
            gx = gx[0]
        return (recorded_gradient(xp, self._double, g, self.saved_self(xp), gx, args=self._args()),)

    def _args(self) -> tuple:
        gm = self.geom
        return (
            gm.kernel, gm.stride, gm.lo, self.ceil_mode, self.count_include_pad,
            self.divisor_override,
        )  # fmt: skip

    def _saved_extra(self):
        gm = self.geom
        return {
            "kernel_size": gm.kernel,
            "stride": gm.stride,
            "padding": gm.lo,
            "ceil_mode": self.ceil_mode,
            "count_include_pad": self.count_include_pad,
            "divisor_override": self.divisor_override,
        }


def _avg_pool(input, d, geom, ceil_mode, count_include_pad, divisor_override, cls):
    """avg_pool of the planes ``d`` (``input``'s, batched) over ``geom``: the result, with a
    ``cls`` node (a ``_AvgPoolBackward``) when it records."""
    nd = len(geom.kernel)
    divisor = _avg_divisor(geom, count_include_pad, divisor_override, d.dtype)
    out = windows(d, geom).sum(axis=tuple(range(-nd, 0))) / divisor
    if input._data.ndim == nd + 1:
        out = out[0]
    out = np.ascontiguousarray(out, dtype=d.dtype)
    if _state.record and input.requires_grad:
        node = cls((edge(input),))
        node.geom, node.ceil_mode, node.count_include_pad = geom, bool(ceil_mode), count_include_pad
        node.divisor_override, node.divisor = divisor_override, divisor
        node._saved = (save(input),)
        return result(out, node)
    return result(out, None)


def _check_divisor(divisor_override) -> None:
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")


class AvgPool2DBackward0(_AvgPoolBackward):
    __slots__ = ()


class AvgPool2DBackwardBackward0(_PoolingBackwardBackward):
    """The adjoint of avg_pool2d's gradient: avg_pool2d itself."""

    __slots__ = ("args",)

    def _pool(self, gg):
        return avg_pool2d(gg, *self.args)


AvgPool2DBackward0._double = AvgPool2DBackwardBackward0


@register(method=False, home="nn.functional")
def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    """The mean of each window of ``(N, C, H, W)`` (or ``(C, H, W)``) input, one
    ``AvgPool2DBackward0`` node (as ``torch.nn.functional.avg_pool2d``).

    >>> import autodiag as torch
    >>> torch.nn.functional.avg_pool2d(torch.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[2.5, 4.5], [10.5, 12.5]]]]
    """
    k, s, p, _ = _defaults(kernel_size, stride, padding, 1, 2, "avg_pool2d")
    _check_divisor(divisor_override)
    d = _planes(input, "avg_pool2d", 2)
    geom = _pool_geometry("avg_pool2d", d.shape[2:], k, s, p, (1, 1), ceil_mode, d.shape[:2])
    return _avg_pool(
        input, d, geom, ceil_mode, count_include_pad, divisor_override, AvgPool2DBackward0
    )


# ---------------------------------------------------------------------------------------------
# adaptive_avg_pool2d
# ---------------------------------------------------------------------------------------------


def _adaptive_matrix(n: int, o: int, dtype) -> np.ndarray:
    """``(o, n)``: row i marks input positions floor(i*n/o) .. ceil((i+1)*n/o) - 1."""
    i = np.arange(o)
    start = (i * n) // o
    end = -((-(i + 1) * n) // o)
    pos = np.arange(n)
    return ((pos >= start[:, None]) & (pos < end[:, None])).astype(dtype)


class AdaptiveAvgPool2DBackward0(Node):
    """``out = (Mh @ x @ Mw^T) / count``: the gradient is ``Mh^T @ (g / count) @ Mw``."""

    __slots__ = ("rows", "cols", "count")
    _saved_names = ("self",)

    def backward(self, xp, g):
        gd = g if xp.arrays else g._data
        gx = np.matmul(np.matmul(self.rows.T, gd / self.count), self.cols).astype(gd.dtype)
        size = (self.rows.shape[0], self.cols.shape[0])
        return (
            recorded_gradient(
                xp, AdaptiveAvgPool2DBackwardBackward0, g, self.saved_self(xp), gx, size=size
            ),
        )


class AdaptiveAvgPool2DBackwardBackward0(_PoolingBackwardBackward):
    """The adjoint of adaptive_avg_pool2d's gradient: adaptive_avg_pool2d itself."""

    __slots__ = ("size",)

    def _pool(self, gg):
        return adaptive_avg_pool2d(gg, self.size)


@register(method=False, home="nn.functional")
def adaptive_avg_pool2d(input, output_size):
    """The mean over ``output_size`` windows that tile each input plane (PyTorch's
    floor/ceil boundaries), one ``AdaptiveAvgPool2DBackward0`` node.

    >>> import autodiag as torch
    >>> torch.nn.functional.adaptive_avg_pool2d(torch.arange(16.0).reshape(1, 1, 4, 4), 1)
    tensor([[[[7.5000]]]])
    """
    d = input._data
    if d.ndim not in (3, 4):
        raise RuntimeError(
            f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
            f"[{', '.join(map(str, d.shape))}]"
        )
    if isinstance(output_size, (tuple, list)):
        if len(output_size) != 2:
            raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
        size = tuple(d.shape[-2 + i] if o is None else int(o) for i, o in enumerate(output_size))
    else:
        size = (int(output_size),) * 2
    if size == (1, 1):
        # PyTorch's shortcut for global pooling: a mean over the plane (MeanBackward1)
        return input.mean((-2, -1), keepdim=True)
    if d.dtype.kind != "f":
        raise RuntimeError(
            f"\"adaptive_avg_pool2d\" not implemented for '{input.dtype.scalar_name}'"
        )
    rows = _adaptive_matrix(d.shape[-2], size[0], d.dtype)
    cols = _adaptive_matrix(d.shape[-1], size[1], d.dtype)
    count = rows.sum(1)[:, None] * cols.sum(1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.matmul(np.matmul(rows, d), cols.T) / count
    out = np.ascontiguousarray(out, dtype=d.dtype)
    if _state.record and input.requires_grad:
        node = AdaptiveAvgPool2DBackward0((edge(input),))
        node.rows, node.cols, node.count = rows, cols, count
        node._saved = (save(input),)
        return result(out, node)
    return result(out, None)
