"""PyTorch's float32 Box-Muller block (``normal_fill_16_AVX2``), bit for bit, in numpy.

On an AVX2 CPU, ``torch.randn`` / ``normal_`` of a contiguous float32 tensor with 16 or more
elements turns uniform floats into normals 16 at a time with the cephes-style polynomials of
``avx_mathfun.h`` (``log256_ps``, ``sincos256_ps``), compiled with FMA contraction. This module
replays those float32 operations in the same order, with the same fused multiply-adds, so the
results are PyTorch's to the bit (``tests/test_rng_torch.py`` checks millions of them).

NOTE [Fused multiply-add]: ``a * b + c`` rounded once. The product of two float32 values is
exact in float64; the float64 sum can round, and rounding that again to float32 may differ from
a single rounding only when the float64 sum lands exactly on a float32 halfway point: then the
float64 rounding error says which way the exact value lies, and we step the sum that way.
"""

from __future__ import annotations

import numpy as np

# NOTE [Exact products]: fma(a, b, c) rounds a * b + c once; when the float32 product a * b
# is itself exact (the significant bits of a and b fit in 24 together), the unfused
# ``a * b + c`` rounds once too, so it gives the same bits at a fraction of fma32's cost.

_F = np.float32
_MIN_NORM = np.array(0x00800000, np.int32).view(np.float32)  # the smallest normal float32
_INV_MANT_MASK = np.int32(~0x7F800000)
_HALF_BITS = np.float32(0.5).view(np.int32)
_SIGN = np.int32(-(2**31))

# cephes' logf and sinf/cosf coefficients, as avx_mathfun.h writes them (float32)
_SQRTHF = _F(0.707106781186547524)
_LOG_P = [
    _F(c)
    for c in (
        7.0376836292e-2,
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    )
]
_LOG_Q1, _LOG_Q2 = _F(-2.12194440e-4), _F(0.693359375)
_FOPI = _F(1.27323954473516)  # 4 / pi
_DP = (_F(-0.78515625), _F(-2.4187564849853515625e-4), _F(-3.77489497744594108e-8))
_SINCOF = (_F(-1.9515295891e-4), _F(8.3321608736e-3), _F(-1.6666654611e-1))
_COSCOF = (_F(2.443315711809948e-005), _F(-1.388731625493765e-003), _F(4.166664568298827e-002))
_TWO_PI = _F(2.0 * np.pi)


# float64 bit patterns: the 29 bits below a float32 mantissa, and the exponent field
_LOW29 = np.uint64((1 << 29) - 1)
_HALF29 = np.uint64(1 << 28)
_EXP = np.uint64(0x7FF << 52)
_F32_NORMAL = np.uint64((1023 - 126) << 52)  # 2**-126, the smallest normal float32


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` on float32 values with a single rounding (NOTE [Fused multiply-add])."""
    s = np.multiply(a, b, dtype=np.float64)  # exact: 24 x 24 bits fit in 53
    s += np.asarray(c, dtype=np.float32)
    out = s.astype(np.float32)
    # a float64 sum halfway between two float32 values (its 29 low bits 100...0), or one too
    # small for that test (a float32 subnormal): check those few exactly
    bits = s.view(np.uint64)
    suspect = ((bits & _LOW29) == _HALF29) | ((bits & _EXP) < _F32_NORMAL)
    if suspect.any():
        idx = np.flatnonzero(suspect.ravel())
        sub = _fma32_exact(
            np.broadcast_to(a, s.shape).ravel()[idx],
            np.broadcast_to(b, s.shape).ravel()[idx],
            np.broadcast_to(c, s.shape).ravel()[idx],
        )
        out.ravel()[idx] = sub
    return out


def _fma32_exact(a, b, c) -> np.ndarray:
    """``fma32`` for any values: the float64 sum, stepped toward the exact value when it lies
    exactly halfway between two float32 values."""
    p = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32)
    c64 = np.asarray(c, np.float32).astype(np.float64)
    s = p + c64
    out = s.astype(np.float32)
    out64 = out.astype(np.float64)
    away = np.where(s > out64, _F(np.inf), _F(-np.inf)).astype(np.float32)
    tie = (out64 + np.nextafter(out, away).astype(np.float64)) * 0.5 == s
    bv = s - p
    err = (p - (s - bv)) + (c64 - bv)  # TwoSum: the float64 sum's rounding error, exactly
    fix = tie & (err != 0)
    if fix.any():
        # toward the error's side: ``s + err`` would round back to s (err is far below its ulp)
        out = np.where(fix, np.nextafter(s, np.copysign(np.inf, err)), s).astype(np.float32)
    return out


def log256(x: np.ndarray) -> np.ndarray:
    """``log256_ps``: cephes' logf on float32 (NaN for x <= 0)."""
    invalid = x <= 0
    x = np.maximum(x, _MIN_NORM)  # denormals cut off, as the AVX code does
    bits = x.view(np.int32)
    e = ((bits.view(np.uint32) >> 23).view(np.int32) - 0x7F).astype(np.float32) + _F(1)
    x = ((bits & _INV_MANT_MASK) | _HALF_BITS).view(np.float32)  # the mantissa, in [0.5, 1)
    small = x < _SQRTHF
    e = e - np.where(small, _F(1), _F(0))
    x = (x - _F(1)) + np.where(small, x, _F(0))
    z = x * x
    y = fma32(_LOG_P[0], x, _LOG_P[1])
    for p in _LOG_P[2:]:
        y = fma32(y, x, p)
    y = y * x
    y = fma32(y, z, e * _LOG_Q1)
    y = y - z * _F(0.5)  # z * 0.5 is exact: fused or not, the same
    # e * q2 is exact in float32 (an integer of at most 8 bits times 9 significant bits), so
    # the fused multiply-add rounds once, as a float32 add of it does (NOTE [Exact products])
    x = e * _LOG_Q2 + (x + y)
    return np.where(invalid, _F(np.nan), x)


def sincos256(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sincos256_ps``: cephes' sinf and cosf on float32, sharing the range reduction."""
    sign_sin = x.view(np.int32) & _SIGN
    x = np.abs(x)
    j = (x * _FOPI).astype(np.int32)  # truncation, as _mm256_cvttps_epi32
    j = (j + 1) & ~1
    y = j.astype(np.float32)
    sign_sin = sign_sin ^ ((j & 4) << 29)
    sign_cos = (~(j - 2) & 4) << 29
    poly_sin = (j & 2) == 0
    # extended precision modular arithmetic: x - y * pi/4. y is an even integer; for the
    # first two parts (8 and 11 significant bits) y * dp is exact in float32 while y stays
    # below 2**13 (|x| < 6000; box_muller's angles are below 2 pi): fused or not, one rounding
    # (NOTE [Exact products]). The third part has 24 bits: a real fused multiply-add.
    exact = y.size == 0 or y.max() < 2**13
    for dp in _DP:
        x = y * dp + x if exact and dp is not _DP[2] else fma32(y, dp, x)
    z = x * x
    yc = fma32(fma32(_COSCOF[0], z, _COSCOF[1]), z, _COSCOF[2])
    yc = yc * z
    yc = fma32(yc, z, -(z * _F(0.5))) + _F(1)
    ys = fma32(fma32(_SINCOF[0], z, _SINCOF[1]), z, _SINCOF[2])
    ys = fma32(ys * z, x, x)
    # each of sin and cos takes one polynomial, chosen by the octant
    ysin2 = np.where(poly_sin, ys, _F(0))
    ysin1 = np.where(poly_sin, _F(0), yc)
    ys = ys - ysin2
    yc = yc - ysin1
    s = ((ysin1 + ysin2).view(np.int32) ^ sign_sin).view(np.float32)
    c = ((yc + ys).view(np.int32) ^ sign_cos).view(np.float32)
    return s, c


def box_muller_16(u: np.ndarray, mean, std) -> np.ndarray:
    """``normal_fill_16_AVX2`` on rows of 16 uniform float32 values ``u`` (shape (k, 16)):
    the first 8 give the radius, the last 8 the angle; cosines fill the first half."""
    radius = np.sqrt(_F(-2) * log256(_F(1) - u[:, :8]))
    s, c = sincos256(_TWO_PI * u[:, 8:])
    mean, std = _F(mean), _F(std)
    out = np.empty_like(u)
    if std == 1 and mean == 0:  # the fused n * 1 + 0 is n (a -0 becomes +0)
        out[:, :8] = radius * c + _F(0)
        out[:, 8:] = radius * s + _F(0)
        return out
    out[:, :8] = fma32(radius * c, std, mean)
    out[:, 8:] = fma32(radius * s, std, mean)
    return out
