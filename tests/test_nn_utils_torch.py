"""Differential tests of ``autodiag.nn.utils`` (clip_grad_norm_, clip_grad_value_,
parameters_to_vector, vector_to_parameters) against ``torch.nn.utils``."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from differential import assert_same, names, same_error

import autodiag as ad

torch = pytest.importorskip("torch")


def _params(lib, dtypes=("float32", "float32", "float32"), scale=1.0, none_grad=False):
    rng = np.random.default_rng(0)
    ps = []
    for i, (shape, dt) in enumerate(zip([(3, 4), (5,), (2, 2, 2)], dtypes)):
        p = lib.nn.Parameter(lib.tensor(rng.standard_normal(shape).astype(dt)))
        if not (none_grad and i == 1):
            p.grad = lib.tensor((rng.standard_normal(shape) * scale).astype(dt))
        ps.append(p)
    return ps


CLIP_NORM = [
    ("l2_clips", dict(max_norm=1.0)),
    ("l2_no_clip", dict(max_norm=100.0)),
    ("l1", dict(max_norm=2.0, norm_type=1)),
    ("inf", dict(max_norm=0.5, norm_type=float("inf"))),
    ("p_half", dict(max_norm=3.0, norm_type=0.5)),
    ("p3_str", dict(max_norm=1.0, norm_type=3.0)),
]


@pytest.mark.parametrize("kw", [c[1] for c in CLIP_NORM], ids=[c[0] for c in CLIP_NORM])
@pytest.mark.parametrize("case", ["float32", "float64", "mixed", "none_grad"])
def test_clip_grad_norm_matches_torch(case, kw):
    dts = {
        "float32": ("float32",) * 3,
        "float64": ("float64",) * 3,
        "mixed": ("float32", "float64", "float32"),
        "none_grad": ("float32",) * 3,
    }[case]

    def run(lib):
        ps = _params(lib, dts, none_grad=case == "none_grad")
        v0 = [None if p.grad is None else p.grad._version for p in ps]
        total = lib.nn.utils.clip_grad_norm_(ps, **kw)
        v1 = [None if p.grad is None else p.grad._version - v for p, v in zip(ps, v0)]
        return total, [p.grad for p in ps], v1, [p._version for p in ps]

    a, t = run(ad), run(torch)
    if case == "mixed":
        # a float64 total of float32 norms: those agree to float32 rounding only
        np.testing.assert_allclose(a[0].item(), t[0].item(), rtol=1e-6)
        for ga, gt in zip(a[1], t[1]):
            assert ga.numpy().dtype == gt.numpy().dtype
            np.testing.assert_allclose(ga.numpy(), gt.numpy(), rtol=1e-6)
        a, t = a[2:], t[2:]
    assert_same(a, t)


def test_clip_grad_norm_forms_and_errors():
    for lib in (ad, torch):
        p = lib.nn.Parameter(lib.ones(3))
        p.grad = lib.full((3,), 4.0)
        total = lib.nn.utils.clip_grad_norm_(p, 1.0)  # a single tensor
        assert math.isclose(total.item(), math.sqrt(48), rel_tol=1e-6)
        assert p.grad.tolist() == pytest.approx([1 / math.sqrt(3)] * 3, rel=1e-5)
        # no gradients at all: a zero norm, nothing scaled
        q = lib.nn.Parameter(lib.ones(2))
        t = lib.nn.utils.clip_grad_norm_([q], 1.0)
        assert t.item() == 0.0 and t.dtype == lib.float32 and q.grad is None
        with pytest.warns(UserWarning, match="empty generator"):
            lib.nn.utils.clip_grad_norm_((x for x in []), 1.0)
        with pytest.warns(FutureWarning, match="deprecated in favor"):
            lib.nn.utils.clip_grad_norm([p], 1.0)

    def nonfinite(lib):
        p = lib.nn.Parameter(lib.ones(2))
        p.grad = lib.tensor([1.0, float("inf")])
        lib.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)

    ea, et = same_error(nonfinite, torch, "is non-finite, so it cannot be clipped")
    assert str(ea) == str(et)

    def foreach(lib):  # accepted; the same values
        p = lib.nn.Parameter(lib.ones(2))
        p.grad = lib.ones(2)
        return lib.nn.utils.clip_grad_norm_([p], 1.0, foreach=True), p.grad

    assert_same(foreach(ad), foreach(torch))

    def nan_scaled(lib):
        p = lib.nn.Parameter(lib.ones(2))
        p.grad = lib.tensor([1.0, float("nan")])
        return lib.nn.utils.clip_grad_norm_([p], 1.0), p.grad

    assert_same(nan_scaled(ad), nan_scaled(torch))


@pytest.mark.parametrize("clip", [0.3, 1, 5.0])
def test_clip_grad_value_matches_torch(clip):
    def run(lib):
        ps = _params(lib, ("float32", "float64", "float32"), scale=2.0, none_grad=True)
        v0 = [None if p.grad is None else p.grad._version for p in ps]
        out = lib.nn.utils.clip_grad_value_(ps, clip)
        return (
            out,
            [p.grad for p in ps],
            [None if v is None else p.grad._version - v for p, v in zip(ps, v0)],
        )

    assert_same(run(ad), run(torch))
    for lib in (ad, torch):
        p = lib.nn.Parameter(lib.ones(2))
        p.grad = lib.tensor([-3.0, 0.5])
        lib.nn.utils.clip_grad_value_(p, 1.0)  # a single tensor
        assert p.grad.tolist() == [-1.0, 0.5]


def test_parameters_to_vector_is_differentiable():
    def run(lib):
        ps = _params(lib, ("float64",) * 3)
        vec = lib.nn.utils.parameters_to_vector(ps)
        (vec * lib.arange(vec.numel(), dtype=lib.float64)).sum().backward()
        return (
            vec,
            names(vec.grad_fn),
            names(vec.grad_fn.next_functions[0][0]),
            [p.grad for p in ps],
        )

    a, t = run(ad), run(torch)
    assert a[1] == t[1] and a[2] == t[2]
    assert_same(a, t)


def test_vector_to_parameters():
    def run(lib):
        ps = _params(lib)
        vec = lib.arange(25, dtype=lib.float32) / 7
        lib.nn.utils.vector_to_parameters(vec, ps)
        return ps, [p.is_leaf for p in ps], [p.requires_grad for p in ps]

    assert_same(run(ad), run(torch))

    ea, et = same_error(lambda lib: lib.nn.utils.vector_to_parameters([1.0], _params(lib)), torch)
    assert str(ea) == str(et)


def test_import_paths_under_the_alias():
    from autodiag.torch_alias import torch_alias

    with torch_alias(), warnings.catch_warnings():
        import torch as t2
        from torch.nn.utils import clip_grad_norm_, parameters_to_vector  # noqa: F401
        from torch.nn.utils.clip_grad import clip_grad_value_  # noqa: F401
        from torch.optim.lr_scheduler import OneCycleLR  # noqa: F401

        assert t2.nn.utils.clip_grad_norm_ is clip_grad_norm_
        assert t2.nn.utils.convert_parameters.vector_to_parameters is not None
