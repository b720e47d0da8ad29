"""adaptive_max_pool1d/2d, max_pool3d, avg_pool3d, conv3d/conv_transpose3d, instance_norm and
their modules (AdaptiveMaxPool1d/2d, MaxPool3d, AvgPool3d, Conv3d, ConvTranspose3d,
InstanceNorm1d/2d/3d, BatchNorm3d) against PyTorch 2.13: values, returned indices, gradients,
second gradients, the recorded graph node for node, running statistics, reprs, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from differential import same_error
from test_attention_torch import _graph

import autodiag as ad

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
W3 = R.standard_normal((4, 2, 2, 3, 2))
WT3 = R.standard_normal((4, 2, 2, 3, 2))
AFF = R.standard_normal(3)


def _F(T):
    return T.nn.functional


# name -> (fn(T, x), input shape)
CASES = {
    "adaptive_max_pool2d": (
        lambda T, x: _F(T).adaptive_max_pool2d(x, (2, 4), return_indices=True),
        (2, 3, 5, 7),
    ),
    "adaptive_max_pool2d_none_unbatched": (
        lambda T, x: _F(T).adaptive_max_pool2d(x, (3, None), return_indices=True),
        (3, 5, 7),
    ),
    "adaptive_max_pool2d_grow": (
        lambda T, x: _F(T).adaptive_max_pool2d(x, 6, return_indices=True),
        (1, 2, 4, 5),
    ),
    "adaptive_max_pool1d": (
        lambda T, x: _F(T).adaptive_max_pool1d(x, 4, return_indices=True),
        (2, 3, 7),
    ),
    "adaptive_max_pool1d_torch_ns": (lambda T, x: T.adaptive_max_pool1d(x, 3), (3, 8)),
    "max_pool3d": (
        lambda T, x: _F(T).max_pool3d(
            x, (2, 3, 2), stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), return_indices=True
        ),
        (2, 2, 5, 6, 7),
    ),
    "max_pool3d_ceil_unbatched": (
        lambda T, x: _F(T).max_pool3d(x, 2, ceil_mode=True, return_indices=True),
        (2, 5, 6, 7),
    ),
    "max_pool3d_module": (lambda T, x: T.nn.MaxPool3d(3, stride=2, padding=1)(x), (1, 2, 6, 5, 4)),
    "avg_pool3d": (
        lambda T, x: _F(T).avg_pool3d(
            x, (2, 3, 2), stride=(1, 2, 1), padding=1, count_include_pad=False, ceil_mode=True
        ),
        (2, 2, 5, 6, 7),
    ),
    "avg_pool3d_divisor_unbatched": (
        lambda T, x: _F(T).avg_pool3d(x, 2, divisor_override=3),
        (2, 4, 5, 6),
    ),
    "avg_pool3d_module": (lambda T, x: T.nn.AvgPool3d((1, 2, 2))(x), (2, 2, 3, 4, 4)),
    "conv3d": (
        lambda T, x: _F(T).conv3d(
            x, T.tensor(W3, dtype=x.dtype), stride=(1, 2, 1), padding=1, dilation=(2, 1, 1)
        ),
        (2, 2, 5, 6, 7),
    ),
    "conv3d_groups_same_unbatched": (
        lambda T, x: _F(T).conv3d(
            x, T.tensor(W3[:, :1, :1, :3, :1], dtype=x.dtype), padding="same", groups=2
        ),
        (2, 4, 5, 6),
    ),
    "conv_transpose3d": (
        lambda T, x: _F(T).conv_transpose3d(
            x, T.tensor(WT3, dtype=x.dtype), stride=2, padding=1, output_padding=1
        ),
        (2, 4, 3, 4, 3),
    ),
    "instance_norm": (lambda T, x: _F(T).instance_norm(x), (2, 3, 5, 6)),
    "instance_norm_affine": (
        lambda T, x: _F(T).instance_norm(
            x, weight=T.tensor(AFF, dtype=x.dtype), bias=T.tensor(AFF, dtype=x.dtype), eps=1e-3
        ),
        (2, 3, 5),
    ),
    "instance_norm_3d": (lambda T, x: _F(T).instance_norm(x), (2, 3, 2, 3, 2)),
}


def _run(T, fn, shape, dtype):
    x = T.tensor(np.asarray(R_X[: int(np.prod(shape))]).reshape(shape).astype(dtype))
    x.requires_grad_(True)
    out = fn(T, x)
    y, idx = out if isinstance(out, tuple) else (out, None)
    w = T.tensor(R_W[: y.numel()].reshape(tuple(y.shape)).astype(dtype))
    (g,) = T.autograd.grad((y * w).sum(), x, create_graph=True)
    return x, y, idx, g


R_X = R.standard_normal(4000)
R_W = R.standard_normal(4000)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(CASES))
def test_values_indices_gradients_and_graph_match_torch(name, dtype):
    fn, shape = CASES[name]
    xa, ya, ia, ga = _run(ad, fn, shape, dtype)
    xt, yt, it, gt = _run(torch, fn, shape, dtype)
    tol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(ya.detach().numpy(), yt.detach().numpy(), rtol=tol, atol=tol)
    assert ya.dtype == getattr(ad, dtype)
    assert (ia is None) == (it is None)
    if ia is not None:
        np.testing.assert_array_equal(ia.numpy(), it.numpy())
        assert ia.dtype == ad.int64
    np.testing.assert_allclose(ga.detach().numpy(), gt.detach().numpy(), rtol=tol, atol=tol)
    assert _graph(ya) == _graph(yt)


SECOND = [n for n in CASES if not n.startswith("conv")]


@pytest.mark.parametrize("name", SECOND)
def test_second_gradients_match_torch(name):
    """Through the pooling ops' ``<Op>BackwardBackward0`` nodes and batch norm's double
    backward (convolution's is covered by tests/test_conv_torch.py)."""
    fn, shape = CASES[name]
    res = []
    for T in (ad, torch):
        x, y, _, g = _run(T, fn, shape, "float64")
        w = T.tensor(R_W[1000 : 1000 + g.numel()].reshape(tuple(g.shape)))
        (gg,) = T.autograd.grad((g * g * w).sum(), x, allow_unused=True)
        res.append((None if gg is None else gg.numpy(), g.grad_fn and g.grad_fn.name()))
    (a, an), (t, tn) = res
    if name.startswith("adaptive_max_pool1d"):
        # NOTE: the first gradient's last node is UnsqueezeBackward0's backward, which
        # autodiag records as a reshape (ViewBackward0) where PyTorch records squeeze
        # (SqueezeBackward1): shape.py's rule for every unsqueeze (max_pool1d's too), not
        # this op's; the values agree.
        assert (an, tn) == ("ViewBackward0", "SqueezeBackward1")
    else:
        assert an == tn
    if t is None:
        assert a is None or not a.any()
    else:
        np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-12)


def test_conv3d_second_gradient_wrt_weight_matches_torch():
    res = []
    for T in (ad, torch):
        x = T.tensor(R_X[:840].reshape(2, 2, 5, 6, 7), requires_grad=True)
        w = T.tensor(W3, requires_grad=True)
        y = T.nn.functional.conv3d(x, w, padding=1)
        (gx,) = T.autograd.grad((y * y).sum(), x, create_graph=True)
        res.append([t.numpy() for t in T.autograd.grad((gx * gx).sum(), (x, w))])
    for a, t in zip(*res, strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-9, atol=1e-9)


def _sd(m):
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize(
    ("cls", "kw", "shape"),
    [
        ("InstanceNorm1d", {}, (2, 3, 5)),
        ("InstanceNorm1d", {"affine": True, "track_running_stats": True}, (2, 3, 5)),
        ("InstanceNorm2d", {"track_running_stats": True, "momentum": None}, (2, 3, 4, 5)),
        ("InstanceNorm2d", {"affine": True}, (3, 4, 5)),  # unbatched
        ("InstanceNorm3d", {"track_running_stats": True}, (2, 3, 2, 3, 4)),
        ("BatchNorm3d", {}, (2, 3, 2, 3, 4)),
        ("BatchNorm3d", {"momentum": None, "affine": False}, (2, 3, 2, 3, 4)),
    ],
)
def test_normalization_modules_train_and_eval_match_torch(cls, kw, shape):
    res, tsd = [], None
    for T in (torch, ad):  # torch first: autodiag loads its state
        m = getattr(T.nn, cls)(3, **kw).double()
        if tsd is not None:
            m.load_state_dict({k: ad.tensor(v) for k, v in tsd.items()})
        else:
            if m.weight is not None:
                with torch.no_grad():
                    m.weight.copy_(torch.tensor(AFF))
                    m.bias.copy_(torch.tensor(AFF[::-1].copy()))
            tsd = _sd(m)
        outs = []
        for step in range(3):
            x = T.tensor(R_X[step * 100 : step * 100 + int(np.prod(shape))].reshape(shape))
            x.requires_grad_(True)
            y = m(x)
            (g,) = T.autograd.grad((y * y * y).sum(), x)
            outs.append((y.detach().numpy(), g.numpy(), _graph(y)))
        m.eval()
        x = T.tensor(R_X[500 : 500 + int(np.prod(shape))].reshape(shape))
        outs.append((m(x).detach().numpy(), None, None))
        res.append((outs, _sd(m), repr(m), [n for n, _ in m.named_parameters()]))
    (to, tsd2, tr, tn), (ao, asd, ar, an) = res
    for (y1, g1, gr1), (y2, g2, gr2) in zip(ao, to, strict=True):
        np.testing.assert_allclose(y1, y2, rtol=1e-10, atol=1e-10)
        if g1 is not None:
            np.testing.assert_allclose(g1, g2, rtol=1e-9, atol=1e-9)
        assert gr1 == gr2
    assert asd.keys() == tsd2.keys()
    for k in asd:
        np.testing.assert_allclose(asd[k], tsd2[k], rtol=1e-12, err_msg=k)
    assert ar == tr and an == tn


def test_instance_norm_running_stats_update_and_version_match_torch():
    res = []
    for T in (ad, torch):
        rm, rv = T.zeros(3, dtype=T.float64), T.ones(3, dtype=T.float64)
        x = T.tensor(R_X[:30].reshape(2, 3, 5))
        T.nn.functional.instance_norm(x, rm, rv, momentum=0.3)
        y = T.nn.functional.instance_norm(x, rm, rv, use_input_stats=False)
        res.append((rm.numpy(), rv.numpy(), rm._version, y.numpy()))
    for a, t in zip(*res, strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-12)


def test_instance_norm_is_not_a_batch_norm():
    """isinstance checks scripts make (e.g. to exclude norms from weight decay) see
    PyTorch's hierarchy: both are _NormBase, only BatchNorm is _BatchNorm."""
    from autodiag.nn.modules.batchnorm import _BatchNorm, _NormBase

    assert isinstance(ad.nn.InstanceNorm1d(3), _NormBase)
    assert not isinstance(ad.nn.InstanceNorm1d(3), _BatchNorm)
    assert isinstance(ad.nn.BatchNorm3d(3), _BatchNorm)


@pytest.mark.parametrize(
    "make",
    [
        lambda T: T.nn.MaxPool3d(2, return_indices=True),
        lambda T: T.nn.AvgPool3d((1, 2, 2), stride=1, padding=(0, 1, 1)),
        lambda T: T.nn.AdaptiveMaxPool1d(3),
        lambda T: T.nn.AdaptiveMaxPool2d((2, None), return_indices=True),
        lambda T: T.nn.Conv3d(2, 4, (1, 2, 3), stride=2, padding=1, groups=2, bias=False),
        lambda T: T.nn.ConvTranspose3d(2, 3, 2, stride=2, output_padding=1),
        lambda T: T.nn.InstanceNorm1d(3),
        lambda T: T.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
        lambda T: T.nn.BatchNorm3d(3),
    ],
)
def test_module_repr_and_state_dict_match_torch(make):
    a, t = make(ad), make(torch)
    assert repr(a) == repr(t)
    assert {k: tuple(v.shape) for k, v in a.state_dict().items()} == {
        k: tuple(v.shape) for k, v in t.state_dict().items()
    }


def test_conv3d_module_loads_torch_weights_and_matches():
    res, tsd = [], None
    for T in (torch, ad):
        m = T.nn.Conv3d(2, 4, (2, 3, 2), stride=(1, 2, 1), padding="valid").double()
        if tsd is not None:
            m.load_state_dict({k: ad.tensor(v) for k, v in tsd.items()})
        tsd = _sd(m)
        x = T.tensor(R_X[:840].reshape(2, 2, 5, 6, 7), requires_grad=True)
        y = m(x)
        y.pow(2).sum().backward()
        res.append((y.detach().numpy(), x.grad.numpy(), m.weight.grad.numpy(), m.bias.grad.numpy()))
    for a, t in zip(*res, strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-10, atol=1e-10)


ERRORS = [
    ("mp3_dims", lambda T: T.nn.functional.max_pool3d(T.ones(2, 3, 4), 2)),
    ("ap3_dims", lambda T: T.nn.functional.avg_pool3d(T.ones(2, 3, 4), 2)),
    ("mp3_small", lambda T: T.nn.functional.max_pool3d(T.ones(1, 1, 1, 1, 1), 2)),
    ("ap3_small", lambda T: T.nn.functional.avg_pool3d(T.ones(1, 1, 1, 1, 1), 2)),
    ("mp3_pad", lambda T: T.nn.functional.max_pool3d(T.ones(1, 1, 4, 4, 4), 3, padding=2)),
    ("amp2_dims", lambda T: T.nn.functional.adaptive_max_pool2d(T.ones(2, 3), 2)),
    ("amp1_dims", lambda T: T.nn.functional.adaptive_max_pool1d(T.ones(2, 3, 4, 5), 2)),
    ("amp2_size", lambda T: T.nn.functional.adaptive_max_pool2d(T.ones(2, 3, 4), (2, 2, 2))),
    ("amp2_empty", lambda T: T.nn.functional.adaptive_max_pool2d(T.ones(2, 3, 0, 4), 2)),
    ("in_spatial", lambda T: T.nn.functional.instance_norm(T.ones(2, 3, 1))),
    ("in_affine", lambda T: T.nn.InstanceNorm1d(3, affine=True)(T.ones(2, 4, 5))),
    ("in_dims", lambda T: T.nn.InstanceNorm2d(3)(T.ones(2, 3))),
    ("bn3_dims", lambda T: T.nn.BatchNorm3d(3)(T.ones(2, 3, 4, 5))),
    (
        "conv3d_channels",
        lambda T: T.nn.functional.conv3d(T.ones(2, 3, 4, 5), T.ones(1, 3, 2, 2, 2)),
    ),
    ("conv3d_dims", lambda T: T.nn.functional.conv3d(T.ones(3, 4, 5), T.ones(1, 3, 2, 2, 2))),
]


@pytest.mark.parametrize("fn", [e[1] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_match_torch(fn):
    ea, et = same_error(fn, torch)
    assert str(ea) == str(et)


def test_instance_norm_channel_mismatch_warns_as_torch():
    msgs = []
    for T in (ad, torch):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            T.nn.InstanceNorm1d(3)(T.ones(2, 4, 5))
        msgs.append([str(x.message) for x in w])
    assert msgs[0] == msgs[1] and len(msgs[0]) == 1
