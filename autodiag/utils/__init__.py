"""``autodiag.utils``: ``checkpoint`` (activation checkpointing), as ``torch.utils``."""

from __future__ import annotations

from autodiag.utils import checkpoint

__all__ = ["checkpoint"]
