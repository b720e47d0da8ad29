"""The ``autodiag`` command: one thin module per command, registered here.

This package and ``report/`` are the only places that import typer and rich.
"""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag._version import __version__
from autodiag.cli import anomaly as _anomaly
from autodiag.cli import check as _check
from autodiag.cli import gradcheck as _gradcheck
from autodiag.cli import graph as _graph
from autodiag.cli import inplace as _inplace
from autodiag.cli import leaks as _leaks
from autodiag.cli import trace as _trace
from autodiag.cli._common import with_engine

app = typer.Typer(
    name="autodiag",
    help="A graph inspector and gradient debugger for autograd.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)

app.command("graph", no_args_is_help=True)(with_engine(_graph.graph))
app.command("trace", no_args_is_help=True)(with_engine(_trace.trace))
app.command("gradcheck", no_args_is_help=True)(with_engine(_gradcheck.gradcheck))
app.command("anomaly", no_args_is_help=True)(with_engine(_anomaly.anomaly))
app.command("inplace", no_args_is_help=True)(with_engine(_inplace.inplace))
app.command("leaks", no_args_is_help=True)(with_engine(_leaks.leaks))
app.command("check", no_args_is_help=True)(with_engine(_check.check))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"autodiag {__version__}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """A graph inspector and gradient debugger for autograd.

    The engine is importable as [bold]import autodiag as torch[/bold]. Exit codes: 0 nothing
    found, 1 findings, 2 bad invocation or target, 3 the target failed, 130 interrupted.
    """
    if ctx.invoked_subcommand is None and not version:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def main() -> None:
    """Console-script entry point."""
    app()
