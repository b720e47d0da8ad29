"""PyTorch's autograd error messages, plus the locations autodiag adds to them."""

from __future__ import annotations

from autodiag.trace.sites import site_text


def _type_str(t) -> str:
    name = {"float32": "FloatTensor", "float64": "DoubleTensor", "int64": "LongTensor",
            "bool": "BoolTensor", "float16": "HalfTensor", "int32": "IntTensor"}
    return f"torch.{name.get(t.dtype.name, t.dtype.name)}"


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
    which = f", which is output {out_nr} of {owner.name()}," if owner is not None else ""
    msg = (f"one of the variables needed for gradient computation has been modified by an "
           f"inplace operation: [{dt} [{', '.join(map(str, shape))}]]{which} is at version "
           f"{saved.vc[0]}; expected version {saved.version} instead.")
    details = [f"autodiag: the tensor was saved by {node.name()}"]
    if len(saved.vc) > 1:
        op, site = saved.vc[1]
        details.append(f"last modified in place by {op} at {site_text(site)}")
    msg += " " + "; ".join(details) + "."
    if saved.site is not None:
        msg += f" It was saved at {site_text(saved.site)}."
    msg += (" Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True). Fix: clone() the tensor "
            "before modifying it, or use the out-of-place op.")
    return msg
