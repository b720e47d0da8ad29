"""Text report of ``autodiag leaks``: the retained graph per step (a table and a sparkline of
retained bytes), then each finding with its holder, the line that created what it holds, and
the fix."""

from __future__ import annotations

from rich.markup import escape

from autodiag.analysis.summary import fmt_bytes
from autodiag.report.findings import header, source_lines, where

BARS = "▁▂▃▄▅▆▇█"
MAX_ROWS = 12  # census rows shown: the first and last ones, with "..." between


def sparkline(values: list[float]) -> str:
    """One bar per value, scaled to the largest.

    >>> sparkline([0, 1, 2, 4])
    '▁▃▅█'
    """
    top = max(values, default=0)
    if top <= 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, round(v / top * (len(BARS) - 1)))] for v in values)


def render(console, findings: list[dict], census: list[dict], info: dict) -> None:
    target = escape(info["target"])
    source = {
        "optimizer": "optimizer step()",
        "backward": "backward()",
        "marker": "autodiag.trace.step()",
    }.get(info["step_source"], "")
    if not census:
        console.print(
            f"no training step in {target}: no optimizer step(), backward() or "
            f"autodiag.trace.step() ran, so there is nothing to compare across steps."
        )
    else:
        ends = f" (a step ends at each {source})" if source else ""
        console.print(
            f"[bold]Graph retained across steps in {target}[/]: {len(census)} step"
            f"{'s' if len(census) != 1 else ''}{ends}"
        )
        _census_table(console, census, {f.get("detected_at_step") for f in findings})
    for f in findings:
        console.print()
        for line in _finding(f):
            console.print(line)
    console.print()
    errors = sum(1 for f in findings if f["severity"] == "error")
    warnings = len(findings) - errors
    if not findings:
        if census and not info.get("failed"):
            console.print("[bold green]✓ no graph leak[/]: no graph outlived its step and grew.")
        return
    parts = []
    if errors:
        parts.append(f"{errors} leak{'s' if errors != 1 else ''}")
    if warnings:
        parts.append(f"{warnings} warning{'s' if warnings != 1 else ''}")
    console.print(f"[bold]{', '.join(parts)}[/]")


def _census_table(console, census: list[dict], detected: set) -> None:
    if not any(c["nodes"] for c in census):
        console.print("  no graph node outlived the step that made it.")
        return
    rows = census
    if len(rows) > MAX_ROWS:  # the first steps, the detection, the last steps
        keep = set(range(MAX_ROWS // 2)) | set(range(len(census) - MAX_ROWS // 2, len(census)))
        keep |= {i for i, c in enumerate(census) if c["step"] in detected}
        rows = []
        for i in sorted(keep):
            if rows and rows[-1] is not None and i - 1 not in keep:
                rows.append(None)
            rows.append(census[i])
    console.print("  [dim] step  nodes alive from earlier steps  retained bytes[/]")
    prev = 0
    for c in rows:
        if c is None:
            console.print("  [dim]  ...[/]")
            prev = None
            continue
        grow = ""
        if prev is not None and c["nodes"] > prev:
            grow = f"  [red]+{c['nodes'] - prev}[/]"
        mark = "  [bold red]← found[/]" if c["step"] in detected else ""
        console.print(
            f"  {c['step']:>5}  {c['nodes']:>29}  {fmt_bytes(c['bytes']):>14}{grow}{mark}"
        )
        prev = c["nodes"]
    line = sparkline([c["bytes"] for c in census[-60:]])
    console.print(
        f"  [dim]retained bytes per step:[/] {line}  "
        f"(max {fmt_bytes(max(c['bytes'] for c in census))})"
    )


def _finding(f: dict) -> list[str]:
    lines = [header(f)]
    if f["kind"] == "graph_leak":
        lines += source_lines(f["location"], "holder at")
        created = f.get("created_at")
        if created:
            lines += source_lines(created, "tensors created at")
        holder = f.get("holder") or {}
        if holder.get("path"):
            lines.append(f"  [dim]path:[/] {escape(holder['path'])}")
    else:
        lines += source_lines(f["location"], "at")
        if f.get("location") is None:
            lines.append(f"  [dim]at {escape(where(None))}[/]")
    if f.get("hint"):
        lines.append(f"  [yellow]hint:[/] {escape(f['hint'])}")
    return lines


def text_report(sink, outcome) -> None:
    """The text renderer of ``autodiag leaks`` (``report/outcome.py``)."""
    render(
        sink.console(),
        [f.to_json() for f in outcome.findings],
        outcome.info["steps"],
        {
            "target": outcome.label,
            "step_source": outcome.info["step_source"],
            "failed": outcome.failed,
        },
    )
