"""Review of session 15: gradients that differed from PyTorch's at edge values."""

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_atan2_grad_where_the_squares_sum_to_zero(dtype):
    # the origin (all four signed zeros) and squares that underflow to 0: PyTorch's
    # reciprocal is 0 there, so the gradients are signed zeros, never nan or inf
    ys = [0.0, 0.0, -0.0, 1e-200 if dtype == "float64" else 1e-30, 0.0, 1.0]
    xs = [0.0, -0.0, 0.0, 0.0, -0.0, 2.0]
    g = [1.0, 2.0, 3.0, 4.0, -5.0, 6.0]
    ty = torch.tensor(ys, dtype=getattr(torch, dtype), requires_grad=True)
    tx = torch.tensor(xs, dtype=getattr(torch, dtype), requires_grad=True)
    want = torch.autograd.grad(torch.atan2(ty, tx), (ty, tx), torch.tensor(g, dtype=ty.dtype))
    ay = autodiag.tensor(np.array(ys, dtype=dtype), requires_grad=True)
    ax = autodiag.tensor(np.array(xs, dtype=dtype), requires_grad=True)
    got = autodiag.autograd.grad(
        autodiag.atan2(ay, ax), (ay, ax), autodiag.tensor(np.array(g, dtype=dtype))
    )
    for w, a in zip(want, got):
        assert a.dtype == getattr(autodiag, dtype)
        np.testing.assert_array_equal(a.numpy(), w.numpy())
        # the zeros' signs too
        np.testing.assert_array_equal(np.signbit(a.numpy()), np.signbit(w.numpy()))


def test_atan2_double_backward_at_the_origin():
    ty = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
    tx = torch.tensor([0.0, 2.0, -3.0], dtype=torch.float64, requires_grad=True)
    gy, gx = torch.autograd.grad(torch.atan2(ty, tx).sum(), (ty, tx), create_graph=True)
    want = torch.autograd.grad((gy * gx).sum(), (ty, tx))
    ay = autodiag.tensor([0.0, 1.0, 0.0], dtype=autodiag.float64, requires_grad=True)
    ax = autodiag.tensor([0.0, 2.0, -3.0], dtype=autodiag.float64, requires_grad=True)
    gy, gx = autodiag.autograd.grad(autodiag.atan2(ay, ax).sum(), (ay, ax), create_graph=True)
    got = autodiag.autograd.grad((gy * gx).sum(), (ay, ax))
    for w, a in zip(want, got):
        np.testing.assert_allclose(a.numpy(), w.numpy())
