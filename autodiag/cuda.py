"""``torch.cuda``: there is no CUDA device under autodiag (it computes on the CPU).

>>> import autodiag as torch
>>> torch.cuda.is_available(), torch.cuda.device_count()
(False, 0)
"""

from __future__ import annotations


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def is_initialized() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """Seeding CUDA generators: nothing to seed (PyTorch ignores it without CUDA too)."""


def manual_seed_all(seed: int) -> None:
    """As ``manual_seed``."""


def __getattr__(name: str):
    # ``torch.cuda.amp`` without importing it up front (it pulls in autodiag.amp)
    if name == "amp":
        from autodiag import cuda_amp

        return cuda_amp
    raise AttributeError(f"module 'autodiag.cuda' has no attribute {name!r}")
