"""Matrix products keep PyTorch's non-finite results whichever test clears the BLAS result
(NOTE [Plain products] in ops/_products.py): the one-pass sum-of-squares bound, the exact
max/min bound, or neither (the recomputation)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _cases(dtype):
    top = float(np.finfo(dtype).max)
    root = float(np.sqrt(top))
    rng = np.random.default_rng(0)
    plain = rng.integers(-4, 5, (6, 16)).astype(dtype), rng.integers(-4, 5, (16, 12))
    # each element below sqrt(top): no product overflows, but the sums of squares do
    wide = np.full((4, 16), root * 0.9, dtype), np.full((16, 12), -root * 0.9)
    # one product overflows beside a large term of the other sign: BLAS's fused sum is finite
    cancel_a = np.ones((4, 16), dtype)
    cancel_a[:, 0], cancel_a[:, 1] = top * 0.75, top * 0.75
    cancel_b = np.ones((16, 12))
    cancel_b[0], cancel_b[1] = -1.0, 1.5
    # the largest product just under the sum-of-squares bound (half the largest float), and
    # just over it (the exact bound clears it)
    under = np.full((4, 16), 1.0, dtype), np.ones((16, 12))
    under[0][0, 0] = under[1][0, 0] = root * 0.69
    over = np.full((4, 16), 1.0, dtype), np.ones((16, 12))
    over[0][0, 0] = over[1][0, 0] = root * 0.72
    special = (
        np.array([[1.0, np.inf], [np.nan, 2.0], [0.0, -1.0], [3.0, 4.0]], dtype),
        np.ones((2, 12)),
    )
    return {
        "plain": plain,
        "wide": wide,
        "cancel": (cancel_a, cancel_b),
        "under": under,
        "over": over,
        "special": special,
    }


def _product(lib, a, b, layout):
    ta, tb = lib.tensor(a), lib.tensor(b.astype(a.dtype))
    if layout == "transposed":  # column-major operands (x @ w.T)
        ta, tb = ta.T.contiguous().T, tb.T.contiguous().T
    elif layout == "strided":  # neither layout (every other column): the exact tests decide
        ta = lib.stack([ta, ta], 2).reshape(ta.shape[0], -1)[:, ::2]
    return np.asarray((ta @ tb).tolist())


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", ["plain", "wide", "cancel", "under", "over", "special"])
def test_products_as_pytorch_through_every_screen(case, dtype, layout):
    a, b = _cases(dtype)[case]
    np.testing.assert_array_equal(
        _product(ad, a, b, layout), _product(torch, a, b, layout), err_msg=case
    )
