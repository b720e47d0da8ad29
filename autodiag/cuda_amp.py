"""``torch.cuda.amp``: the deprecated CUDA spellings of ``torch.amp`` (see ``autodiag.amp``).

Without CUDA both are disabled with PyTorch's warnings, so ``@torch.cuda.amp.autocast()`` on a
``forward`` (minGPT) and ``torch.cuda.amp.GradScaler(enabled=...)`` (nanoGPT) run unchanged.

>>> import warnings
>>> import autodiag as torch
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     scaler = torch.cuda.amp.GradScaler(enabled=True)
>>> scaler.is_enabled()
False
"""

from __future__ import annotations

from autodiag import _warnings
from autodiag import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):  # noqa: N801 - PyTorch's name
    """``torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        _warnings.warn(
            "`torch.cuda.amp.autocast(args...)` is deprecated. "
            "Please use `torch.amp.autocast('cuda', args...)` instead.",
            FutureWarning,
        )
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval,
    enabled)``."""

    def __init__(
        self,
        init_scale=2.0**16,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
        enabled=True,
    ):
        _warnings.warn(
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. "
            "Please use `torch.amp.GradScaler('cuda', args...)` instead.",
            FutureWarning,
        )
        super().__init__(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )
