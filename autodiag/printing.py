"""``repr`` of tensors in PyTorch's style: ``tensor([1., 2.], requires_grad=True)``."""

from __future__ import annotations

import numpy as np

from autodiag import dtypes

# NOTE [Print options]: ``set_printoptions`` writes these (PyTorch's PRINT_OPTS); the repr reads
# them at each call. ``sci_mode`` None: PyTorch's automatic choice (_format_floats).
_DEFAULTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80, "sci_mode": None}
PRINT_OPTS = dict(_DEFAULTS)
_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": float("inf"), "edgeitems": 3, "linewidth": 80},
}


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
) -> None:
    """PyTorch's ``torch.set_printoptions``: digits, summarising threshold and edge items, line
    width, a ``profile`` ("default", "short", "full") and ``sci_mode`` (None: automatic).

    >>> import autodiag as torch
    >>> torch.set_printoptions(precision=2)
    >>> torch.tensor([1.23456])
    tensor([1.23])
    >>> torch.set_printoptions(profile="default")
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"Invalid profile: {profile}")  # PyTorch ignores it: we refuse
        PRINT_OPTS.update(_PROFILES[profile])
    for name, value in (
        ("precision", precision),
        ("threshold", threshold),
        ("edgeitems", edgeitems),
        ("linewidth", linewidth),
    ):
        if value is not None:
            PRINT_OPTS[name] = value
    PRINT_OPTS["sci_mode"] = sci_mode


def get_printoptions() -> dict:
    """The current print options (PyTorch's ``torch._tensor_str.get_printoptions``)."""
    return dict(PRINT_OPTS)


def _format_floats(a: np.ndarray):
    """PyTorch's ``_Formatter`` choice: integral values print as ``1.``, and scientific notation
    is chosen from the nonzero finite values (their largest above 1e8, a ratio of largest to
    smallest above 1000, or — for non-integral values — the smallest below 1e-4)."""
    p, forced = PRINT_OPTS["precision"], PRINT_OPTS["sci_mode"]
    nonzero = np.abs(a[np.isfinite(a) & (a != 0)].astype(np.float64))  # compared in double
    if nonzero.size == 0:  # also under sci_mode=True, as PyTorch
        return lambda v: _special(v) if not np.isfinite(v) else f"{v:.0f}."
    amax, amin = nonzero.max(), nonzero.min()
    integral = bool(np.all(nonzero == np.ceil(nonzero)))
    sci = amax / amin > 1000.0 or amax > 1.0e8 or (not integral and amin < 1.0e-4)
    if forced is not None:
        sci = forced
    if sci:
        return lambda v: _special(v) if not np.isfinite(v) else f"{v:.{p}e}"
    if integral:
        return lambda v: _special(v) if not np.isfinite(v) else f"{v:.0f}."
    return lambda v: _special(v) if not np.isfinite(v) else f"{v:.{p}f}"


def _special(v) -> str:
    if np.isnan(v):
        return "nan"
    return "inf" if v > 0 else "-inf"


def _summarized(a: np.ndarray, edge: int = 3) -> np.ndarray:
    """The elements a summarised repr shows (the first and last ``edge`` along every dim)."""
    for dim, n in enumerate(a.shape):
        if n > 2 * edge:
            a = np.concatenate(
                [
                    a[(slice(None),) * dim + (slice(0, edge),)],
                    a[(slice(None),) * dim + (slice(n - edge, n),)],
                ],
                axis=dim,
            )
    return a


def _padded(fmt, shown: np.ndarray):
    """PyTorch pads every element to the widest one shown: ``tensor([ 1.5000, -1.5000])``."""
    if shown.dtype.kind == "f":  # only nonzero finite values set the width (PyTorch's _Formatter)
        shown = shown[np.isfinite(shown) & (shown != 0)]
    width = max((len(fmt(v)) for v in shown.flat), default=0)
    return lambda v: fmt(v).rjust(width)


def tensor_repr(t) -> str:
    a = t._data
    opts = PRINT_OPTS
    summarize = a.size > opts["threshold"]
    # what PyTorch's formatter looks at
    shown = _summarized(a, opts["edgeitems"]) if summarize else a
    if a.dtype.kind == "f":
        fmt = _format_floats(shown) if a.size else str
    elif a.dtype.kind == "b":
        fmt = lambda v: "True" if v else "False"
    else:
        fmt = lambda v: str(int(v))
    if a.ndim and a.size:
        fmt = _padded(fmt, shown)
    if a.size == 0:
        body = "[]" if a.ndim == 1 else f"[], size=({', '.join(map(str, a.shape))})"
    elif a.ndim == 0:
        body = fmt(a.item())
    else:
        body = np.array2string(
            a,
            separator=", ",
            formatter={"all": fmt},
            prefix="tensor(",
            threshold=a.size - 1 if summarize else a.size + 1,
            edgeitems=opts["edgeitems"],
            max_line_width=opts["linewidth"],
        ).replace(", ..., ", ",  ..., ")  # PyTorch's summary mark is " ..." after the comma
    extras = []
    default = dtypes.get_default_dtype()
    d = t.dtype
    if (
        not (d is default or d is dtypes.int64 or d is dtypes.bool)
        or a.size == 0
        and d is not default
    ):
        extras.append(f"dtype=torch.{d.name}")
    try:
        fn = t.grad_fn
    except RuntimeError:  # a written view PyTorch refuses to rebase (ops/views.py), as PyTorch
        fn = None
        extras.append("grad_fn=<Invalid>")
    if fn is not None:
        extras.append(f"grad_fn=<{fn.name().rsplit('::', 1)[-1]}>")
    elif extras and extras[-1] == "grad_fn=<Invalid>":
        pass
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return _add_suffixes("tensor(" + body, extras, linewidth=opts["linewidth"])


def _add_suffixes(text: str, suffixes: list, indent: int = 7, linewidth: int = 80) -> str:
    """``, dtype=...`` after the values, or on a line of its own where the last line would pass
    80 columns (PyTorch's ``_add_suffixes``, its line-length arithmetic included)."""
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    return "".join(parts) + ")"
