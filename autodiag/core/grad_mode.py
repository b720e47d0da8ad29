"""Grad modes: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

NOTE [Grad mode is per thread]: as in PyTorch, grad mode and inference mode belong to the
thread that sets them (anomaly mode and the default dtype are process-wide, in both). The state
is one ``threading.local`` object read on every op (``_state.record``: record?), so checking it
costs one attribute read. Its fields are class attributes, so a thread that never set them reads
the defaults: every new thread starts in grad mode, whatever mode the thread that created it is
in (PyTorch's behaviour). ``_state.inference`` is True inside ``inference_mode``;
``_state.asked`` is grad mode asked for inside ``inference_mode`` (``enable_grad`` there): as in
PyTorch, ``is_grad_enabled()`` is then True but nothing is recorded.
"""

from __future__ import annotations

import functools
import threading

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_check_inf_enabled",
]


class _GradState(threading.local):
    """This thread's grad mode; the class attributes are every new thread's starting state."""

    record = True  # ops record a graph
    inference = False  # inside inference_mode
    asked = False  # grad mode asked for inside inference_mode (reported, nothing recorded)

    def get(self) -> tuple:
        return self.record, self.inference, self.asked

    def set(self, state: tuple) -> None:
        self.record, self.inference, self.asked = state


_state = _GradState()


def is_grad_enabled() -> bool:
    """True in grad mode (operations are recorded unless ``inference_mode`` is on)."""
    return _state.record or _state.asked


def is_inference_mode_enabled() -> bool:
    return _state.inference


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
        self._prev = _state.get()
        self._apply()
        return self

    def __exit__(self, *exc):
        _state.set(self._prev)
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
        _state.record = _state.asked = False


def _set_grad_mode(mode: bool) -> None:
    # inside inference_mode grad mode is remembered but nothing is recorded
    _state.record = mode and not _state.inference
    _state.asked = mode and _state.inference


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
        self.prev = (_state.record, _state.asked)
        self.mode = bool(mode)
        _set_grad_mode(self.mode)

    def __call__(self, func):
        _state.record, _state.asked = self.prev
        return super().__call__(func)

    def clone(self):
        return set_grad_enabled(self.mode)

    def __enter__(self):
        _set_grad_mode(self.mode)
        return self

    def __exit__(self, *exc):
        _state.record, _state.asked = self.prev
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
        _state.record = not self.mode
        _state.inference = bool(self.mode)
        _state.asked = False


# ---------------------------------------------------------------------------------------------
# Anomaly mode's switches (autograd/anomaly.py turns it on and off; the engine and its errors
# read it): [enabled, check_nan, check_inf]; process-wide, as PyTorch's AnomalyMode.
# ---------------------------------------------------------------------------------------------
_anomaly = [False, True, False]


def is_anomaly_enabled() -> bool:
    """True while anomaly mode is on (``autodiag.is_anomaly_enabled``)."""
    return _anomaly[0]


def is_anomaly_check_nan_enabled() -> bool:
    return _anomaly[1]


def is_anomaly_check_inf_enabled() -> bool:
    """autodiag only: True when anomaly mode also rejects infinite gradients."""
    return _anomaly[2]
