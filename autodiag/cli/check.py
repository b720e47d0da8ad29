"""``autodiag check``: every detector in one run of the target, for CI."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from autodiag.analysis import check as detectors
from autodiag.analysis import gradcheck as checks
from autodiag.analysis.findings import KINDS
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
from autodiag.cli.gradcheck import _limit
from autodiag.report import check as render
from autodiag.report import junit
from autodiag.report.output import envelope
from autodiag.target.errors import BadInvocation

KindOpt = Annotated[
    list[str] | None,
    typer.Option(help="A finding kind (repeatable).", show_default=False),
]


def check(
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
    ignore: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore", help="Do not report this finding kind (repeatable).", show_default=False
        ),
    ] = None,
    warn_only: Annotated[
        list[str] | None,
        typer.Option(
            "--warn-only",
            help="Report this kind as a warning: it does not fail the check (repeatable).",
            show_default=False,
        ),
    ] = None,
    gradcheck: Annotated[
        bool,
        typer.Option(
            "--gradcheck",
            help="Also gradcheck the script's autograd.Functions and its own gradcheck calls.",
        ),
    ] = False,
) -> None:
    """Run every detector in one run: NaN/Inf, in-place hazards, gradient health.

    Gradient health: parameters without a gradient (and why), forgotten zero_grad.

    Also: exploding/vanishing gradient norms, dead ReLU units (warnings).

    Exit 1 on an error-severity finding left after --ignore/--warn-only; warnings exit 0.

    Example: [bold]autodiag check train.py --warn-only none_grad[/bold]
    """

    def body(cmd) -> int:
        bad = detectors.unknown_kinds(list(ignore or []) + list(warn_only or []))
        if bad:
            raise BadInvocation(f"unknown finding kind {bad[0]!r}", f"Kinds: {', '.join(KINDS)}.")
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        sink = cmd.start()
        tracers = [d.make() for d in detectors.DETECTORS]
        recorder = checks.CallRecorder() if gradcheck and t.expr is None else None
        with recorder if recorder is not None else contextlib.nullcontext():
            result = cmd.run_target(t, tracers)
        found = []
        for d, tracer in zip(detectors.DETECTORS, tracers):
            found += d.findings(tracer, result)
        cases = []
        if recorder is not None:
            cases = list(recorder.cases)
            if not result.interrupted:
                settings = checks.Settings()
                classes = checks.functions_of_run(result, recorder.script_globals)
                with _limit(timeout):
                    cases += checks.run_checks(checks.plan_functions(classes, settings), settings)
            found += checks.findings(cases)
        findings = detectors.ordered(detectors.apply_policy(found, ignore or (), warn_only or ()))
        health = tracers[0]
        info = {
            "ops": result.ops,
            "backward_calls": health.backward_calls,
            "optimizer_steps": health.steps,
            "ignored": sorted(set(ignore or ())),
            "warn_only": sorted(set(warn_only or ())),
        }
        if recorder is not None:
            info["gradchecks"] = checks.totals(cases)
        if fmt is TextOrJson.json:
            sink.write_json(envelope("check", t.label, findings, error=result.error,
                                     interrupted=result.interrupted, **info))
        else:
            render.render(
                sink.console(),
                [f.to_json() for f in findings],
                t.label,
                dict(info, backward_total=result.backward_calls),  # autograd.grad calls too
                result.error is not None or result.interrupted,
            )
        explained = any(f.severity == "error" for f in findings)
        cmd.ci_outputs(findings, error=None if explained else result.error,
                       cases=junit.from_findings(findings, "autodiag.check",
                                                 passed_name=f"check {t.label}",
                                                 warnings_fail=False))
        if result.interrupted:
            return target_failure(cmd, result)
        if explained:
            if result.error is not None:  # shown, but the findings decide the exit code
                cmd.fail(result.error)
            return EXIT_FINDINGS
        failed = target_failure(cmd, result)
        return EXIT_OK if failed is None else failed

    guarded("check", output, no_color, body, junit_xml, annotations, quiet, fmt)
