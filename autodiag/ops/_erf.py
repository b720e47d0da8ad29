"""erf on numpy arrays, vectorised, to float64 accuracy (numpy has no erf; SciPy is not a
dependency and ``math.erf`` per element cost half of a GELU model's step).

Published rational approximations, one per interval of ``|x|``:

- ``|x| < 0.84375``: ``erf(x) = x + x * P(x²) / Q(x²)``, and
- ``0.84375 <= |x| < 1.25``: ``erf(x) = erf(1)' + P(|x| - 1) / Q(|x| - 1)`` (``erf(1)'`` is
  erf(1) cut to 24 bits), both from Sun's fdlibm ``s_erf.c`` (the erf of glibc and musl);
- ``1.25 <= |x| < 4``: ``erfc(|x|) = exp(-x²) * P(|x|) / Q(|x|)``, and
- ``4 <= |x| < 6``: ``erfc(|x|) = exp(-x²) / |x| * (1/sqrt(pi) - R(1/x²))``, both from W. J.
  Cody, "Rational Chebyshev approximations for the error function", Math. Comp. 23 (1969),
  631-638 (the coefficients of his SPECFUN CALERF), with ``erf = ±(1 - erfc)``.

NOTE: the forms matter as much as the coefficients. Below 1.25 the rounding errors of the
rational functions sit in a term an eighth of the result or less; Cody's own ``x * P / Q`` (to
0.46875) and ``1 - erfc`` (from 0.46875) round up to 5 ulp there, as erf crosses 0.5 where its
ulp halves. From 1.25 on erfc < 0.08, so its few ulp of rounding are a fraction of erf's.
From ``|x| = 6`` on, ``erfc(|x|) < 2.2e-17`` is below half an ulp of 1: ``erf`` is ``±1``
exactly (and ``±inf`` give ``±1``, NaN gives NaN). tests/test_erf_torch.py bounds the error
against ``math.erf`` over the real line.
"""

from __future__ import annotations

import numpy as np

_F64 = np.dtype(np.float64)

# |x| < 0.84375 (fdlibm): erf(x) = x + x * (PP[0] + PP[1] z + ... + PP[4] z^4) /
#                                        (1 + QQ[0] z + ... + QQ[4] z^5),  z = x²
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
# 0.84375 <= |x| < 1.25 (fdlibm): erf(x) = ERX + (PA[0] + ... + PA[6] s^6) /
#                                               (1 + QA[0] s + ... + QA[5] s^6),  s = |x| - 1
_ERX = 8.45062911510467529297e-01
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
# 1.25 <= |x| < 4 (Cody): erfc(y) = exp(-y²) * (C[8] y^8 + C[0] y^7 + ... + C[7]) /
#                                          (y^8 + D[0] y^7 + ... + D[7])
_C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
_D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
# 4 <= |x| < 6 (Cody): erfc(y) = exp(-y²) / y * (1/sqrt(pi) - z R(z)), z = 1/y²,
#          R(z) = (P[5] z^5 + P[0] z^4 + ... + P[4]) / (z^5 + Q[0] z^4 + ... + Q[4])
_P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
_Q = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_1_SQRT_PI = 5.6418958354775628695e-1

_SMALL, _NEAR1, _MID, _ONE = 0.84375, 1.25, 4.0, 6.0  # the intervals' ends; erf = ±1 from 6


def _ratio(t, num, den, n):
    """``(num[n] t^(n+1) + num[0] t^n + ... + num[n-1] t) / (t^(n+1) + den[0] t^n + ... +
    den[n-1] t)`` without their constant terms, which the callers add (Cody's evaluation order)."""
    xnum = num[n] * t
    xden = t.copy()
    for i in range(n - 1):
        xnum += num[i]
        xnum *= t
        xden += den[i]
        xden *= t
    return xnum, xden


def _exp_neg_square(y):
    """``exp(-y²)`` without the rounding error of ``y * y``: ``y = s + d`` with ``s = y`` cut to a
    multiple of 1/16, so ``s²`` is exact and ``y² - s² = (y - s)(y + s)`` is small (Cody)."""
    s = np.trunc(y * 16) / 16
    return np.exp(-(s * s)) * np.exp(-((y - s) * (y + s)))


def _poly(t, coefs):
    """``coefs[0] + coefs[1] t + ... + coefs[-1] t^(n-1)`` (Horner)."""
    acc = coefs[-1] * t
    for c in coefs[-2:0:-1]:
        acc += c
        acc *= t
    acc += coefs[0]
    return acc


def _erf_small(x):
    z = x * x
    return x + x * (_poly(z, _PP) / (_poly(z, (1.0,) + _QQ)))


def _erf_near1(y):
    """``erf(y)`` for 0.84375 <= y < 1.25."""
    s = y - 1
    return _ERX + _poly(s, _PA) / _poly(s, (1.0,) + _QA)


def _erf_mid(y):
    """``erf(y)`` for 1.25 <= y < 4."""
    xnum, xden = _ratio(y, _C, _D, 8)
    return 0.5 - _exp_neg_square(y) * ((xnum + _C[7]) / (xden + _D[7])) + 0.5


def _erf_tail(y):
    """``erf(y)`` for 4 <= y < 6."""
    z = 1 / (y * y)
    xnum, xden = _ratio(z, _P, _Q, 5)
    r = z * (xnum + _P[4]) / (xden + _Q[4])
    return 0.5 - _exp_neg_square(y) * ((_1_SQRT_PI - r) / y) + 0.5


# Elements per block of ``erf_array``: 128 KB of float64, so each block's dozen temporaries stay
# in cache and come from malloc's heap instead of fresh mmap'd pages (see erf_array's NOTE).
_BLOCK = 16384


def erf_array(a: np.ndarray) -> np.ndarray:
    """``erf`` of a float array, elementwise, in ``a``'s dtype: float64 to within 1 ulp of
    ``math.erf``; narrower floats are computed in float64 and rounded once.

    NOTE: computed in blocks of ``_BLOCK`` elements (the same operations on each element). One
    pass over a GELU activation (131,072 elements in the tiny GPT) made ~20 float64 temporaries
    of 1 MB: glibc maps and unmaps each, and the page faults (~2,300 a step) cost more than the
    arithmetic; 128 KB blocks stay on the heap and in cache.

    >>> erf_array(np.array([0.0, 0.5, -2.0, np.inf]))
    array([ 0.        ,  0.52049988, -0.99532227,  1.        ])
    """
    dtype, shape = a.dtype, np.shape(a)
    x = np.asarray(a).reshape(-1)  # 1-d, so the index arrays below serve 0-d inputs too
    if x.size <= _BLOCK:
        out = _erf_flat(np.asarray(x, dtype=_F64)).reshape(shape)
        return out if dtype == _F64 else out.astype(dtype)
    out = np.empty(x.shape, dtype)
    for i in range(0, x.size, _BLOCK):
        out[i : i + _BLOCK] = _erf_flat(np.asarray(x[i : i + _BLOCK], dtype=_F64))
    return out.reshape(shape)


def _erf_flat(x: np.ndarray) -> np.ndarray:
    """``erf`` of a 1-d float64 array (``erf_array``'s work on one block)."""
    # NOTE: boolean-mask gathers and scatters cost ~8 ms per 1e6 elements, index arrays ~1 ms:
    # the small-|x| form (most activations) runs on every element, the rest through indices.
    with np.errstate(all="ignore"):  # the small form overflows where it is not used
        out = _erf_small(x)
    rest = np.flatnonzero(~(np.abs(x) < _SMALL))  # NaN included
    if rest.size:
        xr = x[rest]
        yr = np.abs(xr)
        r = np.sign(xr)  # ±1 at |x| >= 6 and ±inf, NaN at NaN; the intervals overwrite the rest
        for lo, hi, fn in (
            (_SMALL, _NEAR1, _erf_near1),
            (_NEAR1, _MID, _erf_mid),
            (_MID, _ONE, _erf_tail),
        ):
            i = np.flatnonzero((yr >= lo) & (yr < hi))
            if i.size:
                r[i] = np.copysign(fn(yr[i]), xr[i])
        out[rest] = r
    return out


# ---------------------------------------------------------------------------------------------
# erfinv: the inverse of erf on (-1, 1)
# ---------------------------------------------------------------------------------------------

# M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single-precision
# polynomials in w = -log(1 - x²): a start within ~1e-7 that Newton's method then refines.
_GILES_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_GILES_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


_2_SQRT_PI = 2 * _1_SQRT_PI


def _erfc_large(y):
    """``erfc(y)`` for 1.25 <= y < 6, from Cody's forms above (not ``1 - erf``, which keeps
    none of erfc's digits here)."""
    with np.errstate(all="ignore"):
        xnum, xden = _ratio(y, _C, _D, 8)
        mid = (xnum + _C[7]) / (xden + _D[7])
        z = 1 / (y * y)
        tnum, tden = _ratio(z, _P, _Q, 5)
        tail = (_1_SQRT_PI - z * (tnum + _P[4]) / (tden + _Q[4])) / y
    return _exp_neg_square(y) * np.where(y < _MID, mid, tail)


def erfinv_array(a: np.ndarray) -> np.ndarray:
    """``erfinv`` of a float array, elementwise, in ``a``'s dtype: ±1 give ±inf, outside
    [-1, 1] and NaN give NaN.

    NOTE: Giles' start, then two Newton steps on ``erf(y) - x`` in float64 (``erf_array`` is
    accurate to 1 ulp, and each step squares the relative error), so float64 results agree
    with PyTorch's to a few ulp; near ±1 the result's conditioning, not the method, sets the
    error.

    >>> erfinv_array(np.array([0.0, 0.5, -0.9, 1.0]))
    array([ 0.        ,  0.47693628, -1.16308715,         inf])
    """
    dtype = a.dtype
    shape = np.shape(a)
    x = np.asarray(a, dtype=_F64).reshape(-1)  # 1-d, so the index arrays serve 0-d inputs too
    with np.errstate(all="ignore"):
        w = -np.log1p(-x * x)
        central = w < 5.0
        t = np.where(central, w - 2.5, np.sqrt(w) - 3.0)
        p = np.where(central, _GILES_CENTRAL[0], _GILES_TAIL[0])
        for c, d in zip(_GILES_CENTRAL[1:], _GILES_TAIL[1:]):
            p = np.where(central, c, d) + p * t
        y = p * x
        for _ in range(2):
            y = np.where(central, y - (erf_array(y) - x) / (_2_SQRT_PI * np.exp(-y * y)), y)
        # NOTE: in the tail erf(y) is within an ulp of 1, so Newton's method solves
        # erfc(|y|) = 1 - |x| there instead (1 - |x| is exact for |x| >= 0.5). Giles' tail
        # polynomial is made for float32's range (w <= 16): from farther out its start is off
        # by up to 1e-3, hence more steps (the tail is rare; only its elements are iterated).
        tail = np.flatnonzero(~central & (np.abs(x) < 1))
        if tail.size:
            ay, c = np.abs(y[tail]), 1 - np.abs(x[tail])
            for _ in range(6):
                ay = ay + (_erfc_large(ay) - c) / (_2_SQRT_PI * _exp_neg_square(ay))
            y[tail] = np.copysign(ay, x[tail])
        y = np.where(np.abs(x) == 1, np.copysign(np.inf, x), y)
        y = np.where((np.abs(x) > 1) | np.isnan(x), np.nan, y).reshape(shape)
    return y if dtype == _F64 else y.astype(dtype)
