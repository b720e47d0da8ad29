"""linspace computes PyTorch's values to the bit (NOTE [linspace's halves])."""

import math

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_linspace_matches_torch_bitwise(dtype):
    rs = np.random.RandomState(0)
    cases = [(-math.pi, math.pi, 2000), (0, 1, 100), (-3.7, 11.3, 37), (0, 10, 4), (-3, 4.9, 5)]
    cases += [
        (float(a), float(b), int(n))
        for a, b, n in zip(
            rs.standard_normal(60) * 10.0 ** rs.randint(-3, 5, 60),
            rs.standard_normal(60) * 10.0 ** rs.randint(-3, 5, 60),
            rs.randint(2, 3000, 60),
        )
    ]
    for a, b, n in cases:
        want = torch.linspace(a, b, n, dtype=getattr(torch, dtype)).numpy()
        got = autodiag.linspace(a, b, n, dtype=getattr(autodiag, dtype)).numpy()
        assert got.dtype == want.dtype
        assert np.array_equal(got, want), (a, b, n)


def test_linspace_edges_match_torch():
    for args in [(0.0, 1.0, 1), (0.0, 1.0, 0), (2.0, 2.0, 5), (1.0, -1.0, 2)]:
        want = torch.linspace(*args).numpy()
        assert np.array_equal(autodiag.linspace(*args).numpy(), want), args
