"""The C library's float64 ``log``, ``log1p``, ``exp``, ``sin``, ``cos`` and ``tan``, which
PyTorch's scalar sampling kernels call (``std::log`` and friends in ATen's CPU distributions).

NOTE [libm-exact transcendentals]
numpy's float64 loops for these call libm on most CPUs, but on an AVX-512 CPU numpy dispatches
to its own vector code (SVML; its own exp/log), which differs from libm in the last place for
some inputs: ``randn(…, dtype=float64)`` then drew PyTorch's stream position right but 1–4 of
every 100 values one ulp away (measured on an AMD EPYC with AVX-512, numpy 2.4). The sampling
code needs libm's bits, so each function here checks once, on a fixed set of inputs from its
sampling range, whether numpy's loop gives libm's results (``math`` calls libm), and otherwise
computes the ordinary inputs element by element with ``math`` (~60 ns each); special inputs
(0, infinities, NaN, out of domain) keep numpy's results, which are IEEE's on every CPU.
"""

from __future__ import annotations

import math

import numpy as np

# per function: the inputs it is probed on (its sampling range) and its ordinary inputs
_RANGES = {
    "log": (1e-300, 2.0),
    "log1p": (-1.0 + 1e-16, 0.0),
    "exp": (-30.0, 30.0),
    "sin": (0.0, 2.0 * math.pi),
    "cos": (0.0, 2.0 * math.pi),
    "tan": (-math.pi / 2, math.pi / 2),
}
_ORDINARY = {
    "log": lambda a: np.isfinite(a) & (a > 0),
    "log1p": lambda a: np.isfinite(a) & (a > -1),
    "exp": lambda a: np.abs(a) < 700.0,
    "sin": np.isfinite,
    "cos": np.isfinite,
    "tan": np.isfinite,
}
_numpy_agrees: dict[str, bool] = {}


def _by_math(name: str, a: np.ndarray) -> np.ndarray:
    fn = getattr(math, name)
    return np.fromiter(map(fn, a.ravel().tolist()), np.float64, count=a.size).reshape(a.shape)


def _agrees(name: str) -> bool:
    """Whether numpy's float64 ``name`` gives libm's bits on this machine (probed once)."""
    known = _numpy_agrees.get(name)
    if known is None:
        lo, hi = _RANGES[name]
        probe = np.random.RandomState(20261124).uniform(lo, hi, 4096)
        probe[:4] = lo, hi, (lo + hi) / 2, 0.5 * lo + 0.25 * hi
        ours = getattr(np, name)(probe)
        known = _numpy_agrees[name] = bool(
            np.array_equal(ours.view(np.int64), _by_math(name, probe).view(np.int64))
        )
    return known


def _libm(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    out = getattr(np, name)(a)
    if _agrees(name):
        return out
    out = np.array(out, dtype=np.float64, copy=True, ndmin=1)
    flat, src = out.reshape(-1), a.reshape(-1)
    ordinary = _ORDINARY[name](src)
    if ordinary.all():
        flat[...] = _by_math(name, src)
    else:
        flat[ordinary] = _by_math(name, src[ordinary])
    return out.reshape(a.shape)


def log(a) -> np.ndarray:
    return _libm("log", a)


def log1p(a) -> np.ndarray:
    return _libm("log1p", a)


def exp(a) -> np.ndarray:
    return _libm("exp", a)


def sin(a) -> np.ndarray:
    return _libm("sin", a)


def cos(a) -> np.ndarray:
    return _libm("cos", a)


def tan(a) -> np.ndarray:
    return _libm("tan", a)
