"""Text report of ``autodiag inplace``."""

from __future__ import annotations

from rich.markup import escape

from autodiag.report.findings import header, source_lines, stack_line, where


def render(
    console,
    findings: list[dict],
    target: str,
    error_is_finding: bool,
    failed: bool = False,
    calls: int | None = None,
) -> None:
    """``calls``: the run's backward calls (None: not known)."""
    if not findings:
        if failed:
            console.print(f"no in-place hazard in {escape(target)} before it stopped.")
            return
        if calls == 0:
            console.print(
                f"no in-place hazard in {escape(target)}: no tensor saved for backward "
                f"was modified; it made no backward() call, so none was needed yet."
            )
            return
        console.print(
            f"[bold green]✓ no in-place hazard[/] in {escape(target)}: no tensor saved "
            f"for backward was modified before its backward ran."
        )
        return
    n = len(findings)
    console.print(f"[bold]In-place hazards in {escape(target)}[/]: {n} site{'s' if n != 1 else ''}")
    for f in findings:
        console.print()
        for line in _finding(f):
            console.print(line)
    if error_is_finding:
        console.print()
        console.print("[dim]The script stopped with this error; it is reported above.[/]")


def _finding(f: dict) -> list[str]:
    lines = [header(f)]
    if f["kind"] == "inplace_leaf":
        lines += source_lines(f["location"], "at")
        lines += stack_line(f["stack"])
    else:
        lines += source_lines(f["location"], "written at")
        saved = f.get("saved_by")
        if saved:
            lines += source_lines(
                saved["location"],
                f"saved by [bold]{escape(saved['node'])}[/] at"
                if saved["location"]
                else f"saved by {saved['node']}",
            )
        needed = f.get("needed_by")
        if needed and needed.get("location"):
            call = f" (backward call {needed['call']})" if needed.get("call") else ""
            verdict = ": it failed there" if f.get("backward_failed") else ""
            lines.append(
                f"  needed by backward at [cyan]{escape(where(needed['location']))}[/]"
                f"{escape(call + verdict)}"
            )
        elif saved:
            lines.append("  [dim]no backward call reached it (yet)[/]")
        if "tensor" in f:
            t = f["tensor"]
            shape = ", ".join(map(str, t["shape"]))
            extra = " · written under no_grad" if f.get("no_grad") else ""
            times = f" · {f['count']} times" if f.get("count", 1) > 1 else ""
            lines.append(
                f"  [dim]tensor:[/] [{escape(shape)}] {t['dtype']} · version "
                f"{f['saved_version']} when saved, {f['version']} after the write"
                f"{extra}{times}"
            )
    if f.get("hint"):
        lines.append(f"  [yellow]hint:[/] {escape(f['hint'])}")
    return lines


def text_report(sink, outcome) -> None:
    """The text renderer of ``autodiag inplace`` (``report/outcome.py``)."""
    render(
        sink.console(),
        [f.to_json() for f in outcome.findings],
        outcome.label,
        outcome.explained,
        outcome.failed,
        outcome.result.backward_calls,
    )
