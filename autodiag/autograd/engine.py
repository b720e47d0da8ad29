"""The backward engine: iterative, dependency-counted, in PyTorch's execution order.

1. Walk the graph from the roots (explicit stack, never recursion) counting, for every node, how
   many edges point at it.
2. With ``inputs`` (``autograd.grad`` or ``backward(inputs=...)``), mark the nodes that lie on a
   path to an input; others are not run.
3. Run ready nodes (all incoming gradients summed) from a heap keyed by creation order, newest
   first, as PyTorch's CPU ready queue does; ``AccumulateGrad`` nodes come first.

Per node, hooks run in PyTorch's order: tensor hooks, retain_grad, node pre-hooks, the backward
formula, gradient shape/dtype fix-up (``_input_meta``), node post-hooks.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import sys

import numpy as np

from autodiag.autograd import grad_mode
from autodiag.autograd.anomaly import _state as _anomaly
from autodiag.autograd.anomaly import report_backward_error
from autodiag.autograd.errors import explain_freed
from autodiag.autograd.graph import AccumulateGrad, Freed, check_saved, children, last_write
from autodiag.ops._core import ARRAY, TENSOR, sum_to_array, wrap
from autodiag.tensor import Tensor
from autodiag.trace import events
from autodiag.trace.sites import user_code_site

_new_freed = object.__new__
# Backward calls so far (``execute`` runs one per backward()/autograd.grad() call; the target
# runner counts a script's calls from 0): the number the "second time" error gives a call.
backward_calls = [0]

_state = grad_mode._state


class GraphTask:
    """Options and results of one backward call."""

    __slots__ = ("retain_graph", "create_graph", "accumulate", "targets", "captured", "needed",
                 "execute", "leaf_targets", "roots", "inputs", "current", "error", "freed")

    def __init__(self, retain_graph, create_graph, accumulate, roots=(), inputs=None):
        self.roots = roots  # the tensors backward starts from (for tracers)
        self.inputs = inputs  # autograd.grad's inputs / backward(inputs=...), or None
        self.retain_graph = retain_graph
        self.create_graph = create_graph
        self.accumulate = accumulate
        self.targets = None  # {(node, nr): [input positions]} for autograd.grad
        self.captured = None
        self.needed = None  # set of nodes that receive gradients, or None for all
        self.execute = None  # the subset of ``needed`` whose backward runs (the rest capture)
        self.leaf_targets = None  # AccumulateGrad nodes allowed to accumulate (inputs=...)
        self.current = None  # the node being run (kept only while tracing, for tracers)
        self.error = None  # the exception that ended the call (seen by on_backward_end)
        self.freed = None  # without retain_graph: what the nodes it runs are freed to (a Freed)


def _count_dependencies(roots) -> dict:
    deps: dict = {}
    # a node may be listed twice (backward on two outputs of one split): walk it once
    stack = list({n: None for n in roots if n is not None})
    seen = set(stack)
    while stack:
        node = stack.pop()
        for child in node._next:
            if child is None:
                continue
            if child.__class__ is tuple:
                child = child[0]
            deps[child] = deps.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return deps


def _mark_needed(roots, target_nodes: set) -> set:
    """Nodes on some path from a root to a target node (iterative post-order)."""
    needed = set()
    done = set()
    stack = [(n, False) for n in roots if n is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            if node in target_nodes or any(c in needed for c in children(node)
                                           if c is not None):
                needed.add(node)
            done.add(node)
            continue
        if node in done:
            continue
        stack.append((node, True))
        for child in children(node):
            if child is not None and child not in done:
                stack.append((child, False))
    return needed


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b



def execute(root_edges, root_grads, task: GraphTask) -> None:
    create_graph = task.create_graph
    xp = TENSOR if create_graph else ARRAY
    root_nodes = [e[0] for e in root_edges]
    call = backward_calls[0] = backward_calls[0] + 1
    if not task.retain_graph:
        task.freed = _freed_marker(call, root_nodes)
    deps = _count_dependencies(root_nodes)
    needed = task.needed
    buffers: dict = {}
    for (node, nr), g in zip(root_edges, root_grads):
        if node is None:
            continue
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * node._num_outputs
        buf[nr] = _add(buf[nr], g)
    heap = []
    # NOTE: ties (only AccumulateGrad nodes share a sequence number) pop in push order, never by
    # id(): memory addresses made the order of sibling leaves' hooks vary from run to run.
    # PyTorch's std::priority_queue agrees for up to three ready leaves; beyond that its order
    # follows libstdc++'s heap layout, which autodiag does not emulate.
    tick = itertools.count().__next__
    pushed = set()
    for node in root_nodes:
        if node is not None and deps.get(node, 0) == 0 and node not in pushed:
            pushed.add(node)
            heapq.heappush(heap, (-node._seq, tick(), node))

    tracing = bool(events.TRACERS)  # NOTE [Tracing cost]: one check per backward call
    if tracing:
        events.emit_backward_begin(task)
        # the per-node event, dispatched here without a call in between
        node_listeners = events.LISTENERS["on_node_backward"]
    prev_mode = _state.record
    _state.record = create_graph
    written = last_write[0]  # a local: compared on every node
    node = None
    try:
        while heap:
            key, _, node = heapq.heappop(heap)
            if key > written and (task.execute is None or node in task.execute):
                # NOTE [Version checks at backward]: a node older than the last in-place write
                # before this call. The heap key -seq, not node._seq: an attribute read of a
                # node is slow (Node.__getattr__ defeats CPython's attribute caches), and every
                # node passes here. A write by a hook during the call is still caught where the
                # formula reads the tensor.
                check_saved(node)
            grads = buffers.pop(node, None)
            if grads is None:
                grads = [None] * node._num_outputs
            if node.__class__ is AccumulateGrad:
                if tracing:
                    task.current = node
                    _accumulate(node, grads[0], task, xp)
                    for t in node_listeners:
                        t.on_node_backward(node, grads, ())
                else:
                    _accumulate(node, grads[0], task, xp)
                continue
            if tracing:
                # anomaly mode's NaN/Inf check is a tracer (autograd/anomaly.py): it may raise
                task.current = node
                outs = _run_node(node, grads, task, xp)
                for t in node_listeners:
                    t.on_node_backward(node, grads, outs)
            else:
                outs = _run_node(node, grads, task, xp)
            for child, g in zip(node._next, outs):
                if child is None:
                    continue
                nr = 0
                if child.__class__ is tuple:  # NOTE [Compact edges]
                    child, nr = child
                if g is not None and (needed is None or child in needed):
                    buf = buffers.get(child)
                    if buf is None:
                        buf = buffers[child] = [None] * child._num_outputs
                    buf[nr] = g if buf[nr] is None else buf[nr] + g
                d = deps[child] - 1
                deps[child] = d
                if d == 0 and (needed is None or child in needed):
                    heapq.heappush(heap, (-child._seq, tick(), child))
            outs = g = None  # NOTE [Gradient stealing]: drop our references before the leaves run
    except Exception as e:
        task.error = e
        info = getattr(e, "autodiag_freed", None)
        if info is not None and info.call is None:
            # the error of a node an earlier call freed: say how this call got there (best
            # effort: should the explanation fail, PyTorch's error stands as raised)
            with contextlib.suppress(Exception):
                explain_freed(e, call, root_nodes)
        if _anomaly[0] and node is not None:
            # PyTorch's anomaly mode: warn with the forward stack of the failing node
            report_backward_error(node, e)
        raise
    finally:
        _state.record = prev_mode
        if tracing:
            task.current = None
            events.emit_backward_end(task)


def _freed_marker(call: int, root_nodes) -> Freed:
    """The marker the call's nodes get when it frees them (NOTE [Freed graphs]): the call's
    number, the user's line that made it (execute's caller outwards), the newest node of its
    graph (roots are newer than everything below them)."""
    m = _new_freed(Freed)  # no __init__ frame: this runs once per backward call
    m.call = call
    m.code, m.lasti = user_code_site(3) or (None, -1)
    last = -1
    for n in root_nodes:
        if n is not None and n.__class__ is not AccumulateGrad and n._seq > last:
            last = n._seq
    m.last_seq = last
    return m


def _run_node(node, grads, task: GraphTask, xp):
    x = node._x  # NOTE [Node layout]
    hooks = meta = None
    if x is not None:
        hooks, meta = x.hooks, x.input_meta
    execute = task.execute
    if execute is not None:
        # NOTE [Hooks ordering] as in PyTorch's evaluate_function: a node that will run captures
        # its raw incoming gradients (its tensor hooks run later, inside the call); a node that
        # is only a capture point runs its tensor hooks first, captures, and stops there without
        # freeing its buffers.
        if node not in execute:
            if hooks is not None:
                grads = _run_tensor_hooks(hooks, grads, task)
            _capture(task, node, grads)
            return ()
        _capture(task, node, grads)
    if hooks is not None:
        grads = _run_tensor_hooks(hooks, grads, task)
        grads = _run_node_pre_hooks(hooks, grads, task)
    if all(g is None for g in grads):
        outs = (None,) * len(node._next)
    else:
        outs = node._apply(xp, grads)
        if meta is not None:
            outs = _fix_shapes(node, outs, meta, xp)
    if hooks is not None and hooks.post:
        outs = _run_post_hooks(hooks, outs, grads, xp)
    freed = task.freed
    if freed is not None:
        node._release(freed)
    return outs


def _capture(task: GraphTask, node, grads) -> None:
    targets = task.targets
    if targets is not None:
        for nr, g in enumerate(grads):
            for slot in targets.get((node, nr), ()):
                task.captured[slot] = _add(task.captured[slot], g)


def _wrap_for_hook(g):
    return g if g is None or isinstance(g, Tensor) else wrap(g)


def _unwrap_from_hook(g, xp):
    if g is None or not xp.arrays:
        return g
    return g._data if isinstance(g, Tensor) else np.asarray(g)


def _run_tensor_hooks(hooks, grads, task):
    """Tensor.register_hook hooks, then retain_grad (PyTorch's call_tensor_pre_hooks)."""
    xp = TENSOR if task.create_graph else ARRAY
    grads = list(grads)
    for nr, d in hooks.tensor_pre.items():
        for fn in list(d.values()):
            if grads[nr] is None:
                continue
            r = fn(_wrap_for_hook(grads[nr]))
            if r is not None:
                grads[nr] = _unwrap_from_hook(r, xp)
    for nr, ref in hooks.retain.items():
        t = ref()
        if t is not None and grads[nr] is not None:
            g = grads[nr]
            # As PyTorch's retain_grad hook: clone the first gradient, add later ones; under
            # create_graph both are recorded (CloneBackward0 / AddBackward0).
            if task.create_graph:
                gt = g if isinstance(g, Tensor) else wrap(np.asarray(g))
                t._grad = gt.clone() if t._grad is None else t._grad + gt
            elif t._grad is None:
                t._grad = wrap(np.array(_unwrap_from_hook(g, ARRAY)))
            else:
                t._grad = wrap(t._grad._data + _unwrap_from_hook(g, ARRAY))
    return grads


def _run_node_pre_hooks(hooks, grads, task):
    xp = TENSOR if task.create_graph else ARRAY
    for fn in list(hooks.pre.values()):
        r = fn(tuple(_wrap_for_hook(g) for g in grads))
        if r is not None:
            grads = [_unwrap_from_hook(g, xp) for g in r]
    return grads


def _run_post_hooks(hooks, outs, grads, xp):
    for fn in list(hooks.post.values()):
        r = fn(tuple(_wrap_for_hook(g) for g in outs), tuple(_wrap_for_hook(g) for g in grads))
        if r is not None:
            outs = tuple(_unwrap_from_hook(g, xp) for g in r)
    return outs


def _fix_shapes(node, outs, meta, xp):
    """Sum gradients back over broadcast dims and cast to the input dtype (validate_outputs)."""
    fixed = list(outs)
    for i, m in enumerate(meta):
        g = fixed[i]
        if m is None or g is None:
            continue
        shape, dt = m
        if xp.arrays:
            if shape is not None and g.shape != shape:
                g = sum_to_array(g, shape)
            if g.dtype != dt:
                g = g.astype(dt)
        else:
            if shape is not None and tuple(g._data.shape) != shape:
                g = xp.sum_to(g, shape)
            if g._data.dtype != dt:
                from autodiag import dtypes

                g = g.to(dtypes.from_numpy_dtype(dt))
        fixed[i] = g
    return tuple(fixed)


# References to an incoming gradient array inside _accumulate when only the engine holds it:
# execute()'s buffer list, the parameter ``g``, the local ``ga``, and getrefcount's argument.
_ENGINE_REFS = 4


def _stealable(a: np.ndarray, like: np.ndarray) -> bool:
    """``a`` has ``like``'s dtype, shape and layout, and its memory is visible only through it:
    it owns its memory, or it is a view (e.g. TBackward0's transpose) of a base nothing else
    references (the view's pointer and getrefcount's argument)."""
    if a.__class__ is not np.ndarray or a.dtype != like.dtype or a.shape != like.shape:
        return False
    if not a.flags.writeable or a.flags.c_contiguous != like.flags.c_contiguous:
        return False
    base = a.base
    return base is None or (base.__class__ is np.ndarray and base.base is None
                            and sys.getrefcount(base) <= 3)


def _accumulate(node: AccumulateGrad, g, task: GraphTask, xp) -> None:
    var = node.variable
    if g is None:
        return
    if var._hooks:
        for fn in list(var._hooks.values()):
            r = fn(_wrap_for_hook(g))
            if r is not None:
                g = _unwrap_from_hook(r, xp)
    if task.targets is not None:
        for slot in task.targets.get((node, 0), ()):
            task.captured[slot] = _add(task.captured[slot], g)
    if not task.accumulate:
        return
    if task.leaf_targets is not None and node not in task.leaf_targets:
        return
    x = node._x
    hooks = None if x is None else x.hooks
    if hooks is not None and hooks.pre:
        g = _run_node_pre_hooks(hooks, [g], task)[0]
        if g is None:
            return
    if task.create_graph:
        gt = g if isinstance(g, Tensor) else wrap(np.asarray(g))
        var._grad = gt if var._grad is None else var._grad + gt
    else:
        ga = g._data if isinstance(g, Tensor) else g
        if var._grad is None:
            # NOTE [Gradient stealing]: as PyTorch's AccumulateGrad, take the incoming array as
            # the new .grad when nothing else can see it: it owns its memory, has the leaf's
            # dtype and layout, and the only references are the engine's (the buffer list, the
            # argument, this frame). Otherwise copy: the same array may reach several leaves
            # (``a + b`` hands one gradient to both) or be the user's own ``gradient=`` tensor.
            if ga is g and sys.getrefcount(g) <= _ENGINE_REFS and _stealable(ga, var._data):
                var._grad = wrap(ga)
            else:
                var._grad = wrap(np.array(ga, dtype=var._data.dtype, copy=True))
        elif var._grad.grad_fn is not None or var._grad.requires_grad:
            var._grad = wrap(var._grad._data + ga)
        else:
            var._grad._data += ga
    post = var._post_acc_hooks
    if post:
        for fn in list(post.values()):
            fn(var)
    if hooks is not None and hooks.post:
        # AccumulateGrad has no inputs: its post hooks see grad_inputs == ()
        for fn in list(hooks.post.values()):
            fn((), (_wrap_for_hook(g),))


def call_node_directly(node, grads):
    """``grad_fn(g)``: run one node's formula on explicit gradients (no graph walk)."""
    arrays = [g._data if isinstance(g, Tensor) else g for g in grads]
    check_saved(node)
    outs = node._apply(ARRAY, arrays)
    meta = node._input_meta
    if meta is not None:
        outs = _fix_shapes(node, outs, meta, ARRAY)
    res = tuple(None if o is None else wrap(np.asarray(o)) for o in outs)
    return res[0] if len(res) == 1 else res
