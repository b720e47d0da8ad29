"""The command pipeline (cli/_common.py): shared options declared once, a command declared as a
Spec (what it runs, what it returns, its renderers), formats registered by name."""

from __future__ import annotations

import json
import re

import pytest
import typer
from cli_helpers import cli
from typer.testing import CliRunner

from autodiag.analysis.findings import Finding
from autodiag.cli import anomaly, check, gradcheck, graph, inplace, leaks, trace
from autodiag.cli._common import Command, Spec, typer_command
from autodiag.report.outcome import Outcome, json_envelope

COMMANDS = [graph, trace, gradcheck, anomaly, inplace, leaks, check]
SHARED = [
    "--expr",
    "--var",
    "--dtype",
    "--format",
    "--output",
    "--no-color",
    "--timeout",
    "--junit-xml",
    "--annotations",
    "--quiet",
    "--engine",
    "--force",
]


def options_in_help(command: str) -> list[str]:
    out = cli(command, "--help", env={"COLUMNS": "200"}).stdout
    return re.findall(r"│ (--[a-z-]+)", out)


@pytest.mark.parametrize("module", COMMANDS, ids=lambda m: m.COMMAND.name)
def test_every_command_takes_the_shared_options_in_one_order(module):
    shown = options_in_help(module.COMMAND.name)
    assert [o for o in shown if o in SHARED] == SHARED
    assert shown[-3:] == ["--engine", "--force", "--help"]


def test_own_options_stand_where_the_command_places_them():
    assert options_in_help("graph")[3:5] == ["--order", "--format"]  # --order before --format
    gc = options_in_help("gradcheck")
    assert gc[gc.index("--timeout") + 1 : gc.index("--junit-xml")] == [
        "--eps",
        "--atol",
        "--rtol",
        "--fast",
        "--order",
        "--function",
        "--seed",
    ]
    assert options_in_help("leaks")[options_in_help("leaks").index("--quiet") + 1] == "--grow-steps"


def test_format_choices_are_the_registered_renderers():
    out = cli("graph", "--help", env={"COLUMNS": "200"}).stdout
    assert "text|json|dot|mermaid|svg" in out
    assert "text|json " in cli("anomaly", "--help", env={"COLUMNS": "200"}).stdout


# --- a new command and a new format: one run, one renderer, one registration ----------------


def _demo(cmd: Command, fail: bool = typer.Option(False, "--fail", help="Report a finding.")):
    """A demo command."""
    t = cmd.make_target()
    cmd.start()
    result = cmd.run_target(t, [], need_ops=False)
    found = [Finding("nan_forward", "error", "a demo finding")] if fail else []
    return Outcome(result, found, info={"expr": t.expr})


def _csv(sink, outcome) -> str:
    sink.write_text(
        "".join(f"{f.kind},{f.message}\n" for f in outcome.findings)
        + f"expr,{outcome.info['expr']}\n"
    )
    return "[yellow]note:[/] csv written"


def _app(renderers: dict) -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command("demo")(typer_command(Spec("demo", _demo, renderers)))
    return app


def test_a_format_is_one_renderer_and_one_registration():
    app = _app({"text": lambda sink, o: None, "json": json_envelope, "csv": _csv})
    runner = CliRunner()
    r = runner.invoke(app, ["-e", "x*2", "--var", "x=1", "-f", "csv"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.stdout == "expr,x*2\n" and "note: csv written" in r.stderr
    r = runner.invoke(
        app, ["-e", "x*2", "--var", "x=1", "-f", "csv", "--fail"], catch_exceptions=False
    )
    assert r.exit_code == 1 and r.stdout == "nan_forward,a demo finding\nexpr,x*2\n"
    r = runner.invoke(
        app, ["-e", "x*2", "--var", "x=1", "-f", "json", "--fail"], catch_exceptions=False
    )
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["command"] == "demo" and doc["status"] == "findings"
    assert doc["expr"] == "x*2" and [f["kind"] for f in doc["findings"]] == ["nan_forward"]
    r = runner.invoke(app, ["-e", "x*2", "--var", "x=1", "-f", "xml"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "'xml' is not one of 'text', 'json', 'csv'" in r.output


def test_a_new_command_gets_the_shared_failure_handling(tmp_path):
    app = _app({"text": lambda sink, o: None, "json": json_envelope})
    runner = CliRunner()
    r = runner.invoke(
        app, ["-e", "x*2", "--var", "x=1", "--timeout", "-1", "-f", "json"], catch_exceptions=False
    )
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["kind"] == "bad_invocation"
    xml = tmp_path / "r.xml"
    r = runner.invoke(
        app,
        ["-e", "x*2", "--var", "x=1", "--fail", "--junit-xml", str(xml)],
        catch_exceptions=False,
    )
    assert r.exit_code == 1 and 'failures="1"' in xml.read_text()
