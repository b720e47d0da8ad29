"""Matrix products on arrays with PyTorch's CPU results where a product overflows or meets inf.

NOTE [Plain products]
numpy's matmul calls a BLAS kernel that multiplies and adds in one fused step (FMA): the exact
product ``-3e38 * 1.5`` is added to the running sum without being rounded first, so beside an
``inf`` it gives ``inf + -4.5e38 = inf``. PyTorch's CPU kernels for the small products a program
usually has (mm, mv, bmm, addmm through MKL) round each product first (``-4.5e38 -> -inf``) and
add them left to right along the shared dim, so the same element is ``inf + -inf = nan``; and a
product that overflows beside a large term of the other sign is ``inf`` there where the fused
sum stays finite. The two agree wherever no product overflows and no operand is inf or NaN, so
the BLAS result is kept except at the output elements where that can happen (a non-finite
result, or a row maximum times a column maximum that overflows), which are recomputed as
PyTorch does: products rounded, then summed left to right (``np.add.accumulate`` is
sequential). Measured with torch 2.13 (MKL, AVX2): a 2-D product (mm, addmm/linear, matmul
folded to mm; bmm from 400 multiply-adds a matrix) of 4+ rows by 12+ columns goes through MKL's
blocked kernel, which fuses: in float32 all of it, in float64 its whole panels of 4 rows by 12
columns (``_fused``); there the elements are recomputed with fused sums. Other CPUs and BLAS
builds choose their kernels by other rules (README 'Where autodiag differs').
"""

from __future__ import annotations

import math

import numpy as np

# half the largest finite value of each float dtype: the bound of the common case's test
_HALF_MAX = {np.dtype(t): float(np.finfo(t).max) / 2 for t in (np.float16, np.float32, np.float64)}


def matmul_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` with PyTorch's non-finite results (NOTE [Plain products])."""
    out = np.matmul(a, b)
    if out.__class__ is not np.ndarray:
        out = np.asarray(out)  # 1-D @ 1-D is a numpy scalar: an array to write into
    half = _HALF_MAX.get(out.dtype)
    if half is None:
        if out.dtype.kind != "f":
            return out
        half = float(np.finfo(out.dtype).max) / 2
    if out.size == 0 or a.shape[-1] == 0:
        return out
    with np.errstate(all="ignore"):
        # the common case: no product can overflow (a NaN or inf operand fails the tests too),
        # so BLAS's sum is PyTorch's. First in one BLAS pass per operand, then exactly.
        if math.sqrt(_sum_of_squares(a)) * math.sqrt(_sum_of_squares(b)) <= half:
            return out
        top = half * 2
        big = max(float(a.max()), -float(a.min())) * max(float(b.max()), -float(b.min()))
        if big <= top:
            return out
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        o2 = out
        if a.ndim == 1:  # its one row sits before the columns (before nothing for b 1-D)
            o2 = np.expand_dims(o2, -1 if b.ndim == 1 else -2)
        if b.ndim == 1:
            o2 = np.expand_dims(o2, -1)
        top = np.finfo(o2.dtype).max
        row_max = np.abs(a2).max(-1)  # (..., m)
        col_max = np.abs(b2).max(-2)  # (..., n)
        redo = ~np.isfinite(o2) | (row_max[..., :, None] * col_max[..., None, :] > top)
        redo = np.broadcast_to(redo, o2.shape)
        if not redo.any():
            return out
        where = np.nonzero(redo)
        batch, i, j = where[:-2], where[-2], where[-1]
        a3 = np.broadcast_to(a2, o2.shape[:-2] + a2.shape[-2:])
        b3 = np.swapaxes(np.broadcast_to(b2, o2.shape[:-2] + b2.shape[-2:]), -1, -2)
        rows, cols = a3[batch + (i,)], b3[batch + (j,)]  # (elements, k)
        sums = np.add.accumulate(rows * cols, axis=-1)[:, -1]  # each product rounded
        m, n = o2.shape[-2:]
        # bmm loops plainly below 400 multiply-adds a matrix, then calls MKL's gemm per matrix
        if out.ndim == 2 or (out.ndim > 2 and m * n * a.shape[-1] >= 400):
            fused = _fused(out.dtype, (m, n), i, j)
            if fused.any():
                sums[fused] = _fused_sums(rows[fused], cols[fused], out.dtype)
        o2[where] = sums
    return out


def _sum_of_squares(x: np.ndarray) -> float:
    """``x``'s sum of squares as BLAS computes it (one pass, faster than a max and a min), or
    inf when ``x`` is not one block of memory (the exact test follows).

    NOTE: it bounds the largest magnitude whatever the order of the additions: a rounded sum of
    two non-negative floats is at least the larger one (rounding is monotone), so the result is
    at least the largest rounded square, max|x|**2 * (1 - 2**-23) in float32. Half the largest
    float for the product of the two bounds leaves room for that. NaN or inf when an element
    is, or when the sum overflows: the test fails and the exact one decides."""
    flags = x.flags
    if flags.c_contiguous:
        v = x.ravel()
    elif flags.f_contiguous:
        v = x.T.ravel()
    else:
        return math.inf
    return float(v.dot(v))


def _fused(dtype, shape, i, j) -> np.ndarray:
    """Which elements (i, j) of a 2-D product MKL's blocked gemm computes (measured with torch
    2.13 on AVX2): in float32 all of a product of 4+ rows by 12+ columns; in float64 its whole
    panels of 4 rows by 12 columns (the remainder rows and columns take a plain loop)."""
    m, n = shape
    if m < 4 or n < 12:
        return np.zeros(i.shape, dtype=bool)
    if dtype == np.float32:
        return np.ones(i.shape, dtype=bool)
    return (i < m - m % 4) & (j < n - n % 12)


def _fused_sums(rows: np.ndarray, cols: np.ndarray, dtype) -> np.ndarray:
    """Left-to-right sums of fused multiply-adds: each product exact, one rounding per add."""
    # a float32 product is exact in float64; a float64 one does not overflow in x86's 80-bit
    # long double (64-bit mantissa: rounded once more, far below a fuzzer's tolerance)
    wide = np.float64 if dtype == np.float32 else np.longdouble
    products = rows.astype(wide) * cols
    acc = np.zeros(rows.shape[0], dtype=dtype)
    for t in range(products.shape[1]):  # a loop over the shared dim, vectorised over elements
        acc = (acc + products[:, t]).astype(dtype)
    return acc
