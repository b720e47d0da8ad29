"""Special values against PyTorch: inf/NaN gradients through masks, signed zeros, empty dims,
degenerate var/std, integer division by zero (issue 17).

Every comparison is NaN-aware and signed-zero-aware: a NaN must be a NaN in both, an inf must
have the same sign, and a zero must carry the same sign bit as PyTorch's. Gradients are compared
at first order and, where PyTorch records the first gradient, at second order, including whether
the first gradient requires grad at all.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")

inf, nan = math.inf, math.nan


# ---------------------------------------------------------------------------------------------
# Comparison helpers
# ---------------------------------------------------------------------------------------------


def _np(t) -> np.ndarray:
    if getattr(t, "_is_zerotensor", lambda: False)():
        return np.zeros(tuple(t.shape))  # torch's efficient zeros have no storage
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def assert_same(a, t, what: str = "value", rtol: float = 1e-6, zero_signs: bool = True) -> None:
    """autodiag's ``a`` equals torch's ``t``: NaNs, infinities and (``zero_signs``) the sign
    bits of zeros included."""
    assert (a is None) == (t is None), f"{what}: autodiag {a!r}, torch {t!r}"
    if t is None:
        return
    x, y = _np(a), _np(t)
    assert x.shape == y.shape, f"{what}: shape {x.shape} != torch {y.shape}"
    np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=f"{what}: NaN positions")
    np.testing.assert_allclose(x, y, rtol=rtol, atol=0, equal_nan=True, err_msg=what)
    if not zero_signs:
        return
    zero = (x == 0) & (y == 0)
    np.testing.assert_array_equal(
        np.signbit(x[zero]),
        np.signbit(y[zero]),
        err_msg=f"{what}: signs of zeros (autodiag {x}, torch {y})",
    )


def _grads(T, fn, data, dtype: str, grad_out: float):
    """value, first gradient (incoming ``grad_out``), whether it requires grad, second gradient."""
    x = T.tensor(data, dtype=getattr(T, dtype), requires_grad=True)
    y = fn(T, x)
    (g,) = T.autograd.grad(y, x, T.full_like(y, grad_out), create_graph=True, allow_unused=True)
    recorded = g is not None and g.requires_grad
    h = None
    if recorded:
        (h,) = T.autograd.grad(g, x, T.full_like(g, grad_out), allow_unused=True)
    return y, g, recorded, h


def check(fn, data, dtype: str = "float64", grad_out: float = 1.0, second: bool = True) -> None:
    """``fn(T, x)`` agrees with torch: value, gradient, recording, second gradient."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ty, tg, trec, th = _grads(torch, fn, data, dtype, grad_out)
        ay, ag, arec, ah = _grads(ad, fn, data, dtype, grad_out)
    where = f"{data} {dtype} grad={grad_out}"
    assert_same(ay, ty, f"value at {where}")
    assert_same(ag, tg, f"gradient at {where}")
    if second:
        assert arec == trec, (
            f"first gradient requires grad: autodiag {arec}, torch {trec} ({where})"
        )
        # the sign of a zero second derivative seeded with a zero gradient depends on the order
        # of products inside the formulas; it is not part of what is compared
        assert_same(ah, th, f"second gradient at {where}", zero_signs=grad_out != 0)


def grad_of(T, fn, data, dtype: str = "float64"):
    x = T.tensor(data, dtype=getattr(T, dtype), requires_grad=True)
    fn(T, x).sum().backward()
    return x.grad


# ---------------------------------------------------------------------------------------------
# The examples of issue 17, one test each
# ---------------------------------------------------------------------------------------------


def test_relu_then_sqrt_gradient_is_zero_not_nan():
    # sqrt'(0) = inf meets relu's zero mask: PyTorch selects, 0 * inf would be NaN
    f = lambda T, x: x.relu().sqrt()  # noqa: E731
    assert_same(grad_of(ad, f, [-1.0, 4.0]), grad_of(torch, f, [-1.0, 4.0]))
    assert _np(grad_of(ad, f, [-1.0, 4.0])).tolist() == [0.0, 0.25]


def test_clamp_min_then_sqrt_gradient_is_zero_not_nan():
    f = lambda T, x: x.clamp(min=0).sqrt()  # noqa: E731
    assert_same(grad_of(ad, f, [-1.0, 4.0]), grad_of(torch, f, [-1.0, 4.0]))


def test_floor_divided_by_zero_gradient_is_zero():
    f = lambda T, x: x.floor() / 0.0  # noqa: E731
    assert_same(grad_of(ad, f, [-1.0, 4.0]), grad_of(torch, f, [-1.0, 4.0]))


def test_max_times_inf_gradient_reaches_only_the_maximum():
    f = lambda T, x: x.max() * inf  # noqa: E731
    assert_same(grad_of(ad, f, [1.0, 3.0, 2.0]), grad_of(torch, f, [1.0, 3.0, 2.0]))
    assert _np(grad_of(ad, f, [1.0, 3.0, 2.0])).tolist() == [0.0, inf, 0.0]


def test_log_then_abs_at_one():
    # abs'(0) = sgn(0) = 0: PyTorch multiplies here (grad * sgn), so an inf gradient gives NaN,
    # while a finite one gives 0; both as PyTorch
    check(lambda T, x: x.log().abs(), [1.0, 2.0])
    check(lambda T, x: x.log().abs(), [1.0, 2.0], grad_out=inf)


@pytest.mark.parametrize("op", ["sum", "mean", "var", "std", "amax", "amin", "norm"])
@pytest.mark.parametrize("dim", [(), []], ids=["tuple", "list"])
def test_reduction_over_empty_dim_list_reduces_everything(op, dim):
    data = [[1.0, 2.0, 3.0], [4.0, 6.0, 9.0]]
    for keepdim in (False, True):
        check(lambda T, x: getattr(x, op)(dim=dim, keepdim=keepdim), data)


def test_sum_of_empty_dim_tuple_is_the_total():
    assert ad.tensor([1.0, 2.0, 3.0]).sum(dim=()).item() == 6.0
    x = ad.tensor([1.0, 2.0], requires_grad=True)
    assert type(x.sum(dim=()).grad_fn).__name__ == "SumBackward1"  # as PyTorch names it


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("correction", [2, 3, 2.5])
def test_var_std_without_degrees_of_freedom(op, correction):
    # torch: sum of squares / max(0, n - correction): inf (NaN for a zero sum), with a warning
    for data in ([1.0, 2.0], [1.0, 1.0], [[1.0, 2.0], [3.0, 3.0]]):
        check(lambda T, x: getattr(x, op)(correction=correction), data)
        check(lambda T, x: getattr(x, op)(dim=-1, correction=correction), data)
        check(lambda T, x: getattr(x, op)(dim=-1, correction=correction, keepdim=True), data)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        getattr(ad.tensor([1.0, 2.0]), op)(correction=2)


def test_var_of_two_with_correction_two_is_inf():
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert ad.tensor([1.0, 2.0]).var(correction=2).item() == inf


def test_std_of_one_element_biased_gradient_is_zero():
    f = lambda T, x: x.std(unbiased=False)  # noqa: E731
    assert_same(grad_of(ad, f, [2.0]), grad_of(torch, f, [2.0]))
    check(f, [2.0])
    check(lambda T, x: x.std(dim=0, unbiased=False), [[2.0, 3.0]])


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std_of_integers_and_bools_are_refused(op):
    # autodiag computed them (var of tensor([1, 2, 3]) was the int64 tensor(1))
    for data in ([1, 2, 3], [True, False]):
        errors = []
        for T in (ad, torch):
            with pytest.raises(RuntimeError) as e:
                getattr(T.tensor(data), op)(0)
            errors.append(str(e.value))
        assert errors[0] == errors[1]


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("shape, dim", [((0,), None), ((2, 0), 1), ((0, 3), 0)])
def test_var_std_backward_of_empty_input_raises_no_numpy_warning(op, shape, dim):
    x = ad.zeros(shape, requires_grad=True)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        y = getattr(x, op)() if dim is None else getattr(x, op)(dim)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" leaked from backward
        y.sum().backward()
    assert x.grad.shape == shape and x.grad.dtype == ad.float32


@pytest.mark.parametrize("dim, correction", [(1, 0), (0, 0), (1, -1), ((0, 1), 0), (1, 1)])
def test_var_of_empty_input_warns_as_pytorch(dim, correction):
    # PyTorch's n is input numel / output numel: 0 for an empty input, whatever the reduced dims
    warned = []
    for T in (ad, torch):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            T.var(T.zeros(0, 3), dim=dim, correction=correction)
        warned.append(any("degrees of freedom" in str(x.message) for x in w))
    assert warned[0] == warned[1]


def test_var_std_of_float32_beyond_float32_squares():
    # PyTorch accumulates float32 var in float64: (2e19)^2 overflows float32, the variance not
    check(lambda T, x: x.var(), [3e19, 1.5, -0.5], "float32")
    check(lambda T, x: x.std(unbiased=False), [3e19, 1.5, -0.5], "float32")


_INT_DIVISIONS = {
    "floordiv": lambda T, a, b: a // b,
    "mod": lambda T, a, b: a % b,
    "floor_divide": lambda T, a, b: T.floor_divide(a, b),
    "remainder": lambda T, a, b: T.remainder(a, b),
    "div_floor": lambda T, a, b: T.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda T, a, b: T.div(a, b, rounding_mode="trunc"),
}


@pytest.mark.parametrize("op", sorted(_INT_DIVISIONS))
@pytest.mark.parametrize("divisor", ["tensor", "int", "uint8"])
def test_integer_division_by_zero_raises(op, divisor):
    fn = _INT_DIVISIONS[op]
    for T in (torch, ad):
        if divisor == "uint8":
            a, b = T.tensor([5, 3], dtype=T.uint8), T.tensor([0, 1], dtype=T.uint8)
        else:
            a = T.tensor([5, -3])
            b = T.tensor([1, 0]) if divisor == "tensor" else 0
        with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
            fn(T, a, b)


@pytest.mark.parametrize("op", sorted(_INT_DIVISIONS))
def test_integer_division_values(op):
    fn = _INT_DIVISIONS[op]
    a, b = [7, -7, 7, -7, 0, 9], [2, 2, -2, -2, 3, -3]
    out_t = fn(torch, torch.tensor(a), torch.tensor(b))
    out_a = fn(ad, ad.tensor(a), ad.tensor(b))
    assert out_a.tolist() == out_t.tolist()
    assert str(out_a.dtype).split(".")[-1] == str(out_t.dtype).split(".")[-1]


def test_float_division_by_zero_still_ieee():
    for fn in (
        lambda T: T.tensor([5, -3, 0]) // 0.0,
        lambda T: T.tensor([5, -3, 0]) / 0,
        lambda T: T.remainder(T.tensor([1.0, -1.0]), 0.0),
    ):
        assert_same(fn(ad), fn(torch))


def test_sign_of_nan_is_zero():
    assert_same(
        ad.tensor([nan, -0.0, 0.0, -2.0]).sign(), torch.tensor([nan, -0.0, 0.0, -2.0]).sign()
    )
    check(lambda T, x: x.sign() * x, [nan, 1.0, -2.0])


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_a_row_holding_inf_is_nan(op):
    for data in ([1.0, inf, 2.0], [-inf, -inf], [-inf, 1.0], [[1.0, inf], [0.0, 1.0]]):
        for dtype in ("float64", "float32"):
            check(lambda T, x: getattr(x, op)(-1), data, dtype)


def test_gelu_at_infinities():
    # issue 17 reported gelu(inf) as NaN in PyTorch; PyTorch 2.13's own kernel gives inf (and
    # NaN at -inf). Its float32 exact gelu goes to oneDNN when oneDNN is enabled, whose AVX-512
    # code gives NaN at +inf (its AVX2 code inf): compared with ATen's kernel, the same on
    # every CPU (README "Where autodiag differs")
    for approximate in ("none", "tanh"):
        for dtype in ("float64", "float32"):
            with warnings.catch_warnings(), torch.backends.mkldnn.flags(enabled=False):
                warnings.simplefilter("ignore")  # its flags() warn of TF32 on Intel GPUs
                want = torch.nn.functional.gelu(
                    torch.tensor([inf, -inf, nan], dtype=getattr(torch, dtype)),
                    approximate=approximate,
                )
            got = ad.nn.functional.gelu(
                ad.tensor([inf, -inf, nan], dtype=getattr(ad, dtype)), approximate=approximate
            )
            assert_same(got, want)
            assert got[0].item() == inf


def test_one_over_relu_of_negative_zero_is_negative_inf():
    assert_same(1 / ad.tensor([-0.0]).relu(), 1 / torch.tensor([-0.0]).relu())
    assert (1 / ad.tensor([-0.0]).relu()).item() == -inf


_SIGNED_ZERO_OPS = {
    "relu": lambda T, x: x.relu(),
    "relu_": lambda T, x: x.clone().relu_(),
    "clamp_min": lambda T, x: x.clamp(min=0.0),
    "clamp_max": lambda T, x: x.clamp(max=0.0),
    "clamp_both": lambda T, x: x.clamp(-0.0, 0.0),
    "clamp_min_fn": lambda T, x: T.clamp_min(x, 0.0),
    "clamp_tensor": lambda T, x: x.clamp(min=T.zeros_like(x), max=T.zeros_like(x)),
    "maximum": lambda T, x: T.maximum(x, T.zeros_like(x)),
    "maximum_swapped": lambda T, x: T.maximum(T.zeros_like(x), x),
    "minimum": lambda T, x: T.minimum(x, T.zeros_like(x)),
    "minimum_swapped": lambda T, x: T.minimum(T.zeros_like(x), x),
    "remainder": lambda T, x: T.remainder(x, 1.0),
    "remainder_negative": lambda T, x: T.remainder(x, -1.0),
    "remainder_tensor": lambda T, x: T.remainder(x, T.ones_like(x)),
    "div_floor": lambda T, x: T.div(x, 2.0, rounding_mode="floor"),
    "div_trunc": lambda T, x: T.div(x, 2.0, rounding_mode="trunc"),
    "sign": lambda T, x: x.sign(),
    "floor": lambda T, x: x.floor(),
    "round": lambda T, x: x.round(),
}


@pytest.mark.parametrize("op", sorted(_SIGNED_ZERO_OPS))
def test_signed_zeros(op):
    fn = _SIGNED_ZERO_OPS[op]
    for data in ([-0.0, 0.0, -0.0], [0.0, -0.0, 0.0], [-0.4, -1e-300, 0.3]):
        for dtype in ("float64", "float32"):
            assert_same(
                fn(ad, ad.tensor(data, dtype=getattr(ad, dtype))),
                fn(torch, torch.tensor(data, dtype=getattr(torch, dtype))),
                f"{op}{data} {dtype}",
            )


@pytest.mark.parametrize("p", [3, 2, 1, 0.5, inf, -inf, 1.5, -2])
def test_norm_of_one_large_float32_element(p):
    # torch's norm over a single element is |x|: no power that could overflow
    # (second derivatives of |x| at 3e19 are rounding noise around 0 in both: not compared)
    check(lambda T, x: x.norm(p=p), [3e19], "float32", second=False)
    check(lambda T, x: x.norm(p=p, dim=1), [[3e19], [1.0]], "float32", second=False)


def test_norm_p3_of_float32_3e19():
    assert ad.tensor([3e19]).norm(p=3).item() == pytest.approx(3e19, rel=1e-6)


@pytest.mark.parametrize("p", [3, 2, 0.5])
def test_norm_overflow_matches_torch(p):
    # more than one element: PyTorch does not rescale, so these overflow or underflow as in torch
    for data in ([3e19, 3e19], [1e-30, 1e-30]):
        assert_same(ad.tensor(data).norm(p=p), torch.tensor(data).norm(p=p), f"{data} p={p}")


def test_norm_p0_has_no_gradient():
    for T in (torch, ad):
        x = T.tensor([1.0, 0.0, 2.0], requires_grad=True)
        (g,) = T.autograd.grad(x.norm(p=0), x, allow_unused=True)
        assert g is None


def test_remainder_second_derivative_at_negative_zero():
    check(lambda T, x: T.remainder(x, x), [-0.0, 1.0])


def test_remainder_divisor_gradient_uses_floor_division():
    # torch's floor division of 1 by 0.1 is 9 (as Python's //), not floor(1 / 0.1) = 10
    check(lambda T, x: T.remainder(T.ones_like(x), x), [0.1, -0.1, 3.0])
    assert_same(
        ad.div(ad.tensor([1.0, inf, -0.0]), 0.1, rounding_mode="floor"),
        torch.div(torch.tensor([1.0, inf, -0.0]), 0.1, rounding_mode="floor"),
    )


@pytest.mark.parametrize("op", ["relu", "relu_", "leaky_relu"])
def test_first_gradient_of_relu_is_recorded(op):
    # PyTorch records threshold_backward / leaky_relu_backward with an edge to the tensor the
    # mask is read from, so the first gradient requires grad and its own gradient is zeros
    fns = {
        "relu": lambda T, x: T.relu(x),
        "relu_": lambda T, x: (x * 1).relu_(),
        "leaky_relu": lambda T, x: T.nn.functional.leaky_relu(x, 0.1),
    }
    x = ad.tensor([-1.0, 2.0], requires_grad=True)
    (g,) = ad.autograd.grad(fns[op](ad, x).sum(), x, create_graph=True)
    assert g.requires_grad
    (h,) = ad.autograd.grad(g.sum(), x)
    assert h.tolist() == [0.0, 0.0]
    tx = torch.tensor([-1.0, 2.0], requires_grad=True)
    (tg,) = torch.autograd.grad(fns[op](torch, tx).sum(), tx, create_graph=True)
    assert type(g.grad_fn).__name__ == type(tg.grad_fn).__name__
    check(fns[op], [-1.0, -0.0, 0.0, 2.0, nan])


def test_clamp_with_tensor_bounds_ties_and_graph():
    # at x == min the gradient goes to x (as torch's clamp_backward), not half to each
    def grads(T):
        x = T.tensor([0.0, 1.0, 3.0, 2.0], requires_grad=True)
        lo = T.tensor([0.0, 2.0, 2.0, 3.0], requires_grad=True)
        hi = T.tensor([1.0, 2.5, 2.5, 1.0], requires_grad=True)
        y = x.clamp(lo, hi)
        return y, type(y.grad_fn).__name__, T.autograd.grad(y.sum(), (x, lo, hi))

    (ty, tname, tg), (ay, aname, ag) = grads(torch), grads(ad)
    assert aname == tname == "ClampBackward0"
    assert_same(ay, ty)
    for a, t in zip(ag, tg):
        assert_same(a, t, "clamp gradient")
    for bound in ("min", "max"):
        x = ad.tensor([1.0, 2.0], requires_grad=True)
        y = x.clamp(**{bound: ad.zeros(2)})
        assert len(y.grad_fn.next_functions) == 3  # (self, min, max), as in PyTorch


# ---------------------------------------------------------------------------------------------
# Every masked backward formula, with inf and NaN incoming gradients
# ---------------------------------------------------------------------------------------------

MASKED = {
    "relu": lambda T, x: x.relu(),
    "relu_": lambda T, x: (x * 1).relu_(),
    "leaky_relu": lambda T, x: T.nn.functional.leaky_relu(x),
    "clamp_min": lambda T, x: x.clamp(min=0.0),
    "clamp_max": lambda T, x: x.clamp(max=1.0),
    "clamp_both": lambda T, x: x.clamp(-1.0, 1.0),
    "clamp_": lambda T, x: (x * 1).clamp_(min=0.0),
    "clamp_min_fn": lambda T, x: T.clamp_min(x, 0.0),
    "clamp_max_fn": lambda T, x: T.clamp_max(x, 0.0),
    "clamp_tensor_min": lambda T, x: x.clamp(min=T.zeros_like(x)),
    "clamp_tensor_max": lambda T, x: x.clamp(max=T.ones_like(x)),
    "clamp_tensor_both": lambda T, x: x.clamp(T.zeros_like(x) - 1, T.ones_like(x)),
    "floor": lambda T, x: x.floor(),
    "ceil": lambda T, x: x.ceil(),
    "round": lambda T, x: x.round(),
    "round_decimals": lambda T, x: x.round(decimals=2),
    "trunc": lambda T, x: x.trunc(),
    "sign": lambda T, x: x.sign(),
    "abs": lambda T, x: x.abs(),
    "max": lambda T, x: x.max(),
    "min": lambda T, x: x.min(),
    "amax": lambda T, x: x.amax(),
    "amin": lambda T, x: x.amin(0),
    "max_dim": lambda T, x: x.max(0)[0],
    "min_dim": lambda T, x: x.min(0, keepdim=True)[0],
    "maximum": lambda T, x: T.maximum(x, T.ones_like(x)),
    "minimum": lambda T, x: T.minimum(x, T.ones_like(x)),
    "where": lambda T, x: T.where(x > 0, x, T.zeros_like(x)),
    "where_other": lambda T, x: T.where(x > 0, T.zeros_like(x), x),
    "masked_fill": lambda T, x: x.masked_fill(x > 0, 0.0),
    "masked_fill_tensor": lambda T, x: x.masked_fill(x > 0, T.tensor(0.0, dtype=x.dtype)),
    "setitem": lambda T, x: _setitem(x),
    "zero_": lambda T, x: (x * 1).zero_(),
    "fill_": lambda T, x: (x * 1).fill_(2.0),
    "copy_": lambda T, x: (x * 1).copy_(T.ones_like(x)),
    "div_floor": lambda T, x: T.div(x, 2.0, rounding_mode="floor"),
    "div_trunc_tensor": lambda T, x: T.div(x, T.ones_like(x) * 2, rounding_mode="trunc"),
    "pow_0": lambda T, x: x**0,
    "pow_tensor_0": lambda T, x: x ** T.zeros_like(x),
    "rpow_0": lambda T, x: 0**x,
    "norm_1": lambda T, x: x.norm(p=1),
    "norm_2": lambda T, x: x.norm(),
    "norm_3": lambda T, x: x.norm(p=3),
    "norm_1.5": lambda T, x: x.norm(p=1.5),
    "norm_0.5": lambda T, x: x.norm(p=0.5),
    "norm_inf": lambda T, x: x.norm(p=inf),
    "norm_-inf": lambda T, x: x.norm(p=-inf),
    "norm_0": lambda T, x: x.norm(p=0),
    "var": lambda T, x: x.var(),
    "std": lambda T, x: x.std(),
    "std_biased": lambda T, x: x.std(unbiased=False),
    "remainder_self": lambda T, x: T.remainder(x, x),
    "remainder_scalar": lambda T, x: T.remainder(x, 2.0),
}


def _setitem(x):
    y = x * 1
    y[0] = 5.0
    return y


@pytest.mark.parametrize("op", sorted(MASKED))
def test_masked_backward_with_special_gradients(op):
    fn = MASKED[op]
    for v in (0.0, -0.0, 1.0, -1.0, inf, -inf, nan):
        for dtype in ("float64", "float32"):
            for grad_out in (1.0, inf, -inf, nan, 0.0):
                check(fn, [v, 1.5, -0.5], dtype, grad_out)


# ---------------------------------------------------------------------------------------------
# Products with zeros, infinities and overflow: prod's and cumprod's first and second
# derivatives (NOTE [Products with zeros] in autodiag/ops/reduction.py)
# ---------------------------------------------------------------------------------------------

PRODUCT_DATA = [
    [2.0, 3.0, -1.5],  # no zero: grad * (result / x)
    [2.0, 0.0, 3.0],  # one zero
    [0.0, 2.0, 0.0],  # two zeros
    [0.0, 0.0, 0.0],
    [inf, 2.0, 3.0],  # inf / inf = nan in result / x, as in PyTorch
    [-inf, 0.0, 3.0],  # inf and a zero: the exclusive products meet inf * 0
    [0.0, inf, 0.0],
    [nan, 0.0, 2.0],
    [1e300, -1e300, 0.5],  # the product overflows (float64), and in float32 every input does
    [3e38, 2.0, 1e-45],  # float32: cumprod accumulates in float64 as PyTorch's kernel does
    [[1.0, 1.0], [-inf, 1.0], [1.0, 0.0]],
    [[0.0, 2.0, 0.0, 1.0], [3.0, 0.0, inf, 2.0]],
]

PRODUCTS = {
    "prod": lambda T, x: x.prod(),
    "prod_dim0": lambda T, x: x.prod(0),
    "prod_dim-1_keepdim": lambda T, x: x.prod(-1, keepdim=True),
    "cumprod_dim0": lambda T, x: x.cumprod(0),
    "cumprod_dim-1": lambda T, x: x.cumprod(-1),
}


@pytest.mark.parametrize("op", sorted(PRODUCTS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_products_through_zeros_and_infinities(op, dtype):
    for data in PRODUCT_DATA:
        for grad_out in (1.0, -2.0):
            check(PRODUCTS[op], data, dtype, grad_out)


def test_prod_second_derivative_through_a_zero_is_finite():
    # the fuzzer's `prod | grad2 value: finite vs nan`: prod(dim=0) of a column with -inf and
    # a column with a zero; PyTorch's second derivative goes through cumprod's backward
    check(lambda T, x: x.prod(dim=0), [[1.0, 1.0], [-inf, 1.0], [1.0, 0.0]], "float32", 0.5)
    check(lambda T, x: x.prod(dim=0), [1.0, -1e300, 1.0, 1e300])


def test_first_order_prod_with_two_zeros_is_zero_even_beside_inf():
    # without create_graph PyTorch returns zeros_like(input) for a full product with two zeros
    for T in (ad, torch):
        x = T.tensor([0.0, inf, 0.0], requires_grad=True)
        x.prod().backward()
        assert _np(x.grad).tolist() == [0.0, 0.0, 0.0]


def test_reciprocal_gradient_squares_the_result_first():
    # the fuzzer's `div.rscalar | grad value: inf vs nan`: -inf / x is reciprocal(x) * -inf, and
    # reciprocal's backward is -grad * (result * result): 1e-30 ** 2 underflows in float32
    check(lambda T, x: -inf / x, [1e30, 2.0], "float32", 0.5)
    check(lambda T, x: x.reciprocal(), [1e30, -3e38, 2.0], "float32", inf)
    check(lambda T, x: -1.0 / x, [-3e38, 1e-30], "float32", 1.0)


def _layer_norm_grad(T, x, w, shape, eps, dtype, grad_out=0.5):
    x = T.tensor(x, dtype=getattr(T, dtype), requires_grad=True)
    w = T.tensor(w, dtype=getattr(T, dtype))
    y = T.nn.functional.layer_norm(x, shape, w, T.ones_like(w), eps=eps)
    (g,) = T.autograd.grad(y, x, T.full_like(y, grad_out), create_graph=True)
    (g0,) = T.autograd.grad(
        T.nn.functional.layer_norm(x, shape, w, T.ones_like(w), eps=eps),
        x,
        T.full_like(y, grad_out),
    )
    return g, g0


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_layer_norm_gradient_with_an_infinite_weight_is_nan_everywhere(dtype):
    # the fuzzer's `layer_norm | grad value: inf vs nan`: PyTorch's kernel forms the gradient as
    # a * dy + b * x + c and the inf weight reaches every element through b
    for x, w in (
        ([[[4.14, 1.0, 1.0]]], [1.0, -inf, 1.0]),
        ([[1.0, 1.0], [1.0, 0.0], [2.0, 3.0]], [[1.0, 1.0], [inf, 1.0], [1.0, 1.0]]),
    ):
        shape = tuple(np.shape(w))
        for a, t in zip(
            _layer_norm_grad(ad, x, w, shape, 1e-5, dtype),
            _layer_norm_grad(torch, x, w, shape, 1e-5, dtype),
        ):
            assert_same(a, t, f"layer_norm gradient at {x}, weight {w}", zero_signs=False)


def test_layer_norm_gradient_over_an_empty_normalized_shape():
    # 1 / N with N = 0 is inf in PyTorch's kernel, never a ZeroDivisionError; the gradient is empty
    for T in (ad, torch):
        x = T.zeros(2, 0, requires_grad=True)
        y = T.nn.functional.layer_norm(x, (0,))
        (g,) = T.autograd.grad(y, x, T.ones_like(y), create_graph=True)
        assert tuple(g.shape) == (2, 0)


def _layer_norm_second(T, x, w, eps):
    x = T.tensor(x, dtype=T.float32, requires_grad=True)
    w = T.tensor(w, dtype=T.float32, requires_grad=True)
    y = T.nn.functional.layer_norm(x, tuple(w.shape), w, T.ones_like(w), eps=eps)

    def ramp(t):  # distinct weights: constant ones make the second derivative cancel to ~0
        return (T.arange(t.numel(), dtype=t.dtype).reshape(t.shape) + 1.0) * 0.5

    gx, gw = T.autograd.grad(y, (x, w), ramp(y), create_graph=True)
    return (gx, gw) + T.autograd.grad((gx, gw), (x, w), (ramp(gx), ramp(gw) * -1.0))


def test_layer_norm_second_derivative_is_pytorch_double_backward():
    # the gradient's values are the kernel's, its derivative PyTorch's double backward: the
    # fuzzer's `layer_norm+min | grad2 value: nan vs finite` and `layer_norm | grad2 value:
    # different finite values` (a two-element row, where the gradient is all cancellation)
    for x, w, eps in (
        ([2.0, 1.02, 0.5, -1.0], [1.2, 1.71, 0.5, 2.0], 1e-5),
        ([[1.0, 4.0, -2.0]], [[1.5, -0.5, 2.0]], 1e-5),
    ):
        for k, (a, t) in enumerate(
            zip(_layer_norm_second(ad, x, w, eps), _layer_norm_second(torch, x, w, eps))
        ):
            assert_same(
                a, t, f"layer_norm derivative {k} at {x}, weight {w}", rtol=1e-4, zero_signs=False
            )


# ---------------------------------------------------------------------------------------------
# abs and norm through sgn: the double-backward graph, and PyTorch's efficient zero tensor
# ---------------------------------------------------------------------------------------------


def _graph_names(fn) -> list[str]:
    """Node names of ``fn``'s iterative walk (depth first, in next_functions order)."""
    names, stack = [], [(fn, 0)]
    while stack:
        node, depth = stack.pop()
        if node is None:
            continue
        names.append("  " * depth + node.name().replace("torch::autograd::", ""))
        stack.extend((f, depth + 1) for f, _ in reversed(node.next_functions))
    return names


_SGN_OPS = {
    "abs": lambda T, x: x.abs(),
    "abs_fn": lambda T, x: T.abs(x),
    "norm_p1": lambda T, x: x.norm(p=1),
    "norm_pinf": lambda T, x: x.norm(p=inf),
    "norm_pminus_inf": lambda T, x: x.norm(p=-inf),
}


@pytest.mark.parametrize("op", sorted(_SGN_OPS))
def test_abs_and_norm_first_gradient_records_sgn(op):
    # PyTorch's abs backward is grad * self.sgn() and norm_backward uses self.sgn() too: sgn is
    # recorded (SgnBackward0, not SignBackward0), with the products in PyTorch's order
    graphs = []
    for T in (ad, torch):
        x = T.tensor([1.0, 0.5, -2.0], dtype=T.float64, requires_grad=True)
        (g,) = T.autograd.grad(_SGN_OPS[op](T, x).sum(), x, create_graph=True)
        graphs.append(_graph_names(g.grad_fn))
    assert graphs[0] == graphs[1]


def test_sgn_of_real_tensors_is_sign_with_a_zero_gradient():
    for data, dtype in (
        ([nan, -0.0, 0.0, -3.0, inf], "float64"),
        ([-3, 0, 2], "int64"),
        ([True, False], "bool"),
    ):
        for method in (False, True):
            a, t = (
                ad.tensor(data, dtype=getattr(ad, dtype)),
                torch.tensor(data, dtype=getattr(torch, dtype)),
            )
            ra, rt = (a.sgn(), t.sgn()) if method else (ad.sgn(a), torch.sgn(t))
            assert str(ra.dtype).split(".")[-1] == str(rt.dtype).split(".")[-1]
            assert_same(ra, rt, f"sgn{data}")
    check(lambda T, x: x.sgn() * 3.0, [nan, -0.0, 2.0])
    for T in (ad, torch):
        x = T.tensor([1.0, -2.0], requires_grad=True)
        assert x.clone().sgn_().grad_fn.name() == "SgnBackward0"


# PyTorch's SgnBackward0 (for a real input) returns ``_efficientzerotensor``: a zero tensor
# without storage that stays zero through the mul/div/expand of later backward formulas
# (ZeroTensor * inf and ZeroTensor / 0 are ZeroTensor) and only becomes an ordinary zero where
# it is added or passes another op. autodiag's is core/zeros.py's ZeroArray (NOTE [Efficient
# zero gradients]).


@pytest.mark.parametrize("op", ["abs", "norm_p1", "norm_pinf"])
def test_second_derivative_through_sgn_after_division_by_zero(op):
    fn = _SGN_OPS[op]
    check(lambda T, x: fn(T, x / 0.0) + x * x, [1.0, 0.0, -2.0])


def test_second_derivative_through_sgn_after_product_with_inf():
    check(lambda T, x: (x * T.tensor([inf, 1.0, 2.0], dtype=x.dtype)).abs(), [1.0, 0.5, -2.0])
