"""``torch.erfinv`` (Normal.icdf's op): values over (-1, 1) and its ends, float32 and float64,
first and second derivatives, node and saved-tensor names, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from differential import names, run_both

import autodiag as ad

torch = pytest.importorskip("torch")

# the central region, both tails (down to 1 - 1e-13) and the special values
POINTS = np.concatenate(
    [
        np.linspace(-0.999, 0.999, 4001),
        1 - np.logspace(-13, -2, 200),
        -(1 - np.logspace(-13, -2, 200)),
        [0.0, -0.0, 1.0, -1.0, 1.5, -2.0, np.nan, np.inf, 1e-300],
    ]
)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_erfinv_values_match_torch(dtype):
    x = POINTS.astype(dtype)
    a = ad.erfinv(ad.from_numpy(x)).numpy()
    t = torch.erfinv(torch.from_numpy(x)).numpy()
    assert np.array_equal(np.isnan(a), np.isnan(t))
    assert np.array_equal(a[np.isinf(t)], t[np.isinf(t)])
    ok = np.isfinite(t)
    # float64: within a few ulp of PyTorch's; float32: computed in float64, rounded once
    rtol = 1e-14 if dtype == "float64" else 2.5e-7
    np.testing.assert_allclose(a[ok], t[ok], rtol=rtol, atol=0)


def test_erfinv_gradients_and_nodes_match_torch():
    def fn(m):
        x = m.tensor([-0.9, -0.3, 0.0, 0.45, 0.99], dtype=m.float64, requires_grad=True)
        y = m.erfinv(x)
        (g,) = m.autograd.grad((y * y).sum(), x, create_graph=True)
        (gg,) = m.autograd.grad(g.sum(), x)
        return y, g, gg

    run_both(fn, torch)

    def graph(m):
        x = m.tensor([0.2], requires_grad=True)
        y = x.erfinv()
        return names(y.grad_fn), y.grad_fn._saved_self.tolist()

    assert graph(ad) == graph(torch)


def test_erfinv_in_place_and_integer_input():
    run_both(lambda m: m.tensor([0.2, -0.7]).erfinv_(), torch)
    run_both(lambda m: m.erfinv(m.tensor([1, 0, -1])), torch)
