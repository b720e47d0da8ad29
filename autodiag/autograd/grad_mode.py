"""``torch.autograd.grad_mode``: the grad-mode context managers.

They live in the engine core (``autodiag/core/grad_mode.py``: every op reads the mode); this
module is the path PyTorch users import them from.
"""

from __future__ import annotations

from autodiag.core.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
]
