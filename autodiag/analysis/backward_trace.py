"""The backward pass step by step: one row per node in the order the engine ran them, with the
node's forward value, the gradient it received, the gradients it sent on, and — where the op is
elementwise — the local derivative (sent / received) that the chain rule multiplied by."""

from __future__ import annotations

import weakref

import numpy as np

from autodiag.analysis.summary import summarize
from autodiag.autograd.graph import AccumulateGrad
from autodiag.trace import Tracer


class BackwardTrace(Tracer):
    """Records the rows of one backward call (the ``call``-th, or the last)."""

    def __init__(self, call: int | None = None):
        self.want_call = call
        self.calls = 0
        self.rows: list[dict] = []
        self.kind = None
        self._values: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._recording = False
        self.leaf_refs: dict = {}  # row index -> weakref to the leaf tensor (for naming)
        self.root_refs: list = []

    def on_op(self, op, node, inputs, outputs, stack):
        if node is not None and outputs:
            self._values[node] = summarize(outputs[0])

    def on_backward_begin(self, task):
        self.calls += 1
        self._recording = self.want_call is None or self.calls == self.want_call
        if self._recording:
            self.rows = []
            self.leaf_refs = {}
            self.kind = "backward" if task.accumulate else "grad"
            self.root_refs = [weakref.ref(t) for t in task.roots]

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        if not self._recording:
            return
        row = {"step": len(self.rows) + 1, "node": type(node).__name__,
               "incoming": [summarize(g) for g in grad_outputs]}
        if node.__class__ is AccumulateGrad:
            v = node.variable
            row["value"] = summarize(v)
            self.leaf_refs[len(self.rows)] = weakref.ref(v)
            row["outgoing"] = []
            row["created_at"] = None
        else:
            row["value"] = self._values.get(node)
            st = node._trace
            row["created_at"] = st.location() if st is not None else None
            outgoing = []
            g_in = grad_outputs[0] if len(grad_outputs) == 1 else None
            for e, g in zip(node._next, grad_inputs):
                if e is None:
                    continue
                child = e[0] if e.__class__ is tuple else e
                outgoing.append({"to": type(child).__name__, "grad": summarize(g),
                                 "local": _local(g_in, g)})
            row["outgoing"] = outgoing
        self.rows.append(row)

    def on_backward_end(self, task):
        self._recording = False

    def name_leaves(self, names_by_id: dict) -> None:
        for k, ref in self.leaf_refs.items():
            t = ref()
            if t is not None and id(t) in names_by_id:
                self.rows[k]["variable"] = names_by_id[id(t)]
        self.root_names = [names_by_id.get(id(r())) if r() is not None else None
                           for r in self.root_refs]


def _local(g_in, g_out):
    """sent / received, elementwise, when both have one shape and nothing received is 0."""
    if g_in is None or g_out is None:
        return None
    a = np.asarray(getattr(g_in, "_data", g_in))
    b = np.asarray(getattr(g_out, "_data", g_out))
    if a.shape != b.shape or a.dtype.kind != "f" or b.dtype.kind != "f" or a.size == 0:
        return None
    if not np.all(np.isfinite(a)) or np.any(a == 0):
        return None
    return summarize(b / a)
