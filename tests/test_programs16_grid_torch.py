"""``affine_grid`` / ``grid_sample`` (ops/grid.py), which pytorch/tutorials'
spatial_transformer_tutorial.py needs: values, gradients, node names, saved attributes,
warnings and errors against PyTorch, and the tutorial's pattern through the CLI on both
engines."""

from __future__ import annotations

import json
import textwrap
import warnings

import numpy as np
import pytest
from cli_helpers import cli

import autodiag
import autodiag.nn.functional as AF

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _run(lib, F, theta, x, size, gout, **kw):
    t = lib.tensor(theta, requires_grad=True)
    xi = lib.tensor(x, requires_grad=True)
    ac = kw.pop("align_corners")
    g = F.affine_grid(t, size, align_corners=ac)
    y = F.grid_sample(xi, g, align_corners=ac, **kw)
    y.backward(lib.tensor(gout))
    return g.detach().numpy(), y.detach().numpy(), xi.grad.numpy(), t.grad.numpy(), y, g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_grid_sample_match_pytorch(dtype, mode, padding_mode, align_corners):
    rng = np.random.RandomState(hash((mode, padding_mode, align_corners)) % 2**31)
    n, c, h, w, ho, wo = 2, 3, 5, 7, 6, 4
    theta = (rng.randn(n, 2, 3) * 0.8).astype(dtype)  # reaches outside the input: padding
    x = rng.randn(n, c, h, w).astype(dtype)
    gout = rng.randn(n, c, ho, wo).astype(dtype)
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    ref = _run(torch, TF, theta, x, (n, c, ho, wo), gout, **dict(kw))
    got = _run(autodiag, AF, theta, x, (n, c, ho, wo), gout, **dict(kw))
    # the grid, and bilinear float32 samples, are PyTorch's to the last bit (NOTE in grid.py)
    np.testing.assert_array_equal(got[0], ref[0])
    if dtype == np.float32 or mode == "nearest":
        np.testing.assert_array_equal(got[1], ref[1])
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], ref[1], **tol)
    np.testing.assert_allclose(got[2], ref[2], **tol)
    np.testing.assert_allclose(got[3], ref[3], **tol)
    assert got[1].dtype == ref[1].dtype
    y, g = got[4], got[5]
    assert y.grad_fn.name() == ref[4].grad_fn.name() == "GridSampler2DBackward0"
    assert g.grad_fn.name() == ref[5].grad_fn.name() == "AffineGridGeneratorBackward0"
    assert y.grad_fn.next_functions[1][0] is g.grad_fn
    assert y.grad_fn._saved_interpolation_mode == ref[4].grad_fn._saved_interpolation_mode
    assert y.grad_fn._saved_padding_mode == ref[4].grad_fn._saved_padding_mode
    assert y.grad_fn._saved_align_corners == ref[4].grad_fn._saved_align_corners
    assert g.grad_fn._saved_size == tuple(ref[5].grad_fn._saved_size)
    assert g.grad_fn._saved_align_corners == ref[5].grad_fn._saved_align_corners


def test_grid_points_outside_and_nan_read_zero_as_in_pytorch():
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    grid = np.array(
        [[[[-1.3, 0.2], [1.7, -0.4], [0.0, 0.0], [np.nan, 0.5], [1.0, 1.0]]]], dtype=np.float32
    )
    out = []
    for lib, F in ((torch, TF), (autodiag, AF)):
        gi = lib.tensor(grid, requires_grad=True)
        xi = lib.tensor(x, requires_grad=True)
        y = F.grid_sample(xi, gi, align_corners=False)
        y.sum().backward()
        out.append((y.detach().numpy(), xi.grad.numpy(), gi.grad.numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_a_grid_that_only_needs_grad_gives_the_grid_its_gradient():
    rng = np.random.RandomState(3)
    x = rng.randn(1, 2, 4, 4).astype(np.float32)
    grid = (rng.rand(1, 3, 3, 2) * 2 - 1).astype(np.float32)
    res = []
    for lib, F in ((torch, TF), (autodiag, AF)):
        gi = lib.tensor(grid, requires_grad=True)
        y = F.grid_sample(lib.tensor(x), gi, padding_mode="border", align_corners=True)
        (y * y).sum().backward()
        res.append(gi.grad.numpy())
        assert y.grad_fn.next_functions[0] == (None, 0)
    np.testing.assert_allclose(res[1], res[0], rtol=1e-5, atol=1e-6)


def test_align_corners_left_unset_warns_at_the_users_line_as_pytorch_does():
    theta = [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]
    msgs = []
    for lib, F in ((torch, TF), (autodiag, AF)):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            g = F.affine_grid(lib.tensor(theta), (1, 1, 2, 2))
            F.grid_sample(lib.ones(1, 1, 2, 2), g)
        msgs.append([(str(x.message), x.category, x.filename) for x in w])
    assert msgs[1] == msgs[0]
    assert len(msgs[1]) == 2 and msgs[1][0][2] == __file__
    assert "align_corners=False since 1.3.0" in msgs[1][0][0]


def _error(lib, F, fn):
    try:
        fn(lib, F)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)
    return None


@pytest.mark.parametrize(
    "case",
    [
        lambda T, F: F.grid_sample(T.ones(1, 1, 2, 2), T.zeros(1, 2, 2, 2), mode="cubic"),
        lambda T, F: F.grid_sample(T.ones(1, 1, 2, 2), T.zeros(1, 2, 2, 2), padding_mode="wrap"),
        lambda T, F: F.affine_grid(T.zeros(1, 2, 3, dtype=T.int64), (1, 1, 2, 2), False),
        lambda T, F: F.affine_grid(T.zeros(1, 3, 3), (1, 1, 2, 2), False),
        lambda T, F: F.affine_grid(T.zeros(1, 2, 3), (1, 1, 0, 2), False),
        lambda T, F: F.affine_grid(T.zeros(1, 2, 3), (1, 2), False),
        lambda T, F: F.grid_sample(
            T.ones(1, 1, 2, 2), T.zeros(1, 2, 2, 2, dtype=T.float64), align_corners=False
        ),
        lambda T, F: F.grid_sample(T.ones(2, 1, 2, 2), T.zeros(1, 2, 2, 2), align_corners=False),
        lambda T, F: F.grid_sample(T.ones(1, 1, 2, 2), T.zeros(1, 2, 2, 3), align_corners=False),
        lambda T, F: F.grid_sample(T.ones(1, 1, 2), T.zeros(1, 2, 2), align_corners=False),
        lambda T, F: F.grid_sample(T.ones(1, 1, 0, 2), T.zeros(1, 2, 2, 2), align_corners=False),
    ],
)
def test_bad_arguments_raise_pytorchs_errors(case):
    ref = _error(torch, TF, case)
    got = _error(autodiag, AF, case)
    assert ref is not None and got is not None
    assert got[0] is ref[0]
    assert got[1] == ref[1]


@pytest.mark.parametrize(
    "case, what",
    [
        (lambda T, F: F.affine_grid(T.zeros(1, 3, 4), (1, 1, 2, 2, 2), False), "5-D size"),
        (
            lambda T, F: F.grid_sample(
                T.ones(1, 1, 2, 2, 2), T.zeros(1, 2, 2, 2, 3), align_corners=False
            ),
            "5-D input",
        ),
        (
            lambda T, F: F.grid_sample(
                T.ones(1, 1, 2, 2), T.zeros(1, 2, 2, 2), mode="bicubic", align_corners=False
            ),
            "bicubic",
        ),
    ],
)
def test_what_autodiag_leaves_out_raises_naming_it(case, what):
    assert _error(torch, TF, case) is None  # PyTorch has it: autodiag says it does not
    err = _error(autodiag, AF, case)
    assert err[0] is NotImplementedError and what in err[1]


def test_double_backward_raises_instead_of_a_wrong_gradient():
    x = autodiag.randn(1, 1, 3, 3, requires_grad=True)
    grid = autodiag.zeros(1, 2, 2, 2, requires_grad=True)
    y = AF.grid_sample(x, grid, align_corners=False)
    with pytest.raises(NotImplementedError, match="GridSampler2DBackward0"):
        autodiag.autograd.grad(y.sum(), x, create_graph=True)
    theta = autodiag.randn(1, 2, 3, requires_grad=True)
    g = AF.affine_grid(theta, (1, 1, 2, 2), align_corners=False)
    with pytest.raises(NotImplementedError, match="AffineGridGeneratorBackward0"):
        autodiag.autograd.grad((g * g).sum(), theta, create_graph=True)


# --- the tutorial's pattern through the CLI, on both engines ---------------------------------

STN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), nn.ReLU(True))
        self.fc_loc = nn.Linear(4 * 3 * 3, 6)
        self.fc_loc.weight.data.zero_()
        self.fc_loc.bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
        self.fc = nn.Linear(8 * 8, 3)

    def stn(self, x):
        theta = self.fc_loc(self.loc(x).view(-1, 4 * 3 * 3)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        {WRITE}
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x):
        return F.log_softmax(self.fc(self.stn(x).view(-1, 64)), dim=1)


def main():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(6, 1, 8, 8)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    for step in range(3):
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4))


main()
"""


def _script(tmp_path, write: str):
    p = tmp_path / "stn.py"
    p.write_text(textwrap.dedent(STN.replace("{WRITE}", write)))
    return str(p)


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_the_stn_graph_names_the_grid_nodes_on_both_engines(tmp_path, engine):
    r = cli("graph", _script(tmp_path, "pass"), "-f", "json", "--engine", engine)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    names = [n["name"] for n in doc["nodes"]]
    assert "GridSampler2DBackward0" in names and "AffineGridGeneratorBackward0" in names
    sampler = next(n for n in doc["nodes"] if n["name"] == "GridSampler2DBackward0")
    # (the order differs: PyTorch's engine lists a node's saved values alphabetically)
    assert sorted(s["name"] for s in sampler["saved"]) == ["grid", "input"]


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_write_into_the_sampled_grid_is_found_on_both_engines(tmp_path, engine):
    # grid_sample saved the grid for backward; a later in-place write breaks the backward
    path = _script(tmp_path, "pass")
    text = (
        open(path)
        .read()
        .replace(
            "        return F.grid_sample(x, grid, align_corners=False)",
            "        out = F.grid_sample(x, grid, align_corners=False)\n"
            "        grid.mul_(1.0)  # BUG: GridSampler2DBackward0 saved it\n"
            "        return out",
        )
    )
    open(path, "w").write(text)
    line = (
        text.splitlines().index("        grid.mul_(1.0)  # BUG: GridSampler2DBackward0 saved it")
        + 1
    )
    r = cli("inplace", path, "-f", "json", "--engine", engine)
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    kinds = {(f["kind"], f["location"]["line"]) for f in doc["findings"]}
    assert ("inplace_saved_tensor", line) in kinds
    assert "GridSampler2DBackward0" in doc["findings"][0]["message"]


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_the_healthy_stn_passes_every_detector_on_both_engines(tmp_path, engine):
    r = cli("check", _script(tmp_path, "pass"), "-f", "json", "--engine", engine)
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    assert doc["backward_calls"] == 3 and doc["optimizer_steps"] == 3
    assert [f["kind"] for f in doc["findings"] if f["severity"] == "error"] == []


# the registered torch.* names (test_ops_torch.py's registry check reads COVERED)
COVERED = {"affine_grid_generator", "grid_sampler"}


def test_the_aten_level_names_match_pytorch():
    """``torch.affine_grid_generator`` and ``torch.grid_sampler`` (what F.affine_grid and
    F.grid_sample call): nodes, the grid and samples bit for bit, gradients to the last bit."""
    torch = pytest.importorskip("torch")
    th = np.array([[[0.9, 0.1, 0.05], [-0.1, 1.1, 0.0]]], dtype=np.float32)
    x = np.arange(60, dtype=np.float32).reshape(1, 3, 4, 5)
    seen = {}
    for T in (torch, autodiag):
        t = T.tensor(th, requires_grad=True)
        g = T.affine_grid_generator(t, [1, 3, 4, 5], False)
        xi = T.tensor(x, requires_grad=True)
        y = T.grid_sampler(xi, g, 0, 0, False)
        y.sum().backward()
        seen[T.__name__] = (
            g.grad_fn.name(),
            y.grad_fn.name(),
            g.detach().numpy(),
            y.detach().numpy(),
            t.grad.numpy(),
            xi.grad.numpy(),
        )
    a, b = seen["autodiag"], seen["torch"]
    assert a[:2] == b[:2]  # node names
    np.testing.assert_array_equal(a[2], b[2])
    np.testing.assert_array_equal(a[3], b[3])
    # the gradients' sums in another order (theta's through a cancelling sum: BLAS order)
    np.testing.assert_allclose(a[4], b[4], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(a[5], b[5], rtol=1e-6)
