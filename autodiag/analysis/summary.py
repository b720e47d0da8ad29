"""Short numeric summaries of tensors and gradients, shared by the analyses."""

from __future__ import annotations

import numpy as np

SMALL = 8  # tensors with at most this many elements are shown in full


def summarize(a) -> dict | None:
    """{'shape', 'dtype', 'min', 'max', 'mean', 'nan', 'inf', 'zeros', 'values'?} of an array-like
    (a numpy array or a Tensor); None for None."""
    if a is None:
        return None
    data = getattr(a, "_data", a)
    data = np.asarray(data)
    out = {"shape": list(data.shape), "dtype": dtype_name(data.dtype)}
    if data.size == 0:
        return out
    if data.dtype.kind in "fc":
        finite = np.isfinite(data)
        n_nan = int(np.isnan(data).sum())
        n_inf = int(data.size - finite.sum() - n_nan)
        vals = data[finite] if not finite.all() else data
        if vals.size:
            out.update(min=float(vals.min()), max=float(vals.max()), mean=float(vals.mean()))
        out.update(nan=n_nan, inf=n_inf)
    elif data.dtype.kind in "iub":
        out.update(min=_num(data.min()), max=_num(data.max()),
                   mean=float(data.mean()) if data.dtype.kind != "b" else None)
    out["zeros"] = int(data.size - np.count_nonzero(data))
    if data.size <= SMALL:
        out["values"] = data.tolist()
    return out


def _num(v):
    return v.item() if hasattr(v, "item") else v


_DTYPE_NAMES: dict = {}


def dtype_name(dt) -> str:
    """numpy dtype -> "float32" (cached: ``dtype.name`` costs microseconds per call)."""
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = dt.name
    return name


def fmt_bytes(n: float) -> str:
    """A byte count for people: ``512 B``, ``36.2 KB``, ``1.0 MB`` (negative for shrinkage).

    >>> fmt_bytes(37080), fmt_bytes(-544), fmt_bytes(3 << 30)
    ('36.2 KB', '-544 B', '3.0 GB')
    """
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


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
    text = (f"[{'x'.join(map(str, s['shape']))}] min {fmt_number(s['min'])} max "
            f"{fmt_number(s['max'])} mean {fmt_number(s.get('mean'))}")
    bad = [f"{s[k]} {k}" for k in ("nan", "inf") if s.get(k)]
    if bad:
        text += " (" + ", ".join(bad) + ")"
    return text


def _fmt_nested(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt_nested(x) for x in v) + "]"
    return fmt_number(v)
