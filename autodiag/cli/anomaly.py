"""``autodiag anomaly``: where NaN and Inf first appear, in forward and in backward."""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag.cli._common import Command, Spec, lazy
from autodiag.report.outcome import Outcome, json_envelope


def anomaly(
    cmd: Command,
    keep_going: Annotated[
        bool,
        typer.Option(
            "--keep-going",
            help="Keep running after the first NaN/Inf in backward (default: stop there).",
        ),
    ] = False,
) -> Outcome:
    """Find where NaN and Inf first appear, in forward and in backward.

    Forward: the first op to turn finite inputs into NaN/Inf, with its line and inputs.

    Backward: the first node to send a NaN/Inf gradient from finite ones, with its line.

    Example: [bold]autodiag anomaly train.py --keep-going[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis.anomaly import AnomalyFinder
    from autodiag.analysis.graph import names_by_id

    t = cmd.make_target()
    cmd.start()
    if t.engine == "torch":  # the same analysis, fed by the PyTorch observer
        from autodiag.analysis.torch_anomaly import TorchAnomalyFinder as Finder
    else:
        Finder = AnomalyFinder
    finder = Finder(keep_going=keep_going)
    result = cmd.run_target(t, [finder])
    findings = finder.findings(names_by_id(*result.scopes))
    # the target's failure is probably a consequence: shown, but the findings rule
    return Outcome(
        result,
        findings,
        info={
            "backward_calls": finder.calls,
            "ops": result.ops,
            "written": dict(finder.written),
            "masked": dict(finder.masked),
            "stopped_at_call": finder.stopped_at,
            "propagated": {
                "forward": finder.propagated_forward,
                "backward": finder.propagated_backward,
            },
        },
    )


COMMAND = Spec(
    "anomaly",
    anomaly,
    {"text": lazy("autodiag.report.anomaly", "text_report"), "json": json_envelope},
)
