"""``ops/_normal_fill32.py`` against ``ops/_avx_mathfun.py``'s checked replay of PyTorch's
float32 Box-Muller block, on every input the stream can hand it.

The fast functions skip fma32's double-rounding check, which is right only because no input
``k * 2**-24`` (0 <= k < 2**24) leads to such a case: checked here for all 2**24 of them, for
the radius and for the sine and cosine (the checked replay is compared with torch 2.13 bit
for bit in tests/test_rng_torch.py and tests/test_rng_normal_torch.py)."""

from __future__ import annotations

import numpy as np
import pytest

from autodiag.ops import _avx_mathfun as checked
from autodiag.ops import _normal_fill32 as fast

_CHUNK = 1 << 20


def _uniforms(start: int, stop: int) -> np.ndarray:
    return (np.arange(start, stop, dtype=np.int64) * 2.0**-24).astype(np.float32)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int32)


@pytest.mark.slow
def test_radius_equals_the_checked_replay_on_every_uniform():
    for start in range(0, 1 << 24, _CHUNK):
        u = _uniforms(start, start + _CHUNK)
        want = np.sqrt(np.float32(-2) * checked.log256(np.float32(1) - u))
        got = fast.radius(u)
        bad = np.flatnonzero(_bits(got) != _bits(want))
        assert bad.size == 0, f"radius differs at k = {start + bad[:5]}"


@pytest.mark.slow
def test_sincos_equals_the_checked_replay_on_every_uniform():
    for start in range(0, 1 << 24, _CHUNK):
        u = _uniforms(start, start + _CHUNK)
        want_s, want_c = checked.sincos256(checked._TWO_PI * u)
        got_s, got_c = fast.sincos(u)
        bad = np.flatnonzero((_bits(got_s) != _bits(want_s)) | (_bits(got_c) != _bits(want_c)))
        assert bad.size == 0, f"sincos differs at k = {start + bad[:5]}"


@pytest.mark.parametrize("rows", [1, 2, 511, 4096, 4097, 9000])
@pytest.mark.parametrize("mean_std", [(0.0, 1.0), (0.25, 3.0), (-1.5, 1e-3), (0.0, -2.0)])
def test_blocks_equal_the_checked_replay(rows, mean_std):
    # chunk boundaries (4096 rows), the extreme uniforms 0 and 1 - 2**-24, mean and std forms
    rng = np.random.default_rng(rows)
    k = rng.integers(0, 1 << 24, size=16 * rows)
    u = (k * 2.0**-24).astype(np.float32).reshape(rows, 16)
    u[0, ::2] = 0
    u[-1, 1::2] = np.float32(1 - 2.0**-24)
    want = checked.box_muller_16(u, *mean_std)
    got = fast.box_muller_uniform16(u, *mean_std)
    assert np.array_equal(_bits(got), _bits(want))
