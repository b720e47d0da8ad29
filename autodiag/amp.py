"""``torch.amp`` (and ``torch.cuda.amp``, ``torch.autocast``): mixed precision, as far as it
applies to a machine without an accelerator.

autodiag computes on the CPU in the dtypes it is given. PyTorch on such a machine turns CUDA
autocast and the CUDA ``GradScaler`` off with a warning, and so does autodiag: scripts that wrap
their forward in ``torch.autocast("cuda", ...)`` or ``@torch.cuda.amp.autocast()`` and scale
their loss run unchanged, in full precision, with PyTorch's numbers. What would change the
numbers is refused by name: CPU autocast to a lower precision, and loss scaling on the CPU.

>>> import autodiag as torch
>>> import warnings
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     with torch.autocast("cuda", dtype=torch.float16):
...         y = torch.ones(2, 2) @ torch.ones(2, 2)
...     scaler = torch.amp.GradScaler("cuda")
>>> y.dtype == torch.float32, scaler.is_enabled(), scaler.get_scale()
(True, False, 1.0)
"""

from __future__ import annotations

import functools

from autodiag import _warnings

__all__ = ["autocast", "GradScaler"]


class autocast:  # noqa: N801 - PyTorch's name
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: a context
    manager and decorator. CUDA autocast is disabled (no CUDA device), with PyTorch's warning;
    ``enabled=False`` does nothing; CPU autocast raises ``NotImplementedError``."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if self._enabled and device_type == "cuda":
            _warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.")
            self._enabled = False
        if self._enabled:
            raise NotImplementedError(
                f"autocast(device_type={device_type!r}): autodiag computes in the dtypes it is "
                "given and has no mixed-precision mode; pass enabled=False, or run the script "
                "on PyTorch"
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast


class GradScaler:
    """``torch.amp.GradScaler``: loss scaling for float16 training. Without CUDA PyTorch
    disables the CUDA scaler (with a warning) and so does autodiag: ``scale`` returns the loss
    as it is, ``step`` calls ``optimizer.step()``. An enabled CPU scaler is refused."""

    def __init__(
        self,
        device="cuda",
        init_scale=2.0**16,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
        enabled=True,
    ):
        self._device = device
        self._enabled = bool(enabled)
        self._init_scale = init_scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        if self._enabled and device == "cuda":
            _warnings.warn(
                "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling."
            )
            self._enabled = False
        if self._enabled:
            raise NotImplementedError(
                f"GradScaler(device={device!r}) with enabled=True: autodiag does not scale "
                "losses; pass enabled=False, or run the script on PyTorch"
            )

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer) -> None:
        return None

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict) -> None:
        """A no-op: the scaler is never enabled (as PyTorch's disabled scaler)."""
        return None
