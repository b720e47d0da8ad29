"""Sampling grids: ``affine_grid`` (``torch.affine_grid_generator``) and ``grid_sample``
(``torch.grid_sampler``, 2-D): the spatial transformer's two ops.

Both follow PyTorch's CPU code step by step, in the input's dtype, so that the numbers are
PyTorch's to the last bit where the order of the arithmetic is knowable:

* the base grid is ``linspace(-1, 1, n)``, then ``* (n - 1)``, then ``/ n`` (two roundings,
  as ``linspace_from_neg_one``) when ``align_corners`` is False; the grid is the base grid
  times ``theta`` transposed (a batched matmul, as PyTorch's ``bmm``);
* a grid coordinate is unnormalized as ``(g + 1) * (size / 2) - 0.5`` (``align_corners``
  False) or ``(g + 1) * ((size - 1) / 2)``, clipped (``border``) or reflected
  (``reflection``); bilinear weights are ``(1 - dy) * (1 - dx)`` and so on, and the output is
  ``nw_val * nw + ne_val * ne + sw_val * sw + se_val * se``, summed left to right; corners
  outside the input read 0 (``zeros``). ``nearest`` rounds half to even.

The input's gradient adds each output gradient, times its corner's weight, into that corner
(corner by corner: where several grid points land on one input pixel, the order of those
additions can differ from PyTorch's vectorised loop in the last bit). The grid's gradient sums
over the channels in order, then is scaled by ``size / 2`` (or ``(size - 1) / 2``).

Not supported (a clear error naming the op): ``mode='bicubic'``, 5-D inputs (3-D grids), and
the double backward of ``grid_sample`` (``create_graph=True`` through its node).
"""

from __future__ import annotations

import numpy as np

from autodiag import _warnings
from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, register, result, save

__all__ = ["affine_grid", "affine_grid_generator", "grid_sample", "grid_sampler"]

_ALIGN_WARNING = (
    "Default grid_sample and affine_grid behavior has changed to align_corners=False since "
    "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
    "documentation of grid_sample for details."
)
_UNIT_WARNING = (
    "Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
    "align_corners=True. This is not an intended use case of affine_grid. See the "
    "documentation of affine_grid for details."
)
_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


# ---------------------------------------------------------------------------------------------
# affine_grid
# ---------------------------------------------------------------------------------------------


def _linspace_from_neg_one(n: int, align_corners: bool, dt) -> np.ndarray:
    from autodiag.ops.factories import linspace

    if n <= 1:
        return np.zeros((), dtype=dt)
    r = linspace(-1, 1, n, dtype=_dtype_of(dt))._data
    if not align_corners:
        r = (r * dt.type(n - 1)) / dt.type(n)
    return r


def _dtype_of(dt):
    from autodiag import dtypes

    return dtypes.float64 if dt == np.float64 else dtypes.float32


def _base_grid(h: int, w: int, align_corners: bool, dt) -> np.ndarray:
    base = np.empty((h, w, 3), dtype=dt)
    base[..., 0] = _linspace_from_neg_one(w, align_corners, dt)
    base[..., 1] = _linspace_from_neg_one(h, align_corners, dt)[..., None]
    base[..., 2] = 1
    return base.reshape(h * w, 3)


class AffineGridGeneratorBackward0(Node):
    __slots__ = ("size", "align_corners")

    def backward(self, xp, g):
        n, _, h, w = self.size
        gd = g if xp.arrays else g._data
        base = _base_grid(h, w, self.align_corners, gd.dtype)
        # PyTorch: base_grid^T.bmm(grad.view(N, H*W, 2)).transpose(1, 2)
        out = np.matmul(base.T, gd.reshape(n, h * w, 2)).transpose(0, 2, 1)
        if xp.arrays:
            return (np.ascontiguousarray(out),)
        raise NotImplementedError(
            "autodiag: the double backward of affine_grid (create_graph=True through "
            "AffineGridGeneratorBackward0) is not supported"
        )

    def _saved_extra(self):
        return {"size": tuple(self.size), "align_corners": self.align_corners}


@register(method=False)
def affine_grid_generator(theta, size, align_corners: bool):
    """``torch.affine_grid_generator``: the ``(N, H, W, 2)`` sampling grid of the affine
    matrices ``theta`` ``(N, 2, 3)`` for an output of ``size`` ``(N, C, H, W)``."""
    size = tuple(int(s) for s in size)
    if len(size) != 4:
        raise NotImplementedError(
            f"autodiag: affine_grid_generator supports 4-D sizes (2-D affine transforms) only, "
            f"got size {list(size)}"
        )
    n, _, h, w = size
    d = theta._data
    # PyTorch's base grid (N, H*W, 3) bmm theta^T, viewed as (N, H, W, 2): its errors
    if d.ndim < 3:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [-{max(d.ndim, 1)}, "
            f"{max(d.ndim, 1) - 1}], but got {1 if d.ndim < 2 else 2})"
        )
    if d.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if d.shape[0] != n or d.shape[2] != 3:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{n}, 3] but got: "
            f"[{d.shape[0]}, {d.shape[2]}]."
        )
    if d.shape[1] != 2:
        raise RuntimeError(
            f"shape '[{n}, {h}, {w}, 2]' is invalid for input of size {n * h * w * d.shape[1]}"
        )
    base = _base_grid(h, w, align_corners, d.dtype)
    # PyTorch's bmm of (N, H*W, 3) by theta^T rounds as x * t0 + y * t1, then + t2 (no fused
    # multiply-add): that order, elementwise, is PyTorch's grid to the last bit
    bx, by = base[None, :, 0, None], base[None, :, 1, None]  # (1, H*W, 1)
    t0, t1, t2 = d[:, None, :, 0], d[:, None, :, 1], d[:, None, :, 2]  # (N, 1, 2)
    out = ((bx * t0 + by * t1) + t2).reshape(n, h, w, 2)
    node = None
    if _state.record and theta.requires_grad:
        node = AffineGridGeneratorBackward0((edge(theta),))
        node.size, node.align_corners = size, bool(align_corners)
    return result(np.ascontiguousarray(out), node)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of a batch of affine matrices (``torch.nn.functional.affine_grid``).

    >>> import autodiag as torch
    >>> theta = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> torch.nn.functional.affine_grid(theta, (1, 1, 1, 2), align_corners=False)
    tensor([[[[-0.5000,  0.0000],
              [ 0.5000,  0.0000]]]])
    """
    if align_corners is None:
        _warnings.warn(_ALIGN_WARNING)
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    given, size = size, tuple(size)
    if len(size) == 4:
        if theta.dim() != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(
                f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. "
                f"Got {theta.shape}."
            )
        spatial = size[-2:]
    elif len(size) == 5:
        raise NotImplementedError(
            "autodiag: affine_grid of a 5-D size (3-D affine transforms) is not supported"
        )
    else:
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {size}."
        )
    if align_corners and min(spatial) == 1:
        _warnings.warn(_UNIT_WARNING)
    elif min(size) <= 0:  # the batch and channels too, as PyTorch
        raise ValueError(f"Expected non-zero, positive output size. Got {given}")
    return affine_grid_generator(theta, size, align_corners)


# ---------------------------------------------------------------------------------------------
# grid_sample
# ---------------------------------------------------------------------------------------------


def _fma(a: np.ndarray, b, c) -> np.ndarray:
    """``a * b + c`` rounded once, as the fused multiply-add PyTorch's compiled CPU kernel
    uses (float32: the product is exact in float64, so the sum is rounded to float64, then to
    float32: a double rounding that can differ from a true fma in rare ties). float64 has no
    wider type here: it is ``a * b + c`` rounded twice (the last bit can differ)."""
    if a.dtype == np.float32:
        return (a.astype(np.float64) * np.float64(b) + c).astype(np.float32)
    return a * b + c


def _location(g: np.ndarray, size: int, padding: int, align_corners: bool):
    """The unnormalized, padded coordinate of grid values ``g`` along a dim of ``size``, and
    the gradient multiplier (PyTorch's ``ComputeLocation.apply_get_grad``)."""
    t = g.dtype.type
    one = t(1)
    if align_corners:
        scale = t(size - 1) / t(2)
        x = (g + one) * scale
    else:
        scale = t(size) / t(2)
        x = _fma(g + one, scale, t(-0.5))
    mult = np.full(g.shape, scale, dtype=g.dtype)
    if padding == 2:  # reflection, then clip
        if align_corners:
            low, twice = t(0), t(size - 1) * t(2)
            empty = size <= 1
        else:
            low, twice = t(-0.5), t(size) * t(2)
            empty = size <= 0
        if empty:
            x = np.zeros_like(x)
            mult = np.zeros_like(mult)
        else:
            shifted = x - low
            neg = shifted < 0
            a = np.abs(shifted)
            extra = a - np.trunc(a / twice) * twice
            reflected = twice - extra
            flip = extra > reflected
            x = np.where(flip, reflected, extra) + low
            mult = mult * np.where(flip ^ neg, t(-1), t(1))
    if padding >= 1:  # border (and reflection's final clip); borders get no gradient
        max_val = t(size - 1)
        with np.errstate(invalid="ignore"):
            lo = np.maximum(x, t(0))
            x = np.minimum(lo, max_val)
        mult = np.where((lo != 0) & (x != max_val), mult, t(0))
    return x, mult


def _ints(v: np.ndarray) -> np.ndarray:
    """Float coordinates as int64 (NaN and infinities as an out-of-range index)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(v), v, -(2**40)).astype(np.int64)


class _Corners:
    """The four corners a bilinear sample reads: flat indices into each (n, c) plane, masks
    and weights, all of shape (N, 1, Ho, Wo) to broadcast over the channels."""

    __slots__ = ("idx", "mask", "weight", "n", "s", "w", "e")

    def __init__(self, x, y, h: int, w: int):
        x_w, y_n = np.floor(x), np.floor(y)
        wd = x - x_w
        e = x.dtype.type(1) - wd
        nd = y - y_n
        s = y.dtype.type(1) - nd
        self.n, self.s, self.w, self.e = nd, s, wd, e
        self.weight = (s * e, s * wd, nd * e, nd * wd)  # nw, ne, sw, se
        ix, iy = _ints(x_w), _ints(y_n)
        cols = (ix, ix + 1, ix, ix + 1)
        rows = (iy, iy, iy + 1, iy + 1)
        self.mask = tuple((c >= 0) & (c < w) & (r >= 0) & (r < h) for c, r in zip(cols, rows))
        self.idx = tuple(np.where(m, r * w + c, 0) for m, c, r in zip(self.mask, cols, rows))


def _gather(planes: np.ndarray, idx: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``planes`` (N, C, H*W) read at ``idx`` (N, 1, P), 0 where ``mask`` is False."""
    vals = np.take_along_axis(
        planes, np.broadcast_to(idx, (idx.shape[0], planes.shape[1], idx.shape[2])), axis=2
    )
    return np.where(mask, vals, planes.dtype.type(0))


class GridSampler2DBackward0(Node):
    __slots__ = ("interpolation_mode", "padding_mode", "align_corners")
    _saved_names = ("input", "grid")

    def backward(self, xp, g):
        if not xp.arrays:
            raise NotImplementedError(
                "autodiag: the double backward of grid_sample (create_graph=True through "
                "GridSampler2DBackward0) is not supported"
            )
        needs_input, needs_grid = self.needs_grad
        inp, grid = self.saved_input(xp), self.saved_grid(xp)
        gi, gg = _grid_sample_backward(
            g,
            inp,
            grid,
            self.interpolation_mode,
            self.padding_mode,
            self.align_corners,
            needs_input,
        )
        return (gi if needs_input else None, gg if needs_grid else None)

    def _saved_extra(self):
        return {
            "align_corners": self.align_corners,
            "interpolation_mode": self.interpolation_mode,
            "padding_mode": self.padding_mode,
        }


def _coords(inp, grid, padding, align_corners):
    _, _, h, w = inp.shape
    x, mx = _location(grid[..., 0], w, padding, align_corners)
    y, my = _location(grid[..., 1], h, padding, align_corners)
    n = grid.shape[0]
    flat = (n, 1, -1)
    return x.reshape(flat), y.reshape(flat), mx.reshape(flat), my.reshape(flat)


def _grid_sample_forward(inp, grid, mode, padding, align_corners):
    n, c, h, w = inp.shape
    ho, wo = grid.shape[1], grid.shape[2]
    planes = inp.reshape(n, c, h * w)
    x, y, _, _ = _coords(inp, grid, padding, align_corners)
    if mode == 1:  # nearest
        ix, iy = _ints(np.rint(x)), _ints(np.rint(y))
        mask = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        out = _gather(planes, np.where(mask, iy * w + ix, 0), mask)
    else:
        k = _Corners(x, y, h, w)
        vals = [_gather(planes, i, m) for i, m in zip(k.idx, k.mask)]
        # nw * val + ne * val + sw * val + se * val, each addition fused with its product
        out = _fma(vals[1], k.weight[1], vals[0] * k.weight[0])
        out = _fma(vals[2], k.weight[2], out)
        out = _fma(vals[3], k.weight[3], out)
    return out.reshape(n, c, ho, wo)


def _scatter(gi_flat, idx, mask, vals, c):
    """Add ``vals`` (N, C, P) into ``gi_flat`` (N*C*H*W) at plane indices ``idx`` (N, 1, P)."""
    n, _, p = vals.shape
    hw = gi_flat.size // (n * c)
    base = (np.arange(n * c).reshape(n, c, 1)) * hw
    full = np.broadcast_to(idx, (n, c, p)) + base
    m = np.broadcast_to(mask, (n, c, p))
    np.add.at(gi_flat, full[m], vals[m])


def _grid_sample_backward(g, inp, grid, mode, padding, align_corners, needs_input):
    n, c, h, w = inp.shape
    g = g.reshape(n, c, -1)
    gi = np.zeros(inp.shape, dtype=inp.dtype) if needs_input else None
    gi_flat = gi.reshape(-1) if needs_input else None
    x, y, mx, my = _coords(inp, grid, padding, align_corners)
    gg = np.zeros(grid.shape, dtype=grid.dtype)
    if mode == 1:  # nearest: the grid's gradient is zero
        if needs_input:
            ix, iy = _ints(np.rint(x)), _ints(np.rint(y))
            mask = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
            _scatter(gi_flat, np.where(mask, iy * w + ix, 0), mask, g, c)
        return gi, gg
    k = _Corners(x, y, h, w)
    if needs_input:
        for i in range(4):
            _scatter(gi_flat, k.idx[i], k.mask[i], k.weight[i] * g, c)
    planes = inp.reshape(n, c, h * w)
    nw_v, ne_v, sw_v, se_v = (_gather(planes, i, m) for i, m in zip(k.idx, k.mask))
    gx = np.zeros((n, 1, x.shape[2]), dtype=inp.dtype)
    gy = np.zeros_like(gx)
    for ch in range(c):  # PyTorch sums over the channels in order
        sl = slice(ch, ch + 1)
        go = g[:, sl]
        gx = gx + ((ne_v[:, sl] - nw_v[:, sl]) * k.s + (se_v[:, sl] - sw_v[:, sl]) * k.n) * go
        gy = gy + ((sw_v[:, sl] - nw_v[:, sl]) * k.e + (se_v[:, sl] - ne_v[:, sl]) * k.w) * go
    gg[..., 0] = (gx * mx).reshape(grid.shape[:3])
    gg[..., 1] = (gy * my).reshape(grid.shape[:3])
    return gi, gg


@register(method=False)
def grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
    """``torch.grid_sampler``: ``input`` (N, C, H, W) sampled at ``grid`` (N, Ho, Wo, 2) of
    normalized ``(x, y)`` coordinates; modes and paddings as PyTorch's enums (0 bilinear,
    1 nearest; 0 zeros, 1 border, 2 reflection)."""
    a, gr = input._data, grid._data
    if a.dtype != gr.dtype:
        names = {np.float32: "Float", np.float64: "Double"}
        raise RuntimeError(
            f"expected scalar type {names.get(a.dtype.type, a.dtype)} but found "
            f"{names.get(gr.dtype.type, gr.dtype)}"
        )
    if gr.shape[-1] != a.ndim - 2:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {a.ndim - 2} in last dimension, but "
            f"got grid with sizes {list(gr.shape)}"
        )
    if a.ndim == 5 and gr.ndim == 5:
        raise NotImplementedError(
            "autodiag: grid_sample of a 5-D input (3-D grid, GridSampler3DBackward0) is not "
            "supported"
        )
    if not (a.ndim == 4 and gr.ndim == 4):
        raise RuntimeError(
            "grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, "
            f"but got input with sizes {list(a.shape)} and grid with sizes {list(gr.shape)}"
        )
    if a.shape[0] != gr.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input "
            f"with sizes {list(a.shape)} and grid with sizes {list(gr.shape)}"
        )
    for i in (2, 3):
        if a.shape[i] <= 0:
            raise RuntimeError(
                "grid_sampler(): expected input to have non-empty spatial dimensions, but "
                f"input has sizes {list(a.shape)} with dimension {i} being empty"
            )
    if a.dtype.kind != "f":
        raise NotImplementedError(
            f"autodiag: grid_sampler of {input.dtype} tensors is not supported"
        )
    if interpolation_mode == 2:
        raise NotImplementedError("autodiag: grid_sample with mode='bicubic' is not supported")
    out = _grid_sample_forward(a, gr, interpolation_mode, padding_mode, bool(align_corners))
    node = None
    if _state.record and (input.requires_grad or grid.requires_grad):
        node = GridSampler2DBackward0((edge(input), edge(grid)))
        node.interpolation_mode = int(interpolation_mode)
        node.padding_mode = int(padding_mode)
        node.align_corners = bool(align_corners)
        node._saved = (save(input), save(grid))
    return result(out, node)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``input`` sampled at the normalized coordinates of ``grid``
    (``torch.nn.functional.grid_sample``, 4-D input).

    >>> import autodiag as torch
    >>> x = torch.arange(4.0).view(1, 1, 2, 2)
    >>> grid = torch.tensor([[[[0.0, 0.0]]]])
    >>> torch.nn.functional.grid_sample(x, grid, align_corners=False)
    tensor([[[[1.5000]]]])
    """
    if mode not in _MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    if align_corners is None:
        _warnings.warn(_ALIGN_WARNING)
        align_corners = False
    return grid_sampler(input, grid, _MODES[mode], _PADDINGS[padding_mode], align_corners)
