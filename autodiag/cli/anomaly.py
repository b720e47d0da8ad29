"""``autodiag anomaly``: where NaN and Inf first appear, in forward and in backward."""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag.analysis.anomaly import AnomalyFinder
from autodiag.analysis.graph import names_by_id
from autodiag.cli._common import (
    EXIT_FINDINGS,
    EXIT_OK,
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
from autodiag.report import anomaly as render
from autodiag.report.output import envelope


def anomaly(
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
    keep_going: Annotated[bool, typer.Option("--keep-going", help="Keep running after the "
                                             "first NaN/Inf in backward (default: stop "
                                             "there).")] = False,
) -> None:
    """Find where NaN and Inf first appear, in forward and in backward.

    Forward: the first op to turn finite inputs into NaN/Inf, with its line and inputs.

    Backward: the first node to send a NaN/Inf gradient from finite ones, with its line.

    Example: [bold]autodiag anomaly train.py --keep-going[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        finder = AnomalyFinder(keep_going=keep_going)
        result = cmd.run_target(t, [finder])
        findings = finder.findings(names_by_id(*result.scopes))
        info = {"target": t.label, "calls": finder.calls, "stopped_at": finder.stopped_at,
                "ops": result.ops,
                "propagated": {"forward": finder.propagated_forward,
                               "backward": finder.propagated_backward}}
        docs = [f.to_json() for f in findings]
        if fmt is TextOrJson.json:
            sink.write_json(envelope("anomaly", t.label, findings, error=result.error,
                                     interrupted=result.interrupted,
                                     backward_calls=finder.calls, ops=result.ops,
                                     stopped_at_call=finder.stopped_at,
                                     propagated=info["propagated"]))
        else:
            info["failed"] = result.error is not None or result.interrupted
            render.render(sink.console(), docs, info)
        cmd.ci_outputs(findings, error=result.error)
        if findings and not result.interrupted:
            if result.error is not None:  # probably a consequence: shown, but the finding rules
                cmd.fail(result.error)
            return EXIT_FINDINGS
        failed = target_failure(cmd, result)
        return EXIT_OK if failed is None else failed

    guarded("anomaly", output, no_color, body, junit_xml, annotations, quiet, fmt)
