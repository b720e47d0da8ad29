"""``autodiag.utils``: ``checkpoint`` (activation checkpointing) and ``data`` (datasets and
``DataLoader``), as ``torch.utils``."""

from __future__ import annotations

from autodiag.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
