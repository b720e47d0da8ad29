"""``torch.autograd.graph``: graph nodes, saved-tensor hooks and hook handles.

They live in the engine core (``autodiag/core/graph.py``, below the tensor); this module is the
path PyTorch users import them from.

>>> import autodiag as torch
>>> x = torch.ones(2, requires_grad=True)
>>> isinstance((x * 2).grad_fn, torch.autograd.graph.Node)
True
"""

from __future__ import annotations

from autodiag.core.graph import (
    AccumulateGrad,
    Node,
    RemovableHandle,
    SavedTensor,
    saved_tensors_hooks,
)

__all__ = ["Node", "AccumulateGrad", "SavedTensor", "RemovableHandle", "saved_tensors_hooks"]
