"""What every command shares: the TARGET options, the failure table, and the run pipeline
(parse -> run target with tracers -> analysis -> render -> exit code)."""

from __future__ import annotations

import enum
import os
import sys
import traceback
from typing import Annotated

import typer
from rich.markup import escape

from autodiag.report.output import Sink, check_writable, stderr_console
from autodiag.target import Run, Target, run
from autodiag.target.errors import AutodiagError, BadInvocation

# --- exit codes (DESIGN §4; README lists them) ---------------------------------------------------
EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_TARGET_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# --- options shared by the commands -----------------------------------------------------------


class TextOrJson(str, enum.Enum):
    """--format of the commands that have no graph formats."""

    text = "text"
    json = "json"


FormatOpt = Annotated[TextOrJson, typer.Option("--format", "-f", help="text or json.")]
TargetArg = Annotated[str | None, typer.Argument(
    help="Python script to run as __main__ (or use -e EXPR).", show_default=False)]
ScriptArgs = Annotated[list[str] | None, typer.Argument(
    help="Arguments for the script, after --.", show_default=False)]
ExprOpt = Annotated[str | None, typer.Option(
    "-e", "--expr", help="An expression instead of a script, e.g. '(3*x+2)**2'.",
    show_default=False)]
VarOpt = Annotated[list[str] | None, typer.Option(
    "--var", help="NAME=VALUE for -e: a number or nested list; a leaf with requires_grad.",
    show_default=False)]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="dtype of --var leaves: float64 or "
                                       "float32.")]
OutputOpt = Annotated[str | None, typer.Option(
    "-o", "--output", help="Write the report to FILE (atomically) instead of stdout.",
    show_default=False)]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="Plain text without colour.")]
TimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", help="Stop the target after SECONDS.", show_default=False, min=0.001)]


def make_target(target: str | None, script_args, expr, var, dtype, timeout) -> Target:
    if target is not None and expr is not None:
        # with -e, click hands the first word after -- to TARGET: it is a script argument
        raise BadInvocation(f"give either a script ({target}) or -e EXPR, not both",
                            "Drop the script path to inspect the expression.")
    if target is None and expr is None:
        raise BadInvocation("no target: give a script path or -e EXPR",
                            "For example: autodiag graph samples/model.py, or autodiag graph "
                            "-e '(3*x+2)**2' --var x=1.")
    return Target(path=target, args=list(script_args or []), expr=expr, vars=list(var or []),
                  dtype=dtype, timeout=timeout)


class Command:
    """One run of a command: holds the sink and turns outcomes into exit codes."""

    def __init__(self, name: str, output: str | None, no_color: bool):
        self.name = name
        self.output = output
        self.color = not no_color and not os.environ.get("NO_COLOR")
        self.err = stderr_console(self.color and sys.stderr.isatty())
        self.sink: Sink | None = None

    def start(self) -> Sink:
        check_writable(self.output)
        self.sink = Sink(self.output, self.color and sys.stdout.isatty())
        return self.sink

    def run_target(self, target: Target, tracers) -> Run:
        return run(target, tracers)

    def fail(self, e: AutodiagError) -> int:
        """Print a failure as one paragraph on stderr; return its exit code."""
        self.err.print(f"[bold red]autodiag: {escape(e.title)}:[/] {escape(e.message)}")
        if e.details:
            self.err.print(escape(e.details))
        if e.hint:
            self.err.print(f"  {escape(e.hint)}")
        if os.environ.get("AUTODIAG_DEBUG") == "1":
            self.err.print(escape("".join(traceback.format_exception(e))))
        return e.exit_code


def guarded(name: str, output: str | None, no_color: bool, body) -> None:
    """Run a command body ``body(cmd) -> exit code`` with the failure table applied, and exit."""
    cmd = Command(name, output, no_color)
    try:
        code = body(cmd)
        if cmd.sink is not None:
            cmd.sink.close()
    except AutodiagError as e:
        code = cmd.fail(e)
    except KeyboardInterrupt:
        cmd.err.print("[bold red]autodiag: interrupted[/]")
        code = EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - a bug in autodiag: say so, without a traceback
        cmd.err.print(f"[bold red]autodiag: internal error:[/] {escape(type(e).__name__)}: "
                      f"{escape(str(e))}")
        if os.environ.get("AUTODIAG_DEBUG") == "1":
            cmd.err.print(escape("".join(traceback.format_exception(e))))
        else:
            cmd.err.print("  This is a bug in autodiag. Run again with AUTODIAG_DEBUG=1 to see "
                          "its traceback, and report it.")
        code = EXIT_TARGET_FAILED
    raise typer.Exit(code)


def target_failure(cmd: Command, result: Run) -> int | None:
    """After rendering: report a failed or interrupted target; the exit code, or None."""
    if result.interrupted:
        cmd.err.print("[bold red]autodiag: interrupted[/] (the report covers what ran before)")
        return EXIT_INTERRUPTED
    if result.error is not None:
        return cmd.fail(result.error)
    return None
