"""Numbers and value summaries (``analysis/summary.py``) as short text for the reports."""

from __future__ import annotations


def fmt_number(v) -> str:
    """A compact number: 4 significant digits, integers without a decimal point."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def fmt_summary(s: dict | None) -> str:
    """One short line for a summary: the values when small, else range and mean."""
    if s is None:
        return "-"
    if "values" in s:
        v = s["values"]
        return _fmt_nested(v)
    if "min" not in s:
        return f"[{', '.join(map(str, s['shape']))}] {s['dtype']}"
    text = (
        f"[{'x'.join(map(str, s['shape']))}] min {fmt_number(s['min'])} max "
        f"{fmt_number(s['max'])} mean {fmt_number(s.get('mean'))}"
    )
    bad = [f"{s[k]} {k}" for k in ("nan", "inf") if s.get(k)]
    if bad:
        text += " (" + ", ".join(bad) + ")"
    return text


def _fmt_nested(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt_nested(x) for x in v) + "]"
    return fmt_number(v)
