"""issue 17 (fuzz10): the differential fuzzer's remaining classes, each compared with PyTorch
bit for bit: log1p of subnormals, pow's multiplied-out exponents, and the second derivatives
that read them."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _same_bits(a: np.ndarray, t: np.ndarray) -> bool:
    a, t = np.asarray(a), np.asarray(t)
    if a.dtype != t.dtype or a.shape != t.shape:
        return False
    nan = np.isnan(a) & np.isnan(t)
    return bool(np.all(nan | ((a == t) & (np.signbit(a) == np.signbit(t)))))


def _w(lib, t):  # the fuzzer's grad_outputs weights
    n = t.numel()
    return lib.tensor([0.5 + 0.5 * (i % 3) for i in range(n)], dtype=t.dtype).reshape(
        tuple(t.shape)
    )


# --- log1p of subnormals (NOTE [log1p of tiny values]) ------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log1p_of_subnormals_rounds_as_pytorch(dtype):
    rng = np.random.default_rng(17)
    tiny = np.finfo(dtype).tiny
    d = (rng.uniform(0, 3, 4000) * tiny).astype(dtype)
    d = np.concatenate([d, -d, np.array([tiny, 2 * tiny, 0.0, -0.0], dtype=dtype)])
    d = np.concatenate([d, np.array([1e-310 if dtype == "float64" else 1e-45], dtype)])
    want = torch.log1p(torch.from_numpy(d)).numpy()
    got = ad.log1p(ad.tensor(d)).numpy()
    assert _same_bits(got, want)


def test_log1p_maximum_tie_second_derivative_as_pytorch():
    """fuzz class `log1p+maximum+tril | grad2 value: different finite values`: log1p(1e-310)
    is not 1e-310 in PyTorch, so maximum(log1p(x), x) is no tie and its gradient not split."""

    def run(lib):
        x0 = lib.tensor(
            [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1e-310, 1.0]], dtype=lib.float64, requires_grad=True
        )
        t0 = lib.tril(x0, 2)
        t1 = lib.log1p(t0)
        t3 = lib.maximum(t1, x0)
        outs = [t0, t1, t3]
        (g,) = lib.autograd.grad(outs, [x0], [_w(lib, o) for o in outs], create_graph=True)
        (g2,) = lib.autograd.grad([g], [x0], [_w(lib, g)])
        return [t.detach().numpy() for t in (t1, t3, g, g2)]

    for got, want in zip(run(ad), run(torch)):
        assert _same_bits(got, want)


# --- pow with the exponents 2, 3, -2 -------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("e", [2.0, 3.0, -2.0, 2, -2, -0.5, -1.0, -3.0])
def test_pow_scalar_exponent_rounds_as_pytorch(dtype, e):
    """(0.5 is left out: PyTorch 2.13 computes x ** 0.5 with SLEEF's pow, an ulp from sqrt.)"""
    rng = np.random.default_rng(3)
    d = (rng.standard_normal(3000) * 10 ** rng.uniform(-3, 3, 3000)).astype(dtype)
    d = np.concatenate([d, np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40], dtype)])
    if e == -3.0:  # C's pow in both (SLEEF's in PyTorch): compare the exact cases only
        d = np.array([2.0, -0.5, 0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    with np.errstate(all="ignore"):
        want = torch.from_numpy(d).pow(e).numpy()
        got = ad.tensor(d).pow(e).numpy()
    assert _same_bits(got, want)


def test_pow_minus_two_of_softmax_second_derivative_as_pytorch():
    """fuzz class `pow.scalar_exponent+softmax | grad2 value: different finite values`:
    0.10650697 ** -2 is 1 / (x * x) = 88.15437 in PyTorch (powf: 88.15438), and the second
    derivative, ~1e-5 beside terms of 1e2, cancels to that last bit."""

    def run(lib):
        x0 = lib.tensor(
            [[[1.0, 1.0, 2.0]], [[1.0, 1.0, 0.0]], [[1.0, 1.0, 0.0]]],
            dtype=lib.float32,
            requires_grad=True,
        )
        t0 = lib.softmax(x0, dim=-3)
        t1 = t0**-2.0
        return t1.detach().numpy()

    assert _same_bits(run(ad), run(torch))


# --- layer_norm's double backward (NOTE [layer_norm double backward]) ---------------------------


def _layer_norm_grads(lib, xv, wv, bv, dtype, eps, weights2=None):
    dt = getattr(lib, dtype)
    x = lib.tensor(xv, dtype=dt, requires_grad=True)
    w = None if wv is None else lib.tensor(wv, dtype=dt, requires_grad=True)
    b = None if bv is None else lib.tensor(bv, dtype=dt, requires_grad=True)
    y = lib.nn.functional.layer_norm(x, (len(xv[0]),), w, b, eps=eps)
    t = y * y
    leaves = [a for a in (x, w, b) if a is not None]
    g = lib.autograd.grad([t], leaves, [_w(lib, t)], create_graph=True)
    g1 = [a for a in g if a.requires_grad]
    g2 = lib.autograd.grad(g1, leaves, [_w(lib, a) for a in g1], allow_unused=True)
    return [a.detach().numpy() for a in g] + [None if a is None else a.numpy() for a in g2]


@pytest.mark.parametrize(
    "xv, wv, bv, eps",
    [
        ([[1.0, 1.0], [1.0, 1.0], [0.19, 0.24]], None, None, 0.0),  # fuzz: clone+layer_norm
        ([[0.0, 1.0], [0.63, 1.0]], [1.0, 1.0], [1.0, 2.0], 0.0),  # layer_norm+pow.scalar_base
        ([[0.3, -1.2, 2.5], [1.5, 0.25, -0.75]], [0.5, -1.5, 2.0], [0.1, 0.2, 0.3], 1e-5),
        ([[0.3, -1.2, 2.5, 4.0, -3.25]], [0.5, -1.5, 2.0, 1.0, 0.75], None, 1e-5),
    ],
)
def test_layer_norm_second_derivatives_as_pytorch_float32(xv, wv, bv, eps):
    got = _layer_norm_grads(ad, xv, wv, bv, "float32", eps)
    want = _layer_norm_grads(torch, xv, wv, bv, "float32", eps)
    for a, t in zip(got, want):
        assert (a is None) == (t is None)
        if a is not None:
            assert _same_bits(a, t)


def test_layer_norm_second_derivative_through_2_pow_as_pytorch():
    """fuzz class `layer_norm+pow.scalar_base | grad2 value: 0 vs finite`: 0 here where
    PyTorch's double backward leaves 1e-5."""

    def run(lib):
        x3 = lib.tensor([[0.0, 1.0], [0.63, 1.0]], dtype=lib.float32, requires_grad=True)
        x4 = lib.tensor([1.0, 1.0], dtype=lib.float32, requires_grad=True)
        x5 = lib.tensor([1.0, 2.0], dtype=lib.float32)
        t2 = lib.nn.functional.layer_norm(x3, (2,), x4, x5, eps=0.0)
        t3 = 2.0**t2
        outs = [t2, t3]
        g = lib.autograd.grad(outs, [x3, x4], [_w(lib, o) for o in outs], create_graph=True)
        return [a.numpy() for a in lib.autograd.grad(list(g), [x3, x4], [_w(lib, a) for a in g])]

    for a, t in zip(run(ad), run(torch)):
        assert _same_bits(a, t)


SAVED = ("grad_out", "input", "mean", "rstd", "normalized_shape")


def test_layer_norm_gradients_are_one_double_backward_node_as_pytorch():
    def run(lib):
        x = lib.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        b = lib.tensor([0.0, 1.0, 0.0], requires_grad=True)
        y = lib.nn.functional.layer_norm(x, (3,), w, b)
        gx, gw, gb = lib.autograd.grad(y, (x, w, b), lib.ones_like(y), create_graph=True)
        fn = gx.grad_fn
        return (
            fn.name(),
            gw.grad_fn is fn and gb.grad_fn is fn,
            [None if n is None else n.name() for n, _ in fn.next_functions],
            [getattr(fn, "_saved_" + a) is not None for a in SAVED],
        )

    assert run(ad) == run(torch)
    x = ad.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    y = ad.nn.functional.layer_norm(x, (3,))
    (gx,) = ad.autograd.grad(y, x, ad.ones_like(y), create_graph=True)
    assert gx.grad_fn._saved_normalized_shape == (3,)
    assert gx.grad_fn._saved_weight is None


def test_layer_norm_third_derivative_close_to_pytorch():
    def run(lib):
        x = lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = lib.nn.functional.layer_norm(x, (3,), w)
        (gx,) = lib.autograd.grad((y * y).sum(), x, create_graph=True)
        (g2,) = lib.autograd.grad((gx * gx).sum(), x, create_graph=True)
        (g3,) = lib.autograd.grad(g2.sum(), x)
        return g2.detach().numpy(), g3.numpy()

    for a, t in zip(run(ad), run(torch)):
        np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-12)


def test_layer_norm_bias_without_weight_double_backward_error_as_pytorch():
    """PyTorch's layer_norm_double_backward adds an undefined bias term when there is no
    weight: an error, not a silently different gradient."""

    def run(lib):
        x = lib.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
        b = lib.tensor([0.0, 1.0, 0.0], requires_grad=True)
        y = lib.nn.functional.layer_norm(x, (3,), None, b)
        gx, gb = lib.autograd.grad((y * y).sum(), (x, b), create_graph=True)
        try:
            lib.autograd.grad((gx * gx).sum() + (gb * gb).sum(), (x, b))
        except RuntimeError as e:
            return str(e)
        return None

    want = run(torch)
    assert want is not None and run(ad) == want


# --- softmax's rounding (NOTE [softmax rounding]) ----------------------------------------------


@pytest.mark.parametrize("dim", [-3, -1])
def test_softmax_reciprocal_second_derivative_as_pytorch(dim):
    """fuzz class `reciprocal+softmax.functional | grad2 value: finite vs 0`: numpy's float32
    exp was an ulp off PyTorch's, and 1 / softmax's cancelling second derivative showed it."""

    def run(lib):
        v = [[[1.0, 1.0, 0.0]], [[1.0, 1.0, -1.92]], [[1.0, 1.0, 0.06]]]
        x0 = lib.tensor(v, dtype=lib.float32, requires_grad=True)
        t3 = lib.nn.functional.softmax(x0 if dim == -3 else x0.transpose(0, 2), dim=dim)
        t5 = lib.reciprocal(t3)
        outs = [t3, t5]
        (g,) = lib.autograd.grad(outs, [x0], [_w(lib, o) for o in outs], create_graph=True)
        (g2,) = lib.autograd.grad([g], [x0], [_w(lib, g)])
        return [a.detach().numpy() for a in (t3, t5, g, g2)]

    for a, t in zip(run(ad), run(torch)):
        assert _same_bits(a, t)


def test_softmax_rows_round_as_pytorch():
    """Short float32 rows (no SIMD lanes in PyTorch's sums): exp correctly rounded, then times
    the reciprocal of the sum along the last dim, divided by it along another. (float64 keeps
    numpy's exp, whose last bit differs from SLEEF's for some values.)"""
    dtype = "float32"
    x = np.array(
        [[0.0, -1.92, 0.06], [1.5, -0.25, 2.75], [-3.0, 0.5, 0.125], [0.3, 0.7, -0.9]], dtype
    )
    for dim in (0, 1):
        want = torch.softmax(torch.from_numpy(x), dim).numpy()
        got = ad.softmax(ad.tensor(x), dim).numpy()
        assert _same_bits(got, want)


# --- topk's order among ties (NOTE [topk ties]) -------------------------------------------------


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_indices_among_ties_as_pytorch(largest, sorted_):
    rng = np.random.default_rng(10)
    for trial in range(300):
        n = int(rng.integers(1, 150 if trial % 10 == 0 else 30))
        pool = [0.0, -0.0, 1.0, 2.0, 0.5, np.nan, -1.0] if trial % 3 else [0.0, 1.0]
        a = rng.choice(pool, (2, n)).astype("float32" if trial % 2 else "float64")
        if trial % 7 == 0:
            a = rng.integers(-2, 3, (2, n))
        k = int(rng.integers(0, n + 1))
        want = torch.topk(torch.from_numpy(a), k, dim=1, largest=largest, sorted=sorted_)
        got = ad.topk(ad.tensor(a), k, dim=1, largest=largest, sorted=sorted_)
        assert np.array_equal(got.indices.numpy(), want.indices.numpy()), (a, k)
        assert _same_bits(got.values.numpy(), want.values.numpy())


def test_topk_gradient_among_ties_as_pytorch():
    """fuzz classes `topk | grad value: different finite values` / `finite vs 0`."""
    for v, k, dim in (([[[0.0, 0.0, 1.0, 0.0]]], 4, 2), ([[0.0, 0.5, 1.0, 0.5]], 2, -1)):

        def run(lib):
            x = lib.tensor(v, dtype=lib.float32, requires_grad=True)
            t = lib.topk(x, k, dim=dim)[0]
            return lib.autograd.grad(t, x, _w(lib, t))[0].numpy()

        assert _same_bits(run(ad), run(torch))


@pytest.mark.parametrize("shape, ns", [((1, 0, 4), (4,)), ((0, 1, 2), (2,)), ((2, 0), (0,))])
def test_layer_norm_double_backward_of_empty_tensors_as_pytorch(shape, ns):
    def run(lib):
        x = lib.zeros(shape, dtype=lib.float64).requires_grad_()
        w = lib.ones(ns, dtype=lib.float64).requires_grad_()
        y = lib.nn.functional.layer_norm(x, ns, w)
        g = lib.autograd.grad(y, (x, w), lib.ones_like(y), create_graph=True)
        g2 = lib.autograd.grad([a for a in g], (x, w), [lib.ones_like(a) for a in g])
        return [a.detach().numpy() for a in g + g2]

    for a, t in zip(run(ad), run(torch)):
        assert _same_bits(a, t)
