"""``autodiag check``: every detector in one run of the target, for CI."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from autodiag.cli._common import Command, Spec, lazy
from autodiag.report.outcome import Outcome
from autodiag.report.output import envelope, write_atomic
from autodiag.target.errors import BadInvocation

if TYPE_CHECKING:
    from autodiag.analysis.graph import GraphCapture


def check(
    cmd: Command,
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
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Also write the gradient-flow plot to FILE (HTML): per layer, gradient "
            "norm and update/weight ratio over the steps.",
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
) -> Outcome:
    """Run every detector in one run: NaN/Inf, in-place hazards, gradient health.

    Gradient health: parameters without a gradient (and why), forgotten zero_grad.

    Also: exploding/vanishing gradient norms, dead ReLU units (warnings).

    Exit 1 on an error-severity finding left after --ignore/--warn-only; warnings exit 0.

    Example: [bold]autodiag check train.py --warn-only none_grad[/bold]

    Gradient flow: [bold]autodiag check train.py --plot grads.html[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis import check as detectors
    from autodiag.analysis import gradcheck as checks
    from autodiag.analysis.findings import KINDS
    from autodiag.analysis.flow import grad_flow
    from autodiag.analysis.graph import GraphCapture
    from autodiag.report import flow as flow_page
    from autodiag.report import junit

    bad = detectors.unknown_kinds(list(ignore or []) + list(warn_only or []))
    if bad:
        raise BadInvocation(f"unknown finding kind {bad[0]!r}", f"Kinds: {', '.join(KINDS)}.")
    t = cmd.make_target()
    if plot is not None:
        cmd.extra_outputs.append(("--plot", plot))
    cmd.start()
    chosen = detectors.DETECTORS
    if t.engine == "torch":
        chosen = detectors.on_torch()
    tracers = [d.make() for d in chosen]
    # the page draws the graph of the last backward call with the findings on it
    graph = GraphCapture() if cmd.format == "html" else None
    recorder = checks.CallRecorder() if gradcheck and t.expr is None else None
    with recorder if recorder is not None else contextlib.nullcontext():
        result = cmd.run_target(t, tracers + ([graph] if graph is not None else []))
    found = []
    for d, tracer in zip(chosen, tracers):
        found += d.findings(tracer, result)
    cases = []
    if recorder is not None:
        cases = list(recorder.cases)
        if not result.interrupted:
            settings = checks.Settings()
            classes = checks.functions_of_run(result, recorder.script_globals)
            with checks.checks_time_limit(cmd.opts.timeout):
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
    info["grad_flow"] = grad_flow(health, findings, *result.scopes)
    notes = []
    unseen = [d.name for d in detectors.DETECTORS if d.name not in {c.name for c in chosen}]
    if unseen:
        # what this engine cannot check yet is said, never passed over in silence
        info["not_checked"] = unseen
        notes.append(
            f"[yellow]note:[/] with --engine {t.engine}, check does not run these detectors "
            f"yet: {', '.join(unseen)}"
        )
    if plot is not None:
        doc = _document(cmd, result, findings, info)
        write_atomic(plot, flow_page.page(doc, f"autodiag check {t.label}"), "--plot")
        notes.append(f"[dim]gradient-flow plot: {escape(plot)}[/]")
    explained = any(f.severity == "error" for f in findings)
    tests = junit.from_findings(
        findings, "autodiag.check", passed_name=f"check {t.label}", warnings_fail=False
    )
    # the target's failure is shown, but the error findings decide the exit code
    return Outcome(
        result,
        findings,
        info=info,
        failing=explained,
        explained=explained,
        cases=tests,
        data=_graphs(graph, result) if graph is not None else None,
        notes=notes,
    )


def _document(cmd, result, findings, info) -> dict:
    """The document ``--format json`` writes (the plot page embeds it, as the html page does)."""
    return envelope(
        "check",
        cmd.label,
        findings,
        error=result.error,
        interrupted=result.interrupted,
        **info,
    )


def _graphs(cap: GraphCapture, result) -> list:
    """The graph the page draws: the last backward call's, else the module-level tensors'."""
    from autodiag.analysis.graph import module_level_roots, module_names, names_by_id

    snaps = cap.snapshots
    if not snaps:
        roots = module_level_roots(result.namespace)
        snaps = [cap.roots_snapshot([v for _, v in roots])] if roots else []
    names, modules = names_by_id(*result.scopes), module_names(*result.scopes)
    for s in snaps:
        s.name_nodes(names, modules)
    return snaps


COMMAND = Spec(
    "check",
    check,
    {
        "text": lazy("autodiag.report.check", "text_report"),
        "json": lazy("autodiag.report.check", "json_report"),
        "html": lazy("autodiag.report.html", "check_report"),
    },
    format_help="text, json, or html (the graph with its findings marked).",
)
