"""``autodiag trace``: the backward pass node by node — the chain rule made visible."""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag.cli._common import Command, Spec, lazy, target_failure
from autodiag.report.outcome import Outcome
from autodiag.target.errors import BadInvocation, NothingToShow


def trace(
    cmd: Command,
    call: Annotated[
        int | None,
        typer.Option(
            "--call",
            help="Trace the N-th backward/grad call (default: the last).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    max_nodes: Annotated[
        int | None,
        typer.Option(
            "--max-nodes",
            help="Show at most N nodes, the first in execution order (text default 500).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
) -> Outcome | int:
    """Walk through a backward pass: per node, in execution order, its forward value, the
    gradient it received, the local derivative, and the gradients it passed on.

    Example: [bold]autodiag trace -e '(3*x+2)**2' --var x=1[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis.backward_trace import BackwardTrace
    from autodiag.analysis.graph import names_by_id
    from autodiag.report import trace as render

    t = cmd.make_target()
    cmd.start()
    limit = max_nodes if max_nodes is not None else DEFAULT_MAX_NODES[cmd.format]
    if t.engine == "torch":
        from autodiag.analysis import backward_trace
        from autodiag.engines.torch.observe import register

        register()
        backward_trace.bind_seam()  # the seam's accessors that answer for PyTorch's nodes too
    rec = BackwardTrace(call, limit)
    result = cmd.run_target(t, [rec])
    if rec.calls == 0 or (call is not None and rec.calls < call):
        failed = target_failure(cmd, result)
        if failed is not None:
            return failed
        if call is not None and rec.calls:
            raise BadInvocation(
                f"--call {call}: the target made {rec.calls} backward/grad calls",
                "Pick a call number between 1 and that count.",
            )
        raise NothingToShow(
            f"{t.label} ran, but there is nothing to trace: it made no "
            f"backward() or autograd.grad() call",
            "Call loss.backward() in the script (expressions are differentiated automatically).",
        )
    rec.name_leaves(names_by_id(*result.scopes))
    return Outcome(result, data=render.TraceReport(rec, call or rec.calls, limit))


# As graph's (cli/graph.py): text stops at 500 rows unless --max-nodes says otherwise, JSON is
# complete (and indented up to report/trace.py's PRETTY_JSON_ROWS rows, compact beyond).
DEFAULT_MAX_NODES = {"text": 500, "json": None}

COMMAND = Spec(
    "trace",
    trace,
    {
        "text": lazy("autodiag.report.trace", "text_report"),
        "json": lazy("autodiag.report.trace", "json_report"),
    },
)
