"""Text report of ``autodiag check``: findings grouped by kind, then a one-line summary."""

from __future__ import annotations

from rich.markup import escape

from autodiag.report import anomaly, flow
from autodiag.report.findings import header, source_lines, stack_line, where


def render(console, findings: list[dict], target: str, info: dict, failed: bool) -> None:
    """``findings``: Finding.to_json() dicts, grouped by kind (NaN/Inf origins as one group, in
    causal order); ``info``: the run's counts."""
    group = None
    for f in findings:
        if _group(f) != group:
            group = _group(f)
            n = sum(1 for g in findings if _group(g) == group)
            console.print(f"[bold]{escape(group)}[/] ({n})")
        for line in _finding(f, target, info):
            console.print(line)
        console.print()
    flow.render_table(console, info.get("grad_flow"), findings)
    console.print(summary(findings, target, info, failed))


def json_report(sink, outcome) -> None:
    """``check -f json``: the envelope, indented, with each list of scalars on one line (the
    gradient-flow series hold up to 256 numbers each: a line a number made a 150-step run's
    report 87 KB)."""
    from autodiag.report.outcome import json_envelope

    json_envelope(sink, outcome, inline_lists=True)


def _group(f: dict) -> str:
    return "NaN/Inf origins" if f["kind"] in anomaly.KINDS else f["kind"]


def _finding(f: dict, target: str, info: dict) -> list[str]:
    if f["kind"] in anomaly.KINDS:  # as `autodiag anomaly` shows it, input statistics too
        return anomaly.finding_lines(f, info.get("backward_total", info["backward_calls"]), target)
    lines = [header(f)]
    lines += source_lines(f["location"], "at", target=target) if f["location"] else []
    # a freed_graph finding's stack is the failing backward call's, not a forward op's
    lines += stack_line(
        f["stack"], label="stack" if f["kind"] == "freed_graph" else "forward stack"
    )
    details = []
    if f.get("reason"):
        details.append(f"reason: {f['reason']}")
    if f.get("optimizer_step"):
        details.append(f"optimizer step at {where(f['optimizer_step'])}")
    if f.get("norms"):
        norms = ", ".join(f"{x:.3g}" for x in f["norms"])
        details.append(f"last norms (per {f['per']}): {norms}")
    if f.get("units") is not None:
        details.append(f"dead units: {', '.join(map(str, f['units']))}")
    if f["kind"] == "freed_graph":
        details += _freed_details(f)
    if details:
        lines.append(f"  [dim]{escape(' · '.join(details))}[/]")
    if f.get("hint"):
        lines.append(f"  [yellow]hint:[/] {escape(f['hint'])}")
    return lines


def _ops(info: dict) -> str:
    n = info.get("ops", 0)
    return f"{n} op{'s' if n != 1 else ''}"


def _freed_details(f: dict) -> list[str]:
    """Where the freed node was made, which call freed it, which tensor led back to it."""
    out = []
    if f.get("node"):
        out.append(f"{f['node']} created at {where(f['created_at'])}")
    if f.get("freed_by"):
        out.append(
            f"freed by backward call {f['freed_by']['call']} at {where(f['freed_by']['location'])}"
        )
    through = f.get("through")
    if through:
        name = through["name"] or f"the output of {through['node']}"
        out.append(f"reached through {name} ({where(through['location'])})")
    return out


def summary(findings: list[dict], target: str, info: dict, failed: bool) -> str:
    """One line: counts by severity and kind, and what the run did."""
    calls = info["backward_calls"]
    ran = (
        f"{calls} backward call{'s' if calls != 1 else ''}, {info['optimizer_steps']} "
        f"optimizer step{'s' if info['optimizer_steps'] != 1 else ''}"
    )
    if "gradchecks" in info:
        g = info["gradchecks"]
        ran += f", {g['checks']} gradcheck{'s' if g['checks'] != 1 else ''}"
    stopped = " before it stopped" if failed else ""
    if not findings:
        # NOTE: ✓ only for a verdict that was earned: the run ended normally and gradients
        # were checked (a run that failed or made no backward call is said as it is)
        if failed:
            return f"no findings in {escape(target)} before it stopped ({ran})."
        if not info.get("backward_total", calls):
            return (
                f"no findings in {escape(target)}, but it made no backward() call: its "
                f"{_ops(info)} were checked for NaN/Inf and in-place writes; gradients were "
                f"not checked."
            )
        return f"[bold green]✓ no findings[/] in {escape(target)} ({ran})."
    errors = sum(1 for f in findings if f["severity"] == "error")
    warnings = len(findings) - errors
    kinds: dict = {}
    for f in findings:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    by_kind = ", ".join(f"{k} {n}" for k, n in kinds.items())
    style = "bold red" if errors else "bold yellow"
    return (
        f"[{style}]{errors} error{'s' if errors != 1 else ''}, {warnings} warning"
        f"{'s' if warnings != 1 else ''}[/] in {escape(target)}{stopped} ({escape(by_kind)}; "
        f"{ran})."
    )


def text_report(sink, outcome) -> None:
    """The text renderer of ``autodiag check`` (``report/outcome.py``)."""
    render(
        sink.console(),
        [f.to_json() for f in outcome.findings],
        outcome.label,
        dict(outcome.info, backward_total=outcome.result.backward_calls),  # grad calls too
        outcome.failed,
    )
