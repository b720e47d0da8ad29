"""``torch.sparse``: the sparse x dense product (ops/sparse_coo.py says what sparse tensors
support).

>>> import autodiag as torch
>>> s = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
>>> torch.sparse.mm(s, torch.ones(2, 1))
tensor([[2.],
        [3.]])
"""

from __future__ import annotations

from autodiag.ops.sparse_coo import sparse_mm as mm

__all__ = ["mm"]
