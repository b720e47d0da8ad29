"""Anomaly mode, as PyTorch's ``torch.autograd.detect_anomaly`` / ``set_detect_anomaly``.

While it is on:

* every graph node remembers the user's forward stack where it was recorded (the tracing
  capture: an internal tracer is installed, so ``node._trace`` is set by the engine's op events);
  ``node.metadata["traceback_"]`` lists it as PyTorch formats it, and a node recorded during a
  backward pass (``create_graph=True``) has ``metadata["parent_"]``, the node being run then;
* a backward node whose output gradient holds NaN raises
  ``RuntimeError("Function 'SqrtBackward0' returned nan values in its 0th output.")``;
* any error inside backward first warns "Error detected in SqrtBackward0. Traceback of forward
  call that caused the error: ..." (UserWarning, pointing at the backward() call);
* the in-place error ("modified by an inplace operation") names the line of the op that saved
  the tensor, and takes PyTorch's anomaly-mode hint.

Beyond PyTorch, ``check_inf=True`` also rejects infinite gradients ("returned inf values").

>>> import warnings
>>> import autodiag as torch
>>> x = torch.tensor([0.0], requires_grad=True)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     with torch.autograd.detect_anomaly():
...         y = x.sqrt() * 0
...         try:
...             y.sum().backward()
...         except RuntimeError as e:
...             print(e)
Function 'SqrtBackward0' returned nan values in its 0th output.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from autodiag import _warnings
from autodiag.core.grad_mode import _anomaly as _state
from autodiag.core.grad_mode import (
    is_anomaly_check_inf_enabled,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
)
from autodiag.core.sumsq import CHUNK, sum_of_squares
from autodiag.trace import Tracer, events

__all__ = [
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_check_inf_enabled",
    "set_anomaly_enabled",
]

ENABLED_WARNING = (
    "Anomaly Detection has been enabled. This mode will increase the runtime and "
    "should only be enabled for debugging."
)


def set_anomaly_enabled(enabled: bool, check_nan: bool = True, check_inf: bool = False) -> None:
    """Switch anomaly mode (``torch.set_anomaly_enabled``); installs or removes its tracer."""
    _state[:] = [bool(enabled), bool(check_nan), bool(check_inf)]
    installed = any(t is _TRACER for t in events.TRACERS)
    if enabled and not installed:
        events.install(_TRACER)
    elif not enabled and installed:
        events.uninstall(_TRACER)


class _Switch:
    """Shared by both managers: restore the state found at construction on exit."""

    def __exit__(self, *exc) -> bool:
        set_anomaly_enabled(*self.prev)
        return False


class detect_anomaly(_Switch):
    """Context manager (and decorator) that turns anomaly mode on.

    ``check_nan`` (default True): a backward node that returns NaN raises a RuntimeError.
    ``check_inf`` (autodiag only, default False): so does one that returns ±inf.

    >>> import warnings
    >>> import autodiag as torch
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     with torch.autograd.detect_anomaly(check_inf=True):
    ...         torch.is_anomaly_enabled()
    True
    """

    def __init__(self, check_nan: bool = True, check_inf: bool = False) -> None:
        self.prev = tuple(_state)
        self.check_nan = check_nan
        self.check_inf = check_inf
        _warnings.warn(ENABLED_WARNING, UserWarning)

    def __enter__(self) -> None:
        set_anomaly_enabled(True, self.check_nan, self.check_inf)

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            prev = tuple(_state)
            set_anomaly_enabled(True, self.check_nan, self.check_inf)
            try:
                return func(*args, **kwargs)
            finally:
                set_anomaly_enabled(*prev)

        return wrapper


class set_detect_anomaly(_Switch):
    """Turn anomaly mode on or off, as a function or a context manager (restores on exit).

    >>> import autodiag as torch
    >>> with torch.autograd.set_detect_anomaly(True):
    ...     torch.is_anomaly_enabled()
    True
    >>> torch.is_anomaly_enabled()
    False
    """

    def __init__(self, mode: bool, check_nan: bool = True, check_inf: bool = False) -> None:
        self.prev = tuple(_state)
        set_anomaly_enabled(mode, check_nan, check_inf)

    def __enter__(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# The tracer: forward stacks and parents on nodes, the NaN/Inf check after each backward node
# ---------------------------------------------------------------------------------------------


class AnomalyRecord:
    """``node._metadata`` of a node recorded in anomaly mode, until ``node.metadata`` is read:
    then it becomes PyTorch's dict (``traceback_``, and ``parent_`` for nodes made in backward).
    One shared instance serves every node without a parent."""

    __slots__ = ("parent",)

    def __init__(self, parent=None):
        self.parent = parent

    def as_dict(self, node) -> dict:
        d = {"traceback_": format_stack(node._trace)}
        if self.parent is not None:
            d["parent_"] = self.parent
        return d


_NO_PARENT = AnomalyRecord()


class _AnomalyTracer(Tracer):
    internal = True  # not listed by autodiag.trace.active()

    def __init__(self):
        self.tasks: list = []  # backward calls in progress, innermost last

    def on_op(self, op, node, inputs, outputs, stack):
        if node is not None and node._metadata is None:
            parent = self.tasks[-1].current if self.tasks else None
            node._metadata = _NO_PARENT if parent is None else AnomalyRecord(parent)

    def on_backward_begin(self, task):
        self.tasks.append(task)

    def on_backward_end(self, task):
        if self.tasks and self.tasks[-1] is task:
            self.tasks.pop()

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        if grad_inputs and (_state[1] or _state[2]):
            check_gradients(node, grad_inputs, _state[1], _state[2])


_TRACER = _AnomalyTracer()


def check_gradients(node, grads, check_nan: bool, check_inf: bool) -> None:
    """Raise PyTorch's anomaly error when a gradient ``node`` returned holds NaN (or Inf).

    As PyTorch, only gradients that flow somewhere are checked (a built-in op computes none for
    an input that needs no grad), except for custom Functions, whose every output is checked.
    """
    from autodiag.autograd.function import BackwardCFunction

    every = isinstance(node, BackwardCFunction)
    nxt = node._next
    for i, g in enumerate(grads):
        if g is None or (not every and nxt[i] is None):
            continue
        a = np.asarray(getattr(g, "_data", g))
        if a.dtype.kind not in "fc":
            continue
        if a.dtype.kind == "f":
            # fast path: a sum of squares is finite iff every element is (or it overflowed)
            r = a.ravel()
            # NOTE [BLAS threads]: a big array in chunks
            if math.isfinite(r.dot(r) if r.size <= CHUNK else sum_of_squares(r)):
                continue
        if check_nan and np.isnan(a).any():
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")
        if check_inf and np.isinf(a).any():
            raise RuntimeError(f"Function '{node.name()}' returned inf values in its {i}th output.")


# ---------------------------------------------------------------------------------------------
# Reporting the forward stack of a node whose backward failed
# ---------------------------------------------------------------------------------------------


def format_stack(stack) -> list[str]:
    """A captured Stack as ``traceback.format_list`` would print it (PyTorch's traceback_)."""
    if stack is None:
        return []
    out = []
    for f in stack.frames():
        text = f'  File "{f["file"]}", line {f["line"]}, in {f["function"]}\n'
        if f["code"]:
            text += f"    {f['code']}\n"
        out.append(text)
    return out


def report_backward_error(node, exc: BaseException) -> None:
    """Warn with the forward traceback of ``node``, whose backward raised ``exc`` (once per
    error, as PyTorch: an error crossing nested backward calls is reported by the innermost)."""
    if getattr(exc, "_autodiag_anomaly_reported", False):
        return
    try:
        exc._autodiag_anomaly_reported = True
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass
    name = node.name()
    if node._trace is None:
        _warnings.warn(
            f"Error detected in {name}. No forward pass information available. Enable "
            f"detect anomaly during forward pass for more information.",
            UserWarning,
        )
        return
    _warnings.warn(
        f"Error detected in {name}. Traceback of forward call that caused the error:\n"
        + "".join(format_stack(node._trace)),
        UserWarning,
    )
    seen = {node}
    parent = _parent_of(node)
    while parent is not None and parent not in seen:
        seen.add(parent)
        _warnings.warn(
            f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of "
            f"forward call that induced the previous calculation:\n"
            + "".join(format_stack(parent._trace)),
            UserWarning,
        )
        parent = _parent_of(parent)


def _parent_of(node):
    m = node._metadata
    if m is None:
        return None
    if m.__class__ is dict:
        return m.get("parent_")
    return getattr(m, "parent", None)
