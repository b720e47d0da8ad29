"""``torch.backends``: ``mps`` and ``cudnn`` report that they are absent (autodiag computes
on the CPU); the cudnn flags scripts set for reproducibility are accepted and have no effect.

>>> import autodiag as torch
>>> torch.backends.mps.is_available()
False
"""

from __future__ import annotations

from autodiag.backends import cudnn, mha, mps

__all__ = ["cudnn", "mps", "mha"]
