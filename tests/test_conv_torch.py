"""Differential tests of convolution, pooling and batch/group normalization against PyTorch:
values, gradients, second derivatives (gradients of gradients, also with respect to the
incoming gradient), node names with ``next_functions``, saved attributes, running statistics,
modules (repr, state_dict, train/eval) and errors (type and key phrase)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from cli_helpers import cli
from test_ops_torch import TOL64, assert_same_graph

import autodiag as ad
import autodiag.nn.functional as AF

# name -> (input shape, extra parameter shapes (None: not given), kwargs)
CASES = [
    ("conv2d", (2, 3, 8, 8), [(4, 3, 3, 3), (4,)], {}),
    ("conv2d", (2, 3, 8, 8), [(4, 3, 3, 3), None], {"stride": 2, "padding": 1}),
    (
        "conv2d",
        (2, 4, 9, 7),
        [(6, 2, 3, 2), (6,)],
        {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1), "groups": 2},
    ),
    ("conv2d", (2, 3, 8, 8), [(4, 3, 3, 3), (4,)], {"padding": "same", "dilation": 2}),
    ("conv2d", (2, 3, 8, 8), [(4, 3, 3, 3), (4,)], {"padding": "valid"}),
    ("conv2d", (3, 6, 6), [(2, 3, 3, 3), (2,)], {"padding": 1}),  # unbatched
    ("conv1d", (2, 3, 10), [(4, 3, 3), (4,)], {"stride": 2, "padding": 1}),
    ("conv1d", (2, 4, 11), [(4, 1, 3), None], {"groups": 4, "dilation": 3, "padding": "same"}),
    (
        "conv_transpose2d",
        (2, 4, 5, 6),
        [(4, 3, 3, 3), (3,)],
        {"stride": 2, "padding": 1, "output_padding": 1},
    ),
    (
        "conv_transpose2d",
        (2, 4, 5, 6),
        [(4, 2, 3, 2), (4,)],
        {
            "stride": (2, 3),
            "padding": (0, 1),
            "output_padding": (1, 2),
            "groups": 2,
            "dilation": (1, 2),
        },
    ),  # fmt: skip
    ("conv_transpose1d", (2, 4, 5), [(4, 2, 3), (2,)], {"stride": 3, "output_padding": 2}),
    ("max_pool2d", (2, 3, 8, 8), [], {"kernel_size": 2}),
    (
        "max_pool2d",
        (2, 3, 8, 8),
        [],
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    ),  # fmt: skip
    (
        "max_pool2d",
        (2, 3, 9, 8),
        [],
        {"kernel_size": (2, 3), "stride": (3, 2), "padding": 1, "dilation": 2, "ceil_mode": True},
    ),  # fmt: skip
    ("max_pool2d", (3, 7, 7), [], {"kernel_size": 3, "stride": 1, "padding": 1}),
    ("max_pool1d", (2, 3, 9), [], {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("max_pool1d", (3, 9), [], {"kernel_size": 2, "ceil_mode": True}),
    ("avg_pool2d", (2, 3, 8, 8), [], {"kernel_size": 2}),
    (
        "avg_pool2d",
        (2, 3, 9, 8),
        [],
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    ),  # fmt: skip
    (
        "avg_pool2d",
        (2, 3, 9, 8),
        [],
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": 1,
            "ceil_mode": True,
            "count_include_pad": False,
        },
    ),  # fmt: skip
    (
        "avg_pool2d",
        (3, 9, 8),
        [],
        {"kernel_size": (3, 2), "stride": (2, 3), "padding": 1, "divisor_override": 5},
    ),  # fmt: skip
    ("adaptive_avg_pool2d", (2, 3, 9, 8), [], {"output_size": (4, 3)}),
    ("adaptive_avg_pool2d", (3, 9, 8), [], {"output_size": (None, 5)}),
    ("adaptive_avg_pool2d", (2, 3, 9, 8), [], {"output_size": 1}),
    ("group_norm", (4, 6, 5, 5), [(6,), (6,)], {"num_groups": 3}),
    ("group_norm", (4, 6), [None, None], {"num_groups": 2}),
    ("group_norm", (4, 6, 7), [(6,), None], {"num_groups": 6, "eps": 1e-3}),
]


def _call(lib_f, name, x, params, kw):
    fn = getattr(lib_f, name)
    if name == "group_norm":
        kw = dict(kw)
        return fn(x, kw.pop("num_groups"), *params, **kw)
    return fn(x, *params, **kw)


def _make(torch, shape, dtype, rng, requires_grad=True):
    a = rng.standard_normal(shape)
    t = torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=requires_grad)
    d = ad.tensor(a, dtype=getattr(ad, dtype), requires_grad=requires_grad)
    return t, d


def _np(t):
    return np.asarray(t.detach().numpy())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}{c[1]}{c[3]}")
def test_values_gradients_and_graph(torch, case, dtype):
    name, shape, param_shapes, kw = case
    rng = np.random.default_rng(0)
    # float32: sums over a whole batch of windows cancel; the rounding differs from PyTorch's
    tol = TOL64 if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    x_t, x_a = _make(torch, shape, dtype, rng)
    pairs = [_make(torch, s, dtype, rng) if s else (None, None) for s in param_shapes]
    p_t, p_a = [p[0] for p in pairs], [p[1] for p in pairs]
    y_t = _call(torch.nn.functional, name, x_t, p_t, kw)
    y_a = _call(AF, name, x_a, p_a, kw)
    assert tuple(y_a.shape) == tuple(y_t.shape)
    np.testing.assert_allclose(_np(y_a), _np(y_t), **tol)
    assert_same_graph(y_t.grad_fn, y_a.grad_fn)
    wrt_t = [x_t] + [p for p in p_t if p is not None]
    wrt_a = [x_a] + [p for p in p_a if p is not None]
    g = rng.standard_normal(tuple(y_t.shape))
    g_t = torch.autograd.grad(y_t, wrt_t, torch.tensor(g, dtype=y_t.dtype))
    g_a = ad.autograd.grad(y_a, wrt_a, ad.tensor(g, dtype=y_a.dtype))
    for a, t in zip(g_a, g_t):
        np.testing.assert_allclose(_np(a), _np(t), **tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}{c[1]}{c[3]}")
def test_second_derivatives(torch, case):
    """d/d(inputs, grad_output) of sum(gradients ** 3), in float64."""
    name, shape, param_shapes, kw = case
    rng = np.random.default_rng(1)
    x_t, x_a = _make(torch, shape, "float64", rng)
    pairs = [_make(torch, s, "float64", rng) if s else (None, None) for s in param_shapes]
    p_t, p_a = [p[0] for p in pairs], [p[1] for p in pairs]
    y_t = _call(torch.nn.functional, name, x_t, p_t, kw)
    y_a = _call(AF, name, x_a, p_a, kw)
    gt, ga = _make(torch, tuple(y_t.shape), "float64", rng)
    wrt_t = [x_t] + [p for p in p_t if p is not None]
    wrt_a = [x_a] + [p for p in p_a if p is not None]
    d_t = torch.autograd.grad(y_t, wrt_t, gt, create_graph=True)
    d_a = ad.autograd.grad(y_a, wrt_a, ga, create_graph=True)
    for a, t in zip(d_a, d_t):
        np.testing.assert_allclose(_np(a), _np(t), **TOL64)
    s_t = sum((d**3).sum() for d in d_t)
    s_a = sum((d**3).sum() for d in d_a)
    dd_t = torch.autograd.grad(s_t, wrt_t + [gt], allow_unused=True)
    dd_a = ad.autograd.grad(s_a, wrt_a + [ga], allow_unused=True)
    for a, t in zip(dd_a, dd_t):
        if t is None:
            assert a is None or not _np(a).any()
        else:
            np.testing.assert_allclose(_np(a), _np(t), rtol=1e-6, atol=1e-9)


def test_convolution_saved_attributes(torch):
    rng = np.random.default_rng(2)
    x_t, x_a = _make(torch, (2, 4, 6, 6), "float64", rng)
    w_t, w_a = _make(torch, (4, 2, 3, 3), "float64", rng)
    for transposed in (False, True):
        kw = dict(stride=2, padding=1, dilation=1, groups=2)
        if transposed:
            kw["output_padding"] = 1
            y_t = torch.nn.functional.conv_transpose2d(x_t, w_t, None, **kw)
            y_a = AF.conv_transpose2d(x_a, w_a, None, **kw)
        else:
            y_t = torch.nn.functional.conv2d(x_t, w_t, **kw)
            y_a = AF.conv2d(x_a, w_a, **kw)
        ft, fa = y_t.grad_fn, y_a.grad_fn
        for attr in ("stride", "padding", "dilation", "transposed", "output_padding", "groups"):
            assert getattr(fa, f"_saved_{attr}") == getattr(ft, f"_saved_{attr}"), attr
        assert fa._saved_bias_sym_sizes_opt == ft._saved_bias_sym_sizes_opt
        assert fa._saved_input is x_a and fa._saved_weight is w_a


def test_max_pool_indices_and_saved(torch):
    rng = np.random.default_rng(3)
    x_t, x_a = _make(torch, (2, 3, 9, 8), "float32", rng)
    kw = dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True, return_indices=True)
    (y_t, i_t), (y_a, i_a) = (
        torch.nn.functional.max_pool2d(x_t, **kw),
        AF.max_pool2d(x_a, **kw),
    )
    np.testing.assert_array_equal(i_a.numpy(), i_t.numpy())
    assert str(i_a.dtype) == str(i_t.dtype) == "torch.int64"
    ft, fa = y_t.grad_fn, y_a.grad_fn
    for attr in ("kernel_size", "stride", "padding", "dilation", "ceil_mode"):
        assert tuple(np.atleast_1d(getattr(fa, f"_saved_{attr}"))) == tuple(
            np.atleast_1d(getattr(ft, f"_saved_{attr}"))
        ), attr
    np.testing.assert_array_equal(fa._saved_result1.numpy(), ft._saved_result1.numpy())
    # 1-d: the indices are squeezed like the values
    x1_t, x1_a = _make(torch, (2, 3, 9), "float32", rng)
    _, j_t = torch.nn.functional.max_pool1d(x1_t, 2, return_indices=True)
    _, j_a = AF.max_pool1d(x1_a, 2, return_indices=True)
    np.testing.assert_array_equal(j_a.numpy(), j_t.numpy())


def test_max_pool_ties_and_nan_pick_as_pytorch(torch):
    p = np.array([[[[1.0, 1.0, 0.0], [np.nan, 2.0, 2.0], [3.0, 3.0, np.nan]]]])
    b = np.array([[[[-np.inf, -np.inf, 5.0], [-np.inf, -np.inf, np.nan], [np.nan, 1.0, 1.0]]]])
    for a, kw in (
        (p, dict(kernel_size=2, stride=1)),
        (p, dict(kernel_size=2, stride=1, padding=1)),
        (b, dict(kernel_size=2, stride=1, padding=1)),  # all -inf windows: the first element
        (b, dict(kernel_size=3, stride=1, padding=1)),  # two NaNs: the last wins
        (b, dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
    ):
        y_t, i_t = torch.nn.functional.max_pool2d(torch.tensor(a), return_indices=True, **kw)
        y_a, i_a = AF.max_pool2d(ad.tensor(a), return_indices=True, **kw)
        np.testing.assert_array_equal(i_a.numpy(), i_t.numpy())
        np.testing.assert_array_equal(y_a.numpy(), y_t.numpy())


def test_unfold_and_fold(torch):
    rng = np.random.default_rng(4)
    x_t, x_a = _make(torch, (2, 3, 7, 6), "float64", rng)
    kw = dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    c_t = torch.nn.functional.unfold(x_t, **kw)
    c_a = AF.unfold(x_a, **kw)
    np.testing.assert_allclose(_np(c_a), _np(c_t))
    assert c_a.grad_fn.name() == c_t.grad_fn.name() == "Im2ColBackward0"
    f_t = torch.nn.functional.fold(c_t, (7, 6), **kw)
    f_a = AF.fold(c_a, (7, 6), **kw)
    np.testing.assert_allclose(_np(f_a), _np(f_t))
    assert_same_graph(f_t.grad_fn, f_a.grad_fn)
    g = rng.standard_normal((2, 3, 7, 6))
    (gt,) = torch.autograd.grad(f_t, x_t, torch.tensor(g))
    (ga,) = ad.autograd.grad(f_a, x_a, ad.tensor(g))
    np.testing.assert_allclose(_np(ga), _np(gt))


def test_gradcheck_and_gradgradcheck_of_conv():
    rng = np.random.default_rng(5)
    x = ad.tensor(rng.standard_normal((1, 2, 5, 5)), requires_grad=True)
    w = ad.tensor(rng.standard_normal((2, 1, 3, 3)), requires_grad=True)
    b = ad.tensor(rng.standard_normal(2), requires_grad=True)

    def f(x, w, b):
        return AF.max_pool2d(AF.conv2d(x, w, b, stride=1, padding=1, groups=2), 2)

    assert ad.autograd.gradcheck(f, (x, w, b))
    assert ad.autograd.gradgradcheck(lambda x, w: AF.conv_transpose2d(x, w, stride=2), (x, w))


# ---------------------------------------------------------------------------------------------
# batch_norm
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 7), (4, 3, 5, 5)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(torch, shape, training, affine):
    rng = np.random.default_rng(6)
    x_t, x_a = _make(torch, shape, "float64", rng)
    rm, rv = rng.standard_normal(3), rng.random(3) + 0.5
    rm_t, rv_t = torch.tensor(rm), torch.tensor(rv)
    rm_a, rv_a = ad.tensor(rm), ad.tensor(rv)
    (w_t, w_a), (b_t, b_a) = (
        (_make(torch, (3,), "float64", rng), _make(torch, (3,), "float64", rng))
        if affine
        else ((None, None), (None, None))
    )
    y_t = torch.nn.functional.batch_norm(x_t, rm_t, rv_t, w_t, b_t, training, 0.3, 1e-4)
    y_a = AF.batch_norm(x_a, rm_a, rv_a, w_a, b_a, training, 0.3, 1e-4)
    np.testing.assert_allclose(_np(y_a), _np(y_t), **TOL64)
    np.testing.assert_allclose(rm_a.numpy(), rm_t.numpy(), **TOL64)  # updated in place
    np.testing.assert_allclose(rv_a.numpy(), rv_t.numpy(), **TOL64)
    assert rm_a._version == rm_t._version  # no version bump (a buffer, NOTE [Running statistics])
    assert_same_graph(y_t.grad_fn, y_a.grad_fn)
    ft, fa = y_t.grad_fn, y_a.grad_fn
    assert (fa._saved_training, fa._saved_eps) == (ft._saved_training, ft._saved_eps)
    assert tuple(fa._saved_result1.shape) == tuple(ft._saved_result1.shape)
    np.testing.assert_allclose(_np(fa._saved_result2), _np(ft._saved_result2), **TOL64)
    wrt_t = [x_t] + ([w_t, b_t] if affine else [])
    wrt_a = [x_a] + ([w_a, b_a] if affine else [])
    gt, ga = _make(torch, shape, "float64", rng)
    d_t = torch.autograd.grad(y_t, wrt_t, gt, create_graph=True)
    d_a = ad.autograd.grad(y_a, wrt_a, ga, create_graph=True)
    for a, t in zip(d_a, d_t):
        np.testing.assert_allclose(_np(a), _np(t), **TOL64)
    s_t, s_a = sum((d**3).sum() for d in d_t), sum((d**3).sum() for d in d_a)
    dd_t = torch.autograd.grad(s_t, wrt_t + [gt], allow_unused=True)
    dd_a = ad.autograd.grad(s_a, wrt_a + [ga], allow_unused=True)
    for a, t in zip(dd_a, dd_t):
        if t is None:
            assert a is None or not _np(a).any()
        else:
            np.testing.assert_allclose(_np(a), _np(t), rtol=1e-6, atol=1e-9)


def test_batch_norm_eval_running_stats_are_version_checked(torch):
    """In eval mode the running statistics are saved: a write into them before backward is
    PyTorch's in-place error; in training a second forward (which updates them) is not."""
    bn_t, bn_a = torch.nn.BatchNorm2d(3), ad.nn.BatchNorm2d(3)
    x = np.random.default_rng(7).standard_normal((4, 3, 5, 5))
    x_t = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    x_a = ad.tensor(x, dtype=ad.float32, requires_grad=True)
    for bn, xx in ((bn_t, x_t), (bn_a, x_a)):
        y1, y2 = bn(xx), bn(xx)
        (y1.sum() + y2.sum()).backward()
    bn_t.eval(), bn_a.eval()
    messages = []
    for lib, bn, xx in ((torch, bn_t, x_t), (ad, bn_a, x_a)):
        y = bn(xx)
        with lib.no_grad():
            bn.running_mean.add_(1)
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
        messages.append(str(e.value))
    assert all("modified by an inplace operation" in m for m in messages)
    assert all("is at version 2; expected version 1" in m for m in messages), messages


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d"])
def test_batch_norm_modules_train_and_eval(torch, cls, momentum):
    t = getattr(torch.nn, cls)(3, momentum=momentum).double()
    a = getattr(ad.nn, cls)(3, momentum=momentum).double()
    shape = (4, 3, 5, 5) if cls == "BatchNorm2d" else (4, 3, 6)
    for step in range(3):
        x = np.random.default_rng(step).standard_normal(shape)
        np.testing.assert_allclose(_np(a(ad.tensor(x))), _np(t(torch.tensor(x))), **TOL64)
    st, sa = t.state_dict(), a.state_dict()
    assert list(sa) == list(st)
    for k in st:
        np.testing.assert_allclose(sa[k].numpy(), st[k].numpy(), **TOL64)
    assert int(a.num_batches_tracked) == 3
    t.eval(), a.eval()
    x = np.random.default_rng(9).standard_normal(shape)
    np.testing.assert_allclose(_np(a(ad.tensor(x))), _np(t(torch.tensor(x))), **TOL64)
    # loading PyTorch's state_dict
    a2 = getattr(ad.nn, cls)(3).double()
    a2.load_state_dict({k: ad.tensor(v.numpy()) for k, v in st.items()})
    a2.eval()
    np.testing.assert_allclose(_np(a2(ad.tensor(x))), _np(t(torch.tensor(x))), **TOL64)


# ---------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------

MODULES = [
    "Conv1d(2, 4, 3)",
    "Conv2d(2, 4, 3, stride=2, padding=1, bias=False)",
    "Conv2d(2, 4, (3, 2), padding='same', dilation=(2, 1), groups=2)",
    "Conv2d(2, 4, 3, padding='valid')",
    "ConvTranspose1d(2, 4, 3, stride=2)",
    "ConvTranspose2d(2, 4, 3, stride=2, output_padding=1)",
    "ConvTranspose2d(4, 4, 2, groups=2, dilation=2, bias=False)",
    "MaxPool1d(2)",
    "MaxPool2d(2)",
    "MaxPool2d(3, 1, 1, ceil_mode=True)",
    "AvgPool2d(2)",
    "AvgPool2d(3, 2, 1, True, False, 2)",
    "AdaptiveAvgPool2d((5, None))",
    "AdaptiveAvgPool2d(1)",
    "BatchNorm1d(3)",
    "BatchNorm2d(3, momentum=None, affine=False)",
    "BatchNorm2d(3, track_running_stats=False)",
    "BatchNorm2d(3, eps=1e-3, bias=False)",
    "GroupNorm(2, 4)",
    "GroupNorm(1, 4, affine=False)",
    "Dropout2d(0.3)",
    "Dropout1d()",
    "Unflatten(1, (2, 3))",
]


@pytest.mark.parametrize("ctor", MODULES)
def test_module_repr_and_state_dict(torch, ctor):
    t = eval("torch.nn." + ctor)
    a = eval("ad.nn." + ctor)
    assert repr(a) == repr(t)
    st, sa = t.state_dict(), a.state_dict()
    assert list(sa) == list(st)
    for k in st:
        assert tuple(sa[k].shape) == tuple(st[k].shape), k
        assert str(sa[k].dtype).split(".")[-1] == str(st[k].dtype).split(".")[-1], k
        if "running" in k or "num_batches" in k or "Norm" in ctor:
            np.testing.assert_array_equal(sa[k].numpy(), st[k].numpy())


@pytest.mark.parametrize(
    "ctor,shape",
    [
        ("Conv2d(3, 4, 3, padding=1)", (2, 3, 6, 6)),
        ("Conv2d(4, 6, 3, stride=2, groups=2, bias=False)", (2, 4, 7, 7)),
        ("Conv1d(3, 4, 3, dilation=2, padding='same')", (2, 3, 9)),
        ("ConvTranspose2d(3, 4, 3, stride=2, output_padding=1)", (2, 3, 5, 5)),
        ("ConvTranspose1d(3, 2, 4, stride=2, padding=1)", (2, 3, 5)),
        ("GroupNorm(2, 4)", (2, 4, 3, 3)),
    ],
)
def test_module_forward_backward_with_torchs_weights(torch, ctor, shape):
    t = eval("torch.nn." + ctor).double()
    a = eval("ad.nn." + ctor).double()
    a.load_state_dict({k: ad.tensor(v.numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(10).standard_normal(shape)
    x_t = torch.tensor(x, requires_grad=True)
    x_a = ad.tensor(x, requires_grad=True)
    y_t, y_a = t(x_t), a(x_a)
    np.testing.assert_allclose(_np(y_a), _np(y_t), **TOL64)
    assert_same_graph(y_t.grad_fn, y_a.grad_fn)
    (y_t**2).sum().backward()
    (y_a**2).sum().backward()
    np.testing.assert_allclose(_np(x_a.grad), _np(x_t.grad), **TOL64)
    for (n, p_t), (m, p_a) in zip(t.named_parameters(), a.named_parameters()):
        assert n == m
        np.testing.assert_allclose(_np(p_a.grad), _np(p_t.grad), **TOL64)


def test_conv_init_matches_torchs_bounds(torch):
    """kaiming_uniform(a=sqrt(5)): |w| <= 1/sqrt(fan_in), bias likewise (the draws are
    autodiag's generator's; PyTorch's formula for the bounds)."""
    for ctor in ("Conv2d(3, 8, 5)", "ConvTranspose2d(4, 6, 3, groups=2)", "Conv1d(2, 4, 7)"):
        a = eval("ad.nn." + ctor)
        fan_in = a.weight[0].numel()
        bound = 1 / fan_in**0.5
        assert float(a.weight.abs().max()) <= bound
        assert float(a.bias.abs().max()) <= bound
        assert float(a.weight.abs().max()) > 0.5 * bound  # really drawn over the range


def test_dropout2d_zeroes_whole_channels(torch):
    ad.manual_seed(0)
    x = ad.ones(8, 16, 3, 3, requires_grad=True)
    y = AF.dropout2d(x, 0.5)
    per_channel = y.detach().numpy().reshape(8, 16, 9)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(-1) == per_channel.max(-1)).all()  # a channel is all or nothing
    assert 0 < (per_channel[..., 0] == 0).mean() < 1
    t = torch.nn.functional.dropout2d(torch.ones(2, 3, 2, 2, requires_grad=True), 0.5)
    assert y.grad_fn.name() == t.grad_fn.name() == "MulBackward0"
    assert AF.dropout2d(x, 0.5, training=False) is x


def test_unflatten_module(torch):
    x = np.arange(24.0).reshape(4, 6)
    y_t = torch.nn.Unflatten(1, (2, 3))(torch.tensor(x, requires_grad=True))
    y_a = ad.nn.Unflatten(1, (2, 3))(ad.tensor(x, requires_grad=True))
    np.testing.assert_array_equal(_np(y_a), _np(y_t))
    assert_same_graph(y_t.grad_fn, y_a.grad_fn)


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------

ERRORS = [
    ("conv2d", lambda L, F: F.conv2d(L.ones(2, 3, 8, 8), L.ones(4, 2, 3, 3)), "to have 2 channels"),
    (
        "conv2d groups",
        lambda L, F: F.conv2d(L.ones(2, 4, 8, 8), L.ones(3, 2, 3, 3), groups=2),
        "expected weight to be divisible by 2 at dimension 0",
    ),
    (
        "conv2d kernel",
        lambda L, F: F.conv2d(L.ones(2, 3, 8, 8), L.ones(4, 3, 9, 9)),
        "Kernel size can't be greater than actual input size",
    ),
    (
        "conv2d dim",
        lambda L, F: F.conv2d(L.ones(8, 8), L.ones(4, 3, 3, 3)),
        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [8, 8]",
    ),
    (
        "conv2d padding",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3), padding="foo"),
        "Invalid padding string: 'foo'",
    ),
    (
        "conv2d same stride",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3), padding="same", stride=2),
        "padding='same' is not supported for strided convolutions",
    ),
    (
        "conv2d bias",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3), L.ones(3)),
        "expected bias to be 1-dimensional with 4 elements, but got bias of size [3] instead",
    ),
    (
        "conv2d dtype",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3, dtype=L.float64)),
        "expected scalar type Float but found Double",
    ),
    (
        "conv2d stride 0",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3), stride=0),
        "non-positive stride is not supported",
    ),
    (
        "conv2d stride len",
        lambda L, F: F.conv2d(L.ones(1, 3, 8, 8), L.ones(4, 3, 3, 3), stride=(1, 1, 1)),
        "expected stride to be a single integer value or a list of 2 values",
    ),
    (
        "conv_transpose2d channels",
        lambda L, F: F.conv_transpose2d(L.ones(2, 4, 8, 8), L.ones(3, 2, 3, 3)),
        "Given transposed=1, weight of size [3, 2, 3, 3], expected input[2, 4, 8, 8] to have 3",
    ),
    (
        "conv_transpose2d output_padding",
        lambda L, F: F.conv_transpose2d(L.ones(2, 4, 8, 8), L.ones(4, 2, 3, 3), output_padding=1),
        "output padding must be smaller than either stride or dilation",
    ),
    (
        "max_pool2d pad",
        lambda L, F: F.max_pool2d(L.ones(2, 3, 8, 8), 3, padding=2),
        "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3",
    ),
    (
        "max_pool2d size",
        lambda L, F: F.max_pool2d(L.ones(2, 3, 8, 8), 9),
        "Given input size: (3x8x8). Calculated output size: (3x0x0). Output size is too small",
    ),
    (
        "max_pool2d stride",
        lambda L, F: F.max_pool2d(L.ones(2, 3, 8, 8), 2, stride=0),
        "stride should not be zero",
    ),
    (
        "max_pool1d dim",
        lambda L, F: F.max_pool1d(L.ones(2, 3, 8, 8), 2),
        "max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size",
    ),
    (
        "avg_pool2d divisor",
        lambda L, F: F.avg_pool2d(L.ones(2, 3, 8, 8), 2, divisor_override=0),
        "divisor must be not zero",
    ),
    (
        "adaptive_avg_pool2d dim",
        lambda L, F: F.adaptive_avg_pool2d(L.ones(8, 8), 3),
        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [8, 8]",
    ),
    (
        "batch_norm eval",
        lambda L, F: F.batch_norm(L.ones(4, 3), None, None, training=False),
        "running_mean must be defined in evaluation mode",
    ),
    (
        "batch_norm size",
        lambda L, F: F.batch_norm(L.ones(4, 3), L.zeros(4), L.ones(4), training=True),
        "running_mean should contain 3 elements not 4",
    ),
    (
        "batch_norm one value",
        lambda L, F: F.batch_norm(L.ones(1, 3), L.zeros(3), L.ones(3), training=True),
        "Expected more than 1 value per channel when training, got input size torch.Size([1, 3])",
    ),
    (
        "batch_norm dtype",
        lambda L, F: F.batch_norm(L.ones(4, 3), L.zeros(3, dtype=L.float64), L.ones(3), None),
        "type",  # PyTorch's wording varies with the kernel it picks
    ),
    (
        "batch_norm dtype 64",
        lambda L, F: F.batch_norm(
            L.ones(4, 3, dtype=L.float64), L.zeros(3), L.ones(3), training=True
        ),
        "type",
    ),
    (
        "group_norm groups",
        lambda L, F: F.group_norm(L.ones(4, 3, 5, 5), 2),
        "Expected number of channels in input to be divisible by num_groups, but got input of "
        "shape [4, 3, 5, 5] and num_groups=2",
    ),
    (
        "group_norm weight",
        lambda L, F: F.group_norm(L.ones(4, 3, 5, 5), 3, L.ones(4)),
        "Expected weight to be a vector of size equal to the number of channels in input",
    ),
    ("Conv2d groups", lambda L, F: L.nn.Conv2d(3, 4, 3, groups=2), "in_channels must be divisible"),
    (
        "BatchNorm2d dim",
        lambda L, F: L.nn.BatchNorm2d(3)(L.ones(4, 3)),
        "expected 4D input (got 2D input)",
    ),
    (
        "GroupNorm channels",
        lambda L, F: L.nn.GroupNorm(2, 3),
        "num_channels (3) must be divisible by num_groups (2)",
    ),
]


@pytest.mark.parametrize("label,call,phrase", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_pytorch(torch, label, call, phrase):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as et:
            call(torch, torch.nn.functional)
        with pytest.raises(Exception) as ea:
            call(ad, AF)
    assert type(ea.value) is type(et.value)
    assert phrase in str(et.value), str(et.value)  # the phrase is PyTorch's
    assert phrase in str(ea.value), str(ea.value)


def test_what_autodiag_lacks_is_a_clear_not_implemented_error():
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        ad.nn.Conv2d(1, 2, 3, padding_mode="reflect")
    with pytest.raises(NotImplementedError, match=r"conv2d\(padding='same'\) with an even"):
        AF.conv2d(ad.ones(1, 1, 5, 5), ad.ones(1, 1, 2, 2), padding="same")


# ---------------------------------------------------------------------------------------------
# the debugger on conv nets
# ---------------------------------------------------------------------------------------------

DEAD_CHANNEL = """\
import autodiag as torch
import autodiag.nn as nn

conv = nn.Conv2d(1, 4, 3)
with torch.no_grad():
    conv.bias[2] = -100.0  # channel 2 is never positive: a dead filter
x = torch.sin(torch.arange(2 * 49).float().reshape(2, 1, 7, 7))
opt = torch.optim.SGD(conv.parameters(), lr=0.01)
for _ in range(6):
    opt.zero_grad()
    loss = torch.relu(conv(x)).mean()
    loss.backward()
    opt.step()
"""


def test_dead_relu_units_of_a_feature_map_are_its_channels(script):
    r = cli("check", script(DEAD_CHANNEL), "-f", "json")
    doc = json.loads(r.stdout)
    (f,) = [f for f in doc["findings"] if f["kind"] == "dead_relu"]
    assert f["units"] == [2] and f["width"] == 4, f
    assert f["location"]["line"] == 11
