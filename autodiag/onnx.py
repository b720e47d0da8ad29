"""``torch.onnx``: importable, so scripts that import it at the top run; exporting is refused.

autodiag's engine records autograd graphs, not ONNX programs: ``export`` raises
``NotImplementedError`` naming itself (run the script on PyTorch to export).

>>> import autodiag as torch
>>> torch.onnx.is_in_onnx_export()
False
"""

from __future__ import annotations

__all__ = ["export", "is_in_onnx_export"]


def is_in_onnx_export() -> bool:
    """False: autodiag never runs a model inside an ONNX export."""
    return False


def export(model, args=(), f=None, *rest, **kwargs):
    """Refused: ONNX export needs PyTorch's tracer (run the script with plain PyTorch)."""
    raise NotImplementedError(
        "torch.onnx.export: autodiag's engine cannot export ONNX; run the script on PyTorch "
        "to export the model"
    )
