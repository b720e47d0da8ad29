"""``autodiag leaks``: graphs kept alive across training steps, and who holds them."""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag.cli._common import Command, Spec, lazy
from autodiag.report.outcome import Outcome, json_envelope


def leaks(
    cmd: Command,
    grow_steps: Annotated[
        int,
        typer.Option("--grow-steps", min=2, help="Consecutive steps of growth that make a leak."),
    ] = 3,
) -> Outcome:
    """Find graphs kept alive across training steps, and who holds them.

    A step ends at each optimizer step() (or backward() without an optimizer, or
    autodiag.trace.step()). A leak is retained graph that grows at --grow-steps step ends in a
    row; it is traced to the variable, list, dict or attribute that holds it.

    Example: [bold]autodiag leaks train.py[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis.leaks import LeakFinder

    t = cmd.make_target()
    cmd.start()
    if t.engine == "torch":  # the same analysis, fed by the PyTorch observer
        from autodiag.analysis.torch_leaks import TorchLeakFinder as Finder
    else:
        Finder = LeakFinder
    finder = Finder(grow_steps=grow_steps)
    result = cmd.run_target(t, [finder])
    findings = finder.findings()
    # a failed target's exit code (3) outranks the leaks found before it failed
    return Outcome(
        result,
        findings,
        info={"step_source": finder.mode, "steps": finder.census},
        failing=bool(findings) and result.error is None,
    )


COMMAND = Spec(
    "leaks", leaks, {"text": lazy("autodiag.report.leaks", "text_report"), "json": json_envelope}
)
