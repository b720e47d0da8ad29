"""``autodiag inplace``: in-place writes to tensors that backward still needs."""

from __future__ import annotations

from autodiag.analysis.inplace import InplaceWatcher
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
from autodiag.report import inplace as render
from autodiag.report.output import envelope


def inplace(
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
) -> None:
    """Find in-place writes to tensors that backward still needs.

    Caught when they happen: the writing line, the op that saved the tensor, the backward.

    Example: [bold]autodiag inplace train.py -f json[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        watcher = InplaceWatcher()
        result = cmd.run_target(t, [watcher])
        findings, error_is_finding = watcher.findings(result.error)
        if fmt is TextOrJson.json:
            extra = {"backward_calls": watcher.calls, "ops": result.ops}
            if result.error is not None:
                extra["error_is_finding"] = error_is_finding
            sink.write_json(envelope("inplace", t.label, findings, error=result.error,
                                     interrupted=result.interrupted, **extra))
        else:
            render.render(sink.console(), [f.to_json() for f in findings], t.label,
                          error_is_finding, result.error is not None or result.interrupted,
                          result.backward_calls)
        cmd.ci_outputs(findings, error=None if error_is_finding else result.error)
        if result.interrupted:
            return target_failure(cmd, result)
        if findings:
            if result.error is not None and not error_is_finding:
                cmd.fail(result.error)  # shown, but the findings decide the exit code
            return EXIT_FINDINGS
        failed = target_failure(cmd, result)
        return EXIT_OK if failed is None else failed

    guarded("inplace", output, no_color, body, junit_xml, annotations, quiet, fmt)
