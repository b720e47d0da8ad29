"""The engine side of tracing: the active tracers, and how events reach them.

NOTE [Tracing cost]
``TRACERS`` is the one global the engine checks. Every public op is registered through
``traced`` (ops/_core.register), whose wrapper tests ``TRACERS`` and, when it is empty, calls the
op directly: the price of tracing when nobody listens is that one check and one call. The
hottest elementwise ops test ``TRACERS`` themselves and report through ``call_traced``
(``self_traced``; NOTE [Hot path] in ops/pointwise.py), which saves that call. The
backward engine tests it once per backward call. When a tracer is installed, each *outermost* op
call is reported once (ops that other ops call internally are not: ``_depth`` counts the nesting),
with a lazily formatted capture of the user's stack (shared between ops on the same line: NOTE
[Shared stacks] in sites.py). Each event goes only to the tracers that override it
(``LISTENERS``): ``on_save`` costs nothing unless someone listens. Measured on a 10,000-op chain
of tiny tensors run as a script, a tracer that ignores every event costs ~1.25x the plain run.

This module sits in the engine core, below the tensor (NOTE [Layers] in core/__init__.py): it
knows nodes (core.graph), and the Tensor class only as tensor.py binds it.
"""

from __future__ import annotations

import functools
import threading

from autodiag.core import graph as _graph
from autodiag.core.graph import SavedTensor, _seq_counter
from autodiag.trace.sites import Stack, capture_stack, note_saver

_graph.Stack = Stack  # a node's ``_x`` may hold its Stack (NOTE [Stack for extras])

# The installed tracers, in installation order. Mutated only by ``install``/``uninstall``.
TRACERS: list = []


class _Count(threading.local):
    """A count per thread (``n``)."""

    n = 0  # a class default: a new thread starts at 0 without an __init__ call


# How many traced op calls are running in this thread (nested calls inside an op are not
# reported): another thread's op in progress never hides this thread's ops.
_depth = _Count()
# How many ``Optimizer.step`` calls are running in this thread, from the step's pre hooks to its
# post hooks (optim/optimizer.py's ``_hooked_step``; on ``--engine torch`` PyTorch's global step
# hooks, engines/torch/hooks.py): an in-place write made while a step runs is the optimizer's,
# whatever optimizer class made it (NOTE [Retained saves] in analysis/inplace.py). Another
# thread's step says nothing about this thread's writes.
STEPPING = _Count()
# What the engine reported while a tracer was installed: [outermost ops, backward/grad calls,
# optimizer steps, and of the ops those PyTorch's observer reported (--engine torch)]. The
# target runner reads them (a run in which nothing was recorded analysed nothing; a run on
# --engine torch whose ops were autodiag's was observed on the wrong engine), and so does the
# CLI's progress line.
REPORTED = [0, 0, 0, 0]


class _ModuleCalls(threading.local):
    """Per thread, the nn.Module calls in progress (``stack``, outermost first): a thread's ops
    are named after the modules running in that thread, not in another one. Reads and writes
    as a list too (``MODULES[-1]``, ``del MODULES[i:]``); the hot paths take ``.stack``."""

    def __init__(self):
        self.stack: list = []

    def append(self, module) -> None:
        self.stack.append(module)

    def pop(self):
        return self.stack.pop()

    def __len__(self) -> int:
        return len(self.stack)

    def __getitem__(self, i):
        return self.stack[i]

    def __delitem__(self, i) -> None:
        del self.stack[i]

    def __iter__(self):
        return iter(self.stack)


# The nn.Module calls in progress while a tracer is installed, outermost first, per thread
# (nn.Module's __call__ keeps it; engines/torch/hooks.py on PyTorch): an analysis names a
# module's ops by its path in the outermost one.
MODULES = _ModuleCalls()
# What answers ``module_calls()`` instead of ``MODULES`` while an engine that keeps no such list
# is observed (``--engine torch``: engines/torch/hooks.py reads the thread's frames), or None.
MODULE_CALLS = [None]
# How many observers of another engine count its optimizers' steps in ``STEPPING`` now
# (engines/torch/hooks.py, while its global step hooks are installed): with one, every step
# running is counted (autodiag's optimizers always count theirs).
FOREIGN_STEPS_COUNTED = [0]
# What an engine quiets in a process the script forks while it runs, beside ``TRACERS`` (NOTE
# [Forked children] in target/script.py): callables, run in the child.
QUIET_IN_CHILD: list = []


def module_calls() -> list:
    """This thread's nn.Module calls in progress, outermost first: ``MODULES.stack`` on
    autodiag's engine; on an observed engine, what it says when asked (NOTE [Modules from
    frames] in engines/torch/hooks.py). For an analysis that needs them at a few ops only."""
    calls = MODULE_CALLS[0]
    return MODULES.stack if calls is None else calls()


# The sequence number the next graph node gets: nodes made during an op are numbered from the
# mark taken before it on.
_next_seq = _seq_counter.__next__
# The Tensor class: tensor.py, a layer above, binds it (core.bindings.bind_tensor_type).
_Tensor: type = type(None)


# Per event, the installed tracers that override it (a tracer that ignores an event costs
# nothing for it: ``on_save`` work is skipped entirely when nobody listens). Rebuilt on install.
LISTENERS: dict = {}
_EVENTS = (
    "on_op",
    "on_save",
    "on_inplace",
    "on_backward_begin",
    "on_node_backward",
    "on_backward_end",
    "on_optimizer_step",
    "on_step",
)


def _listens(tracer, event: str) -> bool:
    if event in getattr(tracer, "__dict__", ()):  # a hook set on the instance
        return True
    for klass in type(tracer).__mro__:
        if event in klass.__dict__:
            # the base class's no-op does not count (it is the last class defining the event)
            return not getattr(klass.__dict__[event], "__autodiag_noop__", False)
    return False


def _rebuild() -> None:
    for ev in _EVENTS:
        LISTENERS[ev] = tuple(t for t in TRACERS if _listens(t, ev))


def install(tracer) -> None:
    TRACERS.append(tracer)
    _rebuild()


def uninstall(tracer) -> None:
    for i in range(len(TRACERS) - 1, -1, -1):
        if TRACERS[i] is tracer:
            del TRACERS[i]
            break
    _rebuild()


def _note_saving_result(out) -> None:
    """The untraced call of a wrapped op: if its result's node saves tensors, remember the user's
    line on it (NOTE [Saving sites] in core/graph.py)."""
    if out.__class__ is _Tensor:
        node = out.grad_fn
        if node is not None and node._saved is not None:
            note_saver(node, 3)


def traced(name: str, fn):
    """Wrap a public op so that, while a tracer is installed, its calls are reported."""

    def op(*args, **kwargs):
        if not TRACERS:
            out = fn(*args, **kwargs)
            _note_saving_result(out)
            return out
        if _depth.n:
            return fn(*args, **kwargs)
        # call_traced, inlined (one frame less per op, and stacks start one frame closer)
        mark = _next_seq()
        _depth.n += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            _depth.n -= 1
        emit_op(name, _tensors_in(args, kwargs), out, mark, 3)
        return out

    functools.update_wrapper(op, fn)
    op.__autodiag_op__ = name
    return op


def traced_binary(name: str, fn):
    """``traced`` for an operator method of fixed arity ``(self, other)`` (cheaper call)."""

    def method(self, other):
        if not TRACERS:
            out = fn(self, other)
            _note_saving_result(out)
            return out
        if _depth.n:
            return fn(self, other)
        # call_traced, inlined: operators are the most frequent ops of all
        mark = _next_seq()
        _depth.n += 1
        try:
            out = fn(self, other)
        finally:
            _depth.n -= 1
        emit_op(name, (self, other) if isinstance(other, _Tensor) else (self,), out, mark, 3)
        return out

    functools.update_wrapper(method, fn)
    return method


def self_traced(name: str, op):
    """Name ``op``, an op that checks ``TRACERS`` itself and reports through ``call_traced``,
    as the public op ``name``: the registry then uses it as it is, with no ``traced`` wrapper."""
    op.__name__ = op.__qualname__ = name
    op.__autodiag_op__ = name
    return op


def call_traced_binary(name: str, fn, a, b):
    """``call_traced(name, fn, (a, b), None)`` for the binary operators, whose tensor inputs
    are found without the generic walk (the common case: a tensor and a tensor or a number)."""
    mark = _next_seq()
    _depth.n += 1
    try:
        out = fn(a, b)
    finally:
        _depth.n -= 1
    if a.__class__ is _Tensor:
        bc = b.__class__
        if bc is _Tensor:
            inputs = (a, b)
        elif bc is float or bc is int:
            inputs = (a,)
        else:
            inputs = _tensors_in((a, b), None)
    else:
        inputs = _tensors_in((a, b), None)
    emit_op(name, inputs, out, mark)
    return out


def call_traced(name: str, fn, args: tuple, kwargs: dict | None):
    """Call the op ``fn`` and report it: for ops that check ``TRACERS`` themselves (the hot
    operators) rather than through a ``traced`` wrapper."""
    mark = _next_seq()
    _depth.n += 1
    try:
        out = fn(*args, **kwargs) if kwargs else fn(*args)
    finally:
        _depth.n -= 1
    emit_op(name, _tensors_in(args, kwargs), out, mark)
    return out


_AFTER_LEAVES = 1 << 62  # AccumulateGrad's sequence number: never an op's own node


def emit_op(name: str, inputs: tuple, out, mark: int, skip: int = 4) -> None:
    """Report one op: ``name``, the node it recorded (None if none), its tensor inputs/outputs.
    ``skip``: frames from here to the caller of the op's wrapper."""
    REPORTED[0] += 1
    seq = 0  # the node's sequence number (read once: a node's attribute reads are slow)
    if out.__class__ is _Tensor:  # the common case, without the generic walk
        outputs = (out,)
        fn = out.grad_fn
        node = None
        if fn is not None:
            seq = fn._seq
            if mark <= seq < _AFTER_LEAVES:
                node = fn
    else:
        # an op returning no tensor may still have recorded a node: ``t[i] = x`` gives ``t``
        # a CopySlices node, so its first input is looked at too
        outputs = _tensors_in((out,), None)
        node = None
        for o in outputs if out is not None else inputs[:1]:
            fn = o.grad_fn
            if fn is not None and mark <= fn._seq < _AFTER_LEAVES:
                node = fn
                seq = fn._seq
                break
    stack = capture_stack(skip)
    if node is not None:
        if seq == mark + 1:
            # the op recorded this one node only (sequence numbers): ``node._trace = stack``,
            # inlined for a node with no other extra (NOTE [Stack for extras] in core/graph.py)
            x = node._x
            if x is None or x.__class__ is Stack:
                node._x = stack
            else:
                node._trace = stack
        else:
            _mark_new_nodes(node, mark, stack)
    for t in LISTENERS["on_op"]:
        t.on_op(name, node, inputs, outputs, stack)
    if node is not None and LISTENERS["on_save"]:
        saved = node._saved
        if saved:
            _emit_saves(node, saved, outputs)


def new_nodes(node, above: int) -> list:
    """The nodes reachable from ``node`` numbered above ``above``, each once: the nodes an op
    recorded, its own and those of ops it called internally (cross_entropy's
    LogSoftmaxBackward0). The walk stops at older nodes and at AccumulateGrad."""
    found = []
    seen = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n.__class__ is tuple:
            n = n[0]
        s = n._seq
        if not above < s < _AFTER_LEAVES or s in seen:
            continue
        seen.add(s)
        found.append(n)
        todo.extend(e for e in n._next if e is not None)
    return found


def _mark_new_nodes(node, mark: int, stack) -> None:
    """Give every node this op recorded the user's stack (graph and anomaly reports read
    ``node._trace``): those numbered from ``mark`` on."""
    for n in new_nodes(node, mark - 1):
        n._trace = stack


def _emit_saves(node, saved: tuple, outputs) -> None:
    by_data = None  # id(array) -> output, made only for a saved output (mul by a number saves
    # the number alone: nothing to report)
    for s in saved:
        if s.__class__ is _Tensor or isinstance(s, _Tensor):
            t = s
        elif s.__class__ is SavedTensor:
            t = s.tensor
            if t is None:
                if by_data is None:
                    by_data = {id(o._data): o for o in outputs}
                t = by_data.get(id(s.data))
        else:
            continue
        if t is not None:
            for tr in LISTENERS["on_save"]:
                tr.on_save(node, t)


def emit_inplace(tensor, op_name: str) -> None:
    if LISTENERS["on_inplace"]:
        stack = capture_stack(3)
        for t in LISTENERS["on_inplace"]:
            t.on_inplace(tensor, op_name, stack)


def emit_backward_begin(call) -> None:
    REPORTED[1] += 1
    for t in LISTENERS["on_backward_begin"]:
        t.on_backward_begin(call)


def emit_backward_end(call) -> None:
    for t in LISTENERS["on_backward_end"]:
        t.on_backward_end(call)


def emit_optimizer_step(optimizer) -> None:
    REPORTED[2] += 1
    for t in LISTENERS["on_optimizer_step"]:
        t.on_optimizer_step(optimizer)


def emit_step() -> None:
    for t in LISTENERS["on_step"]:
        t.on_step()


def _tensors_in(args, kwargs) -> tuple:
    """The Tensors among an op's arguments or results (one level into lists/tuples)."""
    T = _Tensor
    if not kwargs and len(args) == 1 and isinstance(args[0], T):
        return args  # a unary op or a method without arguments
    found = []
    for a in args:
        if isinstance(a, T):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend(x for x in a if isinstance(x, T))
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, T):
                found.append(a)
    return tuple(found)


_rebuild()


__all__ = ["TRACERS", "Stack", "install", "uninstall", "traced", "traced_binary"]
