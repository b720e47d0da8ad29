"""Convolution: ``conv1d``, ``conv2d``, ``conv_transpose1d/2d`` (one ``ConvolutionBackward0``
node each, as PyTorch records them) and the ``unfold``/``fold`` pair (im2col/col2im) they are
computed with.

A convolution is a matrix product over windows: ``unfold`` lays every window of the (padded)
input out as a column, the weight multiplies the columns, and ``fold`` (the adjoint of
``unfold``) adds columns back into an image. The forward op, its input gradient and its
weight gradient are all products of those three pieces, for plain and transposed convolutions
alike, so first-order backward runs on arrays and ``create_graph=True`` records the same
formulas with the differentiable ``unfold``/``fold`` nodes (double backward).

Windows are read with ``sliding_window_view`` (no copy) and multiplied with one batched
``matmul``; folding loops over the kernel's offsets (9 for a 3x3 kernel), never over pixels.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from autodiag.core.graph import Node
from autodiag.ops._core import ARRAY, TENSOR, _state, edge, register, result, save, wrap
from autodiag.tensor import Tensor
from autodiag.trace.events import traced

# ---------------------------------------------------------------------------------------------
# Geometry and the array kernels
# ---------------------------------------------------------------------------------------------


class Geometry:
    """Where the windows of an im2col sit: ``kernel``, ``stride``, ``dilation`` per spatial
    dim, the padding before (``lo``) and after (``hi``, negative: crop) the image, the image's
    spatial size ``size`` and the number of windows ``out`` along each dim."""

    __slots__ = ("kernel", "stride", "dilation", "lo", "hi", "size", "out")

    def __init__(self, kernel, stride, dilation, lo, size, out):
        self.kernel, self.stride, self.dilation = kernel, stride, dilation
        self.lo, self.size, self.out = tuple(lo), tuple(size), tuple(out)
        # what the last window reaches, past the image and its leading padding
        self.hi = tuple(
            (o - 1) * s + d * (k - 1) + 1 - (n + p)
            for o, s, d, k, n, p in zip(out, stride, dilation, kernel, size, lo)
        )

    @property
    def numel_kernel(self) -> int:
        return math.prod(self.kernel)


def pad_array(a: np.ndarray, lo, hi, value=0) -> np.ndarray:
    """``a`` with its trailing ``len(lo)`` dims padded by ``lo``/``hi`` (a negative ``hi``
    crops), filled with ``value``."""
    nd = len(lo)
    if not any(lo) and not any(hi):
        return a
    lead = a.shape[: a.ndim - nd]
    shape = lead + tuple(n + p + max(h, 0) for n, p, h in zip(a.shape[a.ndim - nd :], lo, hi))
    out = np.full(shape, value, dtype=a.dtype)
    src = tuple(slice(0, n + min(h, 0)) for n, h in zip(a.shape[a.ndim - nd :], hi))
    dst = tuple(slice(p, p + n + min(h, 0)) for n, p, h in zip(a.shape[a.ndim - nd :], lo, hi))
    out[(Ellipsis,) + dst] = a[(Ellipsis,) + src]
    return out


def windows(a: np.ndarray, geom: Geometry, value=0) -> np.ndarray:
    """A view ``(N, C, *out, *kernel)`` of the windows of ``a`` (``(N, C, *size)``), padded
    with ``value``."""
    nd = len(geom.kernel)
    a = pad_array(a, geom.lo, geom.hi, value)
    extent = tuple(d * (k - 1) + 1 for k, d in zip(geom.kernel, geom.dilation))
    v = sliding_window_view(a, extent, axis=tuple(range(2, 2 + nd)))
    pick = (
        (slice(None), slice(None))
        + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(geom.out, geom.stride))
        + tuple(slice(None, None, d) for d in geom.dilation)
    )
    return v[pick]


def im2col(a: np.ndarray, geom: Geometry) -> np.ndarray:
    """``(N, C, *size)`` -> ``(N, C * K, L)``: one column per window (PyTorch's ``unfold``
    layout: channel-major, then kernel offset; ``L`` windows in row-major order)."""
    nd = len(geom.kernel)
    n, c = a.shape[:2]
    v = windows(a, geom)
    perm = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    return v.transpose(perm).reshape(n, c * geom.numel_kernel, math.prod(geom.out))


def col2im(cols: np.ndarray, geom: Geometry) -> np.ndarray:
    """The adjoint of ``im2col``: ``(N, C * K, L)`` -> ``(N, C, *size)``, each column added
    into the window it came from (overlaps sum). One strided add per kernel offset."""
    n = cols.shape[0]
    c = cols.shape[1] // geom.numel_kernel
    blocks = cols.reshape((n, c) + geom.kernel + geom.out)
    canvas_shape = tuple(n_ + p + max(h, 0) for n_, p, h in zip(geom.size, geom.lo, geom.hi))
    canvas = np.zeros((n, c) + canvas_shape, dtype=cols.dtype)
    for offset in np.ndindex(*geom.kernel):
        dst = tuple(
            slice(i * d, i * d + (o - 1) * s + 1, s)
            for i, d, o, s in zip(offset, geom.dilation, geom.out, geom.stride)
        )
        canvas[(Ellipsis,) + dst] += blocks[(slice(None), slice(None)) + offset]
    crop = tuple(slice(p, p + n_) for p, n_ in zip(geom.lo, geom.size))
    out = canvas[(Ellipsis,) + crop]
    return np.ascontiguousarray(out)


# NOTE [Channel-major columns]: first-order convolution uses columns laid out ``(C * K, N * L)``
# (every window of the whole batch side by side) rather than ``unfold``'s ``(N, C * K, L)``:
# the forward product, the input gradient's and the weight gradient's are then one large BLAS
# call each (per group) instead of one small call per sample, and the weight gradient needs
# no reduction over the batch afterwards.


def im2col_cm(a: np.ndarray, geom: Geometry) -> np.ndarray:
    """``(N, C, *size)`` -> ``(C * K, N * L)`` (NOTE [Channel-major columns])."""
    nd = len(geom.kernel)
    n, c = a.shape[:2]
    v = windows(a, geom)
    perm = (1,) + tuple(range(2 + nd, 2 + 2 * nd)) + (0,) + tuple(range(2, 2 + nd))
    return v.transpose(perm).reshape(c * geom.numel_kernel, n * math.prod(geom.out))


def col2im_cm(cols: np.ndarray, geom: Geometry, n: int) -> np.ndarray:
    """The adjoint of ``im2col_cm``: ``(C * K, N * L)`` -> ``(N, C, *size)``."""
    c = cols.shape[0] // geom.numel_kernel
    blocks = cols.reshape((c,) + geom.kernel + (n,) + geom.out)
    canvas_shape = tuple(s + p + max(h, 0) for s, p, h in zip(geom.size, geom.lo, geom.hi))
    canvas = np.zeros((c, n) + canvas_shape, dtype=cols.dtype)
    for offset in np.ndindex(*geom.kernel):
        dst = tuple(
            slice(i * d, i * d + (o - 1) * s + 1, s)
            for i, d, o, s in zip(offset, geom.dilation, geom.out, geom.stride)
        )
        canvas[(Ellipsis,) + dst] += blocks[(slice(None),) + offset]
    crop = tuple(slice(p, p + s) for p, s in zip(geom.lo, geom.size))
    return np.ascontiguousarray(canvas[(Ellipsis,) + crop].swapaxes(0, 1))


# ---------------------------------------------------------------------------------------------
# unfold / fold as recorded ops (Im2ColBackward0 / Col2ImBackward0)
# ---------------------------------------------------------------------------------------------


class Im2ColBackward0(Node):
    """``unfold``'s gradient is ``fold`` of it (the two are adjoint linear maps)."""

    __slots__ = ("geom",)

    def backward(self, xp, g):
        return (fold_op(xp, g, self.geom),)

    def _saved_extra(self):
        gm = self.geom
        return {
            "kernel_size": gm.kernel,
            "dilation": gm.dilation,
            "padding": gm.lo,
            "stride": gm.stride,
        }


class Col2ImBackward0(Im2ColBackward0):
    """``fold``'s gradient is ``unfold`` of it."""

    __slots__ = ()

    def backward(self, xp, g):
        return (unfold_op(xp, g, self.geom),)


def unfold_op(xp, a, geom: Geometry):
    """``im2col`` in the vocabulary ``xp``: an array, or a recorded ``Im2ColBackward0``."""
    return _window_op(xp, a, geom, im2col, Im2ColBackward0)


def fold_op(xp, cols, geom: Geometry):
    """``col2im`` in the vocabulary ``xp``: an array, or a recorded ``Col2ImBackward0``."""
    return _window_op(xp, cols, geom, col2im, Col2ImBackward0)


def _window_op(xp, a, geom: Geometry, fn, node_cls):
    if xp.arrays:
        return fn(a, geom)
    out = fn(a._data, geom)
    if _state.record and a.requires_grad:
        node = node_cls((edge(a),))
        node.geom = geom
        return result(out, node)
    return result(out, None)


def _pair(v, n: int, name: str) -> tuple:
    """``v`` as ``n`` ints (an int repeats; a list must have 1 or ``n`` entries)."""
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise RuntimeError(
                f"expected {name} to be a single integer value or a list of {n} values to "
                f"match the convolution dimensions, but got {name}={list(v)}"
            )
        return tuple(int(i) for i in v)
    return (int(v),) * n


def _out_size(n, k, s, d, lo, hi):
    return (n + lo + hi - d * (k - 1) - 1) // s + 1


def _unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Extract sliding local blocks (im2col): ``(N, C, H, W)`` -> ``(N, C * kh * kw, L)``,
    recorded as ``Im2ColBackward0`` (as ``torch.nn.functional.unfold``).

    >>> import autodiag as torch
    >>> x = torch.arange(9.0).reshape(1, 1, 3, 3)
    >>> torch.nn.functional.unfold(x, 2).shape
    torch.Size([1, 4, 4])
    """
    d = input._data
    if d.ndim not in (3, 4):
        raise RuntimeError(
            f"Input Error: Only 3D or 4D input Tensors are supported (got {d.ndim}D)"
        )
    batched = d.ndim == 4
    x = input if batched else input.unsqueeze(0)
    k = _pair(kernel_size, 2, "kernel_size")
    dl, p, s = (
        _pair(dilation, 2, "dilation"),
        _pair(padding, 2, "padding"),
        _pair(stride, 2, "stride"),
    )
    size = x._data.shape[2:]
    out = tuple(_out_size(n, kk, ss, dd, pp, pp) for n, kk, ss, dd, pp in zip(size, k, s, dl, p))
    if min(out) < 1:
        raise RuntimeError(
            f"Given input with spatial size {tuple(size)}, kernel_size={k}, dilation={dl}, "
            f"padding={p}, calculated shape of the array of sliding blocks as {out}, but its "
            f"components must be at least one."
        )
    r = unfold_op(TENSOR, x, Geometry(k, s, dl, p, size, out))
    return r if batched else r.squeeze(0)


# NOTE: not registered: the registry derives a Tensor method from a name torch.Tensor has, and
# ``Tensor.unfold(dimension, size, step)`` is a different op. Traced all the same.
unfold = traced("unfold", _unfold)


@register(method=False, home="nn.functional")
def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Combine sliding local blocks into an image (col2im, overlaps summed), the adjoint of
    ``unfold``; recorded as ``Col2ImBackward0`` (as ``torch.nn.functional.fold``).

    >>> import autodiag as torch
    >>> cols = torch.ones(1, 4, 4)
    >>> torch.nn.functional.fold(cols, (3, 3), 2)[0, 0]
    tensor([[1., 2., 1.],
            [2., 4., 2.],
            [1., 2., 1.]])
    """
    d = input._data
    if d.ndim not in (2, 3):
        raise RuntimeError(
            f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
            f"(got {d.ndim}D)"
        )
    batched = d.ndim == 3
    x = input if batched else input.unsqueeze(0)
    size = _pair(output_size, 2, "output_size")
    k = _pair(kernel_size, 2, "kernel_size")
    dl, p, s = (
        _pair(dilation, 2, "dilation"),
        _pair(padding, 2, "padding"),
        _pair(stride, 2, "stride"),
    )
    out = tuple(_out_size(n, kk, ss, dd, pp, pp) for n, kk, ss, dd, pp in zip(size, k, s, dl, p))
    ck, L = x._data.shape[1:]
    if ck % math.prod(k):
        raise RuntimeError(
            f"Expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={ck} and kernel_size={k}"
        )
    if math.prod(out) != L:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={k}, dilation={dl}, padding={p}, "
            f"stride={s}, expected size of input's dimension 2 to match the calculated number "
            f"of sliding blocks {out[0]} * {out[1]} = {math.prod(out)}, but got input.size(2)={L}."
        )
    r = fold_op(TENSOR, x, Geometry(k, s, dl, p, size, out))
    return r if batched else r.squeeze(0)


# ---------------------------------------------------------------------------------------------
# Convolution (ConvolutionBackward0)
# ---------------------------------------------------------------------------------------------

# NOTE [Convolution as matmul]
# With G groups, a plain convolution's columns ``cols = unfold(x)`` are viewed as
# ``(N, G, Cg * K, L)`` and the weight as ``(G, Og, Cg * K)``: the output is
# ``W @ cols`` (``(N, G, Og, L)``, already in the output's layout). Its gradients:
#   input:  ``fold(W^T @ g)``          weight: ``sum over N of g @ cols^T``
# A transposed convolution is the input gradient of a plain one: ``fold(W^T @ x)``, with
# gradients ``W @ unfold(g)`` (input) and ``sum over N of x @ unfold(g)^T`` (weight). Its
# geometry describes the *output* image, whose windows are the input's pixels.


def _conv_attributes(node) -> dict:
    """The convolution's arguments a convolution node shows as PyTorch's (``_saved_*``)."""
    gm = node.geom
    return {
        "stride": gm.stride,
        "padding": gm.lo,
        "dilation": gm.dilation,
        "transposed": node.transposed,
        "output_padding": node.output_padding,
        "groups": node.groups,
    }


class ConvolutionBackward0(Node):
    """Gradients of ``convolution(input, weight, bias, ...)`` for plain and transposed
    convolutions of any number of spatial dims (NOTE [Convolution as matmul]). Under
    ``create_graph`` they are recorded as one ``ConvolutionBackwardBackward0`` node
    (NOTE [Convolution double backward])."""

    __slots__ = ("geom", "groups", "transposed", "output_padding", "bias_sizes")
    _saved_names = ("input", "weight")

    def backward(self, xp, g):
        needs_input, needs_weight, needs_bias = self.needs_grad
        x, w = self.saved_input(xp), self.saved_weight(xp)
        if not xp.arrays:
            return _recorded_grads(self, g, x, w, needs_input, needs_weight, needs_bias)
        gx, gw = _conv_grads(
            xp, self, g, x, w, _shape(x), _shape(w), bool(needs_input), bool(needs_weight)
        )
        gb = _bias_grad(xp, g, len(self.geom.kernel)) if needs_bias else None
        return (gx, gw, gb)

    def _saved_extra(self):
        return {"bias_sym_sizes_opt": self.bias_sizes, **_conv_attributes(self)}


def _bias_grad(xp, g, nd: int):
    return xp.sum(g, (0,) + tuple(range(2, 2 + nd)))


def _conv_grads(xp, node, g, x, w, xs, ws, needs_input: bool, needs_weight: bool):
    """``(input gradient, weight gradient)`` of the convolution ``node`` describes for the
    incoming gradient ``g``, input ``x`` of shape ``xs`` and weight ``w`` of shape ``ws``:
    the input gradient reads only ``w`` and the weight gradient only ``x`` (either may be None
    when its gradient is not asked for). Both are linear in each argument."""
    geom, G = node.geom, node.groups
    n = xs[0]
    k, L = geom.numel_kernel, math.prod(geom.out)
    gx = gw = None
    if not node.transposed and xp.arrays:
        # NOTE [Channel-major columns]
        og, cgk = ws[0] // G, ws[1] * k
        gt = g.reshape(n, G * og, L).swapaxes(0, 1).reshape(G, og, n * L)
        if needs_input:
            cols = np.matmul(w.reshape(G, og, cgk).transpose(0, 2, 1), gt)
            gx = col2im_cm(cols.reshape(G * cgk, n * L), geom, n)
        if needs_weight:
            cols = im2col_cm(x, geom).reshape(G, cgk, n * L)
            gw = np.matmul(gt, cols.transpose(0, 2, 1)).reshape(ws)
    elif not node.transposed:
        og, cgk = ws[0] // G, ws[1] * k
        g4 = g.reshape(n, G, og, L)
        if needs_input:
            cols = xp.matmul(xp.mT(w.reshape(G, og, cgk)), g4)
            gx = fold_op(xp, cols.reshape(n, G * cgk, L), geom)
        if needs_weight:
            cols = unfold_op(xp, x, geom).reshape(n, G, cgk, L)
            gw = _batch_sum_of_products(xp, g4, cols).reshape(ws)
    else:
        cin_g, ogk = ws[0] // G, ws[1] * k
        gcols = unfold_op(xp, g, geom).reshape(n, G, ogk, L)
        if needs_input:
            gx = xp.matmul(w.reshape(G, cin_g, ogk), gcols).reshape(xs)
        if needs_weight:
            x4 = x.reshape(n, G, cin_g, L)
            gw = _batch_sum_of_products(xp, x4, gcols).reshape(ws)
    return gx, gw


# NOTE [Convolution double backward]
# Under create_graph PyTorch records a convolution's gradients as the outputs 0, 1, 2 (input,
# weight, bias gradients) of one ``ConvolutionBackwardBackward0`` node with edges
# (grad_output, input, weight); the outputs require grad when any of the three does, even the
# input gradient of a constant weight (which does not depend on the input: its gradient to
# the input is None). With ``y = B(x, w)`` bilinear (a plain or transposed convolution),
# ``gx = Bx*(g, w)``, ``gw = Bw*(x, g)``, ``gb = sum(g)``; for incoming (ggx, ggw, ggb):
#   grad_output: ``B(ggx, w) + B(x, ggw) + ggb``
#   input:       ``Bx*(g, ggw)``          weight: ``Bw*(ggx, g)``
# (the same ``_conv_grads`` formulas with ggw as the weight and ggx as the input).


def _recorded_grads(node, g, x, w, needs_input, needs_weight, needs_bias) -> tuple:
    """The gradients of ``node`` for Tensors ``g``, ``x``, ``w`` under create_graph: computed
    on arrays, recorded as one ``ConvolutionBackwardBackward0`` (NOTE [Convolution double
    backward])."""
    xs, ws = x._data.shape, w._data.shape
    gd = g._data
    gx, gw = _conv_grads(
        ARRAY, node, gd, x._data, w._data, xs, ws, bool(needs_input), bool(needs_weight)
    )
    gb = _bias_grad(ARRAY, gd, len(node.geom.kernel)) if needs_bias else None
    bb = None
    if _state.record and (g.requires_grad or x.requires_grad or w.requires_grad):
        bb = ConvolutionBackwardBackward0((edge(g), edge(x), edge(w)))
        bb.geom, bb.groups, bb.transposed = node.geom, node.groups, node.transposed
        bb.output_padding, bb.in_shape = node.output_padding, xs
        bb._num_outputs = 3
        bb._saved = (save(g), save(x), save(w))
    outs = []
    for i, a in enumerate((gx, gw, gb)):
        if a is None:
            outs.append(None)
            continue
        t = result(np.ascontiguousarray(a), bb)
        if bb is not None:
            t._output_nr = i
        outs.append(t)
    return tuple(outs)


class ConvolutionBackwardBackward0(Node):
    """The double backward of a convolution (NOTE [Convolution double backward])."""

    __slots__ = ("geom", "groups", "transposed", "output_padding", "in_shape", "_num_outputs")
    _saved_names = ("grad_output", "input", "weight")

    def _apply(self, xp, grads):
        ggx, ggw, ggb = grads
        needs_g, needs_x, needs_w = self.needs_grad
        g = self.saved_grad_output(xp)
        x, w = self.saved_input(xp), self.saved_weight(xp)
        xs, ws = _shape(x), _shape(w)
        dg = dx = dw = None
        if needs_g:
            parts = []
            if ggx is not None:
                parts.append(self._forward(xp, ggx, w))
            if ggw is not None:
                parts.append(self._forward(xp, x, ggw))
            if ggb is not None:
                nd = len(self.geom.kernel)
                parts.append(xp.broadcast_to(xp.reshape(ggb, (-1,) + (1,) * nd), _shape(g)))
            for p in parts:
                dg = p if dg is None else dg + p
        if needs_x and ggw is not None:
            dx, _ = _conv_grads(xp, self, g, None, ggw, xs, ws, True, False)
        if needs_w and ggx is not None:
            _, dw = _conv_grads(xp, self, g, ggx, None, xs, ws, False, True)
        return (dg, dx, dw)

    def _forward(self, xp, x, w):
        """``B(x, w)``: the convolution itself (recorded under create_graph)."""
        gm = self.geom
        args = (gm.stride, gm.lo, gm.dilation, self.transposed, self.output_padding, self.groups)
        nd = len(gm.kernel)
        if xp.arrays:
            return convolution(wrap(x), wrap(w), None, *args, op="convolution", nd=nd)._data
        return convolution(x, w, None, *args, op="convolution", nd=nd)

    def _saved_extra(self):
        return _conv_attributes(self)


def _shape(a) -> tuple:
    return a.shape if isinstance(a, np.ndarray) else a._data.shape


def _batch_sum_of_products(xp, a, b):
    """``sum over n of a[n] @ b[n]^T`` for ``(N, G, P, L)`` and ``(N, G, Q, L)``: ``(G, P, Q)``."""
    if xp.arrays:
        # NOTE: one product over the batch and the windows together (a single BLAS call per
        # group) rather than N small ones and a sum
        return np.einsum("ngpl,ngql->gpq", a, b, optimize=True)
    return xp.sum(xp.matmul(a, xp.mT(b)), (0,))


def _check_params(name, value, nd, what):
    v = _pair(value, nd, name)
    if what == "positive" and min(v) <= 0:
        raise RuntimeError(f"non-positive {name} is not supported")
    if what == "non-negative" and min(v) < 0:
        raise RuntimeError(f"negative {name} is not supported")
    return v


def _dims_text(v) -> str:
    return " x ".join(str(i) for i in v)


def convolution(
    input,
    weight,
    bias,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups,
    *,
    op: str,
    nd: int,
):
    """The convolution every public form calls (PyTorch's ``at::convolution``): checks,
    the unbatched case, 'same'/'valid' padding, and one ``ConvolutionBackward0`` node."""
    if not isinstance(input, Tensor) or not isinstance(weight, Tensor):
        raise TypeError(
            f"{op}() argument 'input' and 'weight' must be Tensor, not "
            f"{type(input if not isinstance(input, Tensor) else weight).__name__}"
        )
    xd, wd = input._data, weight._data
    if xd.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(
            f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but got "
            f"input of size: [{', '.join(map(str, xd.shape))}]"
        )
    if xd.ndim == nd + 1:
        # unbatched: PyTorch adds the batch dim and removes it again, both recorded
        out = convolution(
            input.unsqueeze(0),
            weight,
            bias,
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
            op=op,
            nd=nd,
        )
        return out.squeeze(0)
    if wd.ndim != nd + 2:
        raise RuntimeError(
            f"Expected {nd + 2}-dimensional input for {nd + 2}-dimensional weight "
            f"[{', '.join(map(str, wd.shape))}], but got {xd.ndim}-dimensional input of size "
            f"[{', '.join(map(str, xd.shape))}] instead"
        )
    if int(groups) <= 0:
        raise RuntimeError("non-positive groups is not supported")
    G = int(groups)
    s = _check_params("stride", stride, nd, "positive")
    dl = _check_params("dilation", dilation, nd, "positive")
    kernel = tuple(wd.shape[2:])
    size = tuple(xd.shape[2:])
    if isinstance(padding, str):
        if padding == "valid":
            p = (0,) * nd
        elif padding == "same":
            if any(i != 1 for i in s):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            total = tuple(d * (k - 1) for d, k in zip(dl, kernel))
            if any(t % 2 for t in total):
                raise NotImplementedError(
                    f"autodiag: {op}(padding='same') with an even effective kernel size "
                    f"(kernel {kernel}, dilation {dl}) needs an asymmetric zero padding "
                    f"(PyTorch's F.pad), which autodiag does not provide; pad explicitly"
                )
            p = tuple(t // 2 for t in total)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        p = _check_params("padding", padding, nd, "non-negative")
    op_ = _check_params("output_padding", output_padding, nd, "non-negative")
    if xd.dtype != wd.dtype:
        raise RuntimeError(
            f"expected scalar type {input.dtype.scalar_name} but found {weight.dtype.scalar_name}"
        )
    wshape = f"[{', '.join(map(str, wd.shape))}]"
    ishape = f"[{', '.join(map(str, xd.shape))}]"
    c = xd.shape[1]
    if not transposed:
        if wd.shape[0] % G:
            raise RuntimeError(
                f"Given groups={G}, expected weight to be divisible by {G} at dimension 0, but "
                f"got weight of size [{wshape}] instead"
            )
        if wd.shape[1] * G != c:
            raise RuntimeError(
                f"Given groups={G}, weight of size {wshape}, expected input{ishape} to have "
                f"{wd.shape[1] * G} channels, but got {c} channels instead"
            )
        out_channels = wd.shape[0]
    else:
        if wd.shape[0] != c:
            raise RuntimeError(
                f"Given transposed=1, weight of size {wshape}, expected input{ishape} to have "
                f"{wd.shape[0]} channels, but got {c} channels instead"
            )
        if c % G:
            raise RuntimeError(
                f"Given groups={G}, expected weight to be divisible by {G} at dimension 0, but "
                f"got weight of size [{wshape}] instead"
            )
        if any(o >= st and o >= d for o, st, d in zip(op_, s, dl)):
            axes = (
                ("height", "width")
                if nd == 2
                else ("",)
                if nd == 1
                else ("depth", "height", "width")
            )
            parts = [
                " ".join(f"{what}{'_' + a if a else ''}: {v}" for a, v in zip(axes, vals))
                for what, vals in (("output_padding", op_), ("stride", s), ("dilation", dl))
            ]
            raise RuntimeError(
                "output padding must be smaller than either stride or dilation, but got "
                + " ".join(parts)
            )
        out_channels = wd.shape[1] * G
    if bias is not None and (bias._data.ndim != 1 or bias._data.shape[0] != out_channels):
        raise RuntimeError(
            f"Given weight of size {wshape}, expected bias to be 1-dimensional with "
            f"{out_channels} elements, but got bias of size "
            f"[{', '.join(map(str, bias._data.shape))}] instead"
        )
    n = xd.shape[0]
    if not transposed:
        padded = tuple(i + 2 * q for i, q in zip(size, p))
        extent = tuple(d * (k - 1) + 1 for d, k in zip(dl, kernel))
        if any(e > q for e, q in zip(extent, padded)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({_dims_text(padded)}). Kernel "
                f"size: ({_dims_text(extent)}). Kernel size can't be greater than actual input "
                f"size"
            )
        out = tuple(_out_size(i, k, st, d, q, q) for i, k, st, d, q in zip(size, kernel, s, dl, p))
        geom = Geometry(kernel, s, dl, p, size, out)
        og, cgk, L = out_channels // G, wd.shape[1] * geom.numel_kernel, math.prod(out)
        cols = im2col_cm(xd, geom).reshape(G, cgk, n * L)
        y = np.matmul(wd.reshape(G, og, cgk), cols).reshape(out_channels, n, L)
        y = y.swapaxes(0, 1).reshape((n, out_channels) + out)
    else:
        out_size = tuple(
            (i - 1) * st - 2 * q + d * (k - 1) + o + 1
            for i, st, q, d, k, o in zip(size, s, p, dl, kernel, op_)
        )
        if min(out_size) <= 0:
            raise RuntimeError(
                f"Given input size per channel: ({_dims_text(size)}). Calculated output size "
                f"per channel: ({_dims_text(out_size)}). Output size is too small"
            )
        geom = Geometry(kernel, s, dl, p, out_size, size)
        cin_g, ogk, L = c // G, wd.shape[1] * geom.numel_kernel, math.prod(size)
        w3 = wd.reshape(G, cin_g, ogk)
        cols = np.matmul(w3.transpose(0, 2, 1), xd.reshape(n, G, cin_g, L))
        y = col2im(cols.reshape(n, out_channels * geom.numel_kernel, L), geom)
    if bias is not None:
        y += bias._data.reshape((out_channels,) + (1,) * nd)
    y = np.ascontiguousarray(y)
    needs = input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    if _state.record and needs:
        node = ConvolutionBackward0(
            (edge(input), edge(weight), None if bias is None else edge(bias))
        )
        node.geom, node.groups, node.transposed = geom, G, bool(transposed)
        node.output_padding = op_
        node.bias_sizes = (0,) if bias is None else tuple(bias._data.shape)
        node._saved = (save(input), save(weight))
        return result(y, node)
    return result(y, None)


@register(method=False)
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution over ``(N, C, L)`` (or unbatched ``(C, L)``) input, one
    ``ConvolutionBackward0`` node (as ``torch.nn.functional.conv1d``).

    >>> import autodiag as torch
    >>> x = torch.ones(1, 1, 5)
    >>> w = torch.ones(1, 1, 3, requires_grad=True)
    >>> torch.conv1d(x, w)
    tensor([[[3., 3., 3.]]], grad_fn=<ConvolutionBackward0>)
    """
    return convolution(
        input, weight, bias, stride, padding, dilation, False, 0, groups, op="conv1d", nd=1
    )


@register(method=False)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution over ``(N, C, H, W)`` (or unbatched ``(C, H, W)``) input: padding an
    int, a pair, ``'same'`` or ``'valid'``; stride, dilation, groups; one
    ``ConvolutionBackward0`` node (as ``torch.nn.functional.conv2d``).

    >>> import autodiag as torch
    >>> x = torch.ones(1, 1, 4, 4)
    >>> w = torch.ones(2, 1, 3, 3, requires_grad=True)
    >>> y = torch.conv2d(x, w, padding="same")
    >>> tuple(y.shape), y.grad_fn.name()
    ((1, 2, 4, 4), 'ConvolutionBackward0')
    """
    return convolution(
        input, weight, bias, stride, padding, dilation, False, 0, groups, op="conv2d", nd=2
    )


@register(method=False)
def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """1-D transposed convolution (the input gradient of ``conv1d``), one
    ``ConvolutionBackward0`` node (as ``torch.nn.functional.conv_transpose1d``).

    >>> import autodiag as torch
    >>> torch.conv_transpose1d(torch.ones(1, 1, 3), torch.ones(1, 1, 2))
    tensor([[[1., 2., 2., 1.]]])
    """
    if isinstance(padding, str):
        raise RuntimeError("conv_transpose1d(): argument 'padding' must be tuple of ints, not str")
    return convolution(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        True,
        output_padding,
        groups,
        op="conv_transpose1d",
        nd=1,
    )


@register(method=False)
def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """2-D transposed convolution (the input gradient of ``conv2d``; weight
    ``(C_in, C_out / groups, kH, kW)``), one ``ConvolutionBackward0`` node (as
    ``torch.nn.functional.conv_transpose2d``).

    >>> import autodiag as torch
    >>> x = torch.ones(1, 1, 2, 2)
    >>> torch.conv_transpose2d(x, torch.ones(1, 1, 2, 2), stride=2).shape
    torch.Size([1, 1, 4, 4])
    """
    if isinstance(padding, str):
        raise RuntimeError("conv_transpose2d(): argument 'padding' must be tuple of ints, not str")
    return convolution(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        True,
        output_padding,
        groups,
        op="conv_transpose2d",
        nd=2,
    )
