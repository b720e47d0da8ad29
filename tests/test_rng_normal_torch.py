"""``randn``/``normal_`` block paths against torch 2.13, bit for bit with the stream state
after: float16 of 16 or more contiguous values (float32's AVX2 kernel, rounded to half, with
its own draw order for a ragged tail), and float32 at the sizes around the 16-value blocks and
the vectorised chunks of ``ops/_avx_mathfun.py``."""

from __future__ import annotations

import numpy as np
import pytest
from test_rng_torch import _same

torch = pytest.importorskip("torch")

SIZES = [15, 16, 17, 18, 24, 31, 32, 33, 47, 100, 1001, 4099]


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40 + 3])
@pytest.mark.parametrize("n", SIZES)
def test_randn_float16(n, seed):
    _same(lambda m: [m.randn(n, dtype=m.float16), m.randn(n, dtype=m.float16)], seed)


def test_float16_normal_forms_and_the_element_wise_path():
    def program(m):
        h = m.float16
        return [
            m.empty(41, dtype=h).normal_(1.5, 0.3),  # mean and std in float32, not half
            m.empty(40, dtype=h).normal_(-3.0, 0.1),
            m.empty(4, 8, dtype=h).normal_(0.0, 1e-4),
            m.empty(3, 12, dtype=h).t().normal_(),  # not contiguous: the element-wise path
            m.empty(7, dtype=h).normal_(),  # fewer than 16: the element-wise path
            m.randn(5, 7, dtype=h),
            m.normal(2.0, 3.0, (20,), dtype=h),
            m.randn_like(m.empty(33, dtype=h)),
        ]

    _same(program, 7)


@pytest.mark.parametrize("seed", [0, 3, 2**33 + 5])
@pytest.mark.parametrize("n", SIZES + [65_536 - 1, 65_536, 65_536 + 17, 200_003])
def test_randn_float32_around_blocks_and_chunks(n, seed):
    _same(lambda m: [m.randn(n), m.empty(n).normal_(0.25, 3.0)], seed)


def test_float16_randn_values_are_float32s_rounded_to_half():
    # the whole blocks of a float16 draw are float32's draw rounded; only a ragged tail differs
    g = torch.Generator().manual_seed(0)
    half = torch.randn(48, dtype=torch.float16, generator=g).numpy()
    g = torch.Generator().manual_seed(0)
    single = torch.randn(48, generator=g).numpy()
    assert np.array_equal(half, single.astype(np.float16))
