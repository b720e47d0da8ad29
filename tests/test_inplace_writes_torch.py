"""In-place arithmetic and fills write into the tensor's memory (NOTE [In-place arithmetic] in
ops/inplace.py): the values, versions and errors are PyTorch's, and no full-size temporary is
made where PyTorch makes none."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")

OPS = {
    "add_": lambda t, o: t.add_(o),
    "sub_": lambda t, o: t.sub_(o),
    "mul_": lambda t, o: t.mul_(o),
    "div_": lambda t, o: t.div_(o),
    "+=": lambda t, o: t.__iadd__(o),
    "-=": lambda t, o: t.__isub__(o),
    "*=": lambda t, o: t.__imul__(o),
    "/=": lambda t, o: t.__itruediv__(o),
}
# same dtype and shape, Python numbers, and the cases that must take the general path:
# broadcasting, promotion (float32 -= float64 stays float32), a 0-d tensor, an int tensor
OTHERS = {
    "tensor": lambda lib, dt: lib.tensor([[0.5, -2.0, 0.0], [3.0, 1e30, -0.0]], dtype=dt),
    "float": lambda lib, dt: 0.1,
    "int": lambda lib, dt: 3,
    "row": lambda lib, dt: lib.tensor([2.0, -1.0, 0.5], dtype=dt),
    "float64": lambda lib, dt: lib.tensor([[1.5] * 3] * 2, dtype=lib.float64),
    "0-d": lambda lib, dt: lib.tensor(4.0, dtype=dt),
    "ints": lambda lib, dt: lib.tensor([[1, 2, 3], [4, 5, 6]]),
}


def _run(lib, op, other, dtype_name, grad_mode):
    dt = getattr(lib, dtype_name)
    t = lib.tensor([[1.0, 2.0, -3.0], [0.0, float("inf"), 7.0]], dtype=dt)
    o = OTHERS[other](lib, dt)
    v0 = t._version
    ctx = lib.no_grad() if grad_mode == "no_grad" else lib.enable_grad()
    with ctx:
        r = OPS[op](t, o)
    return r is t, t.dtype == dt, np.asarray(t.tolist()), t._version - v0


@pytest.mark.parametrize("grad_mode", ["no_grad", "grad"])
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("other", list(OTHERS))
@pytest.mark.parametrize("op", list(OPS))
def test_in_place_arithmetic_as_pytorch(op, other, dtype_name, grad_mode):
    want = _run(torch, op, other, dtype_name, grad_mode)
    got = _run(ad, op, other, dtype_name, grad_mode)
    assert got[0] == want[0] and got[1] == want[1] and got[3] == want[3]
    np.testing.assert_array_equal(got[2], want[2])


@pytest.mark.parametrize("lib", [ad, torch], ids=["autodiag", "torch"])
def test_in_place_on_a_leaf_that_requires_grad_still_refused_outside_no_grad(lib):
    w = lib.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w -= 0.1


def test_int_tensor_divided_in_place_is_refused_as_pytorch():
    with pytest.raises(RuntimeError) as want:
        torch.tensor([1, 2]).div_(torch.tensor([2, 2]))
    with pytest.raises(RuntimeError) as got:
        ad.tensor([1, 2]).div_(ad.tensor([2, 2]))
    assert str(got.value) == str(want.value)


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "step",
    [
        lambda w, g: w.__isub__(g),
        lambda w, g: w.sub_(g),
        lambda w, g: w.__imul__(0.9),
        lambda w, g: g.zero_(),
        lambda w, g: g.fill_(2.0),
    ],
    ids=["-= tensor", "sub_", "*= number", "zero_", "fill_"],
)
def test_sgd_updates_and_fills_make_no_full_size_temporary(step):
    w = ad.ones(500, 500)  # 1 MB of float32
    g = ad.ones(500, 500)
    with ad.no_grad():
        peak = _peak(lambda: step(w, g))
    assert peak < w.numel() * 4 // 4
