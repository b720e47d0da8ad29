"""Rendering of ``autodiag gradcheck`` results: the rich table and failure details, the JSON
document, and JUnit test cases."""

from __future__ import annotations

import contextlib
import dataclasses

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from autodiag.analysis.gradcheck import Case, totals
from autodiag.analysis.gradcheck import _how_to_give_inputs as how_to_give_inputs
from autodiag.report import table
from autodiag.report.junit import TestCase
from autodiag.report.output import envelope
from autodiag.trace.sites import short_path

_VERDICT = {
    "pass": "[green]pass[/]",
    "fail": "[bold red]FAIL[/]",
    "error": "[bold red]error[/]",
    "skip": "[yellow]skip[/]",
}


def fmt_error(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}"


def settings_line(settings) -> str:
    return (
        f"eps {settings.eps:g}, atol {settings.atol:g}, rtol {settings.rtol:g}, "
        f"{'fast' if settings.fast_mode else 'slow'} mode, order {settings.order}"
    )


# Narrow terminals lose the inputs, then the order and the diagnosis; the case and its verdict
# always stay, and no name or number is cut (report/table.py).
COLUMNS = [
    table.Column("case"),
    table.Column("inputs", keep=10, max_lines=0),
    table.Column("order", keep=20, justify="right"),
    table.Column("max error", keep=50, justify="right"),
    table.Column("verdict"),
    table.Column("diagnosis", keep=30, max_lines=0),
]


def print_table(console, cases: list[Case], title: str) -> None:
    rows = []
    for c in cases:
        inputs = ", ".join(c.inputs) or "-"
        if c.generated:
            inputs = f"generated {inputs}"
        diag = ", ".join(d.kind for d in c.diagnoses) or (
            "-" if c.verdict != "error" else c.exception or "-"
        )
        rows.append(
            [
                table.plain(c.name),
                table.plain(inputs),
                table.plain(str(c.order)),
                table.plain(fmt_error(c.max_error)),
                table.cell(_VERDICT[c.verdict]),
                table.plain(diag),
            ]
        )
    table.print_table(console, COLUMNS, rows, title=title)


def details(console, cases: list[Case]) -> None:
    """Per failure: where, what (first line, worst element) and the diagnosis hints; then
    the skipped cases with their reasons."""
    failed = [c for c in cases if c.failed]
    if failed:
        console.print()
        console.print("[bold]Failures[/]")
    for c in failed:
        where = f" at {escape(c.where)}" if c.where and c.where not in c.name else ""
        code = (
            f"  [dim]{escape(c.location['code'])}[/]"
            if c.location and c.location.get("code")
            else ""
        )
        console.print(
            f"[bold red]✗[/] [bold]{escape(c.name)}[/] ({c.api}, order {c.order}){where}{code}"
        )
        head = c.error.strip().splitlines()[0].rstrip(",") if c.error.strip() else c.message
        if c.exception and c.exception != "GradcheckError":
            head = f"{c.exception}: {head}"
        console.print(f"  {escape(head)}")
        w = c.worst
        if w:
            console.print(
                f"  worst element: d output {w['output']}{list(w['output_index'])} "
                f"/ d input {w['input']}{list(w['input_index'])}: numerical "
                f"{w['numerical']:.6g}, analytical {w['analytical']:.6g}, difference "
                f"{w['difference']:.3g} (tolerance {w['tolerance']:.3g})"
            )
        for d in c.diagnoses:
            console.print(f"  [yellow]diagnosis[/] [bold]{escape(d.kind)}[/]: {escape(d.hint)}")
        if len(c.comparison) > 1 or (c.comparison and not c.diagnoses):
            for line in comparison_lines(c):
                console.print(f"  {escape(line)}")
        if not c.diagnoses and c.verdict == "fail":
            console.print(f"  [dim]{escape(NO_CAUSE if c.comparison else NO_CAUSE_SHORT)}[/]")
        for n in c.notes:
            console.print(f"  [dim]note: {escape(n)}[/]")
    generated(console, cases)
    skipped = [c for c in cases if c.verdict == "skip"]
    if skipped:
        console.print()
        console.print("[bold]Skipped[/]")
    for c in skipped:
        where = f" ({escape(c.where)})" if c.where else ""
        console.print(f"[yellow]-[/] {escape(c.name)}{where}: {escape(c.message)}")


def generated(console, cases: list[Case]) -> None:
    """The passing checks that ran on generated inputs: which (shapes, dtypes), and how to check
    at inputs of one's own. (A failure prints its notes with it.) A pass on inputs autodiag made
    up is a pass there only: it is said, never left to the inputs column a narrow terminal
    drops."""
    made = [c for c in cases if c.generated and not c.failed and c.verdict != "skip"]
    if not made:
        return
    console.print()
    console.print("[bold]Generated inputs[/]")
    for c in made:
        notes = list(c.notes)
        if c.function and not any("sample_inputs()" in n for n in notes):
            notes.append(how_to_give_inputs(c.function))
        where = f" ({escape(c.where)})" if c.where else ""
        console.print(f"[yellow]-[/] {escape(c.name)}{where}: {escape('; '.join(notes))}")


# What the report says when no diagnosis was verified: which rule shapes were tried, so the
# user knows what is left to look at.
NO_CAUSE = (
    "no known cause verified (tried, where they apply: a constant factor or sign, a "
    "kink within eps, low precision, a transposed or swapped gradient, a dropped "
    "product-rule term, the forward value returned as derivative, one wrong sign "
    "branch): compare the backward's formula with the derivative of forward term by term"
)
NO_CAUSE_SHORT = (
    "no specific cause found: the backward formula itself is likely wrong; "
    "compare it with the derivative of forward"
)


def comparison_lines(c: Case) -> list[str]:
    """Per input: does its analytical gradient match (for the failing output)?"""
    out = []
    for e in c.comparison:
        name = f" ({e['name']})" if e.get("name") else ""
        shape = "(" + ", ".join(map(str, e["shape"])) + ("," if len(e["shape"]) == 1 else "") + ")"
        what = (
            "matches numerical"
            if not e["wrong"]
            else f"wrong at {e['wrong']} of {e['entries']} Jacobian entries (max difference "
            f"{e['max_difference']:.3g})"
        )
        out.append(f"input {e['input']}{name} {shape}: analytical gradient {what}")
    return out


def summary_line(cases: list[Case]) -> str:
    t = totals(cases)
    parts = [f"{t['passed']} passed", f"{t['failed']} failed"]
    if t["errors"]:
        parts.append(f"{t['errors']} errors")
    parts.append(f"{t['skipped']} skipped")
    n = t["checks"]
    return f"{n} check{'s' if n != 1 else ''}: " + ", ".join(parts)


def to_json(cases: list[Case], settings) -> dict:
    """The command-specific keys of the JSON envelope."""
    return {
        "cases": [c.to_json() for c in cases],
        "totals": totals(cases),
        "settings": {
            "eps": settings.eps,
            "atol": settings.atol,
            "rtol": settings.rtol,
            "fast_mode": settings.fast_mode,
            "order": settings.order,
            "seed": settings.seed,
        },
    }


def junit_cases(cases: list[Case], label: str) -> list[TestCase]:
    """One JUnit test case per check: a failed check is a ``failure`` (``error`` when the check
    could not run), a skipped one ``skipped``."""
    out = []
    for c in cases:
        status = {"pass": "passed", "fail": "failure", "error": "error", "skip": "skipped"}[
            c.verdict
        ]
        classname = c.function or c.source
        if c.location:
            classname = f"{short_path(c.location['file'])}::{classname}"
        elif c.source == "expression":
            classname = "expression"
        text_lines = [c.error.strip() or c.message] if c.failed else []
        if "autodiag diagnosis:" not in c.error:  # GradcheckError's text already has them
            text_lines += [f"diagnosis [{d.kind}]: {d.hint}" for d in c.diagnoses]
        message = c.message
        if c.diagnoses and c.failed:
            message += f" — diagnosis {c.diagnoses[0].kind}: {c.diagnoses[0].hint}"
        out.append(
            TestCase(
                name=f"{c.name} (order {c.order})",
                classname=classname,
                status=status,
                message=message,
                text="\n".join(text_lines),
                type=(c.diagnoses[0].kind if c.diagnoses else c.exception) if c.failed else "",
                time=c.seconds,
                file=short_path(c.location["file"]) if c.location else None,
                line=c.location["line"] if c.location else None,
            )
        )
    return out


# --- the renderers of ``autodiag gradcheck`` (report/outcome.py) --------------------------------


@dataclasses.dataclass
class GradcheckReport:
    """The checks and their settings; ``script_error``: the script's failure that no failed
    check explains; ``nothing_ran``: the failure of a run whose every check was skipped."""

    cases: list
    settings: object
    script_error: object = None
    nothing_ran: object = None


def json_report(sink, outcome) -> None:
    rep = outcome.data
    found, interrupted = outcome.findings, outcome.result.interrupted
    error = rep.script_error or (rep.nothing_ran if not found else None)
    status = (
        "interrupted"
        if interrupted
        else "error"
        if error is not None
        else "findings"
        if found
        else "ok"
    )
    sink.write_json(
        envelope(
            "gradcheck",
            outcome.label,
            found,
            status,
            error=error,
            interrupted=interrupted,
            **to_json(rep.cases, rep.settings),
        )
    )


def text_report(sink, outcome) -> None:
    rep = outcome.data
    console = sink.console()
    print_table(console, rep.cases, f"gradcheck {outcome.label} ({settings_line(rep.settings)})")
    details(console, rep.cases)
    console.print()
    console.print(f"[dim]{escape(summary_line(rep.cases))}[/]")


# With at least this many checks to run after the script, a progress bar shows on stderr
# (when stderr is a terminal).
PROGRESS_MIN_CASES = 8


@contextlib.contextmanager
def progress(err, total: int):
    """A progress callback for run_checks: a rich bar on ``err`` (the stderr console) when it
    is a terminal and there are many checks; else None."""
    if total < PROGRESS_MIN_CASES or not err.is_terminal:
        yield None
        return
    columns = (
        TextColumn("[bold]gradcheck[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("", total=total)

        def advance(done: int, _total: int, name: str) -> None:
            bar.update(task, completed=done, description=escape(name))

        yield advance
