"""``anomaly --engine torch``: NaN/Inf origins in a PyTorch program, found by the observer
(``engines/torch/observe.py``) and reported as ``analysis/anomaly.py`` reports them on autodiag's
engine (the same ``_Origin`` records, hence the same findings and JSON).

*Forward*: the function mode hands every outermost call to ``torch_op``; a float output is
tested for NaN/Inf, and one that has them while the op's inputs had none is an origin (the user's
line and stack from ``capture_stack``). *Backward*: when a ``backward()``/``autograd.grad()``
call begins, every node of its graph not hooked yet gets ``Node.register_hook`` (one walk per
node's life: a hooked node's inputs were hooked with it); the hook tests the gradients the node
sends on, and a NaN/Inf among them while those it received were finite is an origin, located at
the line that created the node (``seam.SITE``).

NOTE [Torch anomaly cost]
The test must be cheap and never miss. ``t.sum()`` is non-finite whenever an element is NaN or
±inf (NaN survives a sum, and so does an infinity, or inf - inf makes NaN), so a finite sum
proves a finite tensor; only a sum that overflowed can be non-finite for finite elements, which
the exact count (``isnan``/``isinf``, run only then) sorts out. One reduction and one ``item()``
cost a fraction of ``isfinite(t).all()`` (which allocates a mask: ~4x slower on an MLP
activation, ~30x on a weight). One-element tensors are read directly. Ops that cannot make a
NaN/Inf from finite inputs (views, ``relu``, ``sigmoid``; ``SAFE_OPS``) are not tested unless
an input is already known to hold them. The hook holds nothing of its node (it would make a
reference cycle through C++): when a test fails, the node is asked of
``torch._C._current_autograd_node()``; the hooks die with their nodes.

What is not seen: ops inside ``torch.compile`` regions (tested as the region's outputs only),
gradients computed inside C++ without a graph node (fused kernels count as one node), and the
ops of other threads.
"""

from __future__ import annotations

import math
import weakref

import torch

from autodiag.analysis.anomaly import (
    SAFE_OPS,
    AnomalyFinder,
    _Origin,
    stats,
)
from autodiag.engines.torch import seam
from autodiag.trace import StopRun
from autodiag.trace.per_thread import PerThread
from autodiag.trace.sites import capture_stack

_Tensor = torch.Tensor
_isfinite = math.isfinite
_ACCUMULATE = seam.ACCUMULATE
_HOOKED = "autodiag.anomaly"  # node.metadata key: the node has our hook
_TAINTED = "autodiag.tainted"  # node.metadata key: its forward output held NaN/Inf
_current_node = seam.current_node

# PyTorch's operator methods -> the op names autodiag's engine reports (``ops/operators.py``)
_OPERATORS = {
    "__add__": "add",
    "__radd__": "add",
    "__sub__": "sub",
    "__rsub__": "rsub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__truediv__": "div",
    "__rtruediv__": "div",
    "__div__": "div",
    "__rdiv__": "div",
    "__floordiv__": "floor_divide",
    "__rfloordiv__": "floor_divide",
    "__mod__": "remainder",
    "__pow__": "pow",
    "__rpow__": "pow",
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__neg__": "neg",
    "__abs__": "abs",
}


def op_name(name: str) -> str:
    """The name autodiag's engine gives the op PyTorch calls ``name``."""
    return _OPERATORS.get(name, name)


def finite(t) -> bool:
    """Whether a float tensor holds no NaN/Inf (NOTE [Torch anomaly cost]); may say False for
    a finite tensor whose sum overflowed: ``kinds`` confirms."""
    if t.numel() == 1:
        return _isfinite(t.item())
    return _isfinite(t.sum().item())


def kinds(t) -> tuple[int, int]:
    """(number of NaN, number of ±inf) in ``t``."""
    return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def as_array(t):
    """A tensor's values as a numpy array (for the report's statistics)."""
    t = t.detach().cpu()
    if t.layout != torch.strided:
        t = t.to_dense()  # a sparse tensor: the values it stands for
    t = t.resolve_conj().resolve_neg()
    if t.dtype is torch.bfloat16:
        t = t.float()  # numpy has no bfloat16
    try:
        return t.numpy()
    except (RuntimeError, TypeError):
        return t.float().numpy()


def _tstats(t):
    return stats(as_array(t)) if t is not None else None


def tensors_in(args, kwargs) -> list:
    """The tensors among a call's arguments (one level into lists and tuples)."""
    found = []
    for a in args:
        if isinstance(a, _Tensor):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend(x for x in a if isinstance(x, _Tensor))
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, _Tensor):
                found.append(a)
    return found


class TorchAnomalyFinder(AnomalyFinder):
    """``AnomalyFinder`` for a script on real PyTorch: the observer calls ``torch_op`` for each
    op and ``on_backward_begin``/``on_backward_end`` for each backward call; ``findings`` is
    the base class's."""

    def __init__(self, keep_going: bool = False, forward: bool = True, backward: bool = True):
        super().__init__(keep_going, forward, backward)
        # [call, number, found a NaN/Inf gradient] in progress, per thread: an op of one thread
        # while another is in backward is a forward op (trace/per_thread.py)
        self._bw = PerThread()
        self._hook = self._node_hook  # one bound method for every node
        self._token = object()  # node.metadata[_HOOKED]: hooked by this finder (not another's)
        # a list to keep each node hook's handle in, for a caller that must remove them when it
        # ends (autodiag.torch.observe: a graph kept past its block keeps no hook of ours);
        # None (the CLI): the hooks die with their nodes
        self.handles: list | None = None
        self._prune_at = 1024

    @property
    def _calls(self) -> list:
        return self._bw.tasks

    # --- forward --------------------------------------------------------------------------

    def torch_op(self, name, args, kwargs, out, made) -> None:
        """An outermost op of the script ran (``observe.Observer.after_op``)."""
        if self._bw.tasks:
            return  # inside backward (a custom Function's, create_graph): a gradient
        if self._pending:  # NOTE [Masked origins]
            self._torch_uses(op_name(name), args, kwargs, out)
        if out.__class__ is _Tensor:
            if not out.dtype.is_floating_point:
                return
            outputs = (out,)
        elif isinstance(out, (tuple, list)):
            outputs = [o for o in out if isinstance(o, _Tensor) and o.dtype.is_floating_point]
            if not outputs:
                return
        elif isinstance(out, _Tensor):
            if not out.dtype.is_floating_point:
                return
            outputs = (out,)
        else:
            return
        if name in SAFE_OPS:
            bad = self._bad
            if not bad:
                return
            for t in tensors_in(args, kwargs):
                rec = bad.get(id(t))
                if rec is not None and rec[0]() is t:
                    break
            else:
                return
        for o in outputs:
            try:
                if o.numel() == 1:
                    if _isfinite(o.item()):
                        continue
                elif _isfinite(o.sum().item()):
                    continue
            except (RuntimeError, NotImplementedError, TypeError):
                continue  # a tensor without values (meta, a subclass that refuses): not seen
            if self.check_forward:
                self._torch_forward(op_name(name), args, kwargs, o)

    def _torch_uses(self, op, args, kwargs, out) -> None:
        """``AnomalyFinder._uses`` for a PyTorch op: its result, or for an in-place op that
        returns nothing (``x[mask] = 0``), the tensor it wrote."""
        if isinstance(out, _Tensor):
            outputs = [out]
        elif isinstance(out, (tuple, list)):
            outputs = [o for o in out if isinstance(o, _Tensor)]
        else:
            outputs = []
        if not outputs and args and isinstance(args[0], _Tensor):
            outputs = [args[0]]
        self._uses(op, tensors_in(args, kwargs), outputs)

    def _torch_forward(self, op, args, kwargs, out) -> None:
        n_nan, n_inf = kinds(out)
        if not (n_nan or n_inf):
            return  # a sum that overflowed: finite after all
        node = out.grad_fn
        key = self._judge(
            op, tensors_in(args, kwargs), out, n_nan, n_inf, capture_stack, node is not None
        )
        if node is not None:
            node.metadata[_TAINTED] = key or True

    # AnomalyFinder._judge reads PyTorch's tensors themselves
    _finite = staticmethod(finite)
    _kinds = staticmethod(kinds)
    _stats = staticmethod(_tstats)
    _base = staticmethod(seam.base_of)

    @staticmethod
    def _value(t):
        return t

    def _unseen(self, t) -> bool:
        # ``x.data`` is a new tensor on x's storage, made by an attribute read the observer
        # does not hand on (observe.py): known by its storage
        if self._known_bad(t) is None:
            ptr = _storage_ptr(t)
            if ptr is None:
                return True
            for ref, _, _ in list(self._bad.values()):
                b = ref()
                if b is not None and _storage_ptr(b) == ptr:
                    return False
            return True
        return False

    @staticmethod
    def _floating(t) -> bool:
        return t.dtype.is_floating_point or t.dtype.is_complex

    # --- backward -------------------------------------------------------------------------

    def on_backward_begin(self, task):
        self.calls += 1
        self._calls.append([task, self.calls, False])
        if not self.check_backward:
            return
        todo = []
        for r in task.roots:
            fn = r.grad_fn
            if fn is not None:
                todo.append(fn)
        hook, mark, keep = self._hook, self._token, self.handles
        while todo:
            n = todo.pop()
            if type(n) is _ACCUMULATE:
                continue
            md = n.metadata
            if md.get(_HOOKED) is mark:
                continue  # hooked with everything below it
            md[_HOOKED] = mark
            h = n.register_hook(hook)
            if keep is not None:
                keep.append(h)
            for c, _ in n.next_functions:
                if c is not None:
                    todo.append(c)
        if keep is not None and len(keep) > self._prune_at:
            # forget the handles of nodes that died (their hooks died with them)
            keep[:] = [h for h in keep if h.hooks_dict_ref() is not None]
            self._prune_at = 2 * len(keep) + 1024

    def on_op(self, op, node, inputs, outputs, stack):
        pass  # autodiag's engine's event: PyTorch's ops come through ``torch_op``

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        pass  # autodiag's engine's event: PyTorch's nodes report through ``_node_hook``

    def _node_hook(self, grad_inputs, grad_outputs):
        """``Node.register_hook``'s hook: ``grad_inputs`` the gradients the node sends on,
        ``grad_outputs`` those it received. Returns None: the gradients are never changed."""
        if not self._calls:
            return
        if self._masked_graph:  # NOTE [Masked origins]: a masked value's node runs
            node = _current_node()
            if node is not None:
                self._confirm_tainted(node.metadata.get(_TAINTED))
        for g in grad_inputs:
            if g is not None and g.dtype.is_floating_point:
                if g.numel() == 1:
                    if _isfinite(g.item()):
                        continue
                elif _isfinite(g.sum().item()):
                    continue
                break
        else:
            return
        node = _current_node()
        if node is not None:
            self._torch_backward(node, grad_outputs, grad_inputs)

    def _torch_backward(self, node, grad_outputs, grad_inputs) -> None:
        entry = self._calls[-1]
        out_nan = 0
        bad_outputs = []
        kids = [c for c, _ in node.next_functions]
        for i, g in enumerate(grad_inputs):
            if g is None or i >= len(kids) or kids[i] is None or not g.dtype.is_floating_point:
                continue
            n_nan, n_inf = kinds(g)
            if n_nan or n_inf:
                bad_outputs.append(i)
                out_nan += n_nan
        if not bad_outputs:
            return
        entry[2] = True
        in_bad = False
        for g in grad_outputs:
            if g is not None and g.dtype.is_floating_point and not finite(g):
                k_nan, k_inf = kinds(g)
                in_bad |= bool(k_nan or k_inf)
        if node.metadata.get(_TAINTED) or in_bad:
            self.propagated_backward += 1
            return
        kind = "nan_backward" if out_nan else "inf_backward"
        trace = seam.site(node)
        where = trace.site if trace is not None else None
        name = node.name()
        key = (kind, name, where, where is None and id(node.metadata))
        origin = self.origins.get(key)
        if origin is not None:
            origin.count += 1
            return
        task = entry[0]
        detail = {
            "node": name,
            "incoming": [_tstats(g) for g in grad_outputs],
            "outgoing": [_outgoing(kids[i], i, grad_inputs[i]) for i in bad_outputs],
            "path": _path(task, node),
            "call": "backward" if task.accumulate else "grad",
        }
        self.origins[key] = _Origin(kind, key, name, trace, entry[1], detail)

    def on_backward_end(self, task):
        if not self._calls or self._calls[-1][0] is not task:
            return
        _, number, found = self._calls.pop()
        if found and not self.keep_going and not self._calls and self.check_backward:
            # the gradients are in .grad, but the optimizer step does not run
            self.stopped_at = number
            task.roots = task.inputs = None  # the observer's clean-up after this event is skipped
            raise StopRun


def _outgoing(child, i: int, g) -> dict:
    out = {"input": i, "to": child.name() if child is not None else None, "grad": _tstats(g)}
    if type(child) is _ACCUMULATE:
        v = child.variable
        if v is not None:
            out["_leaf"] = weakref.ref(v)  # named at the end, from the namespace
    return out


def _path(task, target) -> list[str]:
    """Node names from a root of ``task`` down to ``target`` (shortest path, iterative BFS;
    nodes compared by their ``metadata``, which lives as long as the C++ node)."""
    goal = target.metadata
    parent: dict = {}
    frontier = []
    for r in task.roots or ():
        fn = r.grad_fn
        if fn is not None and id(fn.metadata) not in parent:
            parent[id(fn.metadata)] = (fn, None)
            frontier.append(fn)
    keep = []  # the metadata dicts whose ids are keys: alive for the walk
    while frontier:
        nxt = []
        for n in frontier:
            md = n.metadata
            keep.append(md)
            if md is goal:
                names = []
                k = id(md)
                while k is not None:
                    node, k = parent[k]
                    names.append(node.name())
                return names[::-1]
            for c, _ in n.next_functions:
                if c is None:
                    continue
                cm = c.metadata
                keep.append(cm)
                if id(cm) not in parent:
                    parent[id(cm)] = (c, id(md))
                    nxt.append(c)
        frontier = nxt
    return [target.name()]


def _storage_ptr(t) -> int | None:
    """The address of ``t``'s storage, or None for a tensor without one (meta, sparse)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
