"""``autodiag trace``: the backward pass node by node — the chain rule made visible."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from autodiag.analysis.backward_trace import BackwardTrace
from autodiag.analysis.graph import names_by_id
from autodiag.analysis.summary import fmt_summary
from autodiag.cli._common import (
    AnnotationsOpt,
    DtypeOpt,
    ExprOpt,
    FormatOpt,
    JunitOpt,
    NoColorOpt,
    QuietOpt,
    OutputOpt,
    ScriptArgs,
    TargetArg,
    TextOrJson,
    TimeoutOpt,
    VarOpt,
    guarded,
    target_failure,
)
from autodiag.report import table
from autodiag.report.output import Streamed, envelope
from autodiag.target.errors import BadInvocation, NothingToShow
from autodiag.trace.sites import short_path


def trace(
    target: TargetArg = None,
    script_args: ScriptArgs = None,
    expr: ExprOpt = None,
    var: VarOpt = None,
    dtype: DtypeOpt = "float64",
    fmt: FormatOpt = TextOrJson.text,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    timeout: TimeoutOpt = None,
    junit_xml: JunitOpt = None,
    annotations: AnnotationsOpt = None,
    quiet: QuietOpt = False,
    call: Annotated[int | None, typer.Option("--call", help="Trace the N-th backward/grad "
                                                "call (default: the last).", min=1,
                                                metavar="N", show_default=False)] = None,
    max_nodes: Annotated[int | None, typer.Option("--max-nodes", help="Show at most N nodes, "
                                                     "the first in execution order (text "
                                                     "default 500).", min=1, metavar="N",
                                                     show_default=False)] = None,
) -> None:
    """Walk through a backward pass: per node, in execution order, its forward value, the
    gradient it received, the local derivative, and the gradients it passed on.

    Example: [bold]autodiag trace -e '(3*x+2)**2' --var x=1[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        limit = max_nodes if max_nodes is not None else DEFAULT_MAX_NODES[fmt.value]
        rec = BackwardTrace(call, limit)
        result = cmd.run_target(t, [rec])
        if rec.calls == 0 or (call is not None and rec.calls < call):
            failed = target_failure(cmd, result)
            if failed is not None:
                return failed
            if call is not None and rec.calls:
                raise BadInvocation(f"--call {call}: the target made {rec.calls} backward/grad "
                                    f"calls", "Pick a call number between 1 and that count.")
            raise NothingToShow(f"{t.label} ran, but there is nothing to trace: it made no "
                                f"backward() or autograd.grad() call", "Call loss.backward() in "
                                "the script (expressions are differentiated automatically).")
        rec.name_leaves(names_by_id(*result.scopes))
        if fmt is TextOrJson.json:
            # rows are built as they are written (NOTE [Trace memory])
            sink.write_json_stream(envelope("trace", t.label, [], error=result.error,
                                            interrupted=result.interrupted,
                                            call=call or rec.calls, calls=rec.calls,
                                            kind=rec.kind,
                                            steps=Streamed(rec.rows(), rec.rows_json()),
                                            truncated=rec.truncated),
                                   pretty=len(rec) <= PRETTY_JSON_ROWS)
        else:
            sink.stream()  # with -o, the text goes to the file as it is printed
            _text(sink.console(), rec, call or rec.calls)
            if rec.truncated:
                cmd.err.print(f"[yellow]note:[/] {rec.truncated} nodes not shown (--max-nodes "
                              f"{limit}); use --max-nodes N or --format json for everything")
        failed = target_failure(cmd, result)
        return 0 if failed is None else failed

    guarded("trace", output, no_color, body, junit_xml, annotations, quiet, fmt)


# As graph's (cli/graph.py): text stops at 500 rows unless --max-nodes says otherwise, JSON is
# complete; JSON is indented up to this many rows, compact beyond.
DEFAULT_MAX_NODES = {"text": 500, "json": None}
PRETTY_JSON_ROWS = 5000


# Narrow terminals lose the forward value first, then the local derivative and the incoming
# gradient; the node and where it was created always stay (report/table.py).
TRACE_COLUMNS = [
    table.Column("#", keep=60, justify="right"),
    table.Column("node"),
    table.Column("forward value", keep=10),
    table.Column("grad in", keep=30),
    table.Column("local grad", keep=20, paired=True),
    table.Column("grad out", keep=40, paired=True),
    table.Column("created at", kind="path"),
]


def _text(console, rec: BackwardTrace, call: int) -> None:
    roots = ", ".join(n for n in rec.root_names if n) or "the output"
    title = f"backward of {roots} (call {call} of {rec.calls}), in execution order"
    if rec.truncated:
        title += f"; the first {len(rec)} of {rec.steps} nodes"
    table.print_table_stream(console, TRACE_COLUMNS, lambda: map(_row_cells, rec.rows()),
                             title=title)


def _row_cells(row: dict) -> list[table.Cell]:
    name = escape(row["node"])
    if "variable" in row:
        name += f" [bold green]{escape(row['variable'])}[/]"
    incoming = ", ".join(fmt_summary(g) for g in row["incoming"])
    local = [fmt_summary(o["local"]) if o["local"] else "-" for o in row["outgoing"]]
    out = [f"→ {escape(o['to'])}: {escape(fmt_summary(o['grad']))}"
           for o in row["outgoing"]] or (["[green]accumulated into .grad[/]"]
                                         if row["node"] == "AccumulateGrad" else ["-"])
    loc = row.get("created_at")
    site = f"{short_path(loc['file'])}:{loc['line']}" if loc else ""
    return [table.plain(str(row["step"])), table.cell(name),
            table.plain(fmt_summary(row["value"])), table.plain(incoming),
            table.plain(*local) if local else table.plain("-"), table.cell(*out),
            table.plain(site)]
