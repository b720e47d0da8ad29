"""``autodiag inplace``: in-place writes to tensors that backward still needs."""

from __future__ import annotations

from autodiag.cli._common import Command, Spec, lazy
from autodiag.report.outcome import Outcome, json_envelope


def inplace(cmd: Command) -> Outcome:
    """Find in-place writes to tensors that backward still needs.

    Caught when they happen: the writing line, the op that saved the tensor, the backward.

    Example: [bold]autodiag inplace train.py -f json[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis.inplace import InplaceWatcher

    t = cmd.make_target()
    cmd.start()
    watcher = InplaceWatcher()
    result = cmd.run_target(t, [watcher])
    findings, error_is_finding = watcher.findings(result.error)
    info = {"backward_calls": watcher.calls, "ops": result.ops}
    if result.error is not None:
        info["error_is_finding"] = error_is_finding
    # an error that is itself the finding is reported as one, not again as a failure
    return Outcome(
        result, findings, info=info, explained=error_is_finding, show_error=not error_is_finding
    )


COMMAND = Spec(
    "inplace",
    inplace,
    {"text": lazy("autodiag.report.inplace", "text_report"), "json": json_envelope},
)
