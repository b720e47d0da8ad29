"""``autodiag gradcheck`` through the real entry point (CliRunner in-process, and a subprocess):
recorded gradcheck calls, Functions on sample_inputs() or generated inputs, expressions, exit
codes, the JSON envelope and JUnit XML."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

import autodiag
from autodiag.analysis import gradcheck as checks
from autodiag.cli import app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runner = CliRunner()

HEADER = "import autodiag as torch\n\n\n"

CUBIC = """\
class Cubic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x ** 2
"""

WRONG = """\
class WrongCubic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x ** 2  # BUG: 3 * x**2
"""

CLAMP = """\
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((x >= ctx.lo) & (x <= ctx.hi)), None, None
"""

CLAMP_SAMPLES = (
    CLAMP
    + """\

    @staticmethod
    def sample_inputs():
        x = torch.tensor([-1.5, -0.3, 0.4, 2.0], dtype=torch.float64, requires_grad=True)
        return [(x, -1.0, 1.0), (x, 0.0, 0.5)]
"""
)

# first derivatives right, but the backward cuts the graph: gradgradcheck fails
DETACHED = """\
class Detached(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x.detach() ** 2
"""


def cli(*args):
    return runner.invoke(app, ["gradcheck", *args], catch_exceptions=False)


@pytest.fixture
def script(tmp_path):
    def make(*parts: str, name: str = "s.py") -> str:
        p = tmp_path / name
        p.write_text(HEADER + "\n\n".join(textwrap.dedent(x) for x in parts))
        return str(p)

    return make


def line_of(path: str, text: str) -> int:
    with open(path) as f:
        return next(i for i, ln in enumerate(f, 1) if text in ln)


def run_json(*args) -> tuple[int, dict]:
    r = cli(*args, "-f", "json")
    doc = json.loads(r.stdout)
    check_envelope(doc)
    return r.exit_code, doc


# --- the JSON contract of DESIGN §4 ---------------------------------------------------------

CASE_KEYS = {
    "name",
    "source",
    "api",
    "order",
    "function",
    "inputs",
    "generated",
    "verdict",
    "max_error",
    "message",
    "diagnoses",
    "worst",
    "location",
    "settings",
    "seconds",
}


def check_location(loc) -> None:
    assert loc is None or set(loc) == {"file", "line", "function", "code"}
    if loc is not None:
        assert isinstance(loc["line"], int) and isinstance(loc["file"], str)


def check_envelope(doc: dict) -> None:
    assert set(doc) >= {
        "autodiag",
        "command",
        "target",
        "status",
        "findings",
        "cases",
        "totals",
        "settings",
    }
    assert doc["autodiag"] == autodiag.__version__ and doc["command"] == "gradcheck"
    assert doc["status"] in ("ok", "findings", "error")
    for f in doc["findings"]:
        assert set(f) >= {"kind", "severity", "message", "location", "stack"}
        assert f["kind"] == "gradcheck_failed" and f["severity"] == "error"
        check_location(f["location"])
        for frame in f["stack"]:
            check_location(frame)
        for d in f["diagnoses"]:
            assert set(d) == {"kind", "hint", "details"}
    for c in doc["cases"]:
        assert set(c) >= CASE_KEYS
        assert c["verdict"] in ("pass", "fail", "error", "skip") and c["order"] in (1, 2)
        check_location(c["location"])
    t = doc["totals"]
    assert (
        t["checks"] == len(doc["cases"]) == t["passed"] + t["failed"] + t["errors"] + t["skipped"]
    )
    failed = [c for c in doc["cases"] if c["verdict"] in ("fail", "error")]
    assert len(doc["findings"]) == len(failed)
    if failed and doc["status"] != "error":
        assert doc["status"] == "findings"


# --- Functions defined by the script -------------------------------------------------------


def test_correct_cubic_passes_on_generated_inputs(script):
    r = cli(script(CUBIC), "--no-color")
    assert r.exit_code == 0, r.output
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("Cubic[generated]"))
    assert "generated (2, 3) float64" in row and " pass" in row
    assert "1 check: 1 passed, 0 failed, 0 skipped" in r.stdout


def test_wrong_factor_fails_with_constant_factor_diagnosis(script):
    path = script(CUBIC, WRONG)
    r = cli(path, "--no-color")
    assert r.exit_code == 1
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("WrongCubic"))
    assert "FAIL" in row and "constant_factor" in row
    assert "Jacobian mismatch for output 0 with respect to input 0" in r.stdout
    assert "worst element" in r.stdout and "off by a factor of 0.666667" in r.stdout
    # the failure points at the backward's return line (the class line stays in the stack)
    assert f"s.py:{line_of(path, 'return grad * 2 * x ** 2')}" in r.stdout

    code, doc = run_json(path)
    assert code == 1 and doc["status"] == "findings"
    (f,) = doc["findings"]
    assert f["location"]["line"] == line_of(path, "return grad * 2 * x ** 2")
    assert f["location"]["code"].startswith("return grad * 2 * x ** 2")
    assert f["stack"][0]["code"].startswith("class WrongCubic")
    assert f["diagnoses"][0]["kind"] == "constant_factor"
    assert f["diagnoses"][0]["details"]["factor"] == pytest.approx(2 / 3, rel=1e-4)
    assert f["worst"]["difference"] > f["worst"]["tolerance"]
    verdicts = {c["name"]: c["verdict"] for c in doc["cases"]}
    assert verdicts == {"Cubic[generated]": "pass", "WrongCubic[generated]": "fail"}


def test_clamp_with_non_tensor_args_uses_sample_inputs(script):
    code, doc = run_json(script(CLAMP_SAMPLES))
    assert code == 0 and doc["status"] == "ok"
    assert [c["name"] for c in doc["cases"]] == ["Clamp[sample 0]", "Clamp[sample 1]"]
    c = doc["cases"][0]
    assert c["inputs"] == ["(4,) float64", "-1.0", "1.0"] and not c["generated"]
    assert c["verdict"] == "pass" and c["max_error"] < 1e-6


def test_clamp_without_sample_inputs_is_skipped_with_a_reason(script):
    path = script(CLAMP)
    r = cli(path, "--no-color")
    assert r.exit_code == 2  # nothing could be checked
    assert "backward returns no gradient for lo, hi" in r.stdout
    assert "sample_inputs()" in r.stdout and "nothing was checked" in r.stderr
    annotated = CLAMP.replace(
        "def forward(ctx, x, lo, hi)", "def forward(ctx, x, lo: float, hi: float)"
    )
    code, doc = run_json(script(CUBIC, annotated, name="a.py"))
    assert code == 0  # Cubic passed; the skip does not fail the run
    skip = doc["cases"][1]
    assert skip["verdict"] == "skip" and "'lo' is a float, not a tensor" in skip["message"]


def test_subclass_reuses_forward_and_is_located_at_its_own_class(script):
    sub = """\
class Bounded(Clamp):
    @classmethod
    def sample_inputs(cls):
        return [(torch.tensor([0.2, 3.0], dtype=torch.float64, requires_grad=True), 0.0, 1.0)]
"""
    path = script(CLAMP, sub)
    code, doc = run_json(path, "--function", "Bounded")
    assert code == 0
    (c,) = doc["cases"]
    assert c["location"]["line"] == line_of(path, "class Bounded(Clamp)")
    assert c["location"]["code"] == "class Bounded(Clamp):"


def test_sample_inputs_errors_and_float32(script):
    broken = (
        CUBIC.replace("class Cubic", "class Broken")
        + """\

    @staticmethod
    def sample_inputs():
        raise ValueError("no data")
"""
    )
    f32 = (
        CUBIC.replace("class Cubic", "class Single")
        + """\

    @staticmethod
    def sample_inputs():
        return [torch.tensor([0.3, 1.7, 2.9])]  # float32, no requires_grad
"""
    )
    code, doc = run_json(script(broken, f32))
    assert code == 1
    by_name = {c["name"]: c for c in doc["cases"]}
    broken = by_name["Broken"]
    assert broken["verdict"] == "error" and broken["exception"] == "ValueError"
    assert "sample_inputs() raised ValueError: no data" in by_name["Broken"]["message"]
    single = by_name["Single[sample 0]"]
    assert single["inputs"] == ["(3,) float32"]
    assert "checked w.r.t. every floating-point tensor" in single["notes"][0]
    # float32 finite differences fail; the diagnosis says a float64 retry passes
    assert single["verdict"] == "fail" and single["diagnoses"][0]["kind"] == "low_precision"
    assert single["diagnoses"][0]["details"]["float64_passes"] is True


def test_setup_context_style_and_generated_positive_inputs(script):
    log = """\
    class Log(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.log()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad / x
    """
    code, doc = run_json(script(log))
    assert code == 0
    (c,) = doc["cases"]
    assert c["generated"] and c["verdict"] == "pass" and "positive values" in c["notes"][0]


def test_wrong_number_of_gradients_explains_the_scripts_own_failure(script):
    bad = CUBIC.replace("return grad * 3 * x ** 2", "return grad * 3 * x ** 2, grad")
    path = script(bad, "x = torch.ones(2, requires_grad=True)\nCubic.apply(x).sum().backward()\n")
    r = cli(path, "--no-color")
    assert r.exit_code == 1  # the script died of the very error the check reports
    assert "wrong_grad_count" in r.stdout and "because of the failed check" in r.stderr


def test_function_filter(script):
    path = script(CUBIC, WRONG)
    code, doc = run_json(path, "--function", "Cubic")
    assert code == 0 and [c["function"] for c in doc["cases"]] == ["Cubic"]
    code, doc = run_json(path, "--function", "WrongCubic", "--function", "Cubic")
    assert code == 1 and len(doc["cases"]) == 2
    r = cli(path, "--function", "Nope")
    assert r.exit_code == 2 and "no autograd.Function named 'Nope'" in r.stderr
    assert "Cubic, WrongCubic" in r.stderr


def test_order_2_runs_gradgradcheck(script):
    path = script(CUBIC, DETACHED)
    code, doc = run_json(path, "--order", "2")
    assert code == 1
    got = {(c["function"], c["order"]): (c["api"], c["verdict"]) for c in doc["cases"]}
    assert got == {
        ("Cubic", 1): ("gradcheck", "pass"),
        ("Cubic", 2): ("gradgradcheck", "pass"),
        ("Detached", 1): ("gradcheck", "pass"),
        ("Detached", 2): ("gradgradcheck", "fail"),
    }
    assert all(c["max_error"] is not None for c in doc["cases"])
    code, doc = run_json(path)  # order 1: the detach() is invisible
    assert code == 0 and len(doc["cases"]) == 2
    assert cli(path, "--order", "3").exit_code == 2


def test_settings_are_applied_and_reported(script):
    path = script(WRONG)
    code, doc = run_json(
        path, "--rtol", "0.5", "--atol", "0", "--eps", "1e-5", "--fast", "--seed", "3"
    )
    assert code == 0  # a factor of 2/3 is within rtol 0.5
    assert doc["settings"] == {
        "eps": 1e-5,
        "atol": 0.0,
        "rtol": 0.5,
        "fast_mode": True,
        "order": 1,
        "seed": 3,
    }
    assert doc["cases"][0]["settings"]["fast_mode"] is True
    code, doc = run_json(path, "--fast")
    assert code == 1 and doc["findings"][0]["diagnoses"][0]["kind"] == "constant_factor"
    assert "fast mode" in doc["cases"][0]["error"]
    assert cli(path, "--eps", "0").exit_code == 2


# --- the script's own gradcheck calls ------------------------------------------------------

CALLS = """\
x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
ok = torch.autograd.gradcheck(WrongCubic.apply, (x,), eps=1e-6, atol=1e-5)
print("gradcheck returned", ok)
from autodiag.autograd import gradgradcheck
print("gradgradcheck returned", gradgradcheck(Cubic.apply, (x,)))
print("script finished")
"""


def test_script_calls_are_recorded_with_their_lines(script):
    path = script(CUBIC, WRONG, CALLS)
    code, doc = run_json(path, "--function", "Cubic")
    assert code == 1
    calls = [c for c in doc["cases"] if c["source"] == "call"]
    assert [(c["api"], c["verdict"], c["location"]["line"]) for c in calls] == [
        ("gradcheck", "fail", line_of(path, "ok = torch.autograd.gradcheck")),
        ("gradgradcheck", "pass", line_of(path, "gradgradcheck returned")),
    ]
    assert calls[0]["name"].startswith("gradcheck(WrongCubic.apply) at ")
    assert calls[0]["name"].endswith(f"s.py:{calls[0]['location']['line']}")
    assert calls[0]["diagnoses"][0]["kind"] == "constant_factor"
    assert calls[0]["location"]["code"].startswith("ok = torch.autograd.gradcheck")
    (f,) = doc["findings"]
    assert f["location"] == calls[0]["location"] and f["stack"][-1] == calls[0]["location"]
    r = cli(path, "--function", "Cubic")
    # the script went on: the failing call returned False instead of raising
    assert "gradcheck returned False" in r.stderr and "script finished" in r.stderr
    assert "gradgradcheck returned True" in r.stderr
    # and the library is itself again afterwards
    assert autodiag.autograd.gradcheck is checks.GRADCHECK
    assert autodiag.autograd.gradgradcheck is checks.GRADGRADCHECK
    x = autodiag.tensor([1.5], dtype=autodiag.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        autodiag.autograd.gradcheck(lambda t: t.detach() * 2 + t * 0, (x,))


def test_assert_on_a_failed_call_is_a_finding_not_a_crash(script):
    path = script(
        WRONG,
        """\
x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(WrongCubic.apply, (x,))
print("not reached")
""",
    )
    r = cli(path, "--no-color", "--function", "WrongCubic")
    assert r.exit_code == 1
    assert "because of the failed check gradcheck(WrongCubic.apply)" in r.stderr
    assert "not reached" not in r.stderr
    assert autodiag.autograd.gradcheck is checks.GRADCHECK


def test_raise_exception_false_and_passing_calls(script):
    path = script(
        CUBIC,
        """\
x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(Cubic.apply, (x,), raise_exception=False)
assert torch.autograd.gradcheck(lambda t: (t * 2).sin(), (x,), fast_mode=True)
""",
    )
    code, doc = run_json(path, "--function", "Cubic")
    assert code == 0
    calls = [c for c in doc["cases"] if c["source"] == "call"]
    assert [c["verdict"] for c in calls] == ["pass", "pass"]
    assert calls[1]["settings"]["fast_mode"] is True and "<lambda>" in calls[1]["name"]


# --- expressions ---------------------------------------------------------------------------


def test_expression_mode():
    code, doc = run_json(
        "-e", "sin(x) * x**2 + x*y", "--var", "x=[0.5, -1.5, 2.0]", "--var", "y=3", "--order", "2"
    )
    assert code == 0 and doc["target"] == "-e sin(x) * x**2 + x*y"
    assert [(c["order"], c["verdict"]) for c in doc["cases"]] == [(1, "pass"), (2, "pass")]
    assert doc["cases"][0]["inputs"] == ["x: (3,) float64", "y: () float64"]
    r = cli("-e", "relu(x)", "--var", "x=[0.0, 1.0]", "--no-color")
    assert r.exit_code == 1 and "nondifferentiable_point" in r.stdout
    code, doc = run_json("-e", "x*y", "--var", "x=1.5", "--var", "y=2.5", "--dtype", "float32")
    assert code == 1 and doc["findings"][0]["diagnoses"][0]["kind"] == "low_precision"


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["-e", "x**2"], "needs at least one --var"),
        (["-e", "x**2", "--var", "x=1", "--function", "F"], "--function selects Functions"),
        (["-e", "__import__('os')", "--var", "x=1"], "not allowed"),
        (["-e", "x + z", "--var", "x=1"], "unknown variable 'z'"),
    ],
)
def test_expression_refusals(args, phrase):
    r = cli(*args)
    assert r.exit_code == 2 and phrase in r.stderr


# --- exit codes and bad input --------------------------------------------------------------


def test_nothing_to_check_is_exit_2(script, tmp_path):
    r = cli(script("x = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"))
    assert r.exit_code == 2 and "nothing to check" in r.stderr
    assert "sample_inputs()" in r.stderr  # says what to do
    r = cli(str(tmp_path / "missing.py"))
    assert r.exit_code == 2 and "no such file" in r.stderr


def test_script_error_is_exit_3_after_the_report(script):
    path = script(CUBIC, "raise KeyError('config')\n")
    r = cli(path, "--no-color")
    assert r.exit_code == 3
    assert "Cubic[generated]" in r.stdout  # the Functions defined before the error are checked
    assert "KeyError" in r.stderr and "Traceback (user frames only)" in r.stderr
    code, doc = run_json(path)
    assert code == 3 and doc["status"] == "error" and "KeyError" in doc["error"]["message"]


def test_timeout_bounds_the_script(script):
    r = cli(script("while True:\n    pass\n"), "--timeout", "0.2")
    assert r.exit_code == 3 and "--timeout" in r.stderr


def test_output_file_and_unwritable_junit_path(script, tmp_path):
    path = script(CUBIC)
    out = tmp_path / "report.json"
    r = cli(path, "-f", "json", "-o", str(out))
    assert r.exit_code == 0 and r.stdout == ""
    check_envelope(json.loads(out.read_text()))
    r = cli(path, "--junit-xml", str(tmp_path / "missing" / "j.xml"))
    assert r.exit_code == 2 and "--junit-xml" in r.stderr and "does not exist" in r.stderr


# --- JUnit XML -----------------------------------------------------------------------------


def test_junit_xml_counts(script, tmp_path):
    path = script(CUBIC, WRONG, CLAMP, CALLS)
    xml_path = tmp_path / "gradcheck.xml"
    r = cli(path, "--junit-xml", str(xml_path), "--order", "2")
    assert r.exit_code == 1
    root = ET.parse(xml_path).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    # calls: gradcheck (fail), gradgradcheck (pass); Cubic x2 orders; WrongCubic x2; Clamp skip
    assert len(cases) == int(suite.get("tests")) == int(root.get("tests")) == 7
    failures = [c for c in cases if c.find("failure") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert int(suite.get("failures")) == len(failures) == 2
    assert int(suite.get("skipped")) == len(skipped) == 1
    assert int(suite.get("errors")) == 0
    for c in failures:
        f = c.find("failure")
        assert "Jacobian mismatch" in f.get("message") and "constant_factor" in f.get("message")
        assert f.get("type") == "constant_factor" and "numerical:" in f.text
        assert c.get("file").endswith("s.py") and int(c.get("line")) > 0
    assert "sample_inputs()" in skipped[0].find("skipped").get("message")
    names = [c.get("name") for c in cases]
    assert "Cubic[generated] (order 2)" in names


def test_junit_renderer_is_generic():
    from autodiag.analysis.findings import Finding
    from autodiag.report import junit

    loc = {"file": "/x/train.py", "line": 7, "function": "<module>", "code": "y = x.log()"}
    cases = junit.from_findings(
        [Finding("nan_forward", "error", "NaN in log\nmore", loc)], "anomaly"
    )
    root = ET.fromstring(
        junit.render(
            "autodiag anomaly",
            cases
            + [
                junit.TestCase("ok", "anomaly"),
                junit.TestCase("bad \x01 char", "anomaly", status="error", message="a\x02b"),
            ],
        )
    )
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    first = suite.find("testcase")
    assert first.get("line") == "7" and first.find("failure").get("message") == "NaN in log"
    assert junit.from_findings([], "anomaly")[0].status == "passed"
    with pytest.raises(ValueError):
        junit.render("s", [junit.TestCase("x", "y", status="flaky")])


# --- progress bar --------------------------------------------------------------------------


def test_progress_bar_on_a_terminal(monkeypatch):
    from rich.console import Console

    from autodiag.report import gradcheck as command

    buf = io.StringIO()

    class Cmd:
        err = Console(file=buf, force_terminal=True, width=100)

    with command.progress(Cmd.err, 3) as cb:
        assert cb is None  # few checks: no bar
    seen = []
    with command.progress(Cmd.err, command.PROGRESS_MIN_CASES) as cb:
        for k in range(command.PROGRESS_MIN_CASES):
            cb(k + 1, command.PROGRESS_MIN_CASES, f"case {k}")
            seen.append(k)
    assert "gradcheck" in buf.getvalue() and len(seen) == command.PROGRESS_MIN_CASES
    Cmd.err = Console(file=io.StringIO(), force_terminal=False)
    with command.progress(Cmd.err, 100) as cb:
        assert cb is None  # not a terminal: no bar in CI logs


# --- the real entry point in a subprocess ---------------------------------------------------


def test_subprocess_ci_run(script, tmp_path):
    path = script(CUBIC, WRONG, CALLS)
    xml_path = tmp_path / "report.xml"
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "autodiag",
            "gradcheck",
            path,
            "--junit-xml",
            str(xml_path),
            "--no-color",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "constant_factor" in r.stdout
    assert "gradcheck(WrongCubic.apply) at s.py:" in r.stdout  # relative to the cwd
    suite = ET.parse(xml_path).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("4", "2")


# --- the samples ------------------------------------------------------------------------------

SAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples")


def test_myop_sample_passes():
    r = runner.invoke(app, ["gradcheck", os.path.join(SAMPLES_DIR, "myop.py"), "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    verdicts = {c["function"]: c["verdict"] for c in doc["cases"]}
    assert verdicts == {"Cubic": "pass", "Clamp": "pass", "StraightThroughRound": "skip"}


def test_bad_backward_sample_fails_with_its_diagnosis():
    r = runner.invoke(
        app, ["gradcheck", os.path.join(SAMPLES_DIR, "bad_backward.py"), "-f", "json"]
    )
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    by_fn = {f["function"]: f for f in doc["findings"]}
    assert set(by_fn) == {"Cube", "Square"}
    assert by_fn["Square"]["diagnoses"][0]["kind"] == "constant_factor"
    assert "off by a factor of 0.5" in by_fn["Square"]["hint"]
    assert by_fn["Square"]["location"]["line"] == 36  # its backward's return line
    assert by_fn["Cube"]["diagnoses"] == []  # no simple shape fits Cube's error


# --- issue 15 item 7: multi-input Functions, the return line, rule-shape diagnoses ------------

MATVEC = """\
class MatVec(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, v):
        ctx.save_for_backward(A, v)
        return A @ v

    @staticmethod
    def backward(ctx, grad):
        A, v = ctx.saved_tensors
        return grad.unsqueeze(-1) * v, A.T @ grad
"""


def test_matrix_vector_function_is_checked_at_the_scripts_inputs(script):
    path = script(
        MATVEC,
        """\
A = torch.randn(3, 4, requires_grad=True)
v = torch.randn(4, requires_grad=True)
MatVec.apply(A, v).sum().backward()
MatVec.apply(A, v)
""",
    )
    code, doc = run_json(path)
    assert code == 0, doc
    (c,) = doc["cases"]
    assert c["name"] == "MatVec[script inputs]" and c["verdict"] == "pass"
    assert c["inputs"] == ["(3, 4) float64", "(4,) float64"] and not c["generated"]
    assert c["recorded"]["line"] == line_of(path, "MatVec.apply(A, v).sum()")
    assert "the first of 2 calls" in c["notes"][0]
    assert "float32 converted to float64" in c["notes"][1]


def test_never_called_matrix_vector_function_says_how_to_give_inputs(script):
    r = cli(script(MATVEC), "--no-color")
    assert r.exit_code == 2  # nothing could be checked: not a pass, not a bare error
    assert "error" not in r.stdout.split("Skipped")[0].split("\n", 2)[2]
    assert "both arguments to matmul" in r.stdout
    assert "sample_inputs()" in r.stdout and "call MatVec.apply in the script" in r.stdout


def test_large_script_inputs_are_cut_consistently(script):
    path = script(
        MATVEC,
        """\
A = torch.randn(40, 60, requires_grad=True)
v = torch.randn(60, requires_grad=True)
MatVec.apply(A, v)
""",
    )
    code, doc = run_json(path)
    assert code == 0
    (c,) = doc["cases"]
    assert c["inputs"] == ["(6, 7) float64", "(7,) float64"]
    assert "40 -> 6, 60 -> 7" in c["notes"][-1]


def test_failure_points_at_the_return_line_that_ran(script):
    two_returns = """\
class Branchy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if grad is None:
            return None
        return (grad * 2
                * x ** 2)  # BUG: 3 * x**2
"""
    path = script(two_returns)
    code, doc = run_json(path)
    assert code == 1
    (f,) = doc["findings"]
    assert f["location"]["line"] == line_of(path, "return (grad * 2")
    assert f["location"]["function"] == "Branchy.backward"
    assert [s["line"] for s in f["stack"]] == [
        line_of(path, "class Branchy"),
        f["location"]["line"],
    ]
    r = cli(path, "--no-color")
    assert f"s.py:{f['location']['line']}  return (grad * 2" in r.stdout


SILU = """\
class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)  # BUG: misses x * s * (1 - s)
"""


def test_silu_missing_product_term_is_diagnosed(script):
    path = script(SILU, "x = torch.randn(5, requires_grad=True)\nSiLU.apply(x).sum().backward()\n")
    r = cli(path, "--no-color")
    assert r.exit_code == 1
    assert "missing_product_term" in r.stdout and "no specific cause" not in r.stdout
    assert "drops the x·g'(x) term of the product rule" in r.stdout
    code, doc = run_json(path)
    (f,) = doc["findings"]
    assert f["diagnoses"][0]["kind"] == "missing_product_term"
    assert f["location"]["code"].startswith("return grad * torch.sigmoid(x)")


def test_unexplained_mismatch_says_which_input_is_wrong_and_claims_no_cause(script):
    two = """\
class Two(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x.sin() * x ** 2 * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * x ** 3 * y, grad * x.sin() * x ** 2
"""
    path = script(two)
    r = cli(path, "--no-color")
    assert r.exit_code == 1
    assert "input 0 (x) (2, 3): analytical gradient wrong at 6 of 36 Jacobian entries" in r.stdout
    assert "input 1 (y) (2, 3): analytical gradient matches numerical" in r.stdout
    assert "no known cause verified" in r.stdout
    code, doc = run_json(path)
    (c,) = doc["cases"]
    assert c["diagnoses"] == []
    assert [(e["name"], e["wrong"]) for e in c["comparison"]] == [("x", 6), ("y", 0)]
