"""Review of session 16's ops and verdicts against PyTorch 2.13: cases the helpers' tests did not
try (out-of-range flat indices, ...)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag

torch = pytest.importorskip("torch")


def _outcome(mod, fn):
    """The values (as numpy arrays) or the exception type and message ``fn(mod)`` gives."""
    try:
        out = fn(mod)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return type(e).__name__, str(e)
    outs = out if isinstance(out, tuple) else (out,)
    return [(np.asarray(o.numpy()), str(o.dtype).rsplit(".", 1)[-1]) for o in outs]


def _same(fn):
    want, got = _outcome(torch, fn), _outcome(autodiag, fn)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and got[0] == want[0], (want, got)
        return
    assert not isinstance(got, tuple), (want, got)
    assert len(got) == len(want), (want, got)
    for (w, wd), (g, gd) in zip(want, got):
        assert gd == wd and g.shape == w.shape and (g == w).all(), (want, got)


@pytest.mark.parametrize(
    "fn",
    [
        # PyTorch divides by the strides and takes each size's modulo: no range check
        lambda T: T.unravel_index(T.tensor(8), (2, 4)),
        lambda T: T.unravel_index(T.tensor([[23, -24, 24, 50, -25, -1]]), (2, 3, 4)),
        lambda T: T.unravel_index(T.tensor([1, 2]), ()),
        lambda T: T.unravel_index(T.tensor([1, 5], dtype=T.uint8), [2, 3]),
        lambda T: T.unravel_index(T.tensor([], dtype=T.int64), (2, 0)),
        lambda T: T.unravel_index(T.tensor(1), (2, 0)),  # RuntimeError: ZeroDivisionError
        lambda T: T.unravel_index(T.tensor(1), (2, -4)),  # ValueError
        lambda T: T.unravel_index(T.tensor(1), 2.0),  # TypeError
        lambda T: T.unravel_index([1, 2], (2, 3)),  # no tensor: refused
    ],
)
def test_unravel_index_as_pytorch(fn):
    _same(fn)


def _raised(mod, fn):
    """What ``fn(mod)`` gives: the exception's type name and message, or the result's shape;
    with the warnings it gave (message, file)."""
    import warnings

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r = tuple(fn(mod).shape)
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            r = (type(e).__name__, str(e))
    return r, [(str(x.message), x.filename) for x in w]


@pytest.mark.parametrize(
    "fn",
    [
        # theta's batch is not the size's (was numpy's ValueError "cannot reshape array")
        lambda T: T.nn.functional.affine_grid(T.zeros(2, 2, 3), [3, 3, 4, 5], align_corners=False),
        lambda T: T.nn.functional.affine_grid(T.zeros(1, 2, 3), [3, 3, 4, 5], align_corners=False),
        lambda T: T.affine_grid_generator(T.zeros(2, 2, 3), [3, 3, 4, 5], False),
        # theta not N x 2 x 3 (2 x 4 was accepted: a grid of the wrong columns)
        lambda T: T.affine_grid_generator(T.zeros(2, 2, 4), [2, 3, 4, 5], False),
        lambda T: T.affine_grid_generator(T.zeros(2, 3, 3), [2, 3, 4, 5], False),
        lambda T: T.affine_grid_generator(T.zeros(2, 3), [2, 3, 4, 5], False),
        lambda T: T.affine_grid_generator(T.zeros(3), [2, 3, 4, 5], False),
        lambda T: T.affine_grid_generator(T.zeros(2, 2, 3, 1), [2, 3, 4, 5], False),
        # an empty batch or no channels is refused, as an empty spatial size is
        lambda T: T.nn.functional.affine_grid(T.zeros(0, 2, 3), [0, 3, 4, 5], align_corners=False),
        lambda T: T.nn.functional.affine_grid(
            T.zeros(1, 2, 3), T.Size([1, 0, 4, 5]), align_corners=False
        ),
        # ... except with align_corners and a unit-size grid, which warns instead
        lambda T: T.nn.functional.affine_grid(T.zeros(1, 2, 3), [1, 1, 1, 5], align_corners=True),
        lambda T: T.nn.functional.affine_grid(T.zeros(0, 2, 3), [0, 3, 4, 1], align_corners=True),
    ],
)
def test_affine_grid_errors_and_warnings_as_pytorch(fn):
    assert _raised(autodiag, fn) == _raised(torch, fn)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_ldexp_gradient_with_an_integer_exponent_is_pytorchs(dtype, create_graph):
    # PyTorch's formula: grad * pow(2, other), an integer pow for an integer exponent: 0 where
    # the exponent is negative or past the dtype's bits (autodiag gave 2 ** other in float)
    exps = [1, 0, 255, 9, 8, 7, 3, 2] if dtype == "uint8" else [1, 0, -1, 70, 62, 63, 31, 7]
    got = []
    for T in (torch, autodiag):
        a = T.tensor([1.5, -2.0, 3.0, 1.0, 2.0, 1.0, 1.0, 1.0], requires_grad=True)
        out = T.ldexp(a, T.tensor(exps, dtype=getattr(T, dtype)))
        (g,) = T.autograd.grad(out.sum(), a, create_graph=create_graph)
        got.append((out.detach().numpy(), g.detach().numpy()))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_array_equal(got[1][1], got[0][1])


def test_ldexp_of_a_float_by_a_bool_exponent_is_refused_as_pytorch():
    fn = lambda T: T.ldexp(T.tensor([1.5]), T.tensor([True]))  # noqa: E731
    assert _raised(autodiag, fn) == _raised(torch, fn)
    fn = lambda T: T.ldexp(T.tensor([3]), T.tensor([True]))  # noqa: E731 - an int base: 6.
    assert _raised(autodiag, fn) == _raised(torch, fn)


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "lower", "midpoint", "nearest"])
@pytest.mark.parametrize("case", ["dim", "flat", "keepdim", "q only", "0-d q"])
def test_quantile_gradient_to_a_q_tensor_as_pytorch(name, interpolation, case):
    # linear interpolation's weights are ranks - ranks_below with ranks = q * (n - 1):
    # PyTorch's graph reaches q (its gradient was dropped: q.grad None, no graph when only q
    # required grad); the other interpolations reach no q, as in PyTorch
    nan = float("nan")
    data = [[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, nan, 10.0], [nan, nan, nan, nan], [5.0, 1, 2, 0]]
    qs = 0.3 if case == "0-d q" else [0.0, 0.1, 0.5, 0.9, 1.0]
    kwargs = {"interpolation": interpolation}
    if case in ("dim", "q only"):
        kwargs["dim"] = -1
    elif case == "keepdim":
        kwargs.update(dim=0, keepdim=True)
    got = []
    for T in (torch, autodiag):
        x = T.tensor(data, requires_grad=case != "q only")
        q = T.tensor(qs, requires_grad=True)
        out = getattr(T, name)(x, q, **kwargs)
        if not out.requires_grad:
            got.append((out.numpy(), None, None))
            continue
        w = T.arange(out.numel(), dtype=T.float32).reshape(out.shape)
        (out * w).sum().backward()
        got.append(
            (
                out.detach().numpy(),
                None if x.grad is None else x.grad.numpy(),
                None if q.grad is None else q.grad.numpy(),
            )
        )
    for want, have in zip(got[0], got[1]):
        assert (want is None) == (have is None), got
        if want is not None:
            np.testing.assert_allclose(have, want, rtol=1e-6, equal_nan=True)


def _grads(T, fn, *datas):
    """``fn``'s output and the gradients of its float leaves (or the exception backward
    raised: its type name and message)."""
    leaves = [T.tensor(d, requires_grad=True) for d in datas]
    out = fn(T, *leaves)
    w = T.arange(out.numel(), dtype=out.dtype).reshape(out.shape) + 1
    try:
        (out * w).sum().backward()
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return out.detach().numpy(), (type(e).__name__, str(e))
    return out.detach().numpy(), [x.grad.numpy() for x in leaves]


def _same_grads(fn, *datas):
    want, got = _grads(torch, fn, *datas), _grads(autodiag, fn, *datas)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    if isinstance(want[1], tuple):
        assert got[1] == want[1]
    else:
        assert not isinstance(got[1], tuple), got
        for w, g in zip(want[1], got[1]):
            np.testing.assert_array_equal(g, w)


NAN = float("nan")


@pytest.mark.parametrize(
    "fn, datas",
    [
        # the gradient to self is masked where self == other (the output is other there)
        (
            lambda T, a, b: T.nextafter(a, b),
            ([0.5, -1.2, 3.0, 2.0, NAN, 1.0, 0.0, -0.0], [1.0, -2, 3, 1, 1, NAN, -0.0, 0.0]),
        ),
        (lambda T, a, b: T.nextafter(a, b), ([[3.0, 1.0]], [[3.0], [1.0]])),
        (lambda T, a: a.nextafter(T.tensor([3.0, 2.0])), ([3.0, 1.0],)),
    ],
)
def test_nextafter_gradient_as_pytorch(fn, datas):
    _same_grads(fn, *datas)


def test_bincount_with_weights_that_require_grad_has_no_derivative_as_pytorch():
    # its weights' gradient was dropped: a loss adding another term backpropagated without it
    def fn(T, w):
        return T.bincount(T.tensor([0, 1, 1, 3]), w).sum() + (w * w).sum()

    _same_grads(fn, [0.5, 1.0, 2.0, 3.0])
    for T in (torch, autodiag):
        out = T.bincount(T.tensor([0, 1]), T.tensor([1.0, 2.0], requires_grad=True))
        assert out.grad_fn.name() == "torch::autograd::NotImplemented"
        assert len(out.grad_fn.next_functions) == 1
        with T.no_grad():
            assert not T.bincount(T.tensor([0]), T.tensor([1.0], requires_grad=True)).requires_grad


@pytest.mark.parametrize(
    "fn",
    [
        lambda T, x: T.unique(x),
        lambda T, x: T.unique(x, dim=0),
        lambda T, x: T.unique_consecutive(x),
        lambda T, x: T.autograd.grad(T.cdist(x, x + 1, p=3).sum(), x, create_graph=True)[0],
    ],
)
def test_derivatives_not_implemented_raise_pytorchs_not_implemented_error(fn):
    # NotImplementedError (a RuntimeError), not a plain RuntimeError: ``except
    # NotImplementedError`` catches PyTorch's
    _same_grads(fn, [[2.0, 1.0], [2.0, 1.0], [0.5, 3.0]])


@pytest.mark.parametrize("op", ["cumsum_", "cumprod_"])
@pytest.mark.parametrize(
    "dtype, to",
    [("float32", "float64"), ("int64", "float32"), ("int32", "int64"), ("uint8", "bool")],
)
def test_cumulative_in_place_with_another_dtype_is_refused_as_pytorch(op, dtype, to):
    # it was accepted (and computed in the tensor's dtype)
    def fn(T):
        return getattr(T.ones(3, dtype=getattr(T, dtype)), op)(0, dtype=getattr(T, to))

    assert _raised(autodiag, fn) == _raised(torch, fn)
    same = lambda T: getattr(T.ones(3), op)(0, dtype=T.float32)  # noqa: E731
    assert _raised(autodiag, same) == _raised(torch, same)


def _empty(T, dim):
    return T.tensor([], dtype=T.int64).reshape((0, 5) if dim == 0 else (2, 0))


@pytest.mark.parametrize(
    "fn, src",
    [
        # an index with no element along a dim where src has one: PyTorch's engine sums the
        # empty src gradient to src's shape (zeros); autodiag raised "invalid gradient"
        (lambda T, a, s: a.scatter(0, _empty(T, 0), s), (1, 5)),
        (lambda T, a, s: a.scatter(1, _empty(T, 1), s), (2, 1)),
        (lambda T, a, s: (a * 1).scatter_(0, _empty(T, 0), s), (1, 5)),
        (lambda T, a, s: a.scatter_add(0, _empty(T, 0), s), (1, 5)),
        (lambda T, a, s: a.scatter(1, _empty(T, 1), s), (2, 3)),  # still refused
        *[
            (
                lambda T, a, s, r=r, i=i: a.scatter_reduce(0, _empty(T, 0), s, r, include_self=i),
                (1, 5),
            )
            for r in ("sum", "prod", "mean", "amax", "amin")
            for i in (True, False)
        ],
        # amax/amin compare src with the gathered result: a src larger than the index
        # broadcasts, as in PyTorch (autodiag raised a broadcast error)
        (lambda T, a, s: a.scatter_reduce(0, T.tensor([[0, 1, 0, 1, 1]]), s, "amax"), (2, 5)),
        (lambda T, a, s: a.scatter_reduce(0, T.tensor([[0, 1, 0, 1, 1]]), s, "amin"), (2, 5)),
        (lambda T, a, s: a.scatter_reduce(0, T.tensor([[0, 1, 0]]), s, "amax"), (1, 5)),
    ],
)
def test_scatter_src_gradient_shapes_as_pytorch(fn, src):
    rng = np.random.RandomState(0)
    data = rng.randn(2, 5).astype(np.float32)
    sdata = rng.randn(*src).astype(np.float32)
    sdata.flat[0] = data.max()  # a tie with the result (amax's src_is_result)
    _same_grads(fn, data, sdata)


@pytest.mark.parametrize("size", [(2, 3), (1, 1, 3)])
def test_sum_to_size_error_message_is_pytorchs(size):
    fn = lambda T: T.ones(4, 3).sum_to_size(*size)  # noqa: E731
    assert _raised(autodiag, fn) == _raised(torch, fn)
