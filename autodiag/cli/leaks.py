"""``autodiag leaks``: graphs kept alive across training steps, and who holds them."""

from __future__ import annotations

from typing import Annotated

import typer

from autodiag.analysis.leaks import LeakFinder
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
from autodiag.report import leaks as render
from autodiag.report.output import envelope


def leaks(
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
    grow_steps: Annotated[int, typer.Option(
        "--grow-steps", min=2, help="Consecutive steps of growth that make a leak.")] = 3,
) -> None:
    """Find graphs kept alive across training steps, and who holds them.

    A step ends at each optimizer step() (or backward() without an optimizer, or
    autodiag.trace.step()). A leak is retained graph that grows at --grow-steps step ends in a
    row; it is traced to the variable, list, dict or attribute that holds it.

    Example: [bold]autodiag leaks train.py[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        finder = LeakFinder(grow_steps=grow_steps)
        result = cmd.run_target(t, [finder])
        findings = finder.findings()
        if fmt is TextOrJson.json:
            sink.write_json(envelope("leaks", t.label, findings, error=result.error,
                                     interrupted=result.interrupted,
                                     step_source=finder.mode, steps=finder.census))
        else:
            render.render(sink.console(), [f.to_json() for f in findings], finder.census,
                          {"target": t.label, "step_source": finder.mode,
                           "failed": result.error is not None or result.interrupted})
        cmd.ci_outputs(findings, error=result.error)
        failed = target_failure(cmd, result)
        if failed is not None:
            return failed
        return EXIT_FINDINGS if findings else EXIT_OK

    guarded("leaks", output, no_color, body, junit_xml, annotations, quiet, fmt)
