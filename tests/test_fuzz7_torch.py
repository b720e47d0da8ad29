"""issue 17 (fuzz7): a Python number written into a tensor is converted as PyTorch converts it
(``c10::checked_convert``: NOTE [Checked scalar conversion] in autodiag/ops/_scalar_convert.py),
and the fuzzer's remaining classes, each compared with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

inf, nan = float("inf"), float("nan")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
VALUES = [
    True,
    -1,
    -255,
    -256,
    255,
    256,
    2**31,
    2**63 - 1,
    2**54 + 2**30 + 1,  # float32: rounded once from the int (through a double it would tie)
    2**63,
    -(2**63) - 1,
    2**64,
    1.5,
    -1.5,
    -0.5,
    127.5,
    65504.0,
    65519.0,
    1e6,
    3.4028235e38,
    1e39,
    2.0**63,
    inf,
    -inf,
    nan,
    -0.0,
    1 + 2j,
    1 + 0j,
    complex(nan, 0),
    np.float64(1e39),
    np.int64(-1),
]


def _fill_(m, dt, v):
    return m.zeros(2, dtype=dt).fill_(v)


def _full(m, dt, v):
    return m.full((2,), v, dtype=dt)


def _new_full(m, dt, v):
    return m.zeros(2, dtype=dt).new_full((2,), v)


def _masked_fill(m, dt, v):
    return m.zeros(2, dtype=dt).masked_fill(m.tensor([True, False]), v)


def _masked_fill_(m, dt, v):
    return m.zeros(2, dtype=dt).masked_fill_(m.tensor([True, False]), v)


def _setitem(m, dt, v):
    t = m.zeros(2, dtype=dt)
    t[0] = v
    return t


def _setitem_all(m, dt, v):
    t = m.zeros(2, 2, dtype=dt)
    t[:] = v  # copy_to's fill_ of the whole tensor
    return t


def _outcome(fn, m, dt, v):
    try:
        with np.errstate(all="ignore"):
            out = fn(m, getattr(m, dt), v)
        return ("ok", str(out.dtype).split(".")[-1], repr(out.tolist()))
    except Exception as e:  # the exception's type and message are the contract
        return (type(e).__name__, str(e).splitlines()[0])


@pytest.mark.parametrize(
    "fn", [_fill_, _full, _new_full, _masked_fill, _masked_fill_, _setitem, _setitem_all]
)
@pytest.mark.parametrize("dt", DTYPES)
def test_fill_value_conversion_is_pytorchs_checked_convert(torch, fn, dt):
    # int32.fill_(nan) was INT_MIN, float16.fill_(1e6) inf, float32.fill_(1 + 2j) 1.0 (numpy's
    # casts, silently); uint8.fill_(-1) raised where PyTorch wraps it to 255
    diffs = []
    for v in VALUES:
        want, got = _outcome(fn, torch, dt, v), _outcome(fn, ad, dt, v)
        if want != got:
            diffs.append(f"{v!r}: torch {want} autodiag {got}")
    assert not diffs, "\n".join(diffs)


def test_full_infers_dtype_as_pytorch(torch):
    for v in [True, 3, np.int32(3), 2.5, np.float16(1.5), np.True_]:
        assert str(ad.full((2,), v).dtype) == str(torch.full((2,), v).dtype), v
    with pytest.raises(RuntimeError, match="int64_t without overflow"):
        ad.full((2,), 2**63)
    with pytest.raises(NotImplementedError, match="complex"):
        ad.full((2,), 1 + 2j)  # PyTorch: a complex tensor, which autodiag does not have


def test_fill_value_that_is_not_a_number_raises_typeerror():
    with pytest.raises(TypeError, match="fill_"):
        ad.zeros(2).fill_("x")
    with pytest.raises(TypeError, match="fill_"):
        ad.zeros(2).fill_(None)


REDUCTIONS = {
    "sum": lambda x: x.sum(2, True),
    "sum_nokeep": lambda x: x.sum(2),
    "mean": lambda x: x.mean(2, True),
    "prod": lambda x: x.prod(2, True),
    "var": lambda x: x.var(2, keepdim=True),
    "std": lambda x: x.std(2, keepdim=True),
    "norm": lambda x: x.norm(dim=2, keepdim=True),
    "logsumexp": lambda x: x.logsumexp(2, True),
    "amax": lambda x: x.amax(2, True),
    "amin": lambda x: x.amin(0),
    "any": lambda x: x.any(2, True),
    "all": lambda x: x.all(2, True),
    "cumsum": lambda x: x.cumsum(2),
    "cumprod": lambda x: x.cumprod(1),
    "softmax": lambda x: x.softmax(2),
    "log_softmax": lambda x: x.log_softmax(0),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_a_permuted_tensor_is_contiguous_as_pytorch(torch, name):
    # fuzz class "contiguous | forward grad_fn: CloneBackward0 vs ViewBackward0": numpy's
    # reductions keep the input's memory order, PyTorch allocates the result contiguous, so
    # .contiguous() cloned (CloneBackward0) where PyTorch returned the tensor itself
    got = []
    for m in (torch, ad):
        x = m.arange(36, dtype=m.float64).reshape(3, 3, 4).permute(2, 1, 0).requires_grad_()
        y = REDUCTIONS[name](x)
        z = y.contiguous()
        got.append((y.stride(), z is y, type(z.grad_fn).__name__, y.detach().numpy().tolist()))
    assert got[1] == got[0]


def test_einsum_then_contiguous_is_the_einsum_result(torch):
    # the fuzzer's repro: einsum sums the labels only one operand has with a keepdim sum
    got = []
    for m in (torch, ad):
        x0 = m.ones(3, 3, 4, dtype=m.float64, requires_grad=True)
        t0 = m.einsum("ijk,kjp->kj", x0, m.ones(1, 1, 1, dtype=m.float64))
        t2 = t0.contiguous()
        got.append((t0.stride(), type(t2.grad_fn).__name__))
    assert got[1] == got[0] == ((3, 1), "ViewBackward0")


def _var_grad2(m, x1, w1, dim, correction):
    x = m.tensor(x1, dtype=m.float32, requires_grad=True)
    v = x.var(dim=dim, correction=correction)
    g = m.ones(v.shape, dtype=m.float32, requires_grad=True)
    (gx,) = m.autograd.grad(v, x, g, create_graph=True)
    (gg,) = m.autograd.grad(gx, g, m.tensor(w1, dtype=m.float32))
    return gg.tolist()


@pytest.mark.parametrize(
    "x1,w1,dim,correction",
    [
        # no degree of freedom left: the factor is inf, the row's terms have both signs
        ([[-4.43, 1.0], [1.0, 1.0], [1.0, 1.0]], [[0.5, 1.0], [1.5, 0.5], [1.0, 1.5]], -1, 2),
        ([[-4.43, 1.0, 2.0], [1.0, 1.0, 3.0]], [[0.5, 1.0, 1.5], [1.5, 0.5, 1.0]], 0, 2),
        ([[1.0, 2.0, 4.0], [3.0, 5.0, 8.0]], [[0.5, 1.0, 1.5], [1.5, 0.5, 1.0]], 1, 1),
    ],
)
def test_var_double_backward_scales_the_summed_terms_as_pytorch(torch, x1, w1, dim, correction):
    # fuzz class "matmul+var | grad2 value: nan vs inf": var's backward expanded the gradient
    # before multiplying by 2 / (n - correction), so the double backward summed inf * terms of
    # both signs (NaN) where PyTorch scales the sum (inf)
    assert str(_var_grad2(ad, x1, w1, dim, correction)) == str(
        _var_grad2(torch, x1, w1, dim, correction)
    )


def test_var_of_an_empty_dim_double_backward_is_nan_as_pytorch(torch):
    # fuzz class "gather+matmul+var | grad2 value: 0 vs nan"
    got = []
    for m in (torch, ad):
        x = m.ones(0, dtype=m.float32, requires_grad=True)
        with np.errstate(all="ignore"), pytest.warns(UserWarning):
            v = x.var(dim=(0,), correction=0, keepdim=True)
        g = m.ones(1, requires_grad=True)
        (gx,) = m.autograd.grad(v, x, g, create_graph=True)
        (gg,) = m.autograd.grad(gx.sum(), g, allow_unused=True)
        got.append(str(gg.tolist()))
    assert got[1] == got[0] == "[nan]"


def _zero_signs(t) -> str:
    a = t.detach().numpy().ravel()
    return "".join(("-" if np.signbit(v) else "+") if v == 0 else "x" for v in a)


TIE_SHAPES = [((n,), ()) for n in (3, 8, 9, 15, 16, 17, 33)] + [
    ((16,), (16,)),
    ((17,), (17,)),
    ((3, 17), (3, 1)),
    ((3, 17), (1, 17)),
    ((2, 3, 8), (1, 3, 8)),
    ((2, 3, 8), (2, 1, 8)),
    ((4, 1, 16), (1, 2, 1)),
    ((2, 16), (2, 1, 1)),
    ((1, 17), (17,)),
]


@pytest.mark.parametrize("shapes", TIE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["maximum", "minimum"])
@pytest.mark.parametrize("swap", [False, True])
def test_maximum_tie_is_pytorchs_vector_body_choice(torch, shapes, dtype, fn, swap):
    # fuzz class "maximum | forward value: -0 vs 0": PyTorch's vectorised loop (16 float32 / 8
    # float64 elements a step) returns the second operand on a tie, its scalar tail the first
    # (NOTE [maximum ties] in autodiag/ops/_vector_ties.py)
    got = []
    for m in (torch, ad):
        a = m.full(shapes[0], -0.0, dtype=getattr(m, dtype))
        b = m.zeros(shapes[1], dtype=getattr(m, dtype))
        if swap:
            a, b = b, a
        got.append(_zero_signs(getattr(m, fn)(a, b)))
    assert got[1] == got[0]


def test_maximum_tie_with_promoted_operands(torch):
    got = []
    for m in (torch, ad):
        a = m.full((17,), -0.0, dtype=m.float32)
        got.append(
            (
                _zero_signs(m.maximum(a, m.zeros(17, dtype=m.float64))),
                _zero_signs(m.maximum(a, m.zeros((), dtype=m.float64))),
            )
        )
    assert got[1] == got[0]
