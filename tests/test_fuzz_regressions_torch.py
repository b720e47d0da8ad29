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
def test_fuzz_inplace_on_view_in_autograd_is_a_clear_refusal(torch, code):
    # fuzz class "view.mul_ | forward exception: RuntimeError vs ok": in-place on a view of a
    # tensor that takes part in autograd works in PyTorch (CopySlices); autodiag refuses it,
    # and a refusal is a NotImplementedError naming the op (still a RuntimeError, as before)
    for m in (torch, ad):
        x = m.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
        w = m.tensor([2.0, 3.0])
        v = (x * 1)[0]
        if m is torch:
            eval(code)
            continue
        with pytest.raises(NotImplementedError, match=r"in-place \w+ on a view") as e:
            eval(code)
        assert isinstance(e.value, RuntimeError)
        op = code.split(".")[1].split("(")[0]
        assert op in str(e.value)
