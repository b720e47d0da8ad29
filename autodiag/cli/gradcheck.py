"""``autodiag gradcheck``: check a script's gradients — its own gradcheck calls and the
autograd.Functions it defines — or an expression's, and say why a check fails."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from autodiag.analysis import gradcheck as checks
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
from autodiag.report import gradcheck as render
from autodiag.report.output import envelope
from autodiag.target.errors import BadInvocation, BadTarget, TargetFailed

# With at least this many checks to run after the script, a progress bar shows on stderr
# (when stderr is a terminal).
PROGRESS_MIN_CASES = 8


def gradcheck(
    target: TargetArg = None,
    script_args: ScriptArgs = None,
    expr: ExprOpt = None,
    var: VarOpt = None,
    dtype: DtypeOpt = "float64",
    fmt: FormatOpt = TextOrJson.text,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    timeout: TimeoutOpt = None,
    eps: Annotated[float, typer.Option("--eps", help="Finite-difference step (> 0).")] = 1e-6,
    atol: Annotated[float, typer.Option("--atol", help="Absolute tolerance.", min=0.0)] = 1e-5,
    rtol: Annotated[float, typer.Option("--rtol", help="Relative tolerance.", min=0.0)] = 1e-3,
    fast: Annotated[bool, typer.Option("--fast/--slow", help="Fast mode (random projections "
                                       "vᵀJu) or slow mode (every Jacobian element).")] = False,
    order: Annotated[int, typer.Option("--order", min=1, max=2, help="1: gradcheck; 2: "
                                       "gradgradcheck too (second derivatives).")] = 1,
    function: Annotated[list[str] | None, typer.Option(
        "--function", help="Check only this Function of the script (repeatable); the "
        "script's own gradcheck calls are always reported.", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of generated inputs and of "
                                      "gradgradcheck's random grad_outputs.")] = 0,
    junit_xml: JunitOpt = None,
    annotations: AnnotationsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Check gradients against finite differences, and explain failures.

    For a script: every gradcheck/gradgradcheck call it makes (recorded with its line; a
    failing call returns False instead of raising), and every autograd.Function it defines,
    on the input tuples of its sample_inputs() static method or, without one, on generated
    float64 inputs. For -e EXPR: the expression w.r.t. its --var leaves. --eps, --atol,
    --rtol, --fast and --order apply to the Functions and the expression; recorded calls keep
    the script's own arguments. Exit 1 when a check fails.

    Example: [bold]autodiag gradcheck myop.py --junit-xml gradcheck.xml[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        if t.expr is not None and function:
            raise BadInvocation("--function selects Functions defined by a script; it does not "
                                "apply to -e EXPR", "Drop --function.")
        if t.expr is not None and not t.vars:
            raise BadInvocation("-e EXPR needs at least one --var to check the gradient "
                                "against", "For example: autodiag gradcheck -e 'x**3' --var "
                                "x=2.")
        if not eps > 0:
            raise BadInvocation(f"--eps {eps:g}: the finite-difference step must be positive",
                                "The default is 1e-6; float64 inputs suit 1e-7 to 1e-4.")
        settings = checks.Settings(eps=eps, atol=atol, rtol=rtol, fast_mode=fast, order=order,
                                   seed=seed)
        sink = cmd.start()
        recorder = checks.CallRecorder()
        with recorder:
            result = cmd.run_target(t, [], need_ops=False)  # checks Functions, not ops
        if t.expr is not None and (result.error is not None or result.interrupted):
            return target_failure(cmd, result)
        cases = list(recorder.cases)
        with _limit(timeout):
            if t.expr is not None:
                plan = checks.expression_case(t.expr, t.vars, t.dtype, settings)
            elif result.interrupted:
                plan = []  # the user wants out: report what the script recorded, nothing more
            else:
                plan = _plan_functions(result, recorder, settings, function)
            if plan:
                with _progress(cmd, len(plan)) as progress:
                    cases += checks.run_checks(plan, settings, progress)
        if not cases:
            failed = target_failure(cmd, result)
            if failed is not None:
                return failed
            raise BadTarget(f"{t.label}: nothing to check: it defines no autograd.Function "
                            f"subclass and calls neither gradcheck nor gradgradcheck",
                            "Define a Function in the script (with a sample_inputs() static "
                            "method returning input tuples), call torch.autograd.gradcheck in "
                            "it, or check an expression: autodiag gradcheck -e 'x**3' --var "
                            "x=2.")
        explained = _explained(cases, result)
        script_error = result.error if explained is None else None
        nothing_ran = None
        if all(c.verdict == "skip" for c in cases):
            nothing_ran = BadTarget(f"{t.label}: nothing was checked: every check was skipped "
                                    f"(reasons above)", "Give the Functions a sample_inputs() "
                                    "static method returning a list of input tuples.")
        _report(cmd, sink, fmt, t.label, cases, settings, script_error, nothing_ran,
                result.interrupted)
        cmd.ci_outputs(checks.findings(cases), error=script_error,
                       cases=render.junit_cases(cases, t.label))
        if explained is not None:
            cmd.err.print(f"[yellow]note:[/] the script failed ({escape(result.error.message)})"
                          f" because of the failed check {escape(explained.name)}; the rest of "
                          f"the script did not run.")
        if result.interrupted or script_error is not None:
            return target_failure(cmd, result)
        if any(c.failed for c in cases):
            return EXIT_FINDINGS
        if nothing_ran is not None:
            return cmd.fail(nothing_ran)
        return EXIT_OK

    guarded("gradcheck", output, no_color, body, junit_xml, annotations, quiet, fmt)


def _plan_functions(result, recorder, settings, names: list[str] | None) -> list:
    """The checks of the script's Functions (those named by --function, if given)."""
    classes = checks.functions_of_run(result, recorder.script_globals)
    if names:
        known = {c.__name__: c for c in classes}
        unknown = [n for n in names if n not in known]
        if unknown and result.error is None:
            defined = ", ".join(known) or "none"
            raise BadInvocation(f"--function {unknown[0]}: {result.target.label} defines no "
                                f"autograd.Function named {unknown[0]!r}",
                                f"Functions it defines: {defined}.")
        classes = [c for c in classes if c.__name__ in names]
    return checks.plan_functions(classes, settings, recorder.function_calls)


def _explained(cases: list, result):
    """The failed check that explains why the script failed, or None: ``assert gradcheck(...)``
    raising at the call's line, ``sys.exit(1)`` after a failed call, or the script dying of the
    very error a Function's check reports (a backward returning the wrong number of
    gradients, say)."""
    err = result.error
    if err is None:
        return None
    exc = err.exception
    at_line = checks.failed_call_site(cases, exc)
    if at_line is not None:
        return at_line
    failed = [c for c in cases if c.failed]
    recorded = [c for c in failed if c.source == "call"]
    if recorded and err.exit_status is not None:
        return recorded[-1]
    if exc is not None and str(exc).strip():
        same = [c for c in failed if c.exception == type(exc).__name__ and
                c.error.strip().splitlines()[0] == str(exc).strip().splitlines()[0]]
        if same:
            return same[0]
    return None


@contextlib.contextmanager
def _progress(cmd, total: int):
    """A progress callback for run_checks: a rich bar on a terminal's stderr for many checks."""
    if total < PROGRESS_MIN_CASES or not cmd.err.is_terminal:
        yield None
        return
    columns = (TextColumn("[bold]gradcheck[/]"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=cmd.err, transient=True) as bar:
        task = bar.add_task("", total=total)

        def advance(done: int, _total: int, name: str) -> None:
            bar.update(task, completed=done, description=escape(name))

        yield advance


@contextlib.contextmanager
def _limit(timeout: float | None):
    """--timeout for the checks run after the script (a separate budget of the same size)."""
    from autodiag.target.script import Timeout, _Alarm

    try:
        with _Alarm(timeout):
            yield
    except Timeout:
        raise TargetFailed(f"checking the script's Functions did not finish within --timeout "
                           f"{timeout:g} s", "Raise --timeout, use --fast, or give "
                           "sample_inputs() smaller inputs.", kind="timeout") from None


def _report(cmd, sink, fmt, label: str, cases: list, settings, script_error,
            nothing_ran, interrupted: bool) -> None:
    """``nothing_ran``: the failure of a run whose every check was skipped, or None."""
    found = checks.findings(cases)
    if fmt is TextOrJson.json:
        error = script_error or (nothing_ran if not found else None)
        status = "interrupted" if interrupted else "error" if error is not None else \
            "findings" if found else "ok"
        sink.write_json(envelope("gradcheck", label, found, status, error=error,
                                 interrupted=interrupted, **render.to_json(cases, settings)))
        return
    console = sink.console()
    render.print_table(console, cases, f"gradcheck {label} ({render.settings_line(settings)})")
    render.details(console, cases)
    console.print()
    console.print(f"[dim]{escape(render.summary_line(cases))}[/]")

