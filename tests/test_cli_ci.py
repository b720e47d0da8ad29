"""CI outputs of every command: ``--junit-xml`` and GitHub Actions annotations (``--annotations``,
``GITHUB_ACTIONS=true``), through the real entry point on the samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from autodiag.cli import app
from autodiag.report import annotations as gh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
COMMANDS = ("graph", "trace", "gradcheck", "anomaly", "inplace", "leaks", "check")


def cli(*args, env=None):
    # GITHUB_ACTIONS is set when this suite itself runs on GitHub: tests choose it explicitly
    env = {"GITHUB_ACTIONS": "", **(env or {})}
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env=env)


def sample(name: str) -> str:
    return os.path.join(SAMPLES, name)


def junit(path) -> tuple[ET.Element, list[ET.Element]]:
    """The <testsuite> (its counts checked against its cases and <testsuites>) and its cases."""
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    for el in (root, suite):
        assert int(el.get("tests")) == len(cases)
        for status in ("failure", "error", "skipped"):
            count = sum(c.find(status) is not None for c in cases)
            assert int(el.get(status + "s" if status != "skipped" else "skipped")) == count
    return suite, cases


def annotation_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("::")]


# --- JUnit XML ----------------------------------------------------------------------------------


def test_anomaly_junit_one_failing_case_per_finding(tmp_path):
    out = tmp_path / "anomaly.xml"
    r = cli("anomaly", sample("nan_log.py"), "-f", "json", "--junit-xml", str(out))
    assert r.exit_code == 1
    findings = json.loads(r.stdout)["findings"]
    suite, cases = junit(out)
    assert suite.get("failures") == str(len(findings)) == "2"  # log -> inf, then 0 * inf -> nan
    kinds = {c.find("failure").get("type") for c in cases}
    assert kinds == {"inf_forward", "nan_forward"}
    for c in cases:
        assert c.get("file").endswith("nan_log.py") and c.get("line") == "17"
        assert c.get("name").startswith(c.find("failure").get("type") + " at ")
        assert c.get("name").endswith("nan_log.py:17")
        assert "clamp" in c.find("failure").text or "mask" in c.find("failure").text  # the hint


def test_inplace_junit(tmp_path):
    out = tmp_path / "inplace.xml"
    r = cli("inplace", sample("inplace_saved.py"), "--junit-xml", str(out))
    assert r.exit_code == 1
    suite, (case,) = junit(out)
    # the script died of the hazard: the error is the finding, not an extra error case
    assert suite.get("errors") == "0" and suite.get("failures") == "1"
    assert case.find("failure").get("type") == "inplace_saved_tensor"
    assert case.get("file").endswith("inplace_saved.py") and case.get("line") == "16"
    assert "SigmoidBackward0" in case.find("failure").get("message")


def test_leaks_junit_and_annotations(tmp_path):
    out = tmp_path / "leaks.xml"
    r = cli("leaks", sample("leaky_loop.py"), "--junit-xml", str(out), "--annotations", "github")
    assert r.exit_code == 1
    suite, cases = junit(out)
    assert suite.get("failures") == "2"
    by_type = {c.find("failure").get("type"): c for c in cases}
    assert by_type["graph_leak"].get("line") == "19"  # history = []
    assert by_type["retained_graph"].get("line") == "23"
    lines = annotation_lines(r.stderr)
    assert any(x.startswith("::error file=") and "title=graph_leak" in x for x in lines)
    assert any(x.startswith("::warning file=") and "title=retained_graph" in x for x in lines)


def test_check_junit_warnings_pass_errors_fail(tmp_path):
    out = tmp_path / "check.xml"
    r = cli("check", sample("train.py"), "--junit-xml", str(out))
    assert r.exit_code == 0  # dead_relu warnings only: the JUnit report agrees with the exit
    suite, cases = junit(out)
    # one dead_relu warning (model.3) from PyTorch's initial weights under manual_seed(0)
    assert suite.get("failures") == "0" and len(cases) == 1
    assert all(c.get("name").endswith("(warning)") for c in cases)
    r = cli("check", sample("no_zero_grad.py"), "--junit-xml", str(out))
    assert r.exit_code == 1
    suite, (case,) = junit(out)
    assert case.find("failure").get("type") == "unplanned_accumulation"


@pytest.mark.parametrize("command", COMMANDS)
def test_clean_sample_is_one_passing_case(command, tmp_path):
    out = tmp_path / "r.xml"
    target = sample("myop.py")  # clean for every command; gradcheck checks its Function
    r = cli(command, target, "--junit-xml", str(out))
    assert r.exit_code == 0, r.stderr
    suite, cases = junit(out)
    assert suite.get("failures") == suite.get("errors") == "0"
    if command != "gradcheck":  # gradcheck: one passing case per check
        assert len(cases) == 1 and cases[0].find("*") is None
        assert cases[0].get("classname") == f"autodiag.{command}"


@pytest.mark.parametrize("command", COMMANDS)
def test_failing_target_is_an_error_case(command, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "import autodiag as torch\n"
        "x = torch.ones(2, requires_grad=True)\n"
        "(x * 2).sum().backward()\n"
        "raise ValueError('boom')\n"
    )
    out = tmp_path / "r.xml"
    r = cli(command, str(script), "--junit-xml", str(out))
    assert r.exit_code == 3, r.stderr
    suite, cases = junit(out)
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    (err,) = [c.find("error") for c in cases if c.find("error") is not None]
    assert "ValueError: boom" in err.get("message") and err.get("type") == "TargetFailed"
    assert "line 4" in err.text  # the user's traceback
    (case,) = [c for c in cases if c.find("error") is not None]
    assert case.get("file").endswith("boom.py") and case.get("line") == "4"  # where it raised


def test_unloadable_target_is_an_error_case(tmp_path):
    script = tmp_path / "syntax.py"
    script.write_text("x = (\n")
    out = tmp_path / "r.xml"
    r = cli("graph", str(script), "--junit-xml", str(out))
    assert r.exit_code == 2
    _, (case,) = junit(out)
    assert "syntax error" in case.find("error").get("message")


@pytest.mark.parametrize("command", COMMANDS)
def test_unwritable_junit_path_exits_2_before_running(command, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = cli(command, str(script), "--junit-xml", str(tmp_path / "missing" / "r.xml"))
    assert r.exit_code == 2
    assert "--junit-xml" in r.stderr and "does not exist" in r.stderr
    assert not marker.exists()  # nothing ran
    r = cli(command, str(script), "--junit-xml", str(tmp_path))
    assert r.exit_code == 2 and "--junit-xml" in r.stderr and "is a directory" in r.stderr
    assert not marker.exists()


def test_junit_and_output_together(tmp_path):
    out, report = tmp_path / "r.xml", tmp_path / "report.json"
    r = cli(
        "anomaly", sample("nan_log.py"), "-f", "json", "-o", str(report), "--junit-xml", str(out)
    )
    assert r.exit_code == 1 and r.stdout == ""
    assert len(json.loads(report.read_text())["findings"]) == len(junit(out)[1])


# --- annotations --------------------------------------------------------------------------------


def test_annotations_on_github_actions():
    r = cli("anomaly", sample("nan_log.py"), env={"GITHUB_ACTIONS": "true"})
    assert r.exit_code == 1
    lines = annotation_lines(r.stderr)
    assert len(lines) == 2 and not annotation_lines(r.stdout)
    assert all(line.startswith("::error file=") and ",line=17,title=" in line for line in lines)
    assert {line.split("title=")[1].split("::")[0] for line in lines} == {
        "inf_forward",
        "nan_forward",
    }


def test_annotations_flag_and_none(tmp_path):
    on = cli("inplace", sample("inplace_saved.py"), "--annotations", "github")
    (line,) = annotation_lines(on.stderr)
    assert line.startswith("::error file=") and "inplace_saved.py,line=16" in line
    assert "title=inplace_saved_tensor::" in line
    off = cli(
        "inplace",
        sample("inplace_saved.py"),
        "--annotations",
        "none",
        env={"GITHUB_ACTIONS": "true"},
    )
    assert off.exit_code == on.exit_code == 1
    assert annotation_lines(off.stderr) == [] and annotation_lines(off.stdout) == []
    quiet = cli("inplace", sample("inplace_saved.py"))  # not on GitHub, no flag
    assert annotation_lines(quiet.stderr) == []


def test_json_stdout_stays_json_with_annotations():
    r = cli("anomaly", sample("nan_log.py"), "-f", "json", env={"GITHUB_ACTIONS": "true"})
    doc = json.loads(r.stdout)  # nothing but the document
    assert doc["status"] == "findings" and len(annotation_lines(r.stderr)) == 2


def test_gradcheck_annotations_and_junit_cases(tmp_path):
    out = tmp_path / "g.xml"
    r = cli(
        "gradcheck", sample("bad_backward.py"), "--junit-xml", str(out), "--annotations", "github"
    )
    assert r.exit_code == 1
    lines = annotation_lines(r.stderr)
    assert len(lines) == 2 and all("title=gradcheck_failed::" in line for line in lines)
    assert any("factor of 0.5" in line for line in lines)  # the diagnosis travels along
    suite, cases = junit(out)
    assert suite.get("failures") == "2" and {c.get("name").split("[")[0] for c in cases} == {
        "Cube",
        "Square",
    }


def test_failed_target_annotation_points_at_the_line(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("x = 1\nraise ValueError('50%, really: no')\n")
    r = cli("graph", str(script), "--annotations", "github")
    assert r.exit_code == 3
    (line,) = annotation_lines(r.stderr)
    assert line.startswith("::error file=") and ",line=2,title=autodiag graph%3A " in line
    assert "50%25%2C really" not in line and "50%25, really: no" in line  # data, not property


def test_subprocess_on_github(tmp_path):
    """The real entry point: stdout is JSON, stderr carries the workflow commands, relative
    paths (the job's cwd is the checkout)."""
    out = tmp_path / "r.xml"
    env = dict(os.environ, PYTHONPATH=ROOT, GITHUB_ACTIONS="true")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "autodiag",
            "inplace",
            "samples/inplace_saved.py",
            "-f",
            "json",
            "--junit-xml",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["status"] == "findings"
    (line,) = annotation_lines(r.stderr)
    assert line.startswith("::error file=samples/inplace_saved.py,line=16,")
    assert junit(out)[0].get("failures") == "1"


# --- the formatter ------------------------------------------------------------------------------


def test_formatter_escapes_data_and_properties():
    line = gh.annotation(
        "error", "100% wrong\r\nsecond line: a, b", file="dir/a,b:c.py", line=3, title="kind: x, y"
    )
    assert line == (
        "::error file=dir/a%2Cb%3Ac.py,line=3,title=kind%3A x%2C y::"
        "100%25 wrong%0D%0Asecond line: a, b"
    )
    assert "\n" not in line and "\r" not in line
    # '%' is escaped first: an escape sequence in the text survives as text
    assert gh.escape_data("%0A") == "%250A"
    assert gh.annotation("warning", "w") == "::warning::w"
    with pytest.raises(ValueError):
        gh.annotation("fatal", "x")


def test_formatter_findings_and_paths(tmp_path, monkeypatch):
    from autodiag.analysis.findings import Finding

    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "pkg" / "train.py")
    found = [
        Finding(
            "exploding_grad",
            "warning",
            "grad norm 1e9",
            {"file": inside, "line": 9, "function": "f", "code": ""},
            hint="clip it",
        ),
        Finding(
            "nan_forward",
            "error",
            "nan",
            {"file": "/elsewhere/x.py", "line": 1, "function": "f", "code": ""},
        ),
        Finding("graph_leak", "error", "no location"),
        Finding(
            "nan_forward",
            "error",
            "in -e",
            {"file": "<string>", "line": 1, "function": "<module>", "code": ""},
        ),
    ]
    lines = gh.from_findings(found)
    assert (
        lines[0] == "::warning file=pkg/train.py,line=9,title=exploding_grad::grad norm 1e9"
        "%0Aclip it"
    )
    assert lines[1].startswith("::error file=/elsewhere/x.py,line=1,")  # outside the cwd: as is
    assert lines[2] == "::error title=graph_leak::no location"
    assert lines[3] == "::error title=nan_forward::in -e"  # not a file: no file/line
