"""``repr`` of tensors against PyTorch's: every element padded to the widest nonzero finite one,
PyTorch's choice of integral/fixed/scientific notation (made in double precision), the summary
mark and where ``dtype=``/``requires_grad=`` go on a long last line."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
CASES = [
    [1.5, -1.5],
    [[1.5, -1.5], [2.0, 3.0]],
    [1.0, -3.0],
    [-0.1055, -0.0613, 0.0798, 0.2021],
    [0.0, -0.0],
    [0.0, -1.5],
    [-0.0, 3.0, NAN],
    [NAN, 1.0, -INF],
    [NAN],
    [1e-5, 2.0, -3e9],
    [0.0, 1e-6],
    [1.0, 5000.0],
    [0.5, 600.0],
    [1e9, 1.0],
    [1e-4, 0.0, -1e-4],
    [[[1.0, 2.0], [3.0, -4.0]]],
    [[10039615.7584, -6179070.4471, 18220113.6333, -13204309.7001]] * 4,
    np.arange(-3000.0, 3000.0).reshape(60, 100).tolist(),
]
INTS = [[1, -30, 2], [[1, 2], [3, -40]], [True, False], np.arange(-3000, 3000).tolist()]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
def test_float_repr_is_pytorchs(values, dtype, requires_grad):
    ours = autodiag.tensor(values, dtype=getattr(autodiag, dtype), requires_grad=requires_grad)
    theirs = torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=requires_grad)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("values", INTS, ids=range(len(INTS)))
def test_int_and_bool_repr_is_pytorchs(values):
    assert repr(autodiag.tensor(values)) == repr(torch.tensor(values))


@pytest.mark.parametrize(
    "name", ["float32", "float64", "float16", "int64", "int32", "bool", "uint8"]
)
def test_dtype_prints_as_pytorchs(name):
    assert repr(getattr(autodiag, name)) == repr(getattr(torch, name))
    assert str(autodiag.ones(1, dtype=getattr(autodiag, name)).dtype) == f"torch.{name}"
