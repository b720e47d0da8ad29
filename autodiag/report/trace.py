"""Reports of ``autodiag trace``: the backward pass as a table (text) or as rows (JSON)."""

from __future__ import annotations

import dataclasses

from rich.markup import escape

from autodiag.analysis.backward_trace import BackwardTrace
from autodiag.report import table
from autodiag.report.output import Streamed, envelope
from autodiag.report.values import fmt_summary
from autodiag.trace.sites import short_path

# JSON is indented up to this many rows, compact beyond.
PRETTY_JSON_ROWS = 5000


@dataclasses.dataclass
class TraceReport:
    """What the renderers show: the recorded call, its number, and the --max-nodes in force."""

    rec: BackwardTrace
    call: int
    limit: int | None


def json_report(sink, outcome) -> None:
    """The JSON renderer of ``autodiag trace`` (``report/outcome.py``)."""
    rep, result = outcome.data, outcome.result
    rec = rep.rec
    # rows are built as they are written (NOTE [Trace memory])
    sink.write_json_stream(
        envelope(
            "trace",
            outcome.label,
            [],
            error=result.error,
            interrupted=result.interrupted,
            call=rep.call,
            calls=rec.calls,
            kind=rec.kind,
            steps=Streamed(rec.rows(), rec.rows_json()),
            truncated=rec.truncated,
        ),
        pretty=len(rec) <= PRETTY_JSON_ROWS,
    )


def text_report(sink, outcome) -> str | None:
    """The text renderer of ``autodiag trace``; a note when --max-nodes left nodes out."""
    rep = outcome.data
    rec = rep.rec
    sink.stream()  # with -o, the text goes to the file as it is printed
    _text(sink.console(), rec, rep.call)
    if rec.truncated:
        return (
            f"[yellow]note:[/] {rec.truncated} nodes not shown (--max-nodes "
            f"{rep.limit}); use --max-nodes N or --format json for everything"
        )
    return None


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
    table.print_table_stream(
        console, TRACE_COLUMNS, lambda: map(_row_cells, rec.rows()), title=title
    )


def _row_cells(row: dict) -> list[table.Cell]:
    name = escape(row["node"])
    if "variable" in row:
        name += f" [bold green]{escape(row['variable'])}[/]"
    incoming = ", ".join(fmt_summary(g) for g in row["incoming"])
    local = [fmt_summary(o["local"]) if o["local"] else "-" for o in row["outgoing"]]
    out = [f"→ {escape(o['to'])}: {escape(fmt_summary(o['grad']))}" for o in row["outgoing"]] or (
        ["[green]accumulated into .grad[/]"] if row["node"] == "AccumulateGrad" else ["-"]
    )
    loc = row.get("created_at")
    site = f"{short_path(loc['file'])}:{loc['line']}" if loc else ""
    return [
        table.plain(str(row["step"])),
        table.cell(name),
        table.plain(fmt_summary(row["value"])),
        table.plain(incoming),
        table.plain(*local) if local else table.plain("-"),
        table.cell(*out),
        table.plain(site),
    ]
