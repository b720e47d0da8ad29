"""The backward pass step by step: one row per node in the order the engine ran them, with the
node's forward value, the gradient it received, the gradients it sent on, and — where the op is
elementwise — the local derivative (sent / received) that the chain rule multiplied by.

NOTE [Trace memory]: a 1,000,000-node backward pass makes a million rows, so rows are not kept
as dicts (a few KB each with their summaries) but in columns (``Summaries``: 10 bytes per
one-element float summary), and only the first ``limit`` rows at all; ``rows()`` rebuilds each
row's dict as it is written. Forward values are kept per node from ``on_op`` on, before anyone
knows which nodes the traced call will reach: a one-element float value in an array indexed by
the node's sequence number (10 bytes per node recorded during the run), any other value as a
summary dict held only as long as its node lives.
"""

from __future__ import annotations

import json
import weakref
from array import array

import numpy as np

from autodiag import inspect
from autodiag.analysis.summary import Summaries, summarize
from autodiag.trace import Tracer


class _ForwardValues:
    """node -> the summary of its forward value (``on_op``'s first output)."""

    def __init__(self, codec: Summaries):
        self.codec = codec  # the shape/dtype codes shared with the rows' columns
        self.base: int | None = None  # sequence number of position 0
        self.values = array("d")
        self.codes = array("H")
        self.others: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def put(self, node, out) -> None:
        cv = self.codec.encode(out)
        seq = inspect.sequence_nr(node)
        if self.base is None:
            self.base = seq
        k = seq - self.base
        if cv is None or k < 0:
            self.others[node] = summarize(out)
            return
        n = len(self.codes)
        if k > n:
            # nodes made by ops inside other ops are not reported: their positions stay empty
            self.codes.extend(array("H", bytes(2 * (k - n))))
            self.values.extend(array("d", bytes(8 * (k - n))))
        if k >= n:
            self.codes.append(cv[0])
            self.values.append(cv[1])
        else:
            self.codes[k], self.values[k] = cv

    def get(self, node) -> tuple[int, float] | dict | None:
        """(code, value), a summary dict, or None."""
        if self.base is not None:
            k = inspect.sequence_nr(node) - self.base
            if 0 <= k < len(self.codes) and self.codes[k] != Summaries.NONE:
                return self.codes[k], self.values[k]
        return self.others.get(node)


class BackwardTrace(Tracer):
    """Records the rows of one backward call (the ``call``-th, or the last): all of them, or
    the first ``limit`` (``steps`` counts them all)."""

    def __init__(self, call: int | None = None, limit: int | None = None):
        self.want_call = call
        self.limit = limit
        self.calls = 0
        self.kind = None
        self.steps = 0  # rows of the recorded call, kept or not
        self._recording = False
        self._codec = Summaries()
        self._forward = _ForwardValues(self._codec)
        self._reset()
        self.root_refs: list = []
        self.root_names: list = []

    def _reset(self) -> None:
        self.steps = 0
        self.leaf_refs: dict = {}  # row index -> weakref to the leaf tensor (for naming)
        self.variables: dict = {}  # row index -> the leaf's variable name
        # the kept rows, in columns (NOTE [Trace memory]); ``*_end``: cumulative counts
        self._node: list[str] = []
        self._site: list = []
        self._value = self._column()
        self._in_end = array("L")
        self._in = self._column()
        self._out_end = array("L")
        self._out_to: list[str] = []
        self._out_grad = self._column()
        self._out_local = self._column()

    def _column(self) -> Summaries:
        col = Summaries()
        col.kinds, col._code_of = self._codec.kinds, self._codec._code_of  # one code table
        return col

    @property
    def truncated(self) -> int:
        """Rows of the recorded call not kept (beyond ``limit``)."""
        return self.steps - len(self._node)

    # --- events -----------------------------------------------------------------------------

    def on_op(self, op, node, inputs, outputs, stack):
        if node is not None and outputs:
            self._forward.put(node, outputs[0])

    def on_backward_begin(self, task):
        self.calls += 1
        self._recording = self.want_call is None or self.calls == self.want_call
        if self._recording:
            self._reset()
            self.kind = "backward" if task.accumulate else "grad"
            self.root_refs = [weakref.ref(t) for t in task.roots]

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        if not self._recording:
            return
        if self.limit is not None and len(self._node) >= self.limit:
            self.steps += 1
            return  # counted, not kept (NOTE [Trace memory])
        row = len(self._node)
        enc = self._codec.encode
        add_in = self._in.add_as
        cv_in = None
        for g in grad_outputs:
            cv_in = enc(g)
            add_in(g, cv_in)
        self._in_end.append(len(self._in))
        v = inspect.leaf_variable(node)
        if v is not None:
            self._value.add(v)
            self.leaf_refs[row] = weakref.ref(v)
            self._site.append(None)
        else:
            self._add_forward(node)
            self._site.append(inspect.site(node))
            g_in = grad_outputs[0] if len(grad_outputs) == 1 else None
            to, add_grad, local = self._out_to.append, self._out_grad.add_as, self._out_local
            for child, g in zip(inspect.children(node), grad_inputs):
                if child is None:
                    continue
                to(type(child).__name__)
                cv = enc(g)
                add_grad(g, cv)
                _add_local(local, g_in, g, cv_in, cv)
        self._out_end.append(len(self._out_to))
        # NOTE: a row exists once its node's name is in, last: an interrupt (Ctrl-C) landing
        # anywhere above leaves a partial row that rows() never reads
        self._node.append(type(node).__name__)
        self.steps += 1

    def _add_forward(self, node) -> None:
        col = self._value
        v = self._forward.get(node)
        if v is None or v.__class__ is dict:
            col.codes.append(col.NONE if v is None else col.DICT)
            col.values.append(len(col.dicts))
            if v is not None:
                col.dicts.append(v)
        else:
            col.codes.append(v[0])
            col.values.append(v[1])

    def on_backward_end(self, task):
        if self._recording and self.want_call is not None:
            self._forward = _ForwardValues(self._codec)  # the wanted call is done: no more
        self._recording = False

    # --- results ------------------------------------------------------------------------------

    def name_leaves(self, names_by_id: dict) -> None:
        for k, ref in self.leaf_refs.items():
            t = ref()
            if t is not None and id(t) in names_by_id:
                self.variables[k] = names_by_id[id(t)]
        self.root_names = [names_by_id.get(id(r())) if r() is not None else None
                           for r in self.root_refs]

    def __len__(self) -> int:
        """Rows kept."""
        return len(self._node)

    def rows(self):
        """The kept rows, in execution order, each as a dict (built as it is asked for):
        ``step``, ``node``, ``incoming`` (summaries), ``value``, ``created_at``, ``outgoing``
        (``to``, ``grad``, ``local``) and, for named leaves, ``variable``."""
        in_get, grad_get, local_get = self._in.get, self._out_grad.get, self._out_local.get
        value_get = self._value.get
        out_to = self._out_to
        sites: dict = {}  # Stack -> its location (nodes made by one line share their Stack)
        i0 = o0 = 0
        for k, name in enumerate(self._node):
            i1, o1 = self._in_end[k], self._out_end[k]
            incoming = [in_get(j) for j in range(i0, i1)]
            if k in self.leaf_refs:
                row = {"step": k + 1, "node": name, "incoming": incoming, "value": value_get(k),
                       "outgoing": [], "created_at": None}
            else:
                st = self._site[k]
                loc = None
                if st is not None:
                    loc = sites.get(id(st), sites)
                    if loc is sites:
                        loc = sites[id(st)] = st.location()
                row = {"step": k + 1, "node": name, "incoming": incoming, "value": value_get(k),
                       "created_at": loc,
                       "outgoing": [{"to": out_to[j], "grad": grad_get(j),
                                     "local": local_get(j)} for j in range(o0, o1)]}
            if k in self.variables:
                row["variable"] = self.variables[k]
            yield row
            i0, o0 = i1, o1


    def rows_json(self):
        """``rows()``, each row as the compact JSON text ``json.dumps`` gives it, written
        directly: huge traces are mostly one-element summaries (``Summaries.json``)."""
        in_json, grad_json, local_json = self._in.json, self._out_grad.json, self._out_local.json
        value_json = self._value.json
        texts: dict = {}  # summary texts, shared by the columns (Summaries.json)
        names: dict = {}  # node name -> its JSON text
        sites: dict = {}  # id(Stack) -> its location's JSON text
        to_names = self._out_to
        leaves, variables = self.leaf_refs, self.variables
        in_end, out_end, site = self._in_end, self._out_end, self._site
        i0 = o0 = 0
        for k, name in enumerate(self._node):
            i1, o1 = in_end[k], out_end[k]
            js_name = names.get(name)
            if js_name is None:
                js_name = names[name] = json.dumps(name)
            # NOTE: one incoming gradient and one outgoing edge is the common row: no join
            incoming = in_json(i0, texts) if i1 - i0 == 1 else \
                ", ".join([in_json(j, texts) for j in range(i0, i1)])
            # a forward value is seldom repeated: not worth the shared texts
            head = (f'{{"step": {k + 1}, "node": {js_name}, "incoming": [{incoming}], '
                    f'"value": {value_json(k)}, ')
            if k in leaves:
                text = head + '"outgoing": [], "created_at": null'
            else:
                st = site[k]
                loc = "null"
                if st is not None:
                    loc = sites.get(id(st))
                    if loc is None:
                        loc = sites[id(st)] = json.dumps(st.location())
                outgoing = ", ".join([
                    f'{{"to": {names.get(to_names[j]) or _name_json(names, to_names[j])}, '
                    f'"grad": {grad_json(j, texts)}, '
                    f'"local": {local_json(j, texts)}}}' for j in range(o0, o1)])
                text = f'{head}"created_at": {loc}, "outgoing": [{outgoing}]'
            if variables and k in variables:
                text += f', "variable": {json.dumps(variables[k])}'
            yield text + "}"
            i0, o0 = i1, o1


def _name_json(names: dict, name: str) -> str:
    text = names[name] = json.dumps(name)
    return text


def _add_local(col: Summaries, g_in, g_out, a: tuple | None, b: tuple | None) -> None:
    """Add sent / received, elementwise, when both have one shape and nothing received is 0
    (else None). ``a``, ``b``: ``encode`` of ``g_in`` and ``g_out``."""
    if g_in is None or g_out is None:
        col.add(None)
        return
    if a is not None and b is not None and a[0] == b[0]:
        # NOTE: one-element arrays of one shape and dtype (huge chains of scalars): the
        # quotient below, rounded in the arrays' dtype, without the array machinery
        x = a[1]
        if x == 0 or x - x != 0:
            col.add(None)
            return
        dt = inspect.values(g_in).dtype
        q = b[1] / x if dt == np.float64 else float(dt.type(b[1]) / dt.type(x))
        col.add_encoded(a[0], q)
        return
    col.add(_local(g_in, g_out))


def _local(g_in, g_out):
    """sent / received, elementwise, as an array, or None (different shapes, a gradient
    received that is 0 or not finite)."""
    a = np.asarray(inspect.values(g_in))
    b = np.asarray(inspect.values(g_out))
    if a.shape != b.shape or a.dtype.kind != "f" or b.dtype.kind != "f" or a.size == 0:
        return None
    if not np.all(np.isfinite(a)) or np.any(a == 0):
        return None
    return b / a
