"""``autodiag anomaly`` and ``autodiag inplace`` through the real entry point (CliRunner, and one
subprocess each), on purpose-built scripts: each origin kind, propagation, clean scripts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from autodiag.cli import app

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def anomaly_json(path, *args):
    r = cli("anomaly", path, "-f", "json", *args)
    doc = json.loads(r.stdout)  # strict: NaN/Infinity are not JSON
    assert doc["command"] == "anomaly"
    for f in doc["findings"]:
        assert set(f) >= {
            "kind",
            "severity",
            "message",
            "location",
            "stack",
            "hint",
            "step",
            "count",
        }
    return r.exit_code, doc


def _no_constants(text: str) -> dict:
    def bad(c):
        raise ValueError(f"not JSON: {c}")

    return json.loads(text, parse_constant=bad)


# --- forward origins ----------------------------------------------------------------------------

FORWARD_CASES = {
    # name: (the script's line 3, the op, the finding kind)
    "log of 0": ("y = torch.log(x - 1)", "log", "inf_forward"),
    "0/0": ("y = (x - 1) / (x - 1)", "div", "nan_forward"),
    "sqrt of a negative": ("y = (x - 2).sqrt()", "sqrt", "nan_forward"),
    "exp overflow": ("y = (x * 100).exp()", "exp", "inf_forward"),
}


@pytest.mark.parametrize("case", list(FORWARD_CASES))
def test_forward_origins(script, case):
    line, op, kind = FORWARD_CASES[case]
    path = script(f"""\
        import autodiag as torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        {line}
        z = y * 3
        loss = z.sum()
        loss.backward()
        """)
    code, doc = anomaly_json(path)
    assert code == 1 and doc["status"] == "findings"
    fwd = [f for f in doc["findings"] if f["kind"].endswith("_forward")]
    assert len(fwd) == 1, doc["findings"]  # propagation (y * 3, sum) is not an origin
    f = fwd[0]
    assert f["kind"] == kind and f["op"] == op
    assert f["location"]["line"] == 3 and f["location"]["code"] == line
    assert f["stack"][-1]["line"] == 3 and f["step"] == 1 and f["count"] == 1
    assert f["propagated"] == 2
    stats = f["inputs"][0]
    assert set(stats) >= {"min", "max", "zeros", "negatives", "nan", "inf"}
    assert stats["nan"] == stats["inf"] == 0
    # the backward nodes of non-finite forward values only propagate: no backward origin
    assert all(g["kind"].endswith("_forward") for g in doc["findings"])
    assert doc["propagated"]["forward"] == 2


def test_zero_times_inf_is_a_nan_origin_and_the_inf_data_is_not(script):
    path = script("""\
        import autodiag as torch
        a = torch.tensor([0.0, 1.0])
        b = torch.tensor([float("inf"), 2.0])
        c = a * b
        d = c + 1
        """)
    code, doc = anomaly_json(path)
    assert code == 1
    [f] = doc["findings"]
    assert (f["kind"], f["op"], f["location"]["line"]) == ("nan_forward", "mul", 4)
    assert f["inputs"][0]["name"] == "a" and f["inputs"][1]["name"] == "b"
    assert f["inputs"][1]["inf"] == 1 and f["inputs"][0]["zeros"] == 1
    assert f["output"]["values"] == ["nan", 2.0]  # JSON has no NaN
    assert "step" in f and doc["backward_calls"] == 0


def test_origin_in_a_function_has_the_forward_stack(script):
    path = script("""\
        import autodiag as torch

        def features(x):
            return x.log()

        x = torch.tensor([0.0, 1.0])
        h = features(x)
        """)
    code, doc = anomaly_json(path)
    [f] = doc["findings"]
    assert [fr["line"] for fr in f["stack"]] == [7, 4]
    assert [fr["function"] for fr in f["stack"]] == ["<module>", "features"]


def test_text_report_of_a_forward_origin(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
        y = torch.log(x)
        loss = (y * 2).sum()
        loss.backward()
        """)
    r = cli("anomaly", path, "--no-color")
    assert r.exit_code == 1
    out = r.stdout
    assert "✗ inf_forward  log produced ±inf from finite inputs" in out
    assert "s.py:3 in <module>" in out and "y = torch.log(x)" in out
    assert "input 0 x: [3] float32 [0, 1, 2] · 1 zero" in out
    assert "propagated to 2 later ops" in out and "hint:" in out
    assert "inf_backward" not in out  # LogBackward0's inf comes from the forward -inf


def test_masks_and_clean_training_report_nothing(script):
    path = script("""\
        import autodiag as torch
        torch.manual_seed(0)
        x = torch.randn(16, 4)
        t = torch.randn(16, 1)
        w = torch.randn(4, 1, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        for step in range(5):
            loss = ((x @ w + b).tanh() - t).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad
                w.grad = None
                b.grad = None
        mask = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
        s = torch.randn(2, 2, requires_grad=True).masked_fill(mask == 0, float("-inf"))
        s.softmax(-1).sum().backward()
        """)
    code, doc = anomaly_json(path)
    assert code == 0 and doc["status"] == "ok" and doc["findings"] == []
    assert doc["backward_calls"] == 6 and doc["stopped_at_call"] is None
    r = cli("anomaly", path, "--no-color")
    assert r.exit_code == 0 and "no NaN or Inf" in r.stdout and "6 backward calls" in r.stdout


# --- backward origins ---------------------------------------------------------------------------


def test_sqrt_at_zero_is_a_backward_origin(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([0.0, 4.0], requires_grad=True)
        y = x.sqrt()
        loss = (y * 0).sum()
        loss.backward()
        print("not reached")
        """)
    code, doc = anomaly_json(path)
    assert code == 1
    [f] = doc["findings"]
    assert f["kind"] == "nan_backward" and f["node"] == "SqrtBackward0"
    assert f["location"]["line"] == 3 and f["location"]["code"] == "y = x.sqrt()"
    assert f["path"] == ["SumBackward0", "MulBackward0", "SqrtBackward0"]
    assert f["incoming"][0]["zeros"] == 2
    [out] = f["outgoing"]
    assert out["grad"]["nan"] == 1 and out["variable"] == "x"
    assert doc["stopped_at_call"] == 1


def test_inf_gradient_of_sqrt_at_zero(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([0.0, 4.0], requires_grad=True)
        x.sqrt().sum().backward()
        """)
    code, doc = anomaly_json(path)
    [f] = doc["findings"]
    assert (f["kind"], f["node"]) == ("inf_backward", "SqrtBackward0")


CUSTOM = """\
    import autodiag as torch

    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    x = torch.ones(3, requires_grad=True)
    for step in range(4):
        y = Bad.apply(x)
        loss = y.sum()
        loss.backward()
        print("step", step)
    """


def test_custom_function_backward_stops_the_run(script):
    path = script(CUSTOM)
    r = cli("anomaly", path, "-f", "json")
    doc = _no_constants(r.stdout)
    assert r.exit_code == 1
    [f] = doc["findings"]
    assert (f["kind"], f["node"], f["count"], f["step"]) == ("nan_backward", "BadBackward", 1, 1)
    assert f["location"]["line"] == 14
    assert doc["stopped_at_call"] == 1 and doc["backward_calls"] == 1
    assert "step 1" not in r.stderr  # stopped after the first backward call


def test_keep_going_counts_every_occurrence(script):
    code, doc = anomaly_json(script(CUSTOM), "--keep-going")
    [f] = doc["findings"]
    assert f["count"] == 4 and f["step"] == 1
    assert doc["backward_calls"] == 4 and doc["stopped_at_call"] is None


def test_a_nan_that_starts_at_a_later_step(script):
    path = script("""\
        import autodiag as torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        for step in range(6):
            scale = torch.tensor(3.0 - step)
            loss = (w * scale).log().sum()
            loss.backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                w.grad = None
        """)
    code, doc = anomaly_json(path)
    assert code == 1
    [f] = doc["findings"]
    assert (f["kind"], f["op"], f["step"]) == ("inf_forward", "log", 4)
    assert doc["stopped_at_call"] == 4


def test_expression_target():
    r = cli("anomaly", "-e", "log(x) * y", "--var", "x=0", "--var", "y=2", "-f", "json")
    doc = _no_constants(r.stdout)
    assert r.exit_code == 1
    [f] = doc["findings"]
    assert f["op"] == "log" and f["inputs"][0]["name"] == "x"
    r = cli("anomaly", "-e", "x * y", "--var", "x=1", "--var", "y=2")
    assert r.exit_code == 0


def test_a_failing_script_without_findings_is_exit_3(script):
    r = cli("anomaly", script("import autodiag as torch\nraise ValueError('boom')\n"))
    assert r.exit_code == 3 and "ValueError" in r.stderr


def test_findings_win_over_the_error_they_cause(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([-1.0])
        y = x.sqrt()
        assert y.item() == y.item(), "NaN!"
        """)
    r = cli("anomaly", path)
    assert r.exit_code == 1 and "AssertionError" in r.stderr and "nan_forward" in r.stdout


def test_anomaly_subprocess(script):
    path = script("""\
        import autodiag as torch
        x = torch.tensor([0.0], requires_grad=True)
        (x.sqrt() * 0).sum().backward()
        """)
    p = subprocess.run(
        [sys.executable, "-m", "autodiag", "anomaly", path, "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1, p.stderr
    doc = _no_constants(p.stdout)
    assert [f["kind"] for f in doc["findings"]] == ["nan_backward"]


def test_anomaly_mode_is_restored_after_a_script_turns_it_on(script):
    import autodiag as ad

    path = script("""\
        import autodiag as torch
        torch.autograd.set_detect_anomaly(True)
        (torch.ones(1, requires_grad=True) * 2).sum().backward()  # something to analyse
        """)
    assert cli("anomaly", path).exit_code == 0
    assert not ad.is_anomaly_enabled()


# --- autodiag inplace ---------------------------------------------------------------------------


def inplace_json(path, *args):
    r = cli("inplace", path, "-f", "json", *args)
    doc = _no_constants(r.stdout)
    assert doc["command"] == "inplace"
    for f in doc["findings"]:
        assert set(f) >= {"kind", "severity", "message", "location", "stack", "hint"}
    return r, doc


def test_saved_output_written_then_backward_fails_exit_1(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        b = a.exp()
        b.add_(1)
        b.sum().backward()
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 1 and doc["status"] == "findings"  # not 3: the error is the finding
    [f] = doc["findings"]
    assert f["kind"] == "inplace_saved_tensor" and f["op"] == "add_"
    assert f["location"]["line"] == 4 and f["location"]["code"] == "b.add_(1)"
    assert f["saved_by"]["node"] == "ExpBackward0" and f["saved_by"]["location"]["line"] == 3
    assert f["saved_by"]["output"] is True
    assert (f["saved_version"], f["version"]) == (0, 1)
    assert f["needed_by"]["location"]["line"] == 5 and f["needed_by"]["call"] == 1
    assert f["backward_failed"] is True and doc["error_is_finding"] is True
    r = cli("inplace", path, "--no-color")
    assert r.exit_code == 1
    assert "written at" in r.stdout and "saved by ExpBackward0 at" in r.stdout
    assert "it failed there" in r.stdout


def test_saved_tensor_written_without_any_backward(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        y = a * 2
        y.add_(1)              # fine: MulBackward0 saved a, not y
        z = y.sigmoid()
        with torch.no_grad():
            z.mul_(0.5)        # SigmoidBackward0 saved z
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 1
    [f] = doc["findings"]
    assert (f["op"], f["location"]["line"], f["saved_by"]["node"]) == (
        "mul_",
        7,
        "SigmoidBackward0",
    )
    assert f["no_grad"] is True and f["needed_by"] is None and f["backward_failed"] is False


def test_write_through_an_alias_when_the_script_catches_the_error(script):
    path = script("""\
        import autodiag as torch
        x = torch.ones(3, requires_grad=True)
        h = x * 3
        s = h ** 2             # PowBackward0 saves h
        v = h.detach()         # shares h's storage and version counter
        v[0] = 5.0
        try:
            s.sum().backward()
        except RuntimeError:
            pass
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 1 and "error" not in doc
    [f] = doc["findings"]
    assert (f["op"], f["location"]["line"]) == ("__setitem__", 6)
    assert f["saved_by"]["node"] == "PowBackward0" and f["saved_by"]["output"] is False
    # backward failed there, even though the script caught the error and ended normally
    assert f["needed_by"]["location"]["line"] == 8 and f["backward_failed"] is True
    assert "backward call 1 then failed" in f["message"]


def test_write_through_a_view_under_no_grad(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(4, requires_grad=True)
        b = a.tanh()
        with torch.no_grad():
            b[1:3].zero_()
        """)
    r, doc = inplace_json(path)
    [f] = doc["findings"]
    assert (f["op"], f["location"]["line"], f["saved_by"]["node"]) == ("zero_", 5, "TanhBackward0")


def test_inplace_on_a_leaf_is_a_finding(script):
    path = script("""\
        import autodiag as torch
        w = torch.ones(3, requires_grad=True)
        w.add_(1)
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 1
    [f] = doc["findings"]
    assert f["kind"] == "inplace_leaf" and f["location"]["line"] == 3
    assert "leaf Variable that requires grad" in f["message"]


def test_writes_after_backward_and_optimizer_updates_are_fine(script):
    path = script("""\
        import autodiag as torch
        w = torch.ones(3, requires_grad=True)
        for step in range(3):
            h = (w * 2).exp()
            loss = h.sum()
            loss.backward()
            h.add_(1)              # ExpBackward0 has run: nothing needs h any more
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 0 and doc["findings"] == [] and doc["status"] == "ok"
    r = cli("inplace", path, "--no-color")
    assert r.exit_code == 0 and "no in-place hazard" in r.stdout


def test_repeated_hazard_is_one_finding_with_a_count(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        for i in range(3):
            b = a.sigmoid()
            b.mul_(2)
        """)
    r, doc = inplace_json(path)
    [f] = doc["findings"]
    assert f["count"] == 3


def test_an_unrelated_error_is_exit_3(script):
    r = cli("inplace", script("import autodiag as torch\nraise KeyError('k')\n"))
    assert r.exit_code == 3 and "KeyError" in r.stderr


def test_inplace_subprocess(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        b = a.exp()
        b += 1
        b.sum().backward()
        """)
    p = subprocess.run(
        [sys.executable, "-m", "autodiag", "inplace", path, "-f", "json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1, p.stderr
    doc = _no_constants(p.stdout)
    [f] = doc["findings"]
    assert f["op"] == "__iadd__" and f["location"]["line"] == 4


def test_retained_graph_that_already_ran_is_not_a_hazard(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        b = a.exp()
        b.sum().backward(retain_graph=True)
        b.add_(1)                 # ExpBackward0 ran; a second backward would fail
        """)
    r, doc = inplace_json(path)
    assert r.exit_code == 0 and doc["findings"] == []
