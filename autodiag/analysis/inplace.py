"""In-place writes to tensors saved for backward, caught when they happen (``autodiag inplace``).

A node saves tensors for its backward (``on_save``); the saved tensor shares its version counter
with every view and alias of it (NOTE [Version counters]). An in-place write bumps that counter
(``on_inplace``). If a node that saved the tensor is still alive, keeps its saved tensors and has
not run its backward yet, that backward will fail ("modified by an inplace operation") or, with
saved-tensor hooks, compute a wrong gradient: a finding, whether or not backward ever runs.

Findings:

* ``inplace_saved_tensor``: where the tensor was written (op and line), which node saved it and
  where that op ran, the versions, and — when a backward call reached the node — where backward
  needed it, and whether it failed there.
* ``inplace_leaf``: an in-place op on a leaf that requires grad (or a view of one), which
  PyTorch refuses: the script's RuntimeError, reported with its line.

NOTE [Retained saves]: a node whose backward ran with ``retain_graph=True`` keeps its saved
tensors, and a later backward through it checks their versions again. A write after that first
backward is not a hazard by itself (``loss.backward(retain_graph=True); opt.step()`` writes
saved parameters and is fine if no backward follows), so it is recorded with the call that ran
the node (``after_call``) and reported only when a later backward call needs the node.
The same holds for an optimizer step's write (``by_optimizer``) to a tensor that a graph no
backward has run saved: ``val_loss = model(x)`` kept with grad enabled, then the next
``opt.step()``, is a correct program (PyTorch raises only if that graph's backward runs), so
the write is reported once a backward needs the node.
"""

from __future__ import annotations

import threading
import weakref

from autodiag import inspect
from autodiag.analysis.findings import Finding
from autodiag.ops.inplace import LEAF_ERROR, VIEW_OF_LEAF_ERROR
from autodiag.tensor import Tensor
from autodiag.trace import Tracer, events
from autodiag.trace.sites import capture_stack

VERSION_ERROR = "modified by an inplace operation"
SWEEP_EVERY = 10_000  # saves between sweeps of the watch table (entries of dead nodes go)


class _Hazard:
    """One distinct write site x saving site, aggregated over its occurrences."""

    __slots__ = (
        "op",
        "write_stack",
        "node_name",
        "node_ref",
        "nodes",
        "save_stack",
        "saved_version",
        "version",
        "shape",
        "dtype",
        "count",
        "needed_at",
        "needed_call",
        "failed",
        "no_grad",
        "is_output",
        "after_call",
        "by_optimizer",
    )

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class _Calls(threading.local):
    """One thread's backward calls in progress, innermost last: their ``retain_graph``
    (``retaining``, under a base False) and the hazards each needs (``needed``)."""

    def __init__(self):
        self.retaining: list = [False]
        self.needed: list = []


class InplaceWatcher(Tracer):
    """Watches every tensor saved for backward; reports writes that a pending backward needs."""

    def __init__(self):
        # id(version counter) -> (the counter, {id(node): (weakref to node, version at save,
        # saved as the node's output)})
        self._watch: dict = {}
        self._saves = 0
        # nodes whose backward ran and kept their saves (retain_graph=True) -> that call's number:
        # a later write matters only if another backward needs the node (NOTE [Retained saves])
        self._ran = weakref.WeakKeyDictionary()
        # per thread (two threads' backward calls at once are not nested calls): ``retaining``,
        # retain_graph of its backward calls in progress; ``needed``, per call the hazards it needs
        self._here = _Calls()
        self.hazards: dict = {}  # (write site, node name, save site) -> _Hazard
        self.calls = 0

    # --- events ---------------------------------------------------------------------------

    def on_save(self, node, tensor):
        vc = inspect.version_counter(tensor, create=True)
        entry = self._watch.get(id(vc))
        if entry is None:
            entry = self._watch[id(vc)] = (vc, {})
        # keyed by node: a node saving one tensor twice (x * x) is one entry; an id reused by a
        # new node replaces the entry of a dead one
        entry[1][id(node)] = (weakref.ref(node), inspect.version(tensor), tensor.grad_fn is node)
        self._saves += 1
        if self._saves % SWEEP_EVERY == 0:
            self._sweep()

    def on_param_write(self, tensor, op, stack):
        """An optimizer step's write to a parameter (``optim.ParamWriter``): ``on_inplace``,
        reported only if a backward then needs what it modified (NOTE [Retained saves])."""
        self.on_inplace(tensor, op, stack, by_optimizer=True)

    def on_inplace(self, tensor, op, stack, by_optimizer=False):
        vc = inspect.version_counter(tensor)
        entry = self._watch.get(id(vc)) if vc is not None else None
        if entry is None or entry[0] is not vc:
            return
        from autodiag.core.grad_mode import is_grad_enabled

        # a write made while an optimizer's step runs in this thread is the optimizer's, whatever
        # its class (a script's own Optimizer subclass: ``p.add_`` under no_grad), as
        # ``--engine torch`` tags the writes between the global step hooks
        by_optimizer = by_optimizer or events.STEPPING.n > 0

        now = inspect.version(tensor)
        for ref, version, is_output in list(entry[1].values()):
            node = ref()
            if node is None or not inspect.holds_saved(node) or version == now:
                continue
            self._record(
                op, stack, node, version, now, tensor, is_output, not is_grad_enabled(),
                self._ran.get(node), by_optimizer,
            )  # fmt: skip

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        # without retain_graph a node that ran has freed its saved tensors: nothing to track
        if self._here.retaining[-1] and not inspect.is_leaf_node(node):
            self._ran[node] = self.calls

    def on_backward_begin(self, task):
        here = self._here
        here.retaining.append(task.retain_graph)
        self.calls += 1
        needed = []
        pending = [h for h in self.hazards.values() if h.needed_at is None and h.nodes]
        if pending:
            reached = _reachable(task.roots)
            stack = capture_stack(1)  # the user's backward()/grad() call
            for h in pending:
                if any(n in reached for n in list(h.nodes)):
                    h.needed_at, h.needed_call = stack, self.calls
                    needed.append(h)
        here.needed.append(needed)

    def on_backward_end(self, task):
        here = self._here
        here.retaining.pop()
        needed = here.needed.pop()
        err = task.error
        if needed and err is not None and VERSION_ERROR in str(err):
            # the call died of a modified saved tensor: of the hazards it needed, those of the
            # node the error names (all of them when it names none we know)
            named = [h for h in needed if f"saved by {h.node_name}" in str(err)]
            for h in named or needed:
                h.failed = True

    # --- bookkeeping ----------------------------------------------------------------------

    def _record(
        self, op, stack, node, saved_version, version, tensor, is_output, no_grad, after_call,
        by_optimizer=False,
    ):  # fmt: skip
        self.note_hazard(
            op=op,
            stack=stack,
            node_name=node.name(),
            node_ref=weakref.ref(node),
            save_stack=inspect.site(node),
            saved_version=saved_version,
            version=version,
            shape=list(inspect.shape(tensor)),
            dtype=inspect.dtype_name(tensor),
            is_output=is_output,
            no_grad=no_grad,
            after_call=after_call,
            by_optimizer=by_optimizer,
        )

    def note_hazard(
        self, *, op, stack, node_name, node_ref, save_stack, saved_version, version, shape,
        dtype, is_output, no_grad, after_call=None, by_optimizer=False,
    ) -> _Hazard:  # fmt: skip
        """Record a write by ``op`` at ``stack`` to a tensor that the node ``node_name`` saved
        at ``save_stack`` (``node_ref()``: None once the node no longer holds it) and whose
        backward has not run; the hazard (aggregated per write site x node x saving site).
        Observers of another engine (``--engine torch``) report through this, and mark
        ``needed_at``/``needed_call``/``failed`` on it when that backward unpacks the tensor.
        ``after_call``: the last backward call that ran the node keeping its saves
        (``retain_graph=True``); such a write is reported only once a later backward needs it,
        and so is an optimizer step's write (``by_optimizer``)."""
        key = (stack.site, node_name, save_stack.site if save_stack is not None else None)
        h = self.hazards.get(key)
        if h is not None:
            h.count += 1
            if h.needed_at is None:
                # a loop's later write of the same site to another node's save (the next
                # epoch's graph): a backward that needs any of them needs this hazard
                node = node_ref()
                if node is not None:
                    h.nodes.add(node)
                if after_call is None and not by_optimizer:
                    h.after_call, h.by_optimizer = None, False  # this one is a hazard by itself
            return h
        node = node_ref()
        h = self.hazards[key] = _Hazard(
            op=op,
            write_stack=stack,
            node_name=node_name,
            node_ref=node_ref,
            nodes=weakref.WeakSet(() if node is None else (node,)),
            save_stack=save_stack,
            saved_version=saved_version,
            version=version,
            shape=shape,
            dtype=dtype,
            count=1,
            needed_at=None,
            needed_call=None,
            failed=False,
            no_grad=no_grad,
            is_output=is_output,
            after_call=after_call,
            by_optimizer=by_optimizer,
        )
        return h

    def _sweep(self) -> None:
        """Forget saves whose node is gone or has freed its saved tensors."""
        for k in list(self._watch):
            vc, entries = self._watch[k]
            for nid in [
                nid for nid, e in entries.items() if (n := e[0]()) is None or inspect.is_freed(n)
            ]:
                del entries[nid]
            if not entries:
                del self._watch[k]

    # --- results --------------------------------------------------------------------------

    def findings(self, error=None) -> tuple[list[Finding], bool]:
        """(findings, the target's error is one of them). ``error``: the run's TargetFailed."""
        exc = error.exception if error is not None else None
        message = str(exc) if isinstance(exc, RuntimeError) else ""
        consumed = False
        out = [
            _finding(h)
            for h in self.hazards.values()
            if (h.after_call is None and not h.by_optimizer) or h.needed_at is not None
        ]
        if VERSION_ERROR in message:
            consumed = True  # the script died of the hazard: the error is the finding
            if not any(h.failed for h in self.hazards.values()):
                out.append(_from_version_error(message, exc))
        if LEAF_ERROR[:-1] in message or VIEW_OF_LEAF_ERROR[:-1] in message:
            out.append(_leaf_finding(message, exc))
            consumed = True
        return out, consumed


def _reachable(roots) -> set:
    """The nodes of the graphs of ``roots`` (iterative)."""
    seen: set = set()
    stack = [r.grad_fn for r in roots if isinstance(r, Tensor) and r.grad_fn is not None]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for c in inspect.children(n):
            if c is not None:
                if c not in seen:
                    stack.append(c)
    return seen


def _user_location(exc) -> tuple[dict | None, list]:
    """The innermost user frame of an exception's traceback, and the user frames."""
    from autodiag.target.script import user_frames

    frames = (
        [
            {"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line or ""}
            for f in user_frames(exc.__traceback__)
        ]
        if exc is not None
        else []
    )
    return (frames[-1] if frames else None), frames


def _finding(h: _Hazard) -> Finding:
    loc = h.write_stack.location()
    saved_loc = h.save_stack.location() if h.save_stack is not None else None
    what = "its output" if h.is_output else "an input"
    msg = (
        f"{_OP_TEXT.get(h.op, h.op)} modified a tensor that {h.node_name} saved for "
        f"backward ({what}, version {h.saved_version} -> {h.version})"
    )
    if h.after_call is not None:
        msg += f" after backward call {h.after_call} kept it (retain_graph=True)"
    if h.failed:
        msg += f"; backward call {h.needed_call} then failed: modified by an inplace operation"
    elif h.needed_at is not None:
        msg += f"; backward call {h.needed_call} needed it"
    else:
        msg += "; no backward needed it (yet): it would fail, or be wrong with saved-tensor hooks"
    extra = {
        "op": h.op,
        "count": h.count,
        "no_grad": h.no_grad,
        "tensor": {"shape": h.shape, "dtype": h.dtype},
        "saved_version": h.saved_version,
        "version": h.version,
        "saved_by": {
            "node": h.node_name,
            "location": saved_loc,
            "stack": h.save_stack.frames() if h.save_stack is not None else [],
            "output": h.is_output,
        },
        "needed_by": None
        if h.needed_at is None
        else {"location": h.needed_at.location(), "call": h.needed_call},
        "backward_failed": h.failed,
        "after_backward_call": h.after_call,
    }
    return Finding(
        kind="inplace_saved_tensor",
        severity="error",
        message=msg,
        location=loc,
        stack=h.write_stack.frames(),
        hint=_hint(h),
        extra=extra,
    )


_OP_TEXT = {
    "__iadd__": "+=",
    "__isub__": "-=",
    "__imul__": "*=",
    "__itruediv__": "/=",
    "__ipow__": "**=",
    "__setitem__": "an indexed assignment (x[...] = ...)",
}


def _hint(h: _Hazard) -> str:
    if h.is_output:
        return (
            f"{h.node_name} needs its own output for backward: write the update out of place "
            f"(y = y + 1 instead of y.add_(1) / y += 1), or clone() the output before "
            f"modifying it."
        )
    return (
        f"{h.node_name} needs this input for backward: modify a clone() instead, use the "
        f"out-of-place op, or do the write before the tensor is used."
    )


def _from_version_error(message: str, exc) -> Finding:
    loc, frames = _user_location(exc)
    return Finding(
        kind="inplace_saved_tensor",
        severity="error",
        message="backward failed: " + message.split(". autodiag:")[0],
        location=loc,
        stack=frames,
        hint="The write happened before the traced run saw the save; run "
        "autodiag inplace on a script that builds the graph itself.",
        extra={
            "op": None,
            "count": 1,
            "saved_by": None,
            "needed_by": {"location": loc, "call": None},
            "backward_failed": True,
        },
    )


def _leaf_finding(message: str, exc) -> Finding:
    loc, frames = _user_location(exc)
    view = VIEW_OF_LEAF_ERROR[:-1] in message
    return Finding(
        kind="inplace_leaf",
        severity="error",
        message=(VIEW_OF_LEAF_ERROR if view else LEAF_ERROR),
        location=loc,
        stack=frames,
        hint="Update parameters under torch.no_grad() (as optimizers do), or work on a "
        "clone() of the leaf.",
        extra={"view": view},
    )
