"""The ``autodiag`` command: one thin module per command, registered here.

This package and ``report/`` are the only places that import typer and rich.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from autodiag._version import __version__
from autodiag.cli import anomaly, check, gradcheck, graph, inplace, leaks, trace
from autodiag.cli._common import typer_command
from autodiag.cli._light_help import load_rich_utils
from autodiag.report import output


class _Help:
    """Help that reads well at any width.

    Paragraphs are reflowed: in rich markup mode typer keeps a docstring's line breaks, so a
    paragraph wrapped at 100 columns in the source broke mid-sentence on screen ("its forward
    value, the" / "gradient it received"). And no type labels (``<bool>``, ``<str>``,
    ``<list[str]>``): a flag shows none, an option its metavar (FILE, N, SECONDS, NAME=VALUE:
    set where it is declared) or its choices (``text|json``), an argument only its name."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.help:
            self.help = _reflow(self.help)

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            if isinstance(p, TyperArgument):
                p.display_type_rich = _no_type  # the argument's name says it all
            elif p.is_flag:
                p.metavar = ""
            elif p.metavar is None:
                label = p.display_type(ctx).strip("<>")
                p.metavar = label if p.type_descriptor.is_choice else p.name.upper()
        return params

    def format_help(self, ctx, formatter) -> None:
        load_rich_utils()  # before typer imports it (NOTE [Light help])
        try:
            super().format_help(ctx, formatter)
        except BrokenPipeError:
            output.reader_gone(sys.stdout)
        except SystemExit:  # rich's reaction to a closed pipe (`autodiag --help | head -1`)
            pass
        if output.READER_GONE or _stdout_is_null():
            raise typer.Exit(0)  # the reader went away: help was the whole job


def _stdout_is_null() -> bool:
    """Has stdout been pointed at the null device (as rich does when its reader goes away)?"""
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError, AttributeError):
        return False


def _no_type(ctx) -> None:
    return None


def _reflow(text: str) -> str:
    """Join the lines of each paragraph (``\\b`` paragraphs keep theirs, as in click)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


class _Group(_Help, TyperGroup):
    pass


class _Command(_Help, TyperCommand):
    def make_context(self, info_name, args, parent=None, **extra):
        """Options click rejects before the command runs (exit 2): with --format json on the
        command line, the error envelope is printed on stdout too (README, "JSON")."""
        given = list(args)  # the parser consumes ``args``
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as e:
            # click's UsageError (typer vendors click, so it is matched by shape): exit code 2
            usage = getattr(e, "exit_code", None) == 2 and hasattr(e, "format_message")
            if usage and type(e).__name__ != "NoArgsIsHelpError" and _wants_json(given):
                _usage_envelope(self.name, e)
            raise


def _wants_json(args: list[str]) -> bool:
    """Does the command line ask for ``--format json`` (``-f json``, ``--format=json``,
    ``-fjson``)? Only options before ``--`` count."""
    for i, a in enumerate(args):
        if a == "--":
            break
        if a in ("--format", "-f") and i + 1 < len(args):
            if args[i + 1] == "json":
                return True
        elif a in ("--format=json", "-fjson", "-f=json"):
            return True
    return False


def _usage_envelope(command: str, e: Exception) -> None:
    from autodiag.report.output import Sink, envelope
    from autodiag.target.errors import BadInvocation

    error = BadInvocation(e.format_message(), f"Run autodiag {command} --help for its options.")
    error.kind = "usage"
    Sink(None, False).write_json(envelope(command, None, [], status="error", error=error))


app = typer.Typer(
    name="autodiag",
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    cls=_Group,
)

for _command in (graph, trace, gradcheck, anomaly, inplace, leaks, check):
    app.command(_command.COMMAND.name, no_args_is_help=True, cls=_Command)(
        typer_command(_command.COMMAND)
    )


def _version(value: bool) -> None:
    if value:
        output.write_stdout(f"autodiag {__version__}\n")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """A graph inspector and gradient debugger for autograd.

    The engine is importable as [bold]import autodiag as torch[/bold].

    Exit codes (every command): [bold]0[/bold] nothing found, [bold]1[/bold] findings,
    [bold]2[/bold] bad invocation or target, [bold]3[/bold] the target failed, [bold]4[/bold]
    autodiag itself failed (please report), [bold]130[/bold] interrupted.
    """
    if ctx.invoked_subcommand is None and not version:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def main() -> None:
    """Console-script entry point."""
    app()
