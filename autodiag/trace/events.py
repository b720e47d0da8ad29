"""The engine side of tracing: the active tracers, and how events reach them.

NOTE [Tracing cost]
``TRACERS`` is the one global the engine checks. Every public op is registered through
``traced`` (ops/_core.register), whose wrapper tests ``TRACERS`` and, when it is empty, calls the
op directly: the price of tracing when nobody listens is that one check and one call. The
backward engine tests it once per backward call. When a tracer is installed, each *outermost* op
call is reported once (ops that other ops call internally are not: ``_depth`` counts the nesting),
with a lazily formatted capture of the user's stack.

This module imports nothing from the engine at import time: ops, tensor and the engine import it.
"""

from __future__ import annotations

import functools

from autodiag.trace.sites import Stack, capture_stack

# The installed tracers, in installation order. Mutated only by ``install``/``uninstall``.
TRACERS: list = []
# How many traced op calls are running (nested calls inside an op are not reported).
_depth = [0]
# Sequence number source of graph nodes (set by autograd.graph; nodes made during an op have a
# sequence number above the mark taken before it).
_seq_source: list = [None]


def install(tracer) -> None:
    TRACERS.append(tracer)


def uninstall(tracer) -> None:
    for i in range(len(TRACERS) - 1, -1, -1):
        if TRACERS[i] is tracer:
            del TRACERS[i]
            return


def traced(name: str, fn):
    """Wrap a public op so that, while a tracer is installed, its calls are reported."""

    def op(*args, **kwargs):
        if not TRACERS or _depth[0]:
            return fn(*args, **kwargs)
        return call_traced(name, fn, args, kwargs)

    functools.update_wrapper(op, fn)
    op.__autodiag_op__ = name
    return op


def traced_binary(name: str, fn):
    """``traced`` for an operator method of fixed arity ``(self, other)`` (cheaper call)."""

    def method(self, other):
        if not TRACERS or _depth[0]:
            return fn(self, other)
        return call_traced(name, fn, (self, other), {})

    functools.update_wrapper(method, fn)
    return method


def call_traced(name: str, fn, args: tuple, kwargs: dict):
    mark = _seq_source[0]()
    _depth[0] += 1
    try:
        out = fn(*args, **kwargs)
    finally:
        _depth[0] -= 1
    emit_op(name, _tensors_in(args, kwargs), out, mark)
    return out


def emit_op(name: str, inputs: tuple, out, mark: int) -> None:
    """Report one op: ``name``, the node it recorded (None if none), its tensor inputs/outputs."""
    outputs = _tensors_in((out,), None)
    node = None
    for o in outputs:
        fn = o.grad_fn
        if fn is not None and mark <= fn._seq < (1 << 62):
            node = fn
            break
    stack = capture_stack(3)
    if node is not None:
        _mark_new_nodes(node, mark, stack)
    for t in tuple(TRACERS):
        t.on_op(name, node, inputs, outputs, stack)
    if node is not None and node._saved:
        _emit_saves(node, outputs)


def _mark_new_nodes(node, mark: int, stack) -> None:
    """Give every node this op recorded (its own and those of ops it called internally, e.g.
    cross_entropy's LogSoftmaxBackward0) the user's stack: graph and anomaly reports read
    ``node._trace``. New nodes are those numbered after ``mark``; the walk stops at older ones."""
    todo = [node]
    while todo:
        n = todo.pop()
        if n._trace is not None or not mark <= n._seq < (1 << 62):
            continue
        n._trace = stack
        for e in n._next:
            if e is not None:
                todo.append(e[0] if e.__class__ is tuple else e)


def _emit_saves(node, outputs) -> None:
    from autodiag.autograd.graph import SavedTensor
    from autodiag.tensor import Tensor

    by_data = {id(o._data): o for o in outputs}
    for s in node._saved:
        if isinstance(s, Tensor):
            t = s
        elif s.__class__ is SavedTensor:
            t = s.tensor if s.tensor is not None else by_data.get(id(s.data))
        else:
            continue
        if t is not None:
            for tr in tuple(TRACERS):
                tr.on_save(node, t)


def emit_inplace(tensor, op_name: str) -> None:
    stack = capture_stack(3)
    for t in tuple(TRACERS):
        t.on_inplace(tensor, op_name, stack)


def emit_backward_begin(call) -> None:
    for t in tuple(TRACERS):
        t.on_backward_begin(call)


def emit_node_backward(node, grad_outputs, grad_inputs) -> None:
    for t in tuple(TRACERS):
        t.on_node_backward(node, grad_outputs, grad_inputs)


def emit_backward_end(call) -> None:
    for t in tuple(TRACERS):
        t.on_backward_end(call)


def emit_optimizer_step(optimizer) -> None:
    for t in tuple(TRACERS):
        t.on_optimizer_step(optimizer)


def emit_step() -> None:
    for t in tuple(TRACERS):
        t.on_step()


def _tensors_in(args, kwargs) -> tuple:
    """The Tensors among an op's arguments or results (one level into lists/tuples)."""
    from autodiag.tensor import Tensor

    found = []
    for a in args:
        if isinstance(a, Tensor):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend(x for x in a if isinstance(x, Tensor))
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                found.append(a)
    return tuple(found)


__all__ = ["TRACERS", "Stack", "install", "uninstall", "traced", "traced_binary"]
