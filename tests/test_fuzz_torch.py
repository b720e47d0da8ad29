"""The differential fuzzer (tests/fuzz) on a fixed-seed budget, and checks that it can fail.

``test_fuzz_budget`` runs FUZZ_PROGRAMS seeded random programs on autodiag and PyTorch and fails
listing a minimal runnable repro for each class of difference. Classes listed in
``tests/fuzz/known_issues.py`` are reported as a warning with their
counts and do not fail the test; with FUZZ_STALE=1 the entries that matched no program fail it
(listed). Long runs: ``python tests/fuzz/run.py --seconds 900``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
from fuzz import fuzzer as fz
from fuzz.campaign import Campaign

import autodiag as ad

FUZZ_SEED = 2024
FUZZ_PROGRAMS = int(os.environ.get("FUZZ_PROGRAMS", "300"))


def test_fuzz_budget(torch):
    camp = Campaign(torch, ad, seed=FUZZ_SEED)
    for _ in range(FUZZ_PROGRAMS):
        camp.step()
    known = [c for c in camp.classes.values() if c.known is not None]
    if known:
        warnings.warn(
            "fuzz: known-issue classes (tests/fuzz/known_issues.py): "
            + "; ".join(f"{c.count}x {c.label} [{c.known.branch}]" for c in known),
            stacklevel=1,
        )
    assert camp.unknown_failing == 0, camp.report(max_repros=20)
    assert camp.programs == FUZZ_PROGRAMS
    if os.environ.get("FUZZ_STALE") == "1":
        # entries of known_issues.py that no program of this run matched: fixed, or out of
        # the budget's reach (run longer: FUZZ_PROGRAMS=3000)
        stale = camp.stale_known()
        assert not stale, "stale known-issue entries:\n" + "\n".join(
            f"  {k.branch}: {k.ops!r} / {k.diff!r}: {k.issue}" for k in stale
        )


# ---- the fuzzer itself -----------------------------------------------------------------------


def test_fuzzer_finds_and_shrinks_a_wrong_gradient(torch, monkeypatch):
    # sin's gradient made wrong through a custom Function: the fuzzer must find a difference
    # and shrink it to a one-step program over one input
    class BadSin(ad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.detach().sin()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.cos() * 1.01

    monkeypatch.setattr(ad, "sin", BadSin.apply)
    camp = Campaign(torch, ad, seed=5, op_names={"sin"}, use_known=False)
    for _ in range(30):
        camp.step()
    labels = {c.label: c for c in camp.classes.values()}
    assert any(label.startswith("sin | forward grad_fn") for label in labels), labels
    program = fz.Program(
        inputs=(fz.Input("x0", "float64", np.array([0.5, -1.0, 2.0]), True),),
        steps=(
            fz.Step("sin", "t0", "torch.sin(x0)", ("x0",)),
            fz.Step("mul", "t1", "t0 * x0", ("t0", "x0")),
        ),
    )
    # grad_fn names are compared first; bypass them to reach the gradient comparison
    monkeypatch.setattr(fz, "compare_tensors", _without_grad_fn(fz.compare_tensors))
    out = fz.run_program(program, torch, ad)
    assert out.diff is not None and out.diff.describe() == "grad value: different finite values", (
        out.diff
    )
    small, diff = fz.shrink(program, out.diff, torch, ad)
    assert [s.op for s in small.steps] == ["sin"] and small.inputs[0].values.size == 1
    assert fz.classify(small, diff) == "sin | grad value: different finite values"


def _without_grad_fn(compare):
    def inner(*args, **kwargs):
        kwargs["grad_fn"] = False
        return compare(*args, **kwargs)

    return inner


def test_a_clean_op_gives_no_difference(torch):
    camp = Campaign(torch, ad, seed=3, op_names={"tanh", "add", "mul", "reshape"}, use_known=False)
    for _ in range(40):
        camp.step()
    assert camp.failing == 0, camp.report()


def test_values_compare_nan_inf_and_signed_zeros():
    a = np.array([np.nan, np.inf, -0.0, 1.0])
    assert fz.compare_arrays(a, a.copy(), "float64", 0.0) is None
    assert fz.compare_arrays(a, np.array([0.0, np.inf, -0.0, 1.0]), "float64", 0) == "nan vs 0"
    assert (
        fz.compare_arrays(a, np.array([np.nan, -np.inf, -0.0, 1.0]), "float64", 0) == "inf vs -inf"
    )
    assert fz.compare_arrays(a, np.array([np.nan, np.inf, 0.0, 1.0]), "float64", 0) == "-0 vs 0"
    assert (
        fz.compare_arrays(a, np.array([np.nan, np.inf, -0.0, 1.001]), "float64", 0)
        == "different finite values"
    )
    assert fz.compare_arrays(a, np.array([np.nan, np.inf, -0.0, 1.00001]), "float32", 0) is None


def test_repro_snippet_runs_and_shows_the_difference(torch, tmp_path):
    program = fz.Program(
        inputs=(fz.Input("x0", "float64", np.array([-0.0, float("nan"), 1e-310]), True),),
        steps=(fz.Step("exp", "t0", "torch.exp(x0)", ("x0",)),),
    )
    path = tmp_path / "repro.py"
    path.write_text(fz.repro(program))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # the weighted gradient exp(x) * (0.5, 1, 1.5), on each library
    assert lines[0].startswith("torch (tensor([0.5000,") and "nan" in lines[0], r.stdout
    assert lines[1].startswith("autodiag (tensor([0.5000,") and "nan" in lines[1], r.stdout


def test_stale_known_issue_entries_are_listed():
    # FUZZ_STALE=1 and run.py --known list the entries no class of the run matched
    from fuzz.campaign import Class
    from fuzz.known_issues import KNOWN_ISSUES

    camp = Campaign(None, ad)
    assert camp.stale_known() == KNOWN_ISSUES
    camp.classes["x | grad value: -0 vs 0"] = Class(
        "x | grad value: -0 vs 0", count=1, known=KNOWN_ISSUES[0]
    )
    assert camp.stale_known() == KNOWN_ISSUES[1:]
    report = camp.report(max_repros=0)
    assert "matched nothing" in report and KNOWN_ISSUES[1].issue in report
    assert KNOWN_ISSUES[0].issue not in report.split("matched nothing")[1]


def test_tolerance_follows_float32_inputs():
    # numpy's float32 exp(1) is 2.718282, PyTorch's 2.7182817: a float64 sum of it carries
    # float32 rounding, compared with float32's tolerance when a program has float32 inputs
    p32 = fz.Program(inputs=(fz.Input("x0", "float32", np.array([1.0]), False),), steps=())
    assert fz._tol_dtype(p32) == "float32"
    assert fz._tol_dtype(fz.Program(inputs=(), steps=())) is None
