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

from autodiag import _warnings
from autodiag.autograd.anomaly import _state as _anomaly
from autodiag.autograd.anomaly import report_backward_error
from autodiag.core import bindings, grad_mode
from autodiag.core.errors import explain_freed
from autodiag.core.graph import (
    AccumulateGrad,
    Freed,
    check_saved,
    children,
    edge_pair,
    last_write,
    mark_needed,
)
from autodiag.core.zeros import ZeroArray, materialize, materialize_grad
from autodiag.ops._core import ARRAY, TENSOR, edge, fix_shapes, wrap
from autodiag.size import Size
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

    __slots__ = (
        "retain_graph",
        "create_graph",
        "accumulate",
        "targets",
        "captured",
        "needed",
        "execute",
        "leaf_targets",
        "roots",
        "inputs",
        "current",
        "error",
        "freed",
    )

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
        for child in node._edges:
            if child is None:
                continue
            if child.__class__ is tuple:
                child = child[0]
            deps[child] = deps.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return deps


def _sum_with_zero(old, g):
    """Two gradient arrays for one input, one an efficient zero (NOTE [Efficient zero
    gradients] in core/zeros.py), summed as PyTorch's InputBuffer does outside grad mode: an
    ordinary gradient that arrived first is added to in place, which computes ``x + 0.``
    (``-0.`` becomes ``0.``); an efficient zero that arrived first cannot be written, so the
    sum is out of place, ``zero + x``, which is ``x`` (``-0.`` stays). Under create_graph the
    gradients are Tensors, added out of place: ``zero + x`` is ``x``."""
    if old.__class__ is ZeroArray:
        return old + g if g.__class__ is ZeroArray else g
    return materialize(old) + materialize(g)


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
                # before this call. The heap key -seq, not node._seq: no attribute read, and
                # every node passes here. A write by a hook during the call is still caught
                # where the formula reads the tensor.
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
            for child, g in zip(node._edges, outs):
                if child is None:
                    continue
                nr = 0
                if child.__class__ is tuple:  # NOTE [Compact edges]
                    child, nr = child
                if g is not None and (needed is None or child in needed):
                    buf = buffers.get(child)
                    if buf is None:
                        buf = buffers[child] = [None] * child._num_outputs
                    old = buf[nr]
                    if old is None:
                        buf[nr] = g
                    elif old.__class__ is ZeroArray or g.__class__ is ZeroArray:
                        buf[nr] = _sum_with_zero(old, g)
                    else:
                        buf[nr] = old + g
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


# ---------------------------------------------------------------------------------------------
# backward() and autograd.grad(): seed the roots, run ``execute``
# ---------------------------------------------------------------------------------------------

_CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter "
    "and its gradient which can cause a memory leak. We recommend using autograd.grad when "
    "creating the graph to avoid this. If you have to use this function, make sure to reset the "
    ".grad fields of your parameters to None after use to break the cycle and avoid the leak."
)
_warned_create_graph = [False]


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _make_grads(outputs, grad_outputs, create_graph: bool) -> list:
    """Seed gradients: 1 for scalar outputs, else the given ones (shape-checked)."""
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.requires_grad:
                if out._data.size != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if out._data.dtype.kind != "f":
                    raise RuntimeError(
                        f"grad can be implicitly created only for real scalar "
                        f"outputs but got {out.dtype}"
                    )
                seed = np.ones(out._data.shape, dtype=out._data.dtype)
                grads.append(wrap(seed) if create_graph else seed)
            else:
                grads.append(None)
            continue
        if not isinstance(g, Tensor):
            g = wrap(np.asarray(g, dtype=out._data.dtype))
        if g._data.shape != out._data.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of "
                f"{Size(g._data.shape)!r} and output[{i}] has a shape of "
                f"{Size(out._data.shape)!r}."
            )
        if create_graph:
            grads.append(g)
        else:
            d = g._data
            grads.append(d if d.dtype == out._data.dtype else d.astype(out._data.dtype))
    return grads


def _root_edges(outputs):
    edges = []
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        edges.append(edge_pair(edge(out)))
    return edges


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the leaves (or of ``inputs``)."""
    outputs = _as_tuple(tensors)
    if grad_tensors is None:
        grad_tensors = grad_variables
    gts = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(outputs)
    if len(gts) != len(outputs):
        raise RuntimeError(f"got {len(gts)} tensors and {len(outputs)} gradients")
    inputs = _as_tuple(inputs) if inputs is not None else None
    if inputs is not None and len(inputs) == 0:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if create_graph and not _warned_create_graph[0]:
        _warned_create_graph[0] = True
        _warnings.warn(_CREATE_GRAPH_WARNING, UserWarning)
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(outputs)
    grads = _make_grads(outputs, gts, create_graph)
    task = GraphTask(retain_graph, create_graph, accumulate=True, roots=outputs, inputs=inputs)
    if inputs is not None:
        _set_targets(task, edges, inputs, capture=False)
    execute(edges, grads, task)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused=None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
):
    """Gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated).

    >>> import autodiag as torch
    >>> x = torch.tensor(3.0, requires_grad=True)
    >>> torch.autograd.grad(x ** 2, x)
    (tensor(6.),)
    """
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads="
            "True, but got: allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    if is_grads_batched:
        raise NotImplementedError("autodiag: autograd.grad(is_grads_batched=True) is not supported")
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    if len(ins) == 0:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    gos = _as_tuple(grad_outputs) if grad_outputs is not None else (None,) * len(outs)
    if len(gos) != len(outs):
        raise RuntimeError(
            f"grad requires one grad_output per output: got {len(gos)} "
            f"grad_outputs and {len(outs)} outputs"
        )
    for t in ins:
        if not isinstance(t, Tensor):
            raise TypeError(f"grad(): inputs must be Tensors, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(outs)
    grads = _make_grads(outs, gos, create_graph)
    task = GraphTask(retain_graph, create_graph, accumulate=False, roots=outs, inputs=ins)
    _set_targets(task, edges, ins, capture=True)
    execute(edges, grads, task)
    result = []
    for i, (t, g) in enumerate(zip(ins, task.captured)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have "
                    f"been used in the graph. Set allow_unused=True if this is "
                    f"the desired behavior."
                )
            if materialize_grads:
                g = np.zeros(t._data.shape, dtype=t._data.dtype)
        if g is None:
            result.append(None)
        elif isinstance(g, Tensor):
            result.append(_leaving(g))
        else:
            result.append(wrap(np.array(g, dtype=t._data.dtype)))
    return tuple(result)


def _set_targets(task: GraphTask, root_edges, inputs, capture: bool) -> None:
    targets: dict = {}  # (node, input_nr) -> input positions captured there
    leaf_targets = set()
    for i, t in enumerate(inputs):
        if t.grad_fn is None:
            ref = t._acc
            node = ref() if ref is not None else None
            if node is None:
                continue  # the leaf takes part in no graph
            key = (node, 0)
            leaf_targets.add(node)
        else:
            key = (t.grad_fn, t._output_nr)
            if not capture:
                t.retain_grad()
        targets.setdefault(key, []).append(i)
    needed = mark_needed([e[0] for e in root_edges], {k[0] for k in targets})
    task.needed = needed
    # backward(inputs=...) runs the input's own node too (PyTorch marks it needed); grad() only
    # captures there and runs a node only when some gradient must flow on below it.
    task.execute = (
        needed
        if not capture
        else {n for n in needed if any(c is not None and c in needed for c in children(n))}
    )
    task.leaf_targets = leaf_targets
    if capture:
        task.targets = targets
        task.captured = [None] * len(inputs)


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
            outs = fix_shapes(node, outs, meta, xp)
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


# A gradient as the user may hold it: an efficient zero one (NOTE [Efficient zero gradients]
# in core/zeros.py) becomes ordinary zeros.
_leaving = materialize_grad


def _wrap_for_hook(g):
    g = _leaving(g)
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
            g = _leaving(grads[nr])
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


# References to an incoming gradient array inside _accumulate when only the engine holds it:
# execute()'s buffer list, the parameter ``g``, the local ``ga``, and getrefcount's argument.
_ENGINE_REFS = 4


def _grad_order(like: np.ndarray) -> str:
    """The memory order a new ``.grad`` of ``like`` takes, as PyTorch's AccumulateGrad lays it
    out (``obeys_layout_contract`` / ``clone_obey_contract``): the parameter's own strides when
    it is dense (a permutation of a contiguous layout), else C order. ``"K"`` means another
    dense permutation (e.g. a permuted 3-D leaf): numpy's ``empty_like`` reproduces it."""
    flags = like.flags
    if flags.c_contiguous:
        return "C"
    if flags.f_contiguous:
        return "F"
    want = like.itemsize
    for d in sorted(range(like.ndim), key=lambda d: (like.shape[d] < 2, like.strides[d])):
        if like.shape[d] < 2:
            break
        if like.strides[d] != want:
            return "C"  # overlapping or with gaps (a strided view): contiguous, as PyTorch
        want *= like.shape[d]
    return "K"


def _in_layout(a: np.ndarray, like: np.ndarray, order: str) -> bool:
    if order == "C":
        return a.flags.c_contiguous
    if order == "F":
        return a.flags.f_contiguous
    return a.strides == like.strides


def _new_grad(g, like: np.ndarray) -> np.ndarray:
    """A copy of ``g`` with ``like``'s dtype, in the layout of ``_grad_order(like)``.
    NOTE: a gradient in another layout than its parameter (``x @ w.T`` hands ``w`` a
    Fortran-ordered one through TBackward0) makes every later elementwise update of the
    parameter (``p -= lr * p.grad``, the optimizers, accumulation) several times slower; one
    transposing copy here is the only price, paid once, for every leaf."""
    order = _grad_order(like)
    if order != "K":
        return np.array(g, dtype=like.dtype, order=order, copy=True)
    out = np.empty_like(like)
    np.copyto(out, g, casting="unsafe")
    return out


def _stealable(a: np.ndarray, like: np.ndarray) -> bool:
    """``a`` has ``like``'s dtype, shape and gradient layout (``_grad_order``), and its memory
    is visible only through it: it owns its memory, or it is a view (e.g. TBackward0's
    transpose) of a base nothing else references (the view's pointer and getrefcount's
    argument)."""
    if a.__class__ is not np.ndarray or a.dtype != like.dtype or a.shape != like.shape:
        return False
    if not a.flags.writeable or not _in_layout(a, like, _grad_order(like)):
        return False
    base = a.base
    return base is None or (
        base.__class__ is np.ndarray and base.base is None and sys.getrefcount(base) <= 3
    )


def _accumulate(node: AccumulateGrad, g, task: GraphTask, xp) -> None:
    var = node.variable
    if g is None:
        return
    g = _leaving(g)
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
            # argument, this frame). Otherwise copy, in the leaf's layout: the same array may
            # reach several leaves (``a + b`` hands one gradient to both) or be the user's own
            # ``gradient=`` tensor.
            if ga is g and sys.getrefcount(g) <= _ENGINE_REFS and _stealable(ga, var._data):
                var._grad = wrap(ga)
            else:
                var._grad = wrap(_new_grad(ga, var._data))
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
        outs = fix_shapes(node, outs, meta, ARRAY)
    res = tuple(None if o is None else wrap(np.asarray(o)) for o in outs)
    return res[0] if len(res) == 1 else res


bindings.bind_engine(backward, call_node_directly)  # Tensor.backward, grad_fn(g) (NOTE [Layers])
