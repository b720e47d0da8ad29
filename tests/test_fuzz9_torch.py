"""issue 17 (fuzz9): differences from PyTorch found by the fuzzer and the known defects, each
compared with PyTorch: efficient zero gradients (ZeroTensor) reaching numpy code or a custom
Function's backward, writes into an expanded tensor, and the fuzzer's classes."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import autodiag as ad
from autodiag.core.zeros import ZeroArray, zeros_like
from autodiag.ops.reduction import SoftmaxBackwardDataBackward0


def _outcome(fn, m):
    """What ``fn(m)`` gives: values (as a list) and the tensor's grad_fn name, or its error."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(m)
        if isinstance(out, tuple):
            # clone(): PyTorch's autograd.grad can return its ZeroTensor itself (a custom
            # backward's ``g * inf``), whose tolist() raises; autodiag's are ordinary zeros
            return ("ok", repr([None if o is None else o.clone().tolist() for o in out]))
        return ("ok", repr(out.tolist()), out.grad_fn.name() if out.grad_fn else None)
    except Exception as e:  # the exception's type and message are the contract
        return (type(e).__name__, str(e).splitlines()[0])


def _same(fn, torch):
    assert _outcome(fn, ad) == _outcome(fn, torch)


# --- efficient zero gradients (ZeroTensor) ----------------------------------------------------

# a custom Function's backward receives PyTorch's ZeroTensor where abs's double backward
# (SgnBackward0) sends it: what the user's code does with it
ZERO_USES = {
    "sigmoid": lambda m, g: m.sigmoid(g) * 2,  # numpy's empty_like then writes: raised
    "clone_then_add_": lambda m, g: g.clone().add_(1),
    "add_": lambda m, g: g.add_(1),  # PyTorch: ZeroTensors are immutable (was silently 0)
    "mul_": lambda m, g: g.mul_(2),
    "setitem": lambda m, g: g.__setitem__(0, 1.0),
    "ones_like_times_inf": lambda m, g: m.ones_like(g) * math.inf,
    "empty_like_copy_": lambda m, g: m.empty_like(g).copy_(g) + 1,
    "div_by_it": lambda m, g: m.ones(3) / g,  # inf everywhere in PyTorch's div_zerotensor
    "neg_div_by_it": lambda m, g: -m.ones(3) / g,
    "div_itself": lambda m, g: g / g,  # NaN (was 0)
    "mul_inf": lambda m, g: g * math.inf,
    "sub_from_it": lambda m, g: g - m.tensor([1.0, -0.0, 2.0]),
    "expand_sum_inf": lambda m, g: g.expand(2, 3).sum(0) * math.inf,
    "softmax": lambda m, g: m.softmax(g, 0),
    "sort": lambda m, g: g.sort()[0] + 1,
    "cumsum": lambda m, g: g.cumsum(0) + 1,
    "cat": lambda m, g: m.cat([g, g])[:3] + 1,
    "where": lambda m, g: m.where(g == 0, m.ones_like(g), g),
}


@pytest.mark.parametrize("use", list(ZERO_USES), ids=str)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_zero_gradient_in_custom_backward_as_pytorch(torch, use, dt):
    f = ZERO_USES[use]

    def run(m):
        class Twice(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return f(m, g)

        x = m.tensor([1.0, -2.0, 3.0], dtype=getattr(m, dt), requires_grad=True)
        (g,) = m.autograd.grad(Twice.apply(x).abs().sum(), x, create_graph=True)
        return m.autograd.grad(g.sum(), x, allow_unused=True)

    _same(run, torch)


def test_zero_array_is_an_ndarray_to_numpy_functions():
    z = zeros_like(np.ones((2, 3)))
    # fresh arrays are ordinary (mutable, and ones_like holds ones that stay ones)
    for fresh in (np.empty_like(z), np.ones_like(z), np.copy(z), np.concatenate([z, z]), z[[0]]):
        assert fresh.__class__ is np.ndarray
    assert (np.ones_like(z) * np.inf == np.inf).all()
    out = np.empty_like(z)
    np.add(z, 1.5, out=out)
    assert (out == 1.5).all()
    e = np.empty_like(z)
    e[0] = 7.0
    np.copyto(e, 2.0)
    assert (e == 2.0).all()
    # views stay efficient zeros; writing into one is refused
    for view in (z[0], z.T, np.reshape(z, 6), np.broadcast_to(z, (4, 2, 3), subok=True)):
        assert view.__class__ is ZeroArray
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        np.copyto(z, 1.0)
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        np.add(1.0, 1.0, out=z)


# --- writes into an expanded tensor ---------------------------------------------------------------


EXPANDED_WRITES = {
    "setitem_row": lambda m, x: x.expand(3, 4).__setitem__(0, 1.0),  # a row: no shared memory
    "setitem_row_tensor": lambda m, x: x.expand(3, 4).__setitem__(0, m.ones(4)),
    "setitem_element": lambda m, x: x.expand(3, 4).__setitem__((0, 1), 7.0),
    "setitem_row_of_column": lambda m, x: x.unsqueeze(1).expand(4, 3)[0].__setitem__(0, 9.0),
    # the fuzzer's class `setitem | forward exception: RuntimeError vs ok`: an empty region
    "setitem_empty": lambda m, x: x.expand(3, 4).__setitem__(
        (slice(None, None, 2), slice(5, None)), 2.0
    ),
    "setitem_column": lambda m, x: x.expand(3, 4).__setitem__((slice(None), 0), 1.0),
    "setitem_all": lambda m, x: x.expand(3, 4).__setitem__(Ellipsis, 1.0),
    "setitem_mask": lambda m, x: x.expand(3, 4).__setitem__(x.expand(3, 4) > 2, 0.0),
    "setitem_index": lambda m, x: x.expand(3, 4).__setitem__(m.tensor([0]), 0.0),
    "setitem_pairs": lambda m, x: x.expand(3, 4).__setitem__(
        (m.tensor([0, 1]), m.tensor([2, 2])), 9.0
    ),
    "masked_fill_": lambda m, x: x.expand(3, 4).masked_fill_(
        m.tensor([True, False, False, True]), 0.0
    ),
    "add_": lambda m, x: x.expand(3, 4).add_(1),
    "copy_": lambda m, x: x.expand(3, 4).copy_(m.ones(3, 4)),
    "fill_": lambda m, x: x.expand(3, 4).fill_(2),
    "zero_": lambda m, x: x.expand(3, 4).zero_(),
    "uniform_": lambda m, x: x.expand(3, 4).uniform_(),  # was numpy's ValueError (read-only)
    "normal_": lambda m, x: x.expand(3, 4).normal_(),
    "bernoulli_": lambda m, x: x.expand(3, 4).bernoulli_(0.5),
}


@pytest.mark.parametrize("case", list(EXPANDED_WRITES), ids=str)
@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_write_into_expanded_tensor_as_pytorch(torch, case, grad):
    write = EXPANDED_WRITES[case]

    def run(m):
        x = m.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=grad)
        y = x * 1 if grad else x
        write(m, y)
        out = (y * m.tensor([1.0, 2.0, 3.0, 4.0])).sum()
        if grad:
            return m.autograd.grad(out, x) + (y.detach(),)
        return (y,)

    _same(run, torch)


def test_setitem_into_expanded_tensor_warns_as_pytorch(torch):
    def warned(m):
        x = m.tensor([1.0, 2.0, 3.0, 4.0])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            x.expand(3, 4)[x.expand(3, 4) > 2] = 0.0
            x.expand(3, 4)[0] = 5.0  # a row: no warning
        return [str(i.message).split(" (Triggered")[0] for i in w], x.tolist()

    assert warned(ad) == warned(torch)


def test_setitem_into_expanded_tensor_with_order_dependent_values_is_refused():
    x = ad.zeros(1, 4).expand(3, 4)
    with (
        pytest.warns(UserWarning, match="index_put_"),
        pytest.raises(NotImplementedError, match="__setitem__"),
    ):
        x[ad.tensor([0, 1]), ad.tensor([2, 2])] = ad.tensor([9.0, 8.0])


# --- softmax's gradient along a dim other than the last ---------------------------------------


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape,dim", [((1, 2, 3), 1), ((2, 3, 5), 0), ((4, 17), 0), ((3, 9, 2), 1)]
)
def test_softmax_backward_data_along_inner_dim_is_pytorchs_bit_for_bit(torch, dt, shape, dim):
    # PyTorch's kernel accumulates sum(grad * output) with one fused multiply-add a step
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = rng.standard_normal(shape).astype(dt)
        g = (rng.standard_normal(shape) * 1e3).astype(dt)
        r = torch.softmax(torch.from_numpy(x), dim)
        want = torch._softmax_backward_data(torch.from_numpy(g), r, dim, r.dtype).numpy()
        # given PyTorch's output (autodiag's forward may round otherwise in the last bit)
        got = SoftmaxBackwardDataBackward0._array(g, r.numpy(), dim)
        assert np.array_equal(got, want)


def test_softmax_second_derivative_cancelling_to_zero_as_pytorch(torch):
    # the fuzzer's `remainder+softmax | grad2 value: inf vs 0`: a sum of +-2e40 terms that
    # cancels exactly in PyTorch's fused accumulation left 1e23 (and inf in float32)
    def run(m):
        x4 = m.tensor([[1.0, -2.08, 1.0]], dtype=m.float64)
        x5 = m.tensor([[[1.0, -1e-40, 1.0], [1.0, 3.36, 1.0]]], requires_grad=True)
        t1 = m.remainder(x4, x5)
        t2 = m.softmax(t1, dim=1)
        w1 = m.tensor([[[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]]], dtype=m.float64)
        (g,) = m.autograd.grad([t1, t2], [x5], [w1, w1], create_graph=True)
        return m.autograd.grad(g, [x5], [m.tensor([[[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]]])])

    _same(run, torch)


# --- layer_norm: PyTorch's kernel rounding (fused multiply-adds) for rows shorter than a vector -


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_values_and_gradients_bit_for_bit(torch, dt, n, affine):
    # the fuzzer's `layer_norm+matmul | grad2 ...` and `add_+layer_norm | grad2 ...` started
    # from these: the output (x - mean) * rstd * w + b is one FMA in PyTorch, the input
    # gradient three, the weight gradient two a row (a row of one value: not 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # PyTorch's weight gradient adds per-thread partial sums
    try:
        rng = np.random.default_rng(n)
        for _ in range(40):
            x = (rng.standard_normal((3, n)) * 3).astype(dt)
            w, b = rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt)
            dy = rng.standard_normal((3, n)).astype(dt)

            def run(m, x=x, w=w, b=b, dy=dy):
                xt = m.tensor(x, requires_grad=True)
                wt = m.tensor(w, requires_grad=True) if affine else None
                bt = m.tensor(b) if affine else None
                y = m.nn.functional.layer_norm(xt, (n,), wt, bt)
                leaves = [xt, wt] if affine else [xt]
                return (y.detach(),) + m.autograd.grad(y, leaves, m.tensor(dy))

            got, want = run(ad), run(torch)
            for g_, w_ in zip(got, want):
                assert g_.numpy().tobytes() == w_.numpy().tobytes()
    finally:
        torch.set_num_threads(threads)


def test_layer_norm_weight_gradient_of_a_one_value_row_as_pytorch(torch):
    # known issue's example: PyTorch's weight gradient is 1.77e-05 for [[1.99]], was 0
    def run(m):
        x = m.tensor([[1.99]], requires_grad=True)
        w = m.tensor([1.0], requires_grad=True)
        y = m.nn.functional.layer_norm(x, (1,), w, m.tensor([0.0]))
        return m.autograd.grad(y.sum(), [x, w])

    _same(run, torch)


def test_elu_float32_is_pytorchs_expm1_and_so_its_second_derivative(torch):
    # the fuzzer's `elu+log1p | grad2 value: different finite values`: numpy's float32 expm1
    # is one ulp from PyTorch's for -5.13, and log1p's second derivative near -1 amplifies it
    def run(m):
        x = m.tensor([1.0, -5.13], requires_grad=True)
        t0 = m.nn.functional.elu(x)
        t1 = m.log1p(t0)
        w0 = w1 = m.tensor([0.5, 1.0])  # the repro's weights
        (g,) = m.autograd.grad([t0, t1], [x], [w0, w1], create_graph=True)
        return (t0.detach(),) + m.autograd.grad(g, [x], [w0])

    _same(run, torch)


def test_max_pool1d_without_autograd_is_no_view_as_pytorch(torch):
    # the fuzzer's `lerp_ | forward grad_fn: AsStridedBackward0 vs LerpBackward0`
    def run(m):
        t2 = m.nn.functional.max_pool1d(m.tensor([[[1.0, 1.0]]], dtype=m.float64), 2)
        assert t2._base is None
        return t2.lerp_(m.tensor(1.0, dtype=m.float64) * m.tensor(1.0, requires_grad=True), 1.0)

    _same(run, torch)

    def grad_view(m):  # with autograd: max_pool1d_with_indices' squeeze view, in both
        y = m.nn.functional.max_pool1d(m.tensor([[[1.0, 3.0, 2.0, 0.0]]], requires_grad=True), 2)
        return (y._base is None, y.grad_fn.name())

    assert grad_view(ad) == grad_view(torch)


def test_lerp_saves_end_only_for_the_weight_gradient_as_pytorch(torch):
    # the fuzzer's `clamp_.tensor+lerp | grad exception: RuntimeError vs ok`: an in-place
    # write into lerp's end is an error at backward only when the weight requires grad
    def run(m, weight_grad):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        e = m.tensor([3.0, 5.0])
        w = m.tensor([0.25, 0.75], requires_grad=weight_grad)
        y = m.lerp(x, e, w)
        e.clamp_(max=4.0)
        return m.autograd.grad(y.sum(), x)

    _same(lambda m: run(m, False), torch)
    for m in (ad, torch):  # autodiag's message goes on with where the tensor was saved
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(m, True)


def test_clamp_with_both_tensor_bounds_keeps_pytorchs_zero_signs(torch):
    # the fuzzer's `clamp.both_tensors | forward value: 0 vs -0`: PyTorch's one kernel,
    # minimum(maximum(self, min), max), takes the bound on a tie in its vectorised body (the
    # first 16 float32 / 8 float64 elements of a step) and self in its scalar tail
    def run(m):
        x = m.tensor([0.0] * 9 + [-0.0] * 9, dtype=m.float64)
        lo = m.tensor([-0.0] * 9 + [0.0] * 9, dtype=m.float64)
        x2 = m.tensor([[[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]], dtype=m.float64)
        outs = (
            m.clamp(x, lo, m.tensor(1.0)),
            m.clamp(x, lo, m.zeros(18, dtype=m.float64)),
            m.clamp(x2, m.nn.functional.leaky_relu(x2, -0.5), m.tensor(1.0)),
            m.clamp(m.zeros(3, 17), m.full((3, 1), -0.0), m.full((17,), 0.0)),
        )
        return tuple(np.signbit(o.numpy()) for o in outs)

    got, want = run(ad), run(torch)
    for g_, w_ in zip(got, want):
        assert (g_ == w_).all()


@pytest.mark.parametrize("grad", [False, True])
def test_max_pool_keeps_the_first_of_tied_zeros_as_pytorch(torch, grad):
    # the fuzzer's `max_pool1d | forward value: -0 vs 0`: numpy's maximum kept the later zero
    def run(m):
        outs = []
        for row in ([0.0, 0.0, -0.0], [-0.0, 0.0, 0.0], [-0.0, -1.0, 0.0, 0.0, 2.0, -0.0]):
            x = m.tensor([[row]], dtype=m.float64, requires_grad=grad)
            outs.append(m.nn.functional.max_pool1d(x, 3, 1, 1))
            outs.append(m.nn.functional.max_pool2d(x.unsqueeze(0), (1, 3), (1, 2), (0, 1)))
        return [np.signbit(o.detach().numpy()) for o in outs]

    for g_, w_ in zip(run(ad), run(torch)):
        assert (g_ == w_).all()


def test_advanced_setitem_of_a_grad_value_into_an_expanded_tensor_as_pytorch(torch):
    # the fuzzer's `setitem.advanced | forward exception: RuntimeError vs ok`: the value
    # requires grad, the expanded tensor does not: PyTorch writes (and records) it
    def run(m):
        x4 = m.tensor(2.0, dtype=m.float64, requires_grad=True)
        t1 = (2.5 / m.tensor(1.0, dtype=m.float64)).expand_as(m.ones(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t1[m.tensor([0])] = x4
        (g,) = m.autograd.grad((t1 * m.tensor([1.0, 3.0], dtype=m.float64)).sum(), x4)
        return (
            t1.detach(),
            g,
            m.tensor(0.0) if t1.grad_fn.name() == "AsStridedBackward0" else None,
        )

    _same(run, torch)


def test_stack_of_transposed_tensors_is_contiguous_as_pytorch(torch):
    # the fuzzer's `reshape | forward grad_fn: UnsafeViewBackward0 vs ViewBackward0`
    def run(m):
        x = m.ones(2, 3, requires_grad=True)
        t = m.stack([x.mT, x.mT], dim=-1)
        return (t.stride(), t.reshape(12).grad_fn.name(), m.stack([x.mT, x.mT]).stride())

    assert run(ad) == run(torch)
