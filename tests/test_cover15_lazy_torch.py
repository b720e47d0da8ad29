"""d2l's lazy layers against PyTorch: ``nn.LazyConv2d``/``LazyConv1d`` and
``nn.LazyBatchNorm2d``/``LazyBatchNorm1d`` (nn/modules/lazy.py) materialise in place at the
first forward (the same objects an optimizer built before holds), draw PyTorch's initial
values, become the plain module, and save/load checkpoints as PyTorch's do."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from test_cli import cli

import autodiag as ad


def _net(T):
    return T.nn.Sequential(
        T.nn.LazyConv2d(4, 3, padding=1),
        T.nn.LazyBatchNorm2d(),
        T.nn.ReLU(),
        T.nn.LazyConv2d(2, 3, stride=2, groups=2, bias=False),
        T.nn.Flatten(),
        T.nn.LazyLinear(3),
    )


def _train(T, steps=3):
    T.manual_seed(0)
    net = _net(T)
    before = (repr(net), {k: type(v).__name__ for k, v in net.state_dict().items()})
    params = list(net.parameters())
    opt = T.optim.SGD(params, lr=0.1, momentum=0.9)
    x = T.randn(4, 2, 6, 6)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    same_objects = all(a is b for a, b in zip(params, net.parameters()))
    state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    kinds = [type(m).__name__ for m in net]
    return before, repr(net), same_objects, losses, state, kinds


def test_lazy_conv_and_batchnorm_train_as_torch(torch):
    a, t = _train(ad), _train(torch)
    assert a[0] == t[0]  # reprs and state_dict entry kinds before the first forward
    assert a[1] == t[1] and a[5] == t[5] == [
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
        "Conv2d",
        "Flatten",
        "Linear",
    ]
    assert a[2] and t[2]  # the optimizer's parameters are the module's, materialised in place
    np.testing.assert_allclose(a[3], t[3], rtol=1e-5)
    assert a[4].keys() == t[4].keys()
    for k in t[4]:
        np.testing.assert_allclose(a[4][k], t[4][k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda T: T.nn.LazyConv1d(3, 2), (2, 4, 7)),
        (lambda T: T.nn.LazyConv1d(3, 2), (4, 7)),  # unbatched
        (lambda T: T.nn.LazyConv2d(3, (2, 1), bias=False), (3, 5, 4)),  # unbatched
        (lambda T: T.nn.LazyBatchNorm1d(affine=False), (5, 3)),
        (lambda T: T.nn.LazyBatchNorm1d(track_running_stats=False), (5, 3, 2)),
        (lambda T: T.nn.LazyBatchNorm2d(momentum=None), (3, 2, 2, 2)),
    ],
    ids=["conv1d", "conv1d_unbatched", "conv2d_unbatched", "bn1d_no_affine", "bn1d_untracked",
         "bn2d_cma"],
)  # fmt: skip
def test_each_lazy_module_materialises_as_torch(torch, make, shape):
    def run(T):
        T.manual_seed(1)
        m = make(T)
        x = T.randn(*shape)
        y = m(x)
        return (
            repr(m),
            y.detach().numpy(),
            {k: v.detach().numpy().copy() for k, v in m.state_dict().items()},
        )

    a, t = run(ad), run(torch)
    assert a[0] == t[0]
    np.testing.assert_allclose(a[1], t[1], rtol=1e-5, atol=1e-6)
    assert a[2].keys() == t[2].keys()
    for k in t[2]:
        np.testing.assert_allclose(a[2][k], t[2][k], rtol=1e-6, err_msg=k)


def test_checkpoints_before_and_after_the_first_forward(torch):
    def run(T):
        T.manual_seed(2)
        trained = _net(T)
        x = T.randn(2, 2, 6, 6)
        y = trained(x)
        fresh = _net(T)
        lazy_sd = fresh.state_dict()
        kinds = sorted({type(v).__name__ for v in lazy_sd.values()})
        missing = fresh.load_state_dict(trained.state_dict())  # materialises, still lazy
        still_lazy = [type(m).__name__ for m in fresh]
        fresh.eval(), trained.eval()
        z = fresh(x)
        # a lazy module loading a lazy checkpoint: nothing missing, nothing copied
        other = _net(T).load_state_dict(_net(T).state_dict())
        return (
            kinds,
            tuple(missing),
            still_lazy,
            [type(m).__name__ for m in fresh],
            np.abs(z.detach().numpy() - trained(x).detach().numpy()).max(),
            tuple(other),
            y.shape,
        )

    a, t = run(ad), run(torch)
    assert a[:4] == t[:4] and a[5:] == t[5:]
    assert a[4] == 0 and t[4] == 0


def test_errors_match_torch(torch):
    from differential import same_error

    same_error(
        lambda T: T.nn.LazyConv2d(4, 3, groups=2)(T.ones(1, 3, 5, 5)),
        torch,
        "in_channels must be divisible by groups",
    )
    same_error(
        lambda T: T.nn.LazyConv2d(4, 3).weight.shape,
        torch,
        "Can't access the shape of an uninitialized parameter",
    )
    same_error(
        lambda T: T.nn.LazyBatchNorm2d().running_mean.shape,
        torch,
        "Can't access the shape of an uninitialized parameter",
    )
    same_error(
        lambda T: T.nn.LazyBatchNorm2d()(T.ones(2, 3)),
        torch,
        "expected 4D input (got 2D input)",
    )


D2L_LIKE = """
import torch
from torch import nn

def lenet():
    return nn.Sequential(
        nn.LazyConv2d(6, kernel_size=5, padding=2), nn.LazyBatchNorm2d(), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.LazyConv2d(16, kernel_size=5), nn.LazyBatchNorm2d(), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
        nn.LazyLinear(10))

def main():
    torch.manual_seed(0)
    net = lenet()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 5))

main()
"""


def test_a_d2l_style_lazy_lenet_through_the_cli_on_both_engines(tmp_path):
    p = tmp_path / "lazy_lenet.py"
    p.write_text(textwrap.dedent(D2L_LIKE))
    names = {}
    for engine in ("autodiag", "torch"):
        r = cli("graph", str(p), "-f", "json", "--engine", engine)
        assert r.exit_code == 0, r.stdout + r.stderr
        names[engine] = [n["name"] for n in json.loads(r.stdout)["nodes"]]
    assert names["autodiag"] == names["torch"]
    assert "ConvolutionBackward0" in names["autodiag"]
    assert "NativeBatchNormBackward0" in names["autodiag"]
    r = cli("check", str(p))
    assert r.exit_code == 0, r.stdout + r.stderr
