"""``gradcheck --engine torch`` (issue 21): PyTorch's own gradcheck/gradgradcheck on a script's
``torch.autograd.Function`` subclasses, with autodiag's diagnosis on top: the same verdicts,
entries, diagnoses and lines as the autodiag twin on autodiag's engine."""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import ROOT, check_envelope, cli
from test_torch_engine import _twins

torch = pytest.importorskip("torch")

# the samples that define autograd.Functions
GRADCHECK_SAMPLES = sorted(
    f
    for f in os.listdir(os.path.join(ROOT, "samples"))
    if f.endswith(".py") and "autograd.Function" in open(os.path.join(ROOT, "samples", f)).read()
)

# PyTorch twins of buggy Functions, with sample_inputs() so both engines check the same inputs
BUGGY = """\
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x * grad  # BUG: forgot the factor 2

    @staticmethod
    def sample_inputs():
        return [(torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]], dtype=torch.float64),)]


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * a, grad * b  # BUG: swapped

    @staticmethod
    def sample_inputs():
        a = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
        b = torch.tensor([1.5, 0.3, -0.7], dtype=torch.float64, requires_grad=True)
        return [(a, b)]


class Extra(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3, grad  # BUG: one gradient too many

    @staticmethod
    def sample_inputs():
        return [(torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True),)]


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, 3 * x**2, 2 * x) * grad  # BUG: 3 * x**2 below 0 too

    @staticmethod
    def sample_inputs():
        x = torch.tensor([-1.5, 0.25, 2.0, -0.5], dtype=torch.float64, requires_grad=True)
        return [(x,)]


class Good(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    @staticmethod
    def sample_inputs():
        return [(torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True),)]
"""


def _write_twins(tmp_path, source: str) -> tuple[str, str]:
    """(autodiag twin, PyTorch script) in two folders, under one name."""
    paths = []
    for folder, text in (
        ("a", source.replace("import torch\n", "import autodiag as torch\n", 1)),
        ("b", source),
    ):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "fn.py").write_text(text)
        paths.append(str(tmp_path / folder / "fn.py"))
    return paths[0], paths[1]


def _both(ours: str, theirs: str, *options):
    r1 = cli("gradcheck", ours, "-f", "json", "-q", *options)
    r2 = cli("gradcheck", theirs, "-f", "json", "-q", "--engine", "torch", *options)
    assert r2.exit_code == r1.exit_code, r2.stderr[-3000:]
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    check_envelope(d2, "gradcheck")
    return d1, d2


def _verdicts(doc: dict) -> list:
    """Per check: Function, order, verdict, diagnosis kinds, line reported."""
    return [
        (
            c["function"],
            c["order"],
            c["verdict"],
            [d["kind"] for d in c["diagnoses"]],
            (c["location"] or {}).get("line"),
        )
        for c in doc["cases"]
    ]


def _entries(doc: dict) -> list:
    """Per check: everything about what differs (inputs flagged, worst entry, message)."""
    return [
        (
            c["name"],
            c["verdict"],
            c["message"],
            c["comparison"],
            c["worst"],
            c["diagnoses"],
            c["location"]["line"] if c["location"] else None,
            c["location"]["code"] if c["location"] else None,
        )
        for c in doc["cases"]
    ]


@pytest.mark.parametrize("name", GRADCHECK_SAMPLES)
def test_every_gradcheck_sample_gets_the_same_verdicts_on_both_engines(tmp_path, name):
    ours, theirs = _twins(tmp_path, name)
    d1, d2 = _both(ours, theirs)
    # autodiag's engine checks a Function without sample_inputs() at the script's call;
    # PyTorch's Function.apply is seen by no public hook, so there the inputs are generated:
    # the verdicts, the mistakes found and the lines are the same
    assert _verdicts(d2) == _verdicts(d1)
    assert [f["location"]["line"] for f in d2["findings"]] == [
        f["location"]["line"] for f in d1["findings"]
    ]
    for c in d2["cases"]:
        if c["generated"]:
            assert any(
                "Function.apply is seen by none of its public hooks" in n for n in c["notes"]
            )


def test_buggy_twins_flag_the_same_entries_on_both_engines(tmp_path):
    d1, d2 = _both(*_write_twins(tmp_path, BUGGY))
    assert _entries(d2) == _entries(d1)
    verdicts = {
        c["function"]: (c["verdict"], [d["kind"] for d in c["diagnoses"]]) for c in d2["cases"]
    }
    assert verdicts == {
        "Square": ("fail", ["constant_factor"]),
        "Mul": ("fail", ["swapped_inputs"]),
        "Extra": ("fail", ["wrong_grad_count"]),
        "Cube": ("fail", ["wrong_on_branch"]),
        "Good": ("pass", []),
    }
    mul = next(c for c in d2["cases"] if c["function"] == "Mul")
    assert [(c["name"], c["wrong"]) for c in mul["comparison"]] == [("a", 3), ("b", 3)]
    assert d2["findings"] and all(f["kind"] == "gradcheck_failed" for f in d2["findings"])


def test_the_verdict_is_pytorchs_own(tmp_path, monkeypatch):
    """PyTorch's gradcheck gives the verdict: made to pass, every check passes."""
    ours, theirs = _write_twins(tmp_path, BUGGY)
    calls = []

    def passing(func, inputs, **kwargs):
        calls.append(func)
        return True

    monkeypatch.setattr(torch.autograd, "gradcheck", passing)
    r = cli("gradcheck", theirs, "-f", "json", "-q", "--engine", "torch")
    assert r.exit_code == 0, r.stderr
    assert {c["verdict"] for c in json.loads(r.stdout)["cases"]} == {"pass"}
    assert len(calls) == 5


SECOND_ORDER = (
    BUGGY
    + """

class Detached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x.detach()  # BUG: right once, but not differentiable again

    @staticmethod
    def sample_inputs():
        return [(torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True),)]
"""
)


def test_second_order_on_both_engines(tmp_path):
    ours, theirs = _write_twins(tmp_path, SECOND_ORDER)
    d1, d2 = _both(ours, theirs, "--order", "2", "--function", "Good", "--function", "Detached")
    # the same verdicts and lines; the diagnosis of second derivatives is autodiag's only
    assert [v[:3] + v[4:] for v in _verdicts(d2)] == [v[:3] + v[4:] for v in _verdicts(d1)]
    assert d1["cases"][3]["diagnoses"][0]["kind"] == "zero_analytical"
    assert d2["cases"][3]["diagnoses"] == []
    assert any("PyTorch's verdict only" in n for n in d2["cases"][3]["notes"])
    assert [(c["function"], c["api"], c["verdict"]) for c in d2["cases"]] == [
        ("Good", "gradcheck", "pass"),
        ("Good", "gradgradcheck", "pass"),
        ("Detached", "gradcheck", "pass"),
        ("Detached", "gradgradcheck", "fail"),
    ]


def test_text_report_names_the_backward_line(tmp_path):
    _, theirs = _write_twins(tmp_path, BUGGY)
    r = cli("gradcheck", theirs, "-q", "--engine", "torch", "--function", "Square")
    assert r.exit_code == 1
    assert "fn.py:13  return x * grad  # BUG: forgot the factor 2" in r.stdout
    assert "off by a factor of 0.5" in r.stdout


def test_a_script_without_functions_says_nothing_to_check(script):
    path = script("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    r = cli("gradcheck", path, "--engine", "torch")
    assert r.exit_code != 0 and r.exit_code != 1
    assert "nothing to check" in r.stderr


def test_setup_context_function_on_generated_inputs(script):
    path = script("""\
        import torch


        class Mul(torch.autograd.Function):
            @staticmethod
            def forward(a, b):
                return a * b

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(*inputs)

            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                return grad * b, grad * a * 2  # BUG: factor 2


        x = torch.ones(3, requires_grad=True)
        Mul.apply(x, x).sum().backward()
        """)
    r = cli("gradcheck", path, "-f", "json", "-q", "--engine", "torch")
    assert r.exit_code == 1, r.stderr
    (case,) = json.loads(r.stdout)["cases"]
    assert case["generated"] and case["verdict"] == "fail"
    assert [d["kind"] for d in case["diagnoses"]] == ["constant_factor"]
    assert case["location"]["line"] == 16
    assert [(c["name"], c["wrong"] > 0) for c in case["comparison"]] == [("a", False), ("b", True)]
