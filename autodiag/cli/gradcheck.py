"""``autodiag gradcheck``: check a script's gradients — its own gradcheck calls and the
autograd.Functions it defines — or an expression's, and say why a check fails."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from autodiag.cli._common import Command, Spec, lazy, target_failure
from autodiag.report.outcome import Outcome
from autodiag.target.errors import BadInvocation, BadTarget


def gradcheck(
    cmd: Command,
    eps: Annotated[float, typer.Option("--eps", help="Finite-difference step (> 0).")] = 1e-6,
    atol: Annotated[float, typer.Option("--atol", help="Absolute tolerance.", min=0.0)] = 1e-5,
    rtol: Annotated[float, typer.Option("--rtol", help="Relative tolerance.", min=0.0)] = 1e-3,
    fast: Annotated[
        bool,
        typer.Option(
            "--fast/--slow",
            help="Fast mode (random projections vᵀJu) or slow mode (every Jacobian element).",
        ),
    ] = False,
    order: Annotated[
        int,
        typer.Option(
            "--order", min=1, max=2, help="1: gradcheck; 2: gradgradcheck too (second derivatives)."
        ),
    ] = 1,
    function: Annotated[
        list[str] | None,
        typer.Option(
            "--function",
            help="Check only this Function of the script (repeatable); the "
            "script's own gradcheck calls are always reported.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", help="Seed of generated inputs and of gradgradcheck's random grad_outputs."
        ),
    ] = 0,
) -> Outcome | int:
    """Check gradients against finite differences, and explain failures.

    For a script: every gradcheck/gradgradcheck call it makes (recorded with its line; a
    failing call returns False instead of raising), and every autograd.Function it defines,
    on the input tuples of its sample_inputs() static method or, without one, on generated
    float64 inputs. For -e EXPR: the expression w.r.t. its --var leaves. --eps, --atol,
    --rtol, --fast and --order apply to the Functions and the expression; recorded calls keep
    the script's own arguments. Exit 1 when a check fails.

    Example: [bold]autodiag gradcheck myop.py --junit-xml gradcheck.xml[/bold]
    """
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis import gradcheck as checks
    from autodiag.report import gradcheck as render

    t = cmd.make_target()
    if t.expr is not None and function:
        raise BadInvocation(
            "--function selects Functions defined by a script; it does not apply to -e EXPR",
            "Drop --function.",
        )
    if t.expr is not None and not t.vars:
        raise BadInvocation(
            "-e EXPR needs at least one --var to check the gradient against",
            "For example: autodiag gradcheck -e 'x**3' --var x=2.",
        )
    if not eps > 0:
        raise BadInvocation(
            f"--eps {eps:g}: the finite-difference step must be positive",
            "The default is 1e-6; float64 inputs suit 1e-7 to 1e-4.",
        )
    settings = checks.Settings(
        eps=eps, atol=atol, rtol=rtol, fast_mode=fast, order=order, seed=seed
    )
    cmd.start()
    recorder = checks.CallRecorder()
    with recorder:
        result = cmd.run_target(t, [], need_ops=False)  # checks Functions, not ops
    if t.expr is not None and (result.error is not None or result.interrupted):
        return target_failure(cmd, result)
    cases = list(recorder.cases)
    with checks.checks_time_limit(t.timeout):
        if t.expr is not None:
            plan = checks.expression_case(t.expr, t.vars, t.dtype, settings)
        elif result.interrupted:
            plan = []  # the user wants out: report what the script recorded, nothing more
        else:
            plan = _plan_functions(result, recorder, settings, function)
        if plan:
            run = checks.run_checks
            if t.engine == "torch":
                from autodiag.analysis import torch_gradcheck

                run = torch_gradcheck.run_checks
            with render.progress(cmd.err, len(plan)) as progress:
                cases += run(plan, settings, progress)
    if not cases:
        failed = target_failure(cmd, result)
        if failed is not None:
            return failed
        raise BadTarget(
            f"{t.label}: nothing to check: it defines no autograd.Function "
            f"subclass and calls neither gradcheck nor gradgradcheck",
            "Define a Function in the script (with a sample_inputs() static "
            "method returning input tuples), call torch.autograd.gradcheck in "
            "it, or check an expression: autodiag gradcheck -e 'x**3' --var "
            "x=2.",
        )
    explained = checks.explaining_case(cases, result.error)
    script_error = result.error if explained is None else None
    nothing_ran = None
    if all(c.verdict == "skip" for c in cases):
        nothing_ran = BadTarget(
            f"{t.label}: nothing was checked: every check was skipped (reasons above)",
            "Give the Functions a sample_inputs() static method returning a list of input tuples.",
        )
    notes = []
    if explained is not None:
        notes.append(
            f"[yellow]note:[/] the script failed ({escape(result.error.message)}) "
            f"because of the failed check {escape(explained.name)}; the rest of the "
            f"script did not run."
        )
    # a failed check that explains the script's failure is the verdict (with a note); any
    # other failure of the script outranks the checks
    return Outcome(
        result,
        checks.findings(cases),
        data=render.GradcheckReport(cases, settings, script_error, nothing_ran),
        failing=script_error is None and any(c.failed for c in cases),
        explained=explained is not None,
        show_error=False,
        cases=render.junit_cases(cases, t.label),
        notes=notes,
        failure=nothing_ran,
    )


COMMAND = Spec(
    "gradcheck",
    gradcheck,
    {
        "text": lazy("autodiag.report.gradcheck", "text_report"),
        "json": lazy("autodiag.report.gradcheck", "json_report"),
    },
    placed=dict.fromkeys(["eps", "atol", "rtol", "fast", "order", "function", "seed"], "timeout"),
)


def _plan_functions(result, recorder, settings, names: list[str] | None) -> list:
    """The checks of the script's Functions (those named by --function, if given)."""
    from autodiag.analysis import gradcheck as checks

    if result.target.engine == "torch":
        from autodiag.analysis import torch_gradcheck

        classes = torch_gradcheck.functions_of_run(result, recorder.script_globals)
    else:
        classes = checks.functions_of_run(result, recorder.script_globals)
    if names:
        known = {c.__name__: c for c in classes}
        unknown = [n for n in names if n not in known]
        if unknown and result.error is None:
            defined = ", ".join(known) or "none"
            raise BadInvocation(
                f"--function {unknown[0]}: {result.target.label} defines no "
                f"autograd.Function named {unknown[0]!r}",
                f"Functions it defines: {defined}.",
            )
        classes = [c for c in classes if c.__name__ in names]
    return checks.plan_functions(classes, settings, recorder.function_calls)
