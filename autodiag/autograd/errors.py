"""PyTorch's autograd error messages, plus the locations autodiag adds to them."""

from __future__ import annotations

import re

from autodiag.trace.sites import saver_site, site_text

_BACKWARD_SUFFIX = re.compile(r"Backward(\d*)$")


def forward_op_name(node) -> str:
    """PyTorch 2.13's name for a node in error messages: ``MulBackward0`` -> ``Mul``.

    A non-zero overload digit is kept (``AddBackward1`` -> ``Add1``), as ``forward_op_name()``.
    """
    name = node.name()
    m = _BACKWARD_SUFFIX.search(name)
    if m is None:
        return name
    digits = m.group(1)
    return name[:m.start()] + (digits if digits not in ("", "0") else "")


def _type_str(t) -> str:
    return t.dtype.legacy_type_name


def inplace_modified_message(saved, node) -> str:
    """PyTorch's "modified by an inplace operation" text, then where it was written."""
    if saved.tensor is not None:
        t = saved.tensor
        shape = t._data.shape
        dt = _type_str(t)
        owner = t.grad_fn
        out_nr = t._output_nr
    else:
        from autodiag.tensor import Tensor

        t = Tensor._make(saved.data)
        shape, dt = saved.data.shape, _type_str(t)
        owner, out_nr = node, saved.output_nr
    which = (f", which is output {out_nr} of {forward_op_name(owner)}," if owner is not None
             else "")
    msg = (f"one of the variables needed for gradient computation has been modified by an "
           f"inplace operation: [{dt} [{', '.join(map(str, shape))}]]{which} is at version "
           f"{saved.vc[0]}; expected version {saved.version} instead.")
    trace = getattr(node, "_trace", None)  # (checkpoint's placeholder owner is not a Node)
    # recorded in anomaly mode or under a tracer, else NOTE [Saving sites]
    saved_at = trace.site if trace is not None else saver_site(node)
    by = f"autodiag: the tensor was saved by {node.name()}"
    if saved_at is not None:
        by += f" at {site_text(saved_at)}"
    details = [by]
    if len(saved.vc) > 1:
        op, site = saved.vc[1]
        details.append(f"last modified in place by {op} at {site_text(site)}")
    msg += " " + "; ".join(details) + "."
    from autodiag.autograd.anomaly import INPLACE_HINT, is_anomaly_enabled

    if is_anomaly_enabled():
        msg += " " + INPLACE_HINT
    else:
        msg += (" Hint: enable anomaly detection to find the operation that failed to compute "
                "its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")
    msg += " Fix: clone() the tensor before modifying it, or use the out-of-place op."
    return msg
