"""Text report of ``autodiag anomaly``: NaN/Inf origins, forward then backward."""

from __future__ import annotations

from rich.markup import escape

from autodiag.report.findings import header, source_lines, stack_line, stats_text


def render(console, findings: list[dict], info: dict) -> None:
    """``findings``: Finding.to_json() dicts; ``info``: calls, stopped_at, propagated, target."""
    if not findings:
        calls = info["calls"]
        written = info.get("written") or {}
        masked = info.get("masked") or {}
        # values the script set to NaN/Inf itself (masked_fill(mask, -inf)), and those it
        # masked before any use (NOTE [Masked origins]): not anomalies, but not finite either
        parts = []
        if written:
            parts.append("what the script set to NaN/Inf on purpose (" + _counts(written) + ")")
        if masked:
            parts.append("NaN/Inf the script masked before any use (" + _counts(masked) + ")")
        but = ", except " + " and ".join(parts) if parts else ""
        if info.get("failed"):
            console.print(
                f"no NaN or Inf in {escape(info['target'])} before it stopped "
                f"({calls} backward call{'s' if calls != 1 else ''})."
            )
            return
        if not calls:  # nothing to say about gradients: no ✓
            ops = info.get("ops", 0)
            console.print(
                f"no NaN or Inf in {escape(info['target'])}: every output of its {ops} "
                f"op{'s' if ops != 1 else ''} was finite{but}; it made no backward() call, "
                f"so no gradient was checked."
            )
            return
        console.print(
            f"[bold green]✓ no NaN or Inf[/] in {escape(info['target'])}: every op "
            f"output and every gradient of {calls} backward call"
            f"{'s' if calls != 1 else ''} was finite{but}."
        )
        return
    n = len(findings)
    console.print(
        f"[bold]NaN/Inf origins in {escape(info['target'])}[/]: {n} site{'s' if n != 1 else ''}"
    )
    for f in findings:
        console.print()
        for line in finding_lines(f, info["calls"], info["target"]):
            console.print(line)
    console.print()
    prop = info["propagated"]
    notes = []
    if prop["forward"] or prop["backward"]:
        ops = f"{prop['forward']} later op{'s' if prop['forward'] != 1 else ''}"
        nodes = f"{prop['backward']} backward node{'s' if prop['backward'] != 1 else ''}"
        notes.append(f"{ops} and {nodes} only carried these values along (not reported)")
    if info.get("stopped_at") is not None:
        notes.append(
            f"the run was stopped at backward call {info['stopped_at']} (--keep-going to continue)"
        )
    for note in notes:
        console.print(f"[dim]{escape(note)}[/]")


def _counts(by_op: dict) -> str:
    return ", ".join(f"{escape(op)}: {n} output{'s' if n != 1 else ''}" for op, n in by_op.items())


KINDS = ("nan_forward", "inf_forward", "nan_backward", "inf_backward")


def finding_lines(f: dict, calls: int, target: str) -> list[str]:
    """One NaN/Inf origin: where, when, the statistics of its inputs and output (or of the
    gradients), the hint. ``calls``: the run's backward calls."""
    lines = [header(f)]
    forward = f["kind"].endswith("_forward")
    lines += source_lines(f["location"], "at" if forward else "created at", target=target)
    lines += stack_line(f["stack"])
    times = f"{f['count']} time{'s' if f['count'] != 1 else ''}"
    if not forward:
        when = f"in backward call {f['step']}"
    elif f["step"] <= calls:
        when = f"in the forward pass of backward call {f['step']}"
    else:
        when = "after the last backward call" if calls else "in a run without backward call"
    first = f"  first {when} · {times}"
    if forward and f.get("propagated"):
        first += f" · propagated to {f['propagated']} later op{'s' if f['propagated'] != 1 else ''}"
    lines.append(escape(first))
    if forward:
        for i, s in enumerate(f["inputs"]):
            name = s.get("name") if s else None
            label = f"input {i}" + (f" {name}" if name else "")
            lines.append(f"  [dim]{escape(label)}:[/] {escape(stats_text(s))}")
        note = " (written in place)" if f.get("inplace") else ""
        lines.append(f"  [dim]output{note}:[/] {escape(stats_text(f['output']))}")
    else:
        for i, s in enumerate(f["incoming"]):
            label = "incoming gradient" + (f" {i}" if len(f["incoming"]) > 1 else "")
            lines.append(f"  [dim]{label}:[/] {escape(stats_text(s))}")
        for o in f["outgoing"]:
            to = f" to {o['to']}" if o.get("to") else ""
            if o.get("variable"):
                to = f" ({o['variable']})"
            lines.append(
                f"  [dim]gradient for input {o['input']}{escape(to)}:[/] "
                f"{escape(stats_text(o['grad']))}"
            )
        if f.get("path"):
            lines.append(f"  [dim]path from the root:[/] {escape(' → '.join(f['path']))}")
    if f.get("hint"):
        lines.append(f"  [yellow]hint:[/] {escape(f['hint'])}")
    return lines


def text_report(sink, outcome) -> None:
    """The text renderer of ``autodiag anomaly`` (``report/outcome.py``)."""
    info = outcome.info
    render(
        sink.console(),
        [f.to_json() for f in outcome.findings],
        {
            "target": outcome.label,
            "calls": info["backward_calls"],
            "stopped_at": info["stopped_at_call"],
            "ops": info["ops"],
            "written": info.get("written"),
            "masked": info.get("masked"),
            "propagated": info["propagated"],
            "failed": outcome.failed,
        },
    )
