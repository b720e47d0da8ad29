"""Tracing hooks: the engine reports what it does to any number of tracers (DESIGN §3).

Subclass ``Tracer``, override the events you need, and run code inside ``tracing(...)``:

>>> import autodiag as torch
>>> from autodiag.trace import Tracer, tracing
>>> class OpNames(Tracer):
...     def __init__(self):
...         self.names = []
...     def on_op(self, op, node, inputs, outputs, stack):
...         self.names.append((op, node.name() if node else None))
>>> t = OpNames()
>>> x = torch.ones(2, requires_grad=True)
>>> with tracing(t):
...     y = (x * 3).sum()
>>> t.names
[('mul', 'MulBackward0'), ('sum', 'SumBackward0')]

Events (all optional; the base class ignores them):

* ``on_op(op, node, inputs, outputs, stack)`` — a public op ran. ``op`` is its name (``"mul"``,
  ``"sum"``, ``"add_"``, ``"detach"``, a custom Function's class name), ``node`` the graph node it
  recorded or None (grad mode off, no input requiring grad, or an op with no derivative),
  ``inputs``/``outputs`` its Tensor arguments and results, ``stack`` a ``Stack`` of the user's
  frames (formatted only when you ask: ``stack.location()``, ``stack.frames()``). Ops called
  inside other ops are not reported.
* ``on_save(node, tensor)`` — ``node`` saved ``tensor`` for its backward (after its ``on_op``).
* ``on_inplace(tensor, op, stack)`` — ``tensor``'s storage was written in place by ``op``
  (its version counter was bumped), also under ``no_grad``.
* ``on_backward_begin(task)`` / ``on_backward_end(task)`` — a ``backward()`` or
  ``autograd.grad()`` call; ``task.roots`` are its output tensors, ``task.inputs`` the inputs of
  ``autograd.grad`` (or ``backward(inputs=...)``), ``task.accumulate`` False for ``grad``,
  ``task.retain_graph``/``task.create_graph`` its options. ``begin`` comes before any buffer is
  freed, so the whole graph can be inspected then.
* ``on_node_backward(node, grad_outputs, grad_inputs)`` — a node's backward ran: the gradients it
  received (one per output of its forward op) and those it sent on (one per
  ``next_functions`` entry; ``()`` for ``AccumulateGrad``). Arrays, or Tensors under
  ``create_graph``; None where no gradient flows.
* ``on_optimizer_step(optimizer)`` — an ``optim`` optimizer finished ``step()``.
* ``on_step()`` — the script called ``autodiag.trace.step()`` to mark the end of a step.

With no tracer installed the engine pays one check per op (NOTE [Tracing cost]).
"""

from __future__ import annotations

import contextlib

from autodiag.trace import events
from autodiag.trace.sites import Stack, capture_stack, format_site

__all__ = [
    "Tracer",
    "tracing",
    "Stack",
    "capture_stack",
    "format_site",
    "step",
    "active",
    "StopRun",
]


class StopRun(BaseException):
    """Raised by a tracer to end the traced run early (``autodiag anomaly`` stops at the first
    NaN in backward). Not an Exception, so the script's ``except Exception`` cannot swallow it;
    the target runner treats it as a normal end of the run."""


def _noop(fn):
    fn.__autodiag_noop__ = True  # events skip tracers that do not override an event
    return fn


class Tracer:
    """Base class of tracers: every event is a no-op until overridden."""

    @_noop
    def on_op(self, op: str, node, inputs: tuple, outputs: tuple, stack: Stack) -> None:
        pass

    @_noop
    def on_save(self, node, tensor) -> None:
        pass

    @_noop
    def on_inplace(self, tensor, op: str, stack: Stack) -> None:
        pass

    @_noop
    def on_backward_begin(self, task) -> None:
        pass

    @_noop
    def on_node_backward(self, node, grad_outputs, grad_inputs) -> None:
        pass

    @_noop
    def on_backward_end(self, task) -> None:
        pass

    @_noop
    def on_optimizer_step(self, optimizer) -> None:
        pass

    @_noop
    def on_step(self) -> None:
        pass


@contextlib.contextmanager
def tracing(*tracers: Tracer):
    """Install ``tracers`` for the duration of the ``with`` block (nesting is allowed)."""
    for t in tracers:
        events.install(t)
    try:
        yield tracers[0] if len(tracers) == 1 else tracers
    finally:
        for t in tracers:
            events.uninstall(t)


def active() -> tuple:
    """The tracers currently installed (not autodiag's own, such as anomaly mode's)."""
    return tuple(t for t in events.TRACERS if not getattr(t, "internal", False))


def step() -> None:
    """Mark the end of a training step (``autodiag leaks`` counts steps by it when a script has
    no optimizer)."""
    if events.TRACERS:
        events.emit_step()
