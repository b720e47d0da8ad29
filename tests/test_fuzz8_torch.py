"""issue 17 (fuzz8): the silent differences left after the fuzzer's classes, each compared with
PyTorch: numpy scalars written into a tensor, numpy uint64 fill values, and integer tensors
that a grad-requiring float value is written into."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad


def _outcome(fn, m):
    """What ``fn(m)`` gives: the tensor's dtype, values and autograd state, or its error."""
    try:
        with np.errstate(all="ignore"):
            out = fn(m)
        return (
            "ok",
            str(out.dtype).split(".")[-1],
            repr(out.tolist()),
            out.requires_grad,
            out.grad_fn.name() if out.grad_fn is not None else None,
        )
    except Exception as e:  # the exception's type and message are the contract
        return (type(e).__name__, str(e).splitlines()[0])


def _same(fn, torch):
    assert _outcome(fn, ad) == _outcome(fn, torch)


# --- numpy scalars as setitem values ------------------------------------------------------------

SETITEM_VALUES = [
    np.float32(1.5),  # was written (1.5); PyTorch: "can't assign a numpy.float32 ..."
    np.float16(1.5),
    np.bool_(True),
    np.array(1.5),  # a 0-d array: the message named "ndarray", PyTorch's "numpy.ndarray"
    np.array(2, dtype=np.int64),
    np.float64(1.5),  # a float subclass: accepted
    np.complex128(1.5),  # a complex subclass: accepted
    np.int64(2),  # numpy integers: accepted
    np.int32(-7),
    np.uint8(4),
    np.uint64(3),
    np.uint64(2**63),  # ValueError: Overflow when unpacking long long
]


@pytest.mark.parametrize("value", SETITEM_VALUES, ids=lambda v: f"{type(v).__name__}({v})")
@pytest.mark.parametrize("dt", ["float32", "float64", "int64", "int32", "bool"])
@pytest.mark.parametrize("where", ["int", "slice", "mask", "index"])
def test_setitem_numpy_scalar_is_accepted_or_refused_as_pytorch(torch, value, dt, where):
    index = {
        "int": lambda m: 0,
        "slice": lambda m: slice(0, 2),
        "mask": lambda m: m.tensor([True, False, True]),
        "index": lambda m: m.tensor([2, 0]),
    }[where]

    def fn(m):
        t = m.zeros(3, dtype=getattr(m, dt))
        t[index(m)] = value
        return t

    _same(fn, torch)


# --- numpy uint64 fill values ---------------------------------------------------------------


@pytest.mark.parametrize("value", [np.uint64(2**63 - 1), np.uint64(2**63), np.uint64(2**64 - 1)])
@pytest.mark.parametrize("dt", ["float32", "int64", "uint8", "bool"])
def test_numpy_uint64_beyond_int64_is_refused_as_pytorch(torch, value, dt):
    # float32.fill_(np.uint64(2**64 - 1)) was 1.8447e+19; PyTorch's argument parser reads a
    # numpy integer as an int64: "TypeError: an integer is required"
    fns = [
        lambda m: m.zeros(2, dtype=getattr(m, dt)).fill_(value),
        lambda m: m.full((2,), value, dtype=getattr(m, dt)),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).masked_fill(m.tensor([True, False]), value),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).masked_fill_(m.tensor([True, False]), value),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).new_full((2,), value),
    ]
    for fn in fns:
        _same(fn, torch)


# --- a grad-requiring float written into an integer tensor ----------------------------------


def _value(m):
    return m.tensor(2.5, requires_grad=True)


def _values(m, n=2):
    return m.full((n,), 2.5, requires_grad=True)


def _mask(m):
    return m.tensor([True, False])


INT_WRITES = {
    # out of place: PyTorch refuses an integer output that would require grad (set_history);
    # autodiag returned tensor([2, 0], grad_fn=<MaskedFillBackward1>)
    "masked_fill": lambda m, t: t.masked_fill(_mask(m), _value(m)),
    # in place: PyTorch writes it and the tensor requires grad (no check there)
    "masked_fill_": lambda m, t: t.masked_fill_(_mask(m), _value(m)),
    "fill_": lambda m, t: t.fill_(_value(m)),
    # copy_ records only into a differentiable dtype; autodiag recorded CopyBackwards/CopySlices
    "copy_": lambda m, t: t.copy_(_values(m)),
    "copy_ 0-d": lambda m, t: t.copy_(_value(m)),
    "t[0] = v": lambda m, t: t.__setitem__(0, _value(m)),
    "t[:] = v (copy_)": lambda m, t: t.__setitem__(slice(None), _values(m)),
    "t[...] = v (copy_)": lambda m, t: t.__setitem__(Ellipsis, _values(m)),
    "t[0:1] = v": lambda m, t: t.__setitem__(slice(0, 1), _values(m, 1)),
    "t[:] = 0-d (fill_)": lambda m, t: t.__setitem__(slice(None), _value(m)),
    "t[mask] = v (index_put_)": lambda m, t: t.__setitem__(_mask(m), _value(m)),
    "t[idx] = v (index_put_)": lambda m, t: t.__setitem__(m.tensor([1, 0]), _values(m)),
}


@pytest.mark.parametrize("case", list(INT_WRITES))
@pytest.mark.parametrize("dt", ["int64", "bool", "uint8"])
def test_grad_requiring_float_written_into_int_tensor_as_pytorch(torch, case, dt):
    def fn(m):
        t = m.zeros(2, dtype=getattr(m, dt))
        r = INT_WRITES[case](m, t)
        return t if r is None else r

    _same(fn, torch)


def test_masked_fill_float_output_still_records(torch):
    # the dtype check leaves the ordinary case alone: gradient to the value, through the mask
    for m in (ad, torch):
        v = m.tensor(2.5, requires_grad=True)
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x.masked_fill(m.tensor([True, False, True]), v)
        y.sum().backward()
        assert y.grad_fn.name() == "MaskedFillBackward1"
        assert v.grad.tolist() == 2.0 and x.grad.tolist() == [0.0, 1.0, 0.0]
