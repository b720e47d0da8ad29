"""Rich-text pieces shared by the finding reports (anomaly, inplace): a finding's header, its
source line, its stack, tensor statistics."""

from __future__ import annotations

from rich.markup import escape

from autodiag.report.values import fmt_number
from autodiag.trace.sites import short_path

KIND_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold blue"}
# Severity is told by the glyph (and, for the milder ones, a word), not only by colour: with
# NO_COLOR or piped output an error and a warning must still look different.
GLYPH = {"error": "✗", "warning": "!", "note": "·"}


def _label(f) -> tuple[str, str]:
    """(glyph, kind with its severity word) of a finding (a Finding or its JSON dict)."""
    sev = f["severity"] if isinstance(f, dict) else f.severity
    kind = f["kind"] if isinstance(f, dict) else f.kind
    return GLYPH.get(sev, "·"), kind if sev == "error" else f"{kind} ({sev})"


def where(loc: dict | None) -> str:
    if loc is None:
        return "<unknown location>"
    return f"{short_path(loc['file'])}:{loc['line']}"


def header(f: dict) -> str:
    style = KIND_STYLE.get(f["severity"], "bold")
    glyph, kind = _label(f)
    return f"[{style}]{glyph} {escape(kind)}[/]  {escape(f['message'])}"


def source_lines(
    loc: dict | None, label: str = "at", indent: str = "  ", target: str = ""
) -> list[str]:
    """``at file:line in function`` and the highlighted code line."""
    if loc is None:
        if target.startswith("-e "):
            return [f"{indent}in the expression [bold]{escape(target[3:])}[/]"]
        return [f"{indent}[dim]{label} <unknown location>[/]"]
    out = [f"{indent}{label} [cyan]{escape(where(loc))}[/] in {escape(loc['function'])}"]
    if loc.get("code"):
        out.append(f"{indent}  [dim]{loc['line']:>5} │[/] [bold]{escape(loc['code'])}[/]")
    return out


def stack_line(frames: list[dict], indent: str = "  ", label: str = "forward stack") -> list[str]:
    """The user's stack, outermost first, when it has more than the innermost frame."""
    if len(frames) < 2:
        return []
    parts = [f"{where(fr)} {fr['function']}" for fr in frames]
    return [f"{indent}[dim]{label}:[/] {escape(' → '.join(parts))}"]


def stats_text(s: dict | None) -> str:
    """``[3] float32 min 0 max 2 · 1 zero · 1 negative · 1 nan`` (counts shown when non-zero,
    except nan/inf which are always named when present)."""
    if s is None:
        return "-"
    text = f"[{', '.join(map(str, s['shape']))}] {s['dtype']}"
    if "values" in s and len(s["shape"]) <= 1:
        text += " " + _values(s["values"])
    elif "min" in s:
        text += f" min {fmt_number(s['min'])} max {fmt_number(s['max'])}"
    counts = []
    for key, one in (("zeros", "zero"), ("negatives", "negative"), ("nan", "nan"), ("inf", "inf")):
        n = s.get(key)
        if n:
            counts.append(f"{n} {one if n == 1 or key in ('nan', 'inf') else key}")
    if counts:
        text += " · " + " · ".join(counts)
    return text


def _values(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_values(x) for x in v) + "]"
    return v if isinstance(v, str) else fmt_number(v)


def plain_text(findings: list) -> str:
    """Findings as plain text (no markup, no colour) for places that are not terminals: a
    pytest failure message, a log. One block per finding: kind and message, file:line, the
    code line, the hint.

    >>> from autodiag.analysis.findings import Finding
    >>> print(plain_text([Finding("nan_forward", "error", "log produced NaN",
    ...     {"file": "<string>", "line": 3, "function": "f", "code": "y = x.log()"},
    ...     hint="clamp the input")]))
    ✗ nan_forward: log produced NaN
      at <string>:3 in f
            3 │ y = x.log()
      hint: clamp the input
    """
    blocks = []
    for f in findings:
        glyph, kind = _label(f)
        lines = [f"{glyph} {kind}: {f.message}"]
        loc = f.location
        if loc is not None:
            lines.append(f"  at {where(loc)} in {loc['function']}")
            if loc.get("code"):
                lines.append(f"    {loc['line']:>5} │ {loc['code']}")
        if f.hint:
            lines.append(f"  hint: {f.hint}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
