"""PyTorch's random stream in the cases review10 found wrong: float16 uniforms (float32's draw
in half), a uniform that rounds up to ``high`` (it becomes ``low``), and the ``*_like``
factories and dropout on a transposed input (drawn in the input's memory order, as
``at::empty_like`` lays it out). Values, dtypes, strides' order and the stream's state after
the program are compared with torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest
from test_rng_torch import _same

torch = pytest.importorskip("torch")

F32_ONE_UP = float(np.nextafter(np.float32(1), np.float32(2)))
F64_ONE_UP = float(np.nextafter(1.0, 2.0))

PROGRAMS = {
    "rand_float16": lambda t: t.rand(2000, dtype=t.float16),
    "rand_like_float16": lambda t: t.rand_like(t.zeros(3, 700, dtype=t.float16)),
    "uniform_float16_bounds": lambda t: t.empty(3000, dtype=t.float16).uniform_(0.1, 0.7),
    "uniform_float16_negative": lambda t: t.empty(3000, dtype=t.float16).uniform_(-2.3, 1.7),
    "uniform_float16_generator": lambda t: t.rand(
        50, dtype=t.float16, generator=t.Generator().manual_seed(7)
    ),
    "uniform_float32_rounds_to_high": lambda t: t.empty(500).uniform_(1.0, F32_ONE_UP),
    "uniform_float64_rounds_to_high": lambda t: t.empty(500, dtype=t.float64).uniform_(
        1.0, F64_ONE_UP
    ),
    "randn_like_transposed": lambda t: t.randn_like(t.zeros(6, 20).t()),
    "randn_like_transposed_float64": lambda t: t.randn_like(t.zeros(6, 20, dtype=t.float64).t()),
    "randn_like_permuted": lambda t: t.randn_like(t.zeros(2, 3, 20).permute(2, 0, 1)),
    "randn_like_sliced": lambda t: t.randn_like(t.zeros(4, 40)[:, ::2]),
    "randn_like_expanded": lambda t: t.randn_like(t.zeros(6, 1).expand(6, 5)),
    "randn_like_dtype": lambda t: t.randn_like(t.zeros(6, 20).t(), dtype=t.float64),
    "rand_like_transposed": lambda t: t.rand_like(t.zeros(6, 20).t()),
    "rand_like_generator": lambda t: t.rand_like(
        t.zeros(6, 20).t(), generator=t.Generator().manual_seed(3)
    ),
    "randint_like_transposed": lambda t: t.randint_like(t.zeros(6, 20).t(), 10),
    "randint_like_dtype": lambda t: t.randint_like(t.zeros(6, 20).t(), 3, 10, dtype=t.float64),
    "randint_like_int32": lambda t: t.randint_like(t.zeros(6, 20, dtype=t.int32), -3, 10),
    "dropout_transposed": lambda t: t.nn.functional.dropout(t.ones(10, 5).t(), 0.3),
    "dropout_permuted_float64": lambda t: t.nn.functional.dropout(
        t.ones(3, 4, 5, dtype=t.float64).permute(2, 0, 1), 0.3
    ),
    "dropout_inplace_transposed": lambda t: t.nn.functional.dropout(
        t.ones(10, 5).t(), 0.3, inplace=True
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("seed", [0, 12345])
def test_stream_matches_torch(name, seed):
    _same(PROGRAMS[name], seed)


@pytest.mark.parametrize("name", [n for n in sorted(PROGRAMS) if "_like_" in n])
def test_like_keeps_the_inputs_layout(name):
    import autodiag as ad

    def order(strides):
        return sorted(range(len(strides)), key=lambda a: -abs(strides[a]))

    expected = PROGRAMS[name](torch)
    got = PROGRAMS[name](ad)
    nbytes = got._data.itemsize
    assert order(tuple(s // nbytes for s in got._data.strides)) == order(expected.stride())
