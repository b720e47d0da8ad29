"""Verdicts are earned (issue 15): a run that analysed nothing is never a pass, no ✓ is printed
when the exit code is not 0 or when gradients were never checked, NaN/Inf findings come cause
first with their statistics, and severities look different without colour."""

from __future__ import annotations

import json
import sys

import pytest
from cli_helpers import cli

ANALYSING = ("check", "anomaly", "inplace", "leaks", "graph", "trace")


@pytest.fixture
def foreign(tmp_path):
    """A script computing with an array library that is not autodiag (a stand-in named
    ``micrograd``, installed outside the script's folder as a real library would be)."""
    site = tmp_path / "site" / "micrograd"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(
        "class Value:\n"
        "    def __init__(self, v):\n        self.v = v\n"
        "    def log(self):\n        import math\n        return Value(math.log(self.v) if self.v "
        "> 0 else float('nan'))\n"
    )
    proj = tmp_path / "proj"
    proj.mkdir()
    path = proj / "uses_micrograd.py"
    path.write_text(
        f"import sys\nsys.path.insert(0, {str(site.parent)!r})\n"
        "import micrograd\n"
        "loss = micrograd.Value(-1.0).log()\n"
        "print(loss.v)\n"
    )
    yield str(path)
    sys.modules.pop("micrograd", None)
    sys.path[:] = [p for p in sys.path if p != str(site.parent)]


@pytest.mark.parametrize("command", ANALYSING)
def test_a_run_on_another_library_is_not_a_pass(foreign, command):
    r = cli(command, foreign)
    assert r.exit_code == 2, r.output
    assert "✓" not in r.output
    assert "none of its tensors were autodiag tensors" in r.stderr
    assert "`micrograd` (micrograd) at" in r.stderr and "uses_micrograd.py:3" in r.stderr


@pytest.mark.parametrize("command", ANALYSING)
def test_a_run_that_recorded_no_op_is_not_a_pass(script, command):
    path = script("import autodiag as torch\nprint('hello', torch.float32)\n")
    r = cli(command, path, "-f", "json")
    assert r.exit_code == 2, r.output
    assert "autodiag's engine recorded no op" in r.stderr
    assert "✓" not in r.output


def test_gradcheck_of_functions_needs_no_recorded_op(script):
    # gradcheck checks the Functions a script defines: defining them records no op
    path = script("""\
        import autodiag as torch

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x * g
        """)
    r = cli("gradcheck", path)
    assert r.exit_code == 0, r.output


FORWARD_ONLY = """\
import autodiag as torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = (x * 2).sum()
"""


@pytest.mark.parametrize(
    "command, says",
    [
        ("check", "made no backward() call"),
        ("anomaly", "made no backward() call, so no gradient was checked"),
        ("inplace", "made no backward() call"),
    ],
)
def test_ops_without_backward_are_said_plainly(script, command, says):
    r = cli(command, script(FORWARD_ONLY), "--no-color")
    assert r.exit_code == 0, r.output
    assert says in r.stdout and "✓" not in r.stdout


def test_no_check_mark_when_the_script_then_fails(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        (x * 2).sum().backward()
        raise ValueError("boom")
        """)
    for command in ("check", "anomaly", "inplace", "leaks"):
        r = cli(command, path, "--no-color")
        assert r.exit_code == 3, (command, r.output)
        assert "✓" not in r.stdout, (command, r.stdout)


def test_a_clean_run_still_earns_its_check_mark(script):
    path = script(FORWARD_ONLY + "y.backward()\n")
    r = cli("check", path, "--no-color")
    assert r.exit_code == 0 and "✓ no findings" in r.stdout, r.output
    assert "(1 backward call, 0 optimizer steps)" in r.stdout
    doc = json.loads(cli("check", path, "-f", "json").stdout)
    assert doc["status"] == "ok" and doc["ops"] >= 3 and doc["backward_calls"] == 1


NAN_AFTER_INF = """\
import autodiag as torch
x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
l = torch.log(x)
y = l * 0.0
y.sum().backward()
"""


def test_check_lists_the_cause_before_the_nan_with_statistics(script):
    r = cli("check", script(NAN_AFTER_INF), "--no-color")
    out = r.stdout
    assert r.exit_code == 1
    assert out.index("inf_forward") < out.index("nan_forward"), out
    # the hint of the NaN says its origin is reported above: it is
    assert "origin is reported above" in out[out.index("nan_forward") :]
    # the input statistics the hint points at are shown, as `autodiag anomaly` shows them
    assert "input 0 x: [3] float32 [0, 1, 2] · 1 zero" in out
    assert "output: [3] float32 [-inf, 0, 0.6931]" in out
    doc = json.loads(cli("check", script(NAN_AFTER_INF), "-f", "json").stdout)
    assert [f["kind"] for f in doc["findings"]] == ["inf_forward", "nan_forward"]


def test_severities_differ_without_colour(script):
    path = script("""\
        import autodiag as torch
        w = torch.tensor([[1.0, -1.0, 1.0]], requires_grad=True)
        b = torch.zeros(3, requires_grad=True)
        for _ in range(6):
            h = torch.relu(torch.rand(8, 1) @ w)
            h.sum().backward()
        """)
    r = cli("check", path, env={"NO_COLOR": "1"})
    lines = r.stdout.splitlines()
    err = next(x for x in lines if "none_grad" in x and "gets no gradient" in x)
    warn = next(x for x in lines if "dead_relu" in x and "relu units" in x)
    assert err.startswith("✗ none_grad ") and warn.startswith("! dead_relu (warning) ")


def test_an_aliased_torch_is_not_blamed_as_pytorch(script):
    # the caller has real PyTorch imported; the script's `import torch` is autodiag's alias
    pytest.importorskip("torch")
    r = cli("check", script("import torch\nprint(torch.float32)\n"))
    assert r.exit_code == 2 and "recorded no op" in r.stderr and "PyTorch" not in r.stderr
