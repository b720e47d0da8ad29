"""The events ``observe.py``'s function mode does not see, for the analyses that listen to them
(``check``'s gradient health, ``trace``'s backward walk-through), from PyTorch's public hooks:

* ``on_node_backward(node, grad_outputs, grad_inputs)``: at each ``backward()``/
  ``autograd.grad()`` call, ``Node.register_hook`` on every node of the call's graph (an
  iterative walk from its roots), removed when the call ends, so a graph kept with
  ``retain_graph`` never reports twice. A node's post hook runs after it ran: for a leaf's
  ``AccumulateGrad``, once ``.grad`` holds the sum. Gradients are handed on as the tensors they
  are, as autodiag's engine hands them under ``create_graph`` (an analysis reads their values
  through ``inspect.values``: a view of a CPU tensor's memory, made only if it looks).
* ``on_optimizer_step(optimizer)``: the global optimizer step post hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``): every optimizer, built in or
  the script's own subclass.
* ``events.module_calls()``: each thread's ``nn.Module`` calls in progress, read from its frames
  when asked (NOTE [Modules from frames]), so an analysis names a relu by its module path
  (``model.1``) as on autodiag's engine.

Each is installed only when some tracer listens (``installed``); each steps aside while
``torch.compile`` traces (a compiled region is one node at the line that called it).

What a hook cannot see: nodes of graphs that C++ runs without the Python hooks (the backward of a
compiled region runs as its one ``CompiledFunctionBackward`` node), and gradients that
``torch.func`` transforms compute (no autograd nodes run).
"""

from __future__ import annotations

import contextlib
import functools
import sys

import torch
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer

from autodiag.engines.torch import seam
from autodiag.trace import events

_is_compiling = torch.compiler.is_compiling

# NOTE [Listeners' own reads]: PyTorch runs a node's hook and the optimizer step hook with the
# script's function modes active, observe.py's among them: a listener that reads a gradient or
# a parameter (``t.detach().numpy()``, engines/torch/seam.py) would go through that mode as if
# the script had called it, be reported to every tracer as the script's op, and pay the mode's
# bookkeeping (half of ``check``'s cost on the MLP step, tests/perf/bench_torch_engine.py).
# Listeners run with torch functions' overrides off: what they do is autodiag's, not the
# script's.
_own = seam.own_calls


def _fire(listeners, node, grad_inputs, grad_outputs) -> None:
    # PyTorch's hook names the node's view: grad_inputs are what it sends to its inputs,
    # grad_outputs what it received; the tracer event takes them the other way round
    if _is_compiling():
        return
    with _own():  # NOTE [Listeners' own reads]
        for t in listeners:
            t.on_node_backward(node, grad_outputs, grad_inputs)


def wanted_nodes(listeners: tuple) -> frozenset | None:
    """The node class names ``listeners`` read (a tracer's ``torch_nodes``), None for all."""
    names: set = set()
    for t in listeners:
        mine = getattr(type(t), "torch_nodes", None)
        if mine is None:
            return None
        names |= mine
    return frozenset(names)


def hook_graph(roots, listeners: tuple, wanted: frozenset | None = None) -> list:
    """Hook the nodes of the graph under ``roots`` (tensors) to report to ``listeners``: all
    of them, or those whose class name is in ``wanted``; the handles, to remove when the
    backward call ends. Iterative: a 1,000,000-node chain walks like a small graph."""
    handles = []
    seen = set()
    todo = []
    for r in roots:
        e = seam.gradient_edge(r)
        if e is not None:
            todo.append(e[0])
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        # NOTE: the partial holds the node and the node holds the partial until the handle is
        # removed (at the end of the call, whatever happens): no cycle outlives the call
        if wanted is None or type(node).__name__ in wanted:
            handles.append(node.register_hook(functools.partial(_fire, listeners, node)))
        todo.extend([c for c, _ in node.next_functions if c is not None and c not in seen])
    return handles


def remove(handles: list) -> None:
    for h in handles:
        h.remove()
    handles.clear()


# NOTE [Optimizer internals]: the ops an optimizer's step() runs on its parameters (``p.add_``,
# ``buf.mul_``, under no_grad) are not the script's: autodiag's engine does not report its
# optimizers' arithmetic either, and an analysis would take ``p.add_`` for a use of ``p`` under
# no_grad (the anomaly finder, for a NaN/Inf origin that autodiag's engine never reports; and
# a finiteness test of every parameter and momentum buffer at every step). While a step runs
# (``STEPPING``, from the global step pre and post hooks), ops with grad disabled are reported
# neither to the ``on_op`` listeners nor to the ``torch_op`` watchers; a closure's forward and
# backward (LBFGS runs it under enable_grad) still are. A step that raises skips the post hook:
# the count stays up, and no-grad ops stay unreported until the run ends (the script has failed
# by then, as a rule).
# Counted per thread: a step running in one thread says nothing about another thread's ops.
STEPPING = events.STEPPING  # the count autodiag's own optimizers keep on its engine


def _optimizer_stepping(optimizer, args, kwargs) -> None:
    if not _is_compiling():
        STEPPING.n += 1


def _optimizer_stepped(listeners, optimizer, args, kwargs) -> None:
    if _is_compiling():
        return
    STEPPING.n = max(0, STEPPING.n - 1)
    events.REPORTED[2] += 1
    with _own():  # NOTE [Listeners' own reads]
        for t in listeners:
            t.on_optimizer_step(optimizer)


# NOTE [Modules from frames]: the modules running in a thread are the ``self`` of its frames of
# ``nn.Module._call_impl`` (every ``module(x)`` runs one; ``module.forward(x)`` called directly
# runs none, and no module hook would see it either). Read from the frames when an analysis
# asks (``dead_relu``, at each relu op), not kept by global module forward hooks: with a global
# hook installed, PyTorch takes the slow path of ``_call_impl`` for every module call of the
# run (a closure, hook lists, a set per call: 0.02-0.05 ms of a 1.9 ms MLP step with two empty
# global hooks, 6 module calls), to keep a list that is read at a few ops. Per thread by
# construction. A compiled region runs no such frames: its ops are not reported either.
_CALL_IMPL = _module.Module._call_impl.__code__


def module_calls() -> list:
    """This thread's ``nn.Module`` calls in progress, outermost first (NOTE [Modules from
    frames])."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is _CALL_IMPL:
            m = f.f_locals.get("self")
            if m is not None:
                out.append(m)
        f = f.f_back
    out.reverse()
    return out


@contextlib.contextmanager
def installed(op_listeners: tuple, step_listeners: tuple, op_watchers: list | tuple = ()):
    """The global hooks for the ``with`` block: the optimizer step hooks when ``step_listeners``
    listen or ``op_watchers`` (``torch_op``) watch (both miss an optimizer's own arithmetic:
    NOTE [Optimizer internals]); ``events.module_calls()`` read from the frames when
    ``op_listeners`` listen (``observe.ready``; NOTE [Modules from frames])."""
    handles = []
    before = events.MODULE_CALLS[0]
    counted = False
    try:
        if step_listeners or op_watchers:
            stepped = functools.partial(_optimizer_stepped, step_listeners)
            handles.append(_optimizer.register_optimizer_step_pre_hook(_optimizer_stepping))
            handles.append(_optimizer.register_optimizer_step_post_hook(stepped))
            events.FOREIGN_STEPS_COUNTED[0] += 1
            counted = True
        if op_listeners:
            events.MODULE_CALLS[0] = module_calls
        yield
    finally:
        remove(handles)
        if counted:
            events.FOREIGN_STEPS_COUNTED[0] -= 1
        events.MODULE_CALLS[0] = before
        STEPPING.n = 0
