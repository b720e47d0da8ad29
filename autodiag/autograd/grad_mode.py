"""Grad modes: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

The state is one module-level list read on every op (``_state[0]``: record?), so checking it
costs one index. ``_state[1]`` is True inside ``inference_mode``. ``_state[2]`` is grad mode asked
for inside ``inference_mode`` (``enable_grad`` there): as in PyTorch, ``is_grad_enabled()`` is
then True but nothing is recorded.
"""

from __future__ import annotations

import functools

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]

_state = [True, False, False]  # [record, inference mode, grad mode asked for in inference mode]


def is_grad_enabled() -> bool:
    """True in grad mode (operations are recorded unless ``inference_mode`` is on)."""
    return _state[0] or _state[2]


def is_inference_mode_enabled() -> bool:
    return _state[1]


class _Mode:
    """A context manager that is also a decorator (``@no_grad()`` and ``@no_grad``)."""

    def __new__(cls, func=None, *args, **kwargs):
        self = super().__new__(cls)
        if callable(func) and not isinstance(func, bool) and cls is not set_grad_enabled:
            # used bare as ``@no_grad``: wrap the function
            self.__init__()
            return self(func)
        return self

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return wrapper

    def clone(self):
        return self.__class__()

    def __enter__(self):
        self._prev = tuple(_state)
        self._apply()
        return self

    def __exit__(self, *exc):
        _state[:] = self._prev
        return False


class no_grad(_Mode):
    """Disable gradient recording.

    >>> import autodiag as torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> with torch.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def _apply(self):
        _state[0] = _state[2] = False


def _set_grad_mode(mode: bool) -> None:
    # inside inference_mode grad mode is remembered but nothing is recorded
    _state[0] = mode and not _state[1]
    _state[2] = mode and _state[1]


class enable_grad(_Mode):
    """Enable gradient recording inside ``no_grad``."""

    def _apply(self):
        _set_grad_mode(True)


class set_grad_enabled(_Mode):
    """Set grad mode on or off; applies at once, and restores on exit when used with ``with``.

    As a decorator (``@set_grad_enabled(False)``) it restores the mode at decoration time and
    applies it around each call, as PyTorch does.
    """

    def __init__(self, mode: bool = True):
        self.prev = (_state[0], _state[2])
        self.mode = bool(mode)
        _set_grad_mode(self.mode)

    def __call__(self, func):
        _state[0], _state[2] = self.prev
        return super().__call__(func)

    def clone(self):
        return set_grad_enabled(self.mode)

    def __enter__(self):
        _set_grad_mode(self.mode)
        return self

    def __exit__(self, *exc):
        _state[0], _state[2] = self.prev
        return False


class inference_mode(_Mode):
    """Like ``no_grad``, and tensors created inside refuse to enter autograd later."""

    def __init__(self, mode: bool = True):
        self.mode = mode

    def clone(self):
        return inference_mode(self.mode)

    def _apply(self):
        # As c10::InferenceMode(enabled): grad mode is set to ``not enabled``, so
        # ``inference_mode(False)`` inside ``inference_mode()`` records again.
        _state[0] = not self.mode
        _state[1] = bool(self.mode)
        _state[2] = False
