"""``normal_fill_16_AVX2`` on the stream's own uniforms, in fewer numpy passes.

``_avx_mathfun.box_muller_16`` replays PyTorch's float32 Box-Muller block for any float32
input: each fused multiply-add is computed in float64 and then checked for the two cases
where rounding twice (to float64, then to float32) can differ from rounding once (a float64
sum exactly halfway between two float32 values, or in float32's subnormal range). The
uniforms the stream hands to that block are not any float32 values, though: they are
``k * 2**-24`` for an integer ``0 <= k < 2**24`` (``uniform01``), so the radius
``sqrt(-2 log(1 - u))`` and the sine and cosine of ``2 pi u`` each take one of only 2**24
inputs. ``tests/test_normal_fill32.py`` runs every one of them through both the checked
replay and the functions below and finds them equal bit for bit: for these inputs no fused
multiply-add of ``log256_ps`` or ``sincos256_ps`` lands on a double-rounding case, so the
functions below round the float64 sums to float32 without the check (three numpy passes a
fused multiply-add instead of nine). They are only right for such uniforms: anything else
goes through ``box_muller_16``.

The arrays are processed in chunks that stay in the CPU's caches, contiguous (the block's
first 8 uniforms give radii, the last 8 angles: each half is gathered once).
"""

from __future__ import annotations

import numpy as np

from autodiag.ops import _avx_mathfun as _m

__all__ = ["box_muller_uniform16", "radius", "sincos"]

_F = np.float32
_F64 = np.float64
# rows of 16 per chunk: 65536 values (measured on 1e6 values: 2048 to 8192 rows are alike,
# 512 rows ~1.7x slower, as numpy's cost per call adds up; rng._fill_blocks chunks alike)
_CHUNK_ROWS = 4096


def _fma(a, b64: np.ndarray, c) -> np.ndarray:
    """``a * b + c`` rounded once to float32 for the inputs above: the product is exact in
    float64 and the float64 sum is never a double-rounding case (module docstring). ``b64`` is
    the float32 factor already widened (a chain of them reuses it: mixed float32-float64
    ufunc loops cost twice as much as casting first)."""
    wide = b64 * _F64(a) if np.ndim(a) == 0 else a.astype(_F64)
    if np.ndim(a):
        wide *= b64
    wide += c.astype(_F64) if np.ndim(c) else _F64(c)
    return wide.astype(_F)


def radius(u: np.ndarray) -> np.ndarray:
    """``sqrt(-2 * log256_ps(1 - u))`` for 1-d contiguous uniforms ``k * 2**-24``.

    ``1 - u`` lies in [2**-24, 1]: positive and normal, so ``log256_ps``'s NaN for x <= 0 and
    its cut of denormals change nothing; the rest is its operations in its order."""
    x = _F(1) - u
    bits = x.view(np.int32)
    e = (bits >> 23).astype(_F)  # the exponent field (x > 0: no sign bit)
    e -= _F(0x7F - 1)  # (field - 0x7F) + 1: both exact on small integers
    xm = ((bits & _m._INV_MANT_MASK) | _m._HALF_BITS).view(_F)  # the mantissa, in [0.5, 1)
    small = xm < _m._SQRTHF
    e -= small
    shift = xm * small  # xm where small, else +0: as the AVX code's and-mask
    xm -= _F(1)
    xm += shift
    z = xm * xm
    xm64 = xm.astype(_F64)
    p = _m._LOG_P
    y = _fma(p[0], xm64, p[1])
    for coef in p[2:]:
        y = _fma(y, xm64, coef)
    y *= xm
    y = _fma(y, z.astype(_F64), e * _m._LOG_Q1)
    z *= _F(0.5)
    y -= z
    xm += y
    out = e * _m._LOG_Q2  # exact (_avx_mathfun's NOTE [Exact products]): fused or not, alike
    out += xm
    out *= _F(-2)
    return np.sqrt(out, out=out)


def sincos(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sincos256_ps(2 pi u)`` for 1-d contiguous uniforms ``k * 2**-24``: (sin, cos).

    The angle is in [0, 2 pi): never negative (the input's sign bit is 0), and the octant
    ``y`` is at most 8, far below the 2**13 up to which ``y * dp`` is exact for the first two
    parts of pi/4."""
    x = _m._TWO_PI * u
    j = (x * _m._FOPI).astype(np.int32)  # truncation, as _mm256_cvttps_epi32
    j += 1
    j &= ~1
    y = j.astype(_F)
    sign_sin = (j & 4) << 29
    sign_cos = (~(j - 2) & 4) << 29
    poly_sin = (j & 2) == 0
    dp = _m._DP
    x += y * dp[0]
    x += y * dp[1]
    x = _fma(dp[2], y.astype(_F64), x)
    z = x * x
    z64 = z.astype(_F64)
    c = _m._COSCOF
    yc = _fma(_fma(c[0], z64, c[1]), z64, c[2])
    yc *= z
    yc = _fma(yc, z64, -(z * _F(0.5)))
    yc += _F(1)
    s = _m._SINCOF
    ys = _fma(_fma(s[0], z64, s[1]), z64, s[2])
    ys *= z
    ys = _fma(ys, x.astype(_F64), x)
    # sincos256_ps picks each result's polynomial with and-masks and adds: (ys - ys) + yc
    # and the like, which is the chosen polynomial with a -0 made +0 (the ``+ 0`` below)
    sin = np.where(poly_sin, ys, yc)
    cos = np.where(poly_sin, yc, ys)
    sin += _F(0)
    cos += _F(0)
    sin.view(np.int32)[...] ^= sign_sin
    cos.view(np.int32)[...] ^= sign_cos
    return sin, cos


def box_muller_uniform16(u: np.ndarray, mean, std) -> np.ndarray:
    """``box_muller_16(u, mean, std)`` for rows of 16 of the stream's float32 uniforms
    (shape (k, 16), any k), in cache-sized chunks; returns a new (k, 16) array."""
    out = np.empty(u.shape, _F)
    mean, std = _F(mean), _F(std)
    plain = std == 1 and mean == 0  # the fused n * 1 + 0 is n (a -0 becomes +0)
    for start in range(0, u.shape[0], _CHUNK_ROWS):
        rows = u[start : start + _CHUNK_ROWS]
        r = radius(np.ascontiguousarray(rows[:, :8]).ravel()).reshape(-1, 8)
        sin, cos = sincos(np.ascontiguousarray(rows[:, 8:]).ravel())
        dst = out[start : start + _CHUNK_ROWS]
        first = np.multiply(r, cos.reshape(-1, 8), out=dst[:, :8])
        second = np.multiply(r, sin.reshape(-1, 8), out=dst[:, 8:])
        if plain:
            first += _F(0)
            second += _F(0)
        elif mean == 0:  # fma(n, std, 0) rounds n * std once, as a float32 product does
            first *= std
            first += _F(0)  # (a -0 becomes +0, as in the fused n * std + 0)
            second *= std
            second += _F(0)
        else:
            dst[:, :8] = _m.fma32(first, std, mean)
            dst[:, 8:] = _m.fma32(second, std, mean)
    return out
