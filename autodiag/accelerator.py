"""``torch.accelerator``: none under autodiag (it computes on the CPU).

>>> import autodiag as torch
>>> torch.accelerator.is_available(), torch.accelerator.current_accelerator()
(False, None)
"""

from __future__ import annotations


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def current_accelerator(check_available: bool = False):
    return None
