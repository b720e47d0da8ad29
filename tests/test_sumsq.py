"""``sum_of_squares`` computes the chunks' dots in one batched call (NOTE [Chunk dots at once]
in core/sumsq.py): bit for bit the sum of the chunk-by-chunk loop it replaced, whose figures
(gradient norms, update ratios) ``autodiag check`` prints."""

import math

import numpy as np
import pytest

from autodiag.core.sumsq import CHUNK, _chunk_by_chunk, sum_of_squares


def _loop(r: np.ndarray) -> float:
    """The loop as it was: one BLAS dot per chunk, added in order in Python floats."""
    total = 0.0
    for i in range(0, r.shape[0], CHUNK):
        c = r[i : i + CHUNK]
        total += float(c.dot(c))
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "n", [CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 7, 25 * CHUNK - 3, 256 * 784, 256 * 256]
)
def test_bit_for_bit_the_loop(dtype, n):
    rng = np.random.default_rng(n)
    for scale in (1e-20, 1e-3, 1.0, 1e7):
        r = (rng.standard_normal(n) * scale).astype(dtype)
        assert sum_of_squares(r).hex() == _loop(r).hex()


@pytest.mark.parametrize("step", [2, -1, -3])
def test_strided_views_as_the_loop(step):
    r = np.random.default_rng(0).standard_normal(5 * CHUNK).astype(np.float32)[::step]
    assert sum_of_squares(r).hex() == _loop(r).hex() == _chunk_by_chunk(r).hex()


@pytest.mark.parametrize("dtype", [np.float16, np.int64])
def test_other_dtypes_as_the_loop(dtype):
    r = (np.arange(3 * CHUNK + 11) % 7).astype(dtype)
    assert sum_of_squares(r) == _loop(r)


@pytest.mark.parametrize("where", [0, CHUNK - 1, 2 * CHUNK, 3 * CHUNK + 2])
def test_a_nan_or_inf_anywhere(where):
    for bad in (np.nan, np.inf, -np.inf):
        r = np.ones(3 * CHUNK + 3, dtype=np.float32)
        r[where] = bad
        assert not math.isfinite(sum_of_squares(r))
        assert not math.isfinite(sum_of_squares(r[::-1]))


def test_overflow_is_not_finite():
    r = np.full(4 * CHUNK, 1e30, dtype=np.float32)  # each chunk's float32 dot overflows
    assert not math.isfinite(sum_of_squares(r))
