"""The ``autodiag`` command. Commands arrive with their issues; for now: ``--version``, ``--help``.

This package and ``report/`` are the only places that import typer and rich.
"""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag._version import __version__

app = typer.Typer(
    name="autodiag",
    help="A graph inspector and gradient debugger for autograd.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
)


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

    The engine is importable as [bold]import autodiag as torch[/bold]; commands that inspect
    scripts (graph, trace, gradcheck, anomaly, inplace, leaks, check) are being built.
    """
    if ctx.invoked_subcommand is None and not version:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def main() -> None:
    """Console-script entry point."""
    app()
