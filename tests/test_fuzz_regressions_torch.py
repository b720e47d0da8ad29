"""Regression tests for difference classes the fuzzer (tests/fuzz) found, one named test each,
written from the shrunk repro and compared with PyTorch."""

from __future__ import annotations

import pytest

import autodiag as ad


def test_fuzz_pow_negative_scalar_base_gradient_is_nan_not_valueerror(torch):
    # fuzz class "pow.scalar_base | grad exception: ValueError vs ok": (-1.0) ** x backward
    # took math.log(-1.0) and raised "math domain error"; PyTorch's gradient is NaN
    results = []
    for m in (ad, torch):
        x = m.tensor([1.0, 2.5], dtype=m.float32, requires_grad=True)
        y = (-1.0) ** x
        (g,) = m.autograd.grad(y.sum(), x, create_graph=True)
        assert g.dtype == m.float32
        results.append(g.detach().numpy().tolist())
    assert str(results[0]) == str(results[1]) == "[nan, nan]"


def test_fuzz_pow_negative_scalar_base_empty_gradient(torch):
    # the same class on an empty tensor: PyTorch returns an empty gradient
    for m in (ad, torch):
        x = m.empty((1, 0, 1), dtype=m.float64, requires_grad=True)
        (g,) = m.autograd.grad(((-1.0) ** x).sum(), x)
        assert tuple(g.shape) == (1, 0, 1)


@pytest.mark.parametrize("code", ["v.mul_(0.5)", "v.abs_()", "v.copy_(w)", "v.add_(w)",
                                  "v.__setitem__(0, w.sum())"])
def test_fuzz_inplace_on_view_in_autograd_rebases_like_pytorch(torch, code):
    # fuzz class "view.mul_ | forward exception: RuntimeError vs ok": in-place on a view of a
    # tensor that takes part in autograd works in PyTorch (CopySlices). autodiag refused it with
    # a NotImplementedError; it now rebases the base's history as PyTorch does
    # (tests/test_views_inplace_torch.py has the rest of the view + in-place behaviour)
    got = []
    for m in (torch, ad):
        x = m.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
        w = m.tensor([2.0, 3.0], requires_grad=True)
        a = x * 1
        v = a[0]
        eval(code)
        gx, gw = m.autograd.grad((a * a).sum(), (x, w), allow_unused=True)
        got.append((a.tolist(), type(a.grad_fn).__name__, type(v.grad_fn).__name__,
                    gx.tolist(), None if gw is None else gw.tolist()))
    assert got[0] == got[1]
