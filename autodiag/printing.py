"""``repr`` of tensors in PyTorch's style: ``tensor([1., 2.], requires_grad=True)``."""

from __future__ import annotations

import numpy as np

from autodiag import dtypes


def _format_floats(a: np.ndarray):
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return lambda v: _special(v)
    amax = np.abs(finite).max()
    amin = np.abs(finite).min()
    integral = bool(np.all(finite == np.round(finite)))
    if integral and amax < 1e8:
        return lambda v: _special(v) if not np.isfinite(v) else f"{v:.0f}."
    if (
        amax >= 1e8
        or (amin < 1e-4 and amin != 0)
        or (amax / max(amin, 1e-300) > 1e3 and amin != 0 and amax > 1e3)
    ):
        return lambda v: _special(v) if not np.isfinite(v) else f"{v:.4e}"
    return lambda v: _special(v) if not np.isfinite(v) else f"{v:.4f}"


def _special(v) -> str:
    if np.isnan(v):
        return "nan"
    return "inf" if v > 0 else "-inf"


def tensor_repr(t) -> str:
    a = t._data
    if a.dtype.kind == "f":
        fmt = _format_floats(a) if a.size else str
    elif a.dtype.kind == "b":
        fmt = lambda v: "True" if v else "False"
    else:
        fmt = lambda v: str(int(v))
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
            threshold=1000,
            edgeitems=3,
            max_line_width=80,
        )
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
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
