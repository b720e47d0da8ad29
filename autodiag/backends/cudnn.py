"""``torch.backends.cudnn``: absent under autodiag; the flags scripts set
(``deterministic``, ``benchmark``, ``enabled``) are plain module attributes."""

from __future__ import annotations

enabled = True
deterministic = False
benchmark = False


def is_available() -> bool:
    return False
