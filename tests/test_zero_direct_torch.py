"""``zero_()`` where nothing is recorded writes its zeros straight into the tensor's memory
(``_plain_zero`` in ops/inplace.py): values, dtypes, versions, the tensor returned and the
errors stay PyTorch's, on that path and on the ones it leaves to ``apply_inplace``."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _case(lib, dtype_name, grad_mode, requires_grad):
    dt = getattr(lib, dtype_name)
    if dtype_name == "bool":
        t = lib.tensor([[True, False, True], [False, True, True]])
    else:
        t = lib.tensor([[1.5, -0.0, 2.0], [-3.0, 4.0, 0.25]]).to(dt)
    if requires_grad:
        t.requires_grad_(True)
    v0 = t._version
    ctx = lib.enable_grad() if grad_mode else lib.no_grad()
    try:
        with ctx:
            r = t.zero_()
    except RuntimeError as e:
        return ("error", str(e))
    signs = np.signbit(r.detach().numpy().astype(np.float64)).tolist()
    return (
        r is t,
        t._version - v0,
        str(t.dtype).split(".")[-1],
        t.tolist(),
        signs,
        t.requires_grad,
        t.grad_fn is None,
    )


@pytest.mark.parametrize(
    "dtype_name, requires_grad",
    [(d, False) for d in ("float32", "float64", "int64", "bool", "float16")]
    + [(d, True) for d in ("float32", "float64", "float16")],  # only floats require grad
)
@pytest.mark.parametrize("grad_mode", [False, True])
def test_zero_as_pytorch(dtype_name, grad_mode, requires_grad):
    assert _case(ad, dtype_name, grad_mode, requires_grad) == _case(
        torch, dtype_name, grad_mode, requires_grad
    )


@pytest.mark.parametrize("lib", [ad, torch], ids=["autodiag", "torch"])
def test_zero_of_a_saved_tensor_under_no_grad_is_caught_at_backward(lib):
    w = lib.tensor([1.0, 2.0], requires_grad=True)
    x = lib.tensor([3.0, 4.0])
    y = (w * x).sum()  # saves x
    with lib.no_grad():
        x.zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_zero_of_a_view_and_of_numpy_memory_as_pytorch():
    got = []
    for lib in (ad, torch):
        base = lib.arange(6.0).reshape(2, 3)
        with lib.no_grad():
            base[1].zero_()
        a = np.arange(4.0)
        t = lib.from_numpy(a)
        t.zero_()
        got.append((base.tolist(), a.tolist(), base._version))
    assert got[0] == got[1]
