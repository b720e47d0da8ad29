"""``autodiag trace``: the backward pass node by node — the chain rule made visible."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

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
    OutputOpt,
    ScriptArgs,
    TargetArg,
    TextOrJson,
    TimeoutOpt,
    VarOpt,
    guarded,
    make_target,
    target_failure,
)
from autodiag.report.output import envelope
from autodiag.target.errors import BadInvocation, BadTarget
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
    call: Annotated[int | None, typer.Option("--call", help="Trace the N-th backward/grad "
                                                "call (default: the last).", min=1,
                                                show_default=False)] = None,
) -> None:
    """Walk through a backward pass: per node, in execution order, its forward value, the
    gradient it received, the local derivative, and the gradients it passed on.

    Example: [bold]autodiag trace -e '(3*x+2)**2' --var x=1[/bold]
    """

    def body(cmd) -> int:
        t = make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        rec = BackwardTrace(call)
        result = cmd.run_target(t, [rec])
        if rec.calls == 0 or (call is not None and rec.calls < call):
            failed = target_failure(cmd, result)
            if failed is not None:
                return failed
            if call is not None and rec.calls:
                raise BadInvocation(f"--call {call}: the target made {rec.calls} backward/grad "
                                    f"calls", "Pick a call number between 1 and that count.")
            raise BadTarget(f"{t.label}: nothing to trace: no backward() or autograd.grad() "
                            f"call", "Call loss.backward() in the script (expressions are "
                            "differentiated automatically).")
        rec.name_leaves(names_by_id(result.namespace))
        if fmt is TextOrJson.json:
            sink.write_json(envelope("trace", t.label, [], error=result.error,
                                     call=call or rec.calls, calls=rec.calls, kind=rec.kind,
                                     steps=rec.rows))
        else:
            _text(sink.console(), rec, call or rec.calls)
        failed = target_failure(cmd, result)
        return 0 if failed is None else failed

    guarded("trace", output, no_color, body, junit_xml, annotations)


def _text(console, rec: BackwardTrace, call: int) -> None:
    roots = ", ".join(n for n in getattr(rec, "root_names", []) if n) or "the output"
    table = Table(title=f"backward of {roots} (call {call} of {rec.calls}), in execution order",
                  title_justify="left", box=None, pad_edge=False)
    with_sites = any(row.get("created_at") for row in rec.rows)
    for col in ("#", "node", "forward value", "grad in", "local grad", "grad out", "created at"):
        if col != "created at" or with_sites:
            table.add_column(col, overflow="fold", no_wrap=col in ("#", "node", "grad out"))
    for row in rec.rows:
        name = escape(row["node"])
        if "variable" in row:
            name += f" [bold green]{escape(row['variable'])}[/]"
        incoming = escape(", ".join(fmt_summary(g) for g in row["incoming"]))
        local = "\n".join(escape(fmt_summary(o["local"])) if o["local"] else "-"
                          for o in row["outgoing"]) or "-"
        out = "\n".join(f"→ {escape(o['to'])}: {escape(fmt_summary(o['grad']))}"
                        for o in row["outgoing"]) or ("[green]accumulated into .grad[/]"
                                                      if row["node"] == "AccumulateGrad" else "-")
        loc = row.get("created_at")
        site = escape(f"{short_path(loc['file'])}:{loc['line']}") if loc else ""
        cells = [str(row["step"]), name, escape(fmt_summary(row["value"])), incoming, local, out]
        table.add_row(*cells, *([site] if with_sites else []))
    console.print(table)
