"""The CLI's output contract (DESIGN §4, §6) for all seven commands: the JSON envelope on every
exit, exit codes (4: autodiag's own failure; 130: interrupted), closed pipes, and the user's
files (never written over; output files get the usual mode). Through the real entry point: typer's
CliRunner in-process, and subprocesses where a pipe or a signal is involved."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from cli_helpers import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
COMMANDS = ["graph", "trace", "gradcheck", "anomaly", "inplace", "leaks", "check"]
STATUS_OF_EXIT = {0: "ok", 1: "findings", 2: "error", 3: "error", 4: "error", 130: "interrupted"}

OK = """\
import autodiag as torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
loss = (x * 3).sum()
loss.backward()
"""


def autodiag(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autodiag", *args], capture_output=True, text=True, env=ENV, **kw
    )


def check_contract(doc: dict, command: str, code: int) -> None:
    """The envelope of DESIGN §4, its status agreeing with the exit code, and an error object
    on every exit that is neither a pass nor findings."""
    assert set(doc) >= {"autodiag", "command", "target", "status", "findings"}
    assert doc["command"] == command
    assert doc["status"] == STATUS_OF_EXIT[code], (code, doc["status"])
    if code not in (0, 1):
        err = doc["error"]
        assert set(err) >= {"kind", "exit_code", "message", "hint", "location"}
        assert err["exit_code"] == code and err["message"]
        assert err["location"] is None or set(err["location"]) >= {"file", "line"}


# --- the envelope on every exit -----------------------------------------------------------------

RAISES = (
    "import autodiag as torch\nx = torch.ones(2, requires_grad=True)\ny = x * 2\n"
    "raise ValueError('boom')\n"
)
NO_TENSORS = "print('hello')\n"
SLEEPS = "import time\ntime.sleep(30)\n"
EXITS = "import sys\nsys.exit(5)\n"


def _bad_targets(tmp_path):
    """(name, arguments, expected exit code, expected error kind) of bad runs."""

    def write(name, source):
        p = tmp_path / name
        p.write_text(source)
        return str(p)

    ok = write("ok.py", OK)
    return [
        ("missing file", [str(tmp_path / "missing.py")], 2, "bad_target"),
        ("directory", [str(tmp_path)], 2, "bad_target"),
        ("syntax error", [write("syn.py", "x = (1,\n")], 2, "bad_target"),
        ("script raising", [write("raises.py", RAISES)], 3, "target_failed"),
        ("sys.exit(5)", [write("exits.py", EXITS)], 3, "target_failed"),
        ("no tensors", [write("plain.py", NO_TENSORS)], 2, None),
        ("refused expression", ["-e", "__import__('os')", "--var", "x=1"], 2, "bad_expression"),
        ("ragged --var", ["-e", "x*2", "--var", "x=[1,[2,3]]"], 2, "bad_invocation"),
        ("duplicate --var", ["-e", "x*2", "--var", "x=1", "--var", "x=2"], 2, "bad_invocation"),
        ("timeout", [write("sleeps.py", SLEEPS), "--timeout", "0.3"], 3, "timeout"),
        ("--timeout inf", [ok, "--timeout", "inf"], 2, "bad_invocation"),
        (
            "unwritable -o",
            [ok, "-o", str(tmp_path / "no" / "such" / "dir.json")],
            2,
            "bad_invocation",
        ),
        ("-o the target", [ok, "-o", ok], 2, "bad_invocation"),
        ("unknown option", [ok, "--no-such-option"], 2, "usage"),
        ("script and -e", [ok, "-e", "x"], 2, "bad_invocation"),
    ]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_the_envelope_on_every_exit(command, tmp_path):
    for name, args, code, kind in _bad_targets(tmp_path):
        r = cli(command, *args, "-f", "json")
        assert r.exit_code == code, (name, r.exit_code, r.stderr)
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"{command} / {name}: stdout is not one JSON document: {r.stdout!r}")
        check_contract(doc, command, code)
        if kind is not None:
            assert doc["error"]["kind"] == kind, (name, doc["error"])
        assert r.stderr.strip(), name  # the paragraph for humans is still on stderr
    assert (tmp_path / "ok.py").read_text() == OK  # -o the target did not touch it


def test_the_envelope_of_a_failure_says_where(script):
    path = script(RAISES)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    err = doc["error"]
    assert err["kind"] == "target_failed" and "ValueError: boom" in err["message"]
    assert err["location"]["line"] == 4 and err["location"]["code"] == "raise ValueError('boom')"
    assert "Traceback (user frames only)" in err["traceback"]
    doc = json.loads(cli("graph", script("x = (1,\n", "syn.py"), "-f", "json").stdout)
    assert doc["error"]["location"]["line"] == 1 and doc["error"]["kind"] == "bad_target"
    doc = json.loads(cli("check", script(EXITS, "e.py"), "-f", "json").stdout)
    assert doc["error"]["exit_status"] == 5


def test_graph_and_trace_of_a_script_raising_before_backward_print_the_envelope(script):
    path = script(RAISES)
    for command in ("graph", "trace", "gradcheck"):
        r = cli(command, path, "-f", "json")
        assert r.exit_code == 3
        check_contract(json.loads(r.stdout), command, 3)


def test_the_error_envelope_goes_to_the_output_file_when_it_can(script, tmp_path):
    out = tmp_path / "report.json"
    r = cli("check", script(RAISES), "-f", "json", "-o", str(out))
    assert r.exit_code == 3 and r.stdout == ""
    check_contract(json.loads(out.read_text()), "check", 3)
    out.unlink()
    r = cli("check", str(tmp_path / "missing.py"), "-f", "json", "-o", str(out))  # before start
    assert r.exit_code == 2 and r.stdout == ""
    check_contract(json.loads(out.read_text()), "check", 2)
    # the output file is what failed: the envelope goes to stdout
    bad = tmp_path / "nodir" / "r.json"
    r = cli("check", script(OK, "ok.py"), "-f", "json", "-o", str(bad))
    assert r.exit_code == 2 and not bad.exists()
    assert "not exist" in json.loads(r.stdout)["error"]["message"]


def test_a_usage_error_prints_the_envelope_when_json_was_asked_for(script):
    path = script(OK)
    for args in (
        ["-f", "json", "--call", "0"],
        ["--format=json", "--bogus"],
        ["-fjson", "--bogus"],
    ):
        r = cli("graph", path, *args)
        assert r.exit_code == 2
        doc = json.loads(r.stdout)
        check_contract(doc, "graph", 2)
        assert doc["error"]["kind"] == "usage"
    r = cli("graph", path, "--bogus")  # text: nothing on stdout
    assert r.exit_code == 2 and r.stdout == ""


# --- exit code 4: autodiag's own failure --------------------------------------------------------


def test_an_internal_error_exits_4_and_says_report_it(script, monkeypatch):
    from autodiag.report import leaks

    def broken(*a, **k):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(leaks, "render", broken)
    path = script(OK)
    r = cli("leaks", path)
    assert r.exit_code == 4
    assert "internal error: ZeroDivisionError: a bug" in r.stderr and "report" in r.stderr
    assert "Traceback" not in r.stderr
    monkeypatch.setenv("AUTODIAG_DEBUG", "1")
    r = cli("leaks", path)
    assert r.exit_code == 4 and "Traceback" in r.stderr and "broken" in r.stderr
    monkeypatch.setattr("autodiag.analysis.leaks.LeakFinder.findings", broken)
    r = cli("leaks", path, "-f", "json")
    doc = json.loads(r.stdout)
    check_contract(doc, "leaks", 4)
    assert doc["error"]["kind"] == "internal"


def test_the_runner_failing_is_not_blamed_on_the_script(script, monkeypatch):
    from autodiag.target import script as runner

    def broken(self):
        raise OverflowError("timestamp out of range for platform time_t")

    monkeypatch.setattr(runner._Alarm, "__enter__", broken)
    r = cli("graph", script(OK), "--timeout", "5")
    assert r.exit_code == 4, r.stderr
    assert "raised OverflowError" not in r.stderr and "internal error" in r.stderr


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "0", "-1", "2e9"])
def test_timeout_out_of_range_is_refused_before_running(script, value, tmp_path):
    marker = tmp_path / "ran"
    path = script(f"open({str(marker)!r}, 'w').close()\n" + OK)
    r = cli("check", path, "--timeout", value)
    assert r.exit_code == 2, r.stderr
    assert (
        f"--timeout {value}" in r.stderr.replace("1e+300", "1e300").replace("2e+09", "2e9")
        and "seconds" in r.stderr
    )
    assert "OverflowError" not in r.stderr and not marker.exists()


# --- interrupts ---------------------------------------------------------------------------------

LOOP = """\
import sys
import autodiag as torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
print("started", file=sys.stderr, flush=True)
while True:
    (x * 2).sum().backward()
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_an_interrupted_run_says_interrupted_in_json(command, script):
    path = script(LOOP)
    p = subprocess.Popen(
        [sys.executable, "-m", "autodiag", command, path, "-f", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        while b"started" not in p.stderr.readline():
            assert p.poll() is None, "the script did not start"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    doc = json.loads(out)
    check_contract(doc, command, 130)
    assert doc["error"]["kind"] == "interrupted"


def test_an_interrupt_while_rendering_leaves_valid_json(script, monkeypatch):
    from autodiag.report import graph

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(graph, "to_json", interrupted)
    r = cli("graph", script(OK), "-f", "json")
    assert r.exit_code == 130
    doc = json.loads(r.stdout)
    check_contract(doc, "graph", 130)
    assert "interrupted" in r.stderr


def test_an_interrupt_while_writing_is_held_until_the_text_is_out(monkeypatch):
    import io

    from autodiag.report import output

    class Slow(io.StringIO):
        def write(self, text):
            half = len(text) // 2
            super().write(text[:half])
            signal.raise_signal(signal.SIGINT)  # Ctrl-C in the middle of the write
            return super().write(text[half:])

    stream = Slow()
    monkeypatch.setattr(sys, "stdout", stream)
    output.write_stdout('{"a": 1}\n')  # no KeyboardInterrupt escapes
    assert json.loads(stream.getvalue()) == {"a": 1}
    assert output.pending_interrupt() and not output.pending_interrupt()  # asked: forgotten


# --- closed pipes -------------------------------------------------------------------------------


def _closed_pipe(*args) -> tuple[int, str]:
    """Run autodiag with its stdout a pipe whose reader is already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [sys.executable, "-m", "autodiag", *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
    finally:
        os.close(w)
    return p.returncode, p.stderr


NAN = """\
import autodiag as torch
x = torch.tensor([0.0, 2.0], requires_grad=True)
y = x.log() * 0
y.sum().backward()
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_pipe_exits_with_the_verdict_silently(command, script):
    args = (
        [command, script(OK)] if command != "gradcheck" else [command, "-e", "x**2", "--var", "x=1"]
    )
    for fmt in ("text", "json"):
        code, err = _closed_pipe(*args, "-f", fmt)
        assert code == 0 and err == "", (fmt, code, err)


def test_a_closed_pipe_keeps_findings_and_failures_exit_codes(script):
    code, err = _closed_pipe("anomaly", script(NAN))
    assert code == 1 and err == ""
    code, err = _closed_pipe("graph", script(RAISES, "r.py"))
    assert code == 3 and "BrokenPipe" not in err and "ValueError: boom" in err


@pytest.mark.parametrize(
    "args", [["--help"], ["graph", "--help"], ["check", "--help"], ["--version"]]
)
def test_help_and_version_into_a_closed_pipe_exit_0(args):
    code, err = _closed_pipe(*args)
    assert code == 0 and err == ""


# --- the user's files ---------------------------------------------------------------------------

VICTIM = """\
import autodiag as torch
from sib import helper_mod
import importlib
dyn = importlib.import_module("dyn" + "amic")
with open("{data}") as f:
    scale = float(f.read())
open("{marker}", "a").close()
x = torch.tensor([1.0, 2.0], requires_grad=True)
loss = (x * helper_mod.k() * scale).sum()
loss.backward()
"""


@pytest.fixture
def victim(tmp_path):
    (tmp_path / "sib").mkdir()
    (tmp_path / "sib" / "__init__.py").write_text("")
    (tmp_path / "sib" / "helper_mod.py").write_text("def k():\n    return 3.0\n")
    (tmp_path / "dynamic.py").write_text("V = 1\n")
    (tmp_path / "data.txt").write_text("2.0\n")
    marker = tmp_path / "ran"
    path = tmp_path / "victim.py"
    path.write_text(VICTIM.format(data=tmp_path / "data.txt", marker=marker))
    os.symlink(path, tmp_path / "link.py")
    os.link(path, tmp_path / "hard.py")
    return tmp_path


def _contents(folder) -> dict:
    return {
        p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("option", ["-o", "--junit-xml"])
@pytest.mark.parametrize(
    "dest,before_run",
    [
        ("victim.py", True),
        ("link.py", True),
        ("hard.py", True),
        ("sib/helper_mod.py", True),
        ("dynamic.py", False),
        ("data.txt", False),
    ],
)
def test_reports_never_overwrite_the_users_files(victim, command, option, dest, before_run):
    files = _contents(victim)
    marker = victim / "ran"
    target = str(victim / "victim.py")
    r = cli(command, target, option, str(victim / dest), "--force")
    assert r.exit_code == 2, r.stderr
    assert "never writes over the user's files" in r.stderr
    assert marker.exists() is not before_run  # refused before the target ran, when knowable
    marker.unlink(missing_ok=True)
    assert _contents(victim) == files  # nothing written, nothing left behind
    assert not list(victim.glob(".autodiag-*"))


def test_an_existing_python_file_needs_force(victim):
    other = victim / "other.py"
    other.write_text("print('mine')\n")
    r = cli("graph", str(victim / "victim.py"), "-o", str(other))
    assert r.exit_code == 2 and "--force" in r.stderr
    assert other.read_text() == "print('mine')\n"
    r = cli("graph", str(victim / "victim.py"), "-o", str(other), "--force")
    assert r.exit_code == 0 and "SumBackward0" in other.read_text()


def test_both_reports_to_one_file_is_refused(victim):
    out = victim / "r.xml"
    r = cli("check", str(victim / "victim.py"), "-o", str(out), "--junit-xml", str(out))
    assert r.exit_code == 2 and "same file" in r.stderr and not out.exists()


@pytest.mark.parametrize("option", ["-o", "--junit-xml"])
def test_output_files_get_the_usual_mode(script, tmp_path, option):
    path = script(OK)
    out = tmp_path / "report.out"
    old = os.umask(0o022)
    try:
        assert cli("check", path, option, str(out)).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644  # a new file honours the umask
        out.chmod(0o664)
        assert cli("check", path, option, str(out)).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o664  # an existing file keeps its mode
        out.unlink()
        os.umask(0o077)
        assert cli("check", path, option, str(out)).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_an_output_that_is_not_a_regular_file_is_refused(script, tmp_path):
    # (a fifo stands for /dev/null, /dev/stdout: never test on those, a bug would replace them)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.symlink(fifo, tmp_path / "link")
    for dest in (fifo, tmp_path / "link"):
        r = cli("graph", script(OK), "-o", str(dest))
        assert r.exit_code == 2 and "not a regular file" in r.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode) and (tmp_path / "link").is_symlink()


def test_an_output_symlink_is_written_through(script, tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    os.symlink(real, link)
    assert cli("graph", script(OK), "-o", str(link)).exit_code == 0
    assert link.is_symlink() and "SumBackward0" in real.read_text()


# --- tracebacks: the user's frames only ---------------------------------------------------------


def test_a_timeout_traceback_shows_only_the_users_frames(script, tmp_path):
    lib = tmp_path / "venv" / "lib" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "spin.py").write_text("def spin():\n    while True:\n        pass\n")
    path = script(f"""\
        import sys, threading
        sys.path.insert(0, {str(lib)!r})
        import autodiag as torch
        import spin
        x = torch.ones(2, requires_grad=True) * 2
        def wait():
            threading.Event().wait()
        def busy():
            spin.spin()
        (wait if sys.argv[1] == "wait" else busy)()
        """)
    for how, inner in (("wait", "threading.Event().wait()"), ("busy", "spin.spin()")):
        r = cli("graph", path, "--timeout", "0.5", "--", how)
        assert r.exit_code == 3, r.stderr
        assert "did not finish within --timeout" in r.stderr
        frames = [ln for ln in r.stderr.splitlines() if ln.strip().startswith("File ")]
        assert frames and all("s.py" in ln for ln in frames), r.stderr
        assert inner in r.stderr
        doc = json.loads(cli("graph", path, "--timeout", "0.5", "-f", "json", "--", how).stdout)
        assert doc["error"]["kind"] == "timeout" and doc["error"]["location"]["code"] == inner


# --- smaller items ------------------------------------------------------------------------------


def test_leaks_header_names_the_step_end_after_one_backward(script):
    r = cli("leaks", script(OK), "--no-color")
    assert r.exit_code == 0
    assert "1 step (a step ends at each backward())" in r.stdout
    assert "each )" not in r.stdout


@pytest.mark.parametrize(
    "spec,reason",
    [
        ("x=[1,[2,3]]", "a number and a list side by side"),
        ("x=[[1],[2,3]]", "lists of lengths 1 and 2"),
        ("x=[[1,2],3]", "a number and a list side by side"),
    ],
)
def test_a_ragged_var_is_a_clear_refusal(spec, reason):
    r = cli("graph", "-e", "x*2", "--var", spec)
    assert r.exit_code == 2 and "not rectangular" in r.stderr and reason in r.stderr
    assert "internal error" not in r.stderr


def test_a_var_given_twice_is_refused():
    r = cli("graph", "-e", "x*2", "--var", "x=1", "--var", "x=2")
    assert r.exit_code == 2 and "--var x is given twice" in r.stderr


def test_a_deeply_nested_expression_is_refused_with_a_reason():
    r = cli("graph", "-e", "-" * 100000 + "x", "--var", "x=1")
    assert r.exit_code == 2
    assert "nested too deeply" in r.stderr and "Simplify" in r.stderr


def test_the_help_lists_exit_code_4():
    r = cli("--help")
    assert "4" in r.stdout and "please report" in r.stdout.replace("\n", " ")


def test_force_is_an_option_of_every_command():
    for command in COMMANDS:
        assert "--force" in cli(command, "--help").stdout


def test_nothing_in_the_folder_is_touched_by_a_normal_run(script, tmp_path):
    path = script(OK)
    before = _contents(tmp_path)
    r = cli("check", path, "-f", "json")
    assert r.exit_code == 0
    assert _contents(tmp_path) == before
