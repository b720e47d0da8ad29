"""NaN/Inf origins in forward and backward: tracer events -> Findings (``autodiag anomaly``).

*Forward origin*: the first op whose output holds NaN while none of its inputs did (``log`` of
a negative, ``0/0``, ``inf - inf``, ``0 * inf``), or ±inf while its inputs were finite (``log``
of 0, ``exp`` overflow, ``x / 0``). An op whose non-finite output only carries a non-finite
input along is *propagation*: counted against the origin it came from, not reported.

*Backward origin*: the first node whose outgoing gradient holds NaN/Inf while the gradients it
received were finite (``sqrt`` at 0 receiving 0, a custom backward dividing by zero).

Values the user wrote on purpose are not origins: ops without tensor inputs (``tensor``,
``full``, ...) and value-setting ops (``masked_fill(mask, -inf)``, ``x[i] = float('nan')``).
NaN/Inf that no op of the run left in an input (an optimizer step, a write through numpy)
are reported at the first op that meets them, while nothing else is found (NOTE [Values from
outside]; the finding's ``entered`` is true).

NOTE [Masked origins]
A forward origin is reported when its value goes on: an op other than a test of finiteness
(``TESTS``) reads it, its node runs in backward, or it is never masked (it may be printed,
returned, saved: a value the script holds is a value it sees). It is not reported when every
value it made is masked away before any such use: read by a masking op (``MASKS``) whose result
is finite, or overwritten in place (pytorch/examples gcn: ``r_inv = rowsum ** -1`` then
``r_inv[torch.isinf(r_inv)] = 0``). PyTorch users write these idioms on purpose; the where
trap (``torch.where(x > 0, torch.sqrt(x), 0)`` with ``x`` requiring grad) is still found: the
masked value's node runs in backward, where the NaN it holds comes back. Only while some
origin's value is pending does an op's input get looked up (``_pending``): a clean run pays
nothing.

NOTE [Anomaly cost]
Every op output and every backward gradient is checked, so the check must be cheap on tiny
tensors: ``r.dot(r)`` of the flattened array is finite exactly when every element is (NaN and
±inf survive a sum of squares; only overflow of a huge finite value can turn it infinite, and
the precise ``isnan``/``isinf`` pass that follows any positive sorts that out). One BLAS call
costs ~0.35 µs against ~1.8 µs for ``np.isfinite(a).all()``; up to 16 elements, a Python
``sum(a.tolist())`` (same argument) costs ~0.16 µs. Gradients are checked in batches
(one ``np.concatenate`` per backward call, or every ``BATCH`` nodes), which divides the numpy
call overhead by the batch size; the precise per-node pass runs only on a batch that failed.
"""

from __future__ import annotations

import math
import weakref
from math import isfinite

import numpy as np
from numpy import ndarray

from autodiag._interrupts import callback
from autodiag.analysis.findings import Finding
from autodiag.analysis.summary import summarize
from autodiag.core.sumsq import CHUNK, sum_of_squares
from autodiag.inspect import array, children, leaf_variable, site, values
from autodiag.trace import StopRun, Tracer
from autodiag.trace.per_thread import PerThread

# Ops that set values the user chose: a non-finite result with finite tensor inputs is intended
# (``masked_fill(mask, float('-inf'))`` before a softmax), not an anomaly.
VALUE_OPS = frozenset(
    {
        "masked_fill",
        "masked_fill_",
        "fill_",
        "where",
        "__setitem__",
        "index_fill",
        "index_fill_",
        "full_like",
        "new_full",
        "clamp",
        "clamp_",
        "clamp_min",
        "clamp_max",
        "clip",
        "clip_",
        "nan_to_num",
        "copy_",
    }
)
# Ops whose output is uninitialised memory (PyTorch's ``empty``: whatever bytes were there, NaN
# patterns included): neither an origin nor a value the script chose.
UNINITIALISED = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
)
# Ops whose output is finite whenever their inputs are: views, copies, bounded functions. Their
# outputs are checked only when an input is known to hold NaN/Inf (to count propagation).
SAFE_OPS = frozenset(
    {
        "view",
        "reshape",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "transpose",
        "permute",
        "t",
        "expand",
        "expand_as",
        "broadcast_to",
        "contiguous",
        "clone",
        "detach",
        "__getitem__",
        "select",
        "narrow",
        "index_select",
        "gather",
        "cat",
        "concat",
        "concatenate",
        "stack",
        "split",
        "chunk",
        "unbind",
        "repeat",
        "swapaxes",
        "relu",
        "leaky_relu",
        "neg",
        "negative",
        "abs",
        "sign",
        "sigmoid",
        "tanh",
        "sin",
        "cos",
        "maximum",
        "minimum",
        "max",
        "min",
        "amax",
        "amin",
        "floor",
        "ceil",
        "round",
        "trunc",
        "softmax",
        "log_softmax",
        "gelu",
        # NOTE: not where/masked_fill: their value may be a Python -inf, no input tensor
        # (``masked_fill(mask, -inf)``: a fully masked row then makes the softmax NaN)
        "clamp",
        "clamp_min",
        "clamp_max",
        "clip",
        "dropout",
    }
)
# Ops that only test values (a mask of where they are NaN/Inf, or a comparison): reading a
# NaN/Inf so is not using it (NOTE [Masked origins])
TESTS = frozenset(
    {
        "isnan",
        "isinf",
        "isfinite",
        "isposinf",
        "isneginf",
        "isreal",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "equal",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "not_equal",
    }
)
# Ops that replace values: with a finite result, the NaN/Inf of their input are masked away
# (``torch.where(torch.isfinite(x), x, 0)``, ``x[torch.isinf(x)] = 0``, ``x.nan_to_num_()``)
MASKS = frozenset(
    {
        "where",
        "masked_fill",
        "masked_fill_",
        "nan_to_num",
        "nan_to_num_",
        "__setitem__",
        "index_put",
        "index_put_",
        "index_fill",
        "index_fill_",
        "fill_",
        "zero_",
        "copy_",
    }
)
BATCH = 512  # gradients kept before a batched check (memory bound: BATCH small arrays)
BIG = 1024  # arrays at least this large are checked at once (the batch would copy them)


def _finite(a: np.ndarray) -> bool:
    """Cheap finiteness test of a float array (NOTE [Anomaly cost]); may say False for finite
    arrays whose squares overflow: callers confirm with ``_kinds``."""
    if a.size == 1:
        return math.isfinite(a.item())  # one element: no BLAS call
    # in memory order: a transposed gradient (TBackward0's) is read where it lies, not copied
    # (copying 200k transposed elements cost 10x the sum); the order does not matter here
    return math.isfinite(sum_of_squares(a.ravel("K")))


def _kinds(a: np.ndarray) -> tuple[int, int]:
    """(number of NaN, number of ±inf) in ``a``."""
    n_nan = int(np.count_nonzero(np.isnan(a)))
    n_inf = int(np.count_nonzero(np.isinf(a)))
    return n_nan, n_inf


def stats(a) -> dict | None:
    """The summary the report prints for a tensor or gradient: shape, dtype, min/max of the
    finite values, and the counts that explain a NaN/Inf (zeros, negatives, nan, inf)."""
    s = summarize(a)
    if s is None:
        return None
    data = np.asarray(values(a))
    if data.dtype.kind in "fiu" and data.size:
        # finite negatives (-inf is counted as inf)
        s["negatives"] = int(np.count_nonzero((data < 0) & (data > -np.inf)))
    s.setdefault("nan", 0)
    s.setdefault("inf", 0)
    if "values" in s and (s["nan"] or s["inf"]):
        s["values"] = _json_safe(s["values"])
    return s


def _json_safe(v):
    """NaN/±inf as the strings "nan", "inf", "-inf": JSON has no such numbers."""
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    if isinstance(v, float) and not isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


class _Origin:
    """One distinct origin site, aggregated over its occurrences."""

    __slots__ = (
        "kind",
        "key",
        "op",
        "stack",
        "first_step",
        "count",
        "propagated",
        "detail",
        "input_refs",
        "used",
        "unmasked",
    )

    def __init__(self, kind, key, op, stack, step, detail, input_refs=()):
        self.kind, self.key, self.op, self.stack = kind, key, op, stack
        self.first_step, self.count, self.propagated = step, 1, 0
        self.detail = detail
        self.input_refs = input_refs
        # NOTE [Masked origins]: a forward origin is reported when its value was used, or
        # some value it made was never masked
        self.used = False
        self.unmasked = 0

    def reported(self) -> bool:
        return self.used or self.unmasked > 0 or not self.kind.endswith("_forward")


class AnomalyFinder(Tracer):
    """Finds NaN/Inf origins while a target runs.

    ``keep_going=False`` ends the run (``StopRun``) once a gradient holds NaN/Inf (a backward
    origin, or a forward one that reached backward): training on NaN teaches nothing, and later
    steps only repeat it. ``findings(names)`` returns one Finding per distinct origin site.
    """

    def __init__(self, keep_going: bool = False, forward: bool = True, backward: bool = True):
        self.keep_going = keep_going
        self.check_forward = forward
        self.check_backward = backward
        self.calls = 0  # backward/grad calls started
        self.origins: dict = {}  # key -> _Origin, in discovery order
        self.propagated_forward = 0  # ops that only carried a NaN/Inf along
        # op name -> outputs holding NaN/Inf the script wrote on purpose (masked_fill(-inf))
        self.written: dict = {}
        self.propagated_backward = 0
        self.stopped_at: int | None = None  # backward call at which the run was stopped
        # id(array) -> (weakref to the array, origin key or None): arrays known to hold NaN/Inf
        self._bad: dict = {}
        # backward calls in progress (see on_backward_begin), per thread: an op of one thread
        # while another is in backward is a forward op (trace/per_thread.py)
        self._here = PerThread()
        # nodes whose forward output held NaN/Inf -> the origin key of that value (or None)
        self._tainted = weakref.WeakKeyDictionary()
        # NOTE [Masked origins]: id(value) -> [weakref, origin key, masked, in a graph] for the
        # values forward origins made while not yet used
        self._pending: dict = {}
        self._masked_graph: set = set()  # keys of masked origins whose values are in a graph
        self.masked: dict = {}  # op -> origin values masked before any use (not reported)

    @property
    def _tasks(self) -> list:
        return self._here.tasks

    # --- forward --------------------------------------------------------------------------

    def on_op(self, op, node, inputs, outputs, stack):
        # NOTE [Anomaly cost]: the common case (one finite float output) stays inline
        if self._here.tasks:
            return  # an op inside backward (a custom Function's, create_graph): its result is a
            # gradient, checked as the node's output
        if not outputs and op == "__setitem__" and inputs:
            # ``t[mask] = -inf`` returns None: the tensor it wrote is its output (nanoGPT's
            # generate() writes -inf so, then a softmax over the wrong dim makes NaN of it)
            outputs = inputs[:1]
        if self._pending:
            self._uses(op, inputs, outputs)
        if op in SAFE_OPS:
            # finite in, finite out: only an input already known to be bad matters
            bad = self._bad
            for t in inputs:
                if id(array(t)) in bad:
                    break
            else:
                return
        for o in outputs:
            d = array(o)
            if d.dtype.kind == "f":
                if d.size == 1:  # a chain of scalars: one element, whatever its dimensions
                    if isfinite(d.item()):
                        continue
                elif d.ndim == 1:
                    # a few elements: a Python sum beats a BLAS call's overhead
                    if d.size <= 16:
                        if isfinite(sum(d.tolist())):
                            continue
                    elif isfinite(d.dot(d) if d.size <= CHUNK else sum_of_squares(d)):
                        continue
                else:
                    r = d.ravel("K")  # no copy of a transposed value (see _finite)
                    # NOTE [BLAS threads]: a big array in chunks
                    if isfinite(r.dot(r) if r.size <= CHUNK else sum_of_squares(r)):
                        continue
                if self.check_forward:
                    self._forward_nonfinite(op, node, inputs, o, stack)

    def _forward_nonfinite(self, op, node, inputs, out, stack) -> None:
        d = array(out)
        n_nan, n_inf = _kinds(d)
        if not (n_nan or n_inf):
            return  # a sum of squares that overflowed: finite after all
        key = self._judge(op, inputs, out, n_nan, n_inf, lambda: stack, node is not None)
        if node is not None:
            # its backward works on non-finite values: a NaN/Inf gradient there is a
            # consequence of this forward value, not a backward origin
            self._tainted[node] = key

    def _uses(self, op, inputs, outputs) -> None:
        """NOTE [Masked origins]: ``op`` read its ``inputs``; a pending origin's value among
        them is used, masked (a masking op with a finite result), or only tested."""
        if op in TESTS:
            return
        pending = self._pending
        for t in inputs:
            a = self._value(t)
            rec = pending.get(id(a))
            if rec is None or rec[0]() is not a:
                continue
            origin = self.origins.get(rec[1])
            if origin is None:
                continue
            if op in MASKS:
                finite = True
                for o in outputs:
                    v = self._value(o)
                    if self._floating(v) and not self._finite(v) and any(self._kinds(v)):
                        finite = False
                        break
                if not finite:
                    continue  # NaN/Inf left: ``_judge`` says where they went
                if not rec[2]:
                    rec[2] = True
                    origin.unmasked -= 1
                    self.masked[origin.op] = self.masked.get(origin.op, 0) + 1
                    if rec[3]:
                        self._masked_graph.add(rec[1])
                if any(self._value(o) is a for o in outputs):
                    del pending[id(a)]  # overwritten in place: its NaN/Inf are gone
                continue
            origin.used = True
            del pending[id(a)]

    def _confirm_tainted(self, key) -> None:
        """The node of a masked origin's value runs in backward: the value went on."""
        if key in self._masked_graph:
            self._masked_graph.discard(key)
            origin = self.origins.get(key)
            if origin is not None:
                origin.used = True

    def _track(self, a, key, origin, graph: bool) -> None:
        """NOTE [Masked origins]: follow ``a``, a value origin ``key`` made, until it is used."""
        aid = id(a)
        pending = self._pending

        @callback
        def gone(_, aid=aid):
            pending.pop(aid, None)  # it died unmasked: ``origin.unmasked`` keeps it reported

        try:
            ref = weakref.ref(a, gone)
        except TypeError:  # not followed: reported as it is
            origin.used = True
            return
        pending[aid] = [ref, key, False, graph]
        origin.unmasked += 1

    # How this engine's values are read; TorchAnomalyFinder reads PyTorch's tensors instead.
    # ``_value``: what is tested and kept in ``_bad`` for a tensor (autodiag's: its array).
    _value = staticmethod(array)
    _finite = staticmethod(_finite)
    _kinds = staticmethod(_kinds)
    _stats = staticmethod(stats)

    @staticmethod
    def _floating(a) -> bool:
        return a.dtype.kind in "fc"

    @staticmethod
    def _base(a):
        return a.base

    def _judge(self, op, inputs, out, n_nan, n_inf, stack, graph: bool = False):
        """``out`` of ``op`` holds ``n_nan`` NaN and ``n_inf`` ±inf: an origin (none of the
        inputs held that kind), a value carried along from a known one, or a value the user
        wrote (a factory, ``fill_``); ``stack()`` gives the user's stack, asked only for an
        origin; ``graph``: ``out`` has a node. Returns the key of the origin ``out``'s NaN/Inf
        come from, or None."""
        d = self._value(out)
        inplace = (
            op.endswith("_")
            and not op.startswith("__")
            or op.startswith("__i")
            or op == "__setitem__"
        )
        in_nan = in_inf = False
        source = None
        strays = []  # inputs holding NaN/Inf with no record of their own
        for t in inputs:
            a = self._value(t)
            if not self._floating(a):
                continue
            if inplace and a is d:
                # the tensor written in place: its values before the write are gone; it held
                # NaN/Inf before only if an earlier op left them there (in it or in its base)
                rec = self._known_bad(a)
                if rec is not None:
                    k_nan, k_inf = rec[2]
                    in_nan |= k_nan
                    in_inf |= k_inf
                    source = source or rec[1]
                continue
            if self._finite(a):
                continue
            k_nan, k_inf = self._kinds(a)
            in_nan |= bool(k_nan)
            in_inf |= bool(k_inf)
            rec = self._bad.get(id(a))
            if rec is not None and rec[0]() is a:
                if source is None:
                    source = rec[1]
            else:
                strays.append(a)
        entered = False
        if n_nan and not in_nan:
            kind = "nan_forward"
        elif n_inf and not in_nan and not in_inf:
            kind = "inf_forward"
        elif (
            strays
            and source is None
            and not any(o.reported() for o in self.origins.values())
            and any(map(self._unseen, strays))
        ):
            # NOTE [Values from outside]: the NaN/Inf came in through an input no op of the run
            # made so (an optimizer's own arithmetic, a write through .data or numpy, loaded
            # data, BatchNorm's running statistics): this op is where the run met it first.
            # Only while nothing else is found: after an origin, an optimizer step applying
            # its NaN gradients writes NaN into the parameters too, and that is its doing
            kind = "nan_forward" if n_nan else "inf_forward"
            entered = True
        else:
            kind = None
        if op in UNINITIALISED:
            self._mark(d, None, n_nan, n_inf)  # followed, never reported
            return None
        if kind is not None and (op in VALUE_OPS or not inputs):
            # a value the user wrote: neither an anomaly nor propagation (a clean report says
            # so: "every output was finite" would not be true)
            self.written[op] = self.written.get(op, 0) + 1
            self._mark(d, None, n_nan, n_inf)
            return None
        if kind is None:
            self.propagated_forward += 1
            if source is not None and source in self.origins:
                origin = self.origins[source]
                origin.propagated += 1
                if id(d) not in self._pending:
                    origin.used = True  # carried into a new value (not the same one in place)
            self._mark(d, source, n_nan, n_inf)
            return source
        stack = stack()
        key = (kind, op, stack.site, "entered") if entered else (kind, op, stack.site)
        origin = self.origins.get(key)
        if origin is None:
            detail = {
                "op": op,
                "output": self._stats(out),
                "inputs": [self._stats(t) for t in inputs if t is not out or not inplace],
                "inplace": inplace,
            }
            if entered:
                detail["entered"] = True
            refs = tuple(_weak(t) for t in inputs)
            origin = _Origin(kind, key, op, stack, self.calls + 1, detail, refs)
            self.origins[key] = origin
        else:
            origin.count += 1
        if not origin.used:
            self._track(d, key, origin, graph)
        self._mark(d, key, n_nan, n_inf)
        return key

    def _unseen(self, a) -> bool:
        """``a`` holds NaN/Inf, and no op of the run left them in its values (nor in those of
        a value it is a view of)."""
        return self._known_bad(a) is None

    def _known_bad(self, a):
        """The record of ``a`` (or of a value it is a view of) in ``_bad``, or None."""
        while a is not None:
            rec = self._bad.get(id(a))
            if rec is not None and rec[0]() is a:
                return rec
            a = self._base(a)
        return None

    def _mark(self, a, key, n_nan, n_inf) -> None:
        aid = id(a)
        bad = self._bad

        @callback
        def gone(_, aid=aid):
            bad.pop(aid, None)

        try:
            ref = weakref.ref(a, gone)
        except TypeError:  # a value that cannot be weakly referenced is not followed
            return
        bad[aid] = (ref, key, (bool(n_nan), bool(n_inf)))

    # --- backward -------------------------------------------------------------------------

    def on_backward_begin(self, task):
        self.calls += 1
        # [task, nodes run since the last check, their gradients, call number]
        self._tasks.append([task, [], [], self.calls])

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        # NOTE [Anomaly cost]: gradients are only collected here, and checked in batches
        if self._masked_graph and node in self._tainted:
            self._confirm_tainted(self._tainted[node])
        if not grad_inputs:
            return
        entry = self._here.tasks[-1]  # (``_tasks``, without the property's call)
        arrays = entry[2]
        for g in grad_inputs:
            if g is not None:
                if g.__class__ is not ndarray:
                    # a Tensor under create_graph, or a numpy scalar from a formula
                    g = np.asarray(values(g))
                if g.size >= BIG:
                    if not _finite(g):
                        entry[1].append((node, grad_outputs, grad_inputs))
                        self._flush(entry, big_bad=True)
                        return
                    continue
                arrays.append(g)
        entry[1].append((node, grad_outputs, grad_inputs))
        if len(arrays) >= BATCH:
            self._flush(entry)

    def on_backward_end(self, task):
        if self._tasks and self._tasks[-1][0] is task:
            entry = self._tasks.pop()
            if entry[1]:
                self._flush(entry)

    def _flush(self, entry, big_bad: bool = False) -> None:
        """Check the gradients collected in one backward call at once; on a NaN/Inf, walk the
        nodes in execution order to tell origins from propagation. Unless ``keep_going``, a
        NaN/Inf gradient (a backward origin, or a forward one reaching the gradients) stops the
        run: when it is found at the end of a backward call, the gradients are already in .grad,
        but the optimizer step does not run. ``big_bad``: the last node sent a big gradient
        found non-finite on arrival (the big ones are checked then, never again)."""
        nodes, arrays = entry[1], entry[2]
        entry[1], entry[2] = [], []
        if not self.check_backward:
            return
        flat = np.concatenate(arrays, axis=None) if arrays else None
        if flat is None or isfinite(sum_of_squares(flat)):
            # the small gradients are finite; a big one was checked on arrival, and a non-finite
            # one flushed at once: it can only belong to the last node
            nodes = nodes[-1:] if big_bad else []
        found = False
        for node, grad_outputs, grad_inputs in nodes:
            found |= self._backward_nonfinite(node, grad_outputs, grad_inputs, entry)
        if found and not self.keep_going:
            self.stopped_at = entry[3]
            raise StopRun

    def _backward_nonfinite(self, node, grad_outputs, grad_inputs, entry) -> bool:
        """Classify one node's gradients; True when some gradient it sent is NaN/Inf."""
        out_nan = 0
        bad_outputs = []
        kids = children(node)
        for i, g in enumerate(grad_inputs):
            if g is None or kids[i] is None:
                continue
            a = np.asarray(values(g))
            if a.dtype.kind != "f" or _finite(a):
                continue
            n_nan, n_inf = _kinds(a)
            if n_nan or n_inf:
                bad_outputs.append(i)
                out_nan += n_nan
        if not bad_outputs:
            return False
        in_nan = in_inf = False
        for g in grad_outputs:
            if g is None:
                continue
            a = np.asarray(values(g))
            if a.dtype.kind == "f" and not _finite(a):
                k_nan, k_inf = _kinds(a)
                in_nan |= bool(k_nan)
                in_inf |= bool(k_inf)
        if node in self._tainted or in_nan or in_inf:
            kind = None  # the forward value, or a gradient received, was already NaN/Inf
        else:
            kind = "nan_backward" if out_nan else "inf_backward"
        if kind is None:
            self.propagated_backward += 1
            return True
        trace = site(node)
        where = trace.site if trace is not None else None
        key = (kind, node.name(), where, where is None and id(node))
        origin = self.origins.get(key)
        if origin is not None:
            origin.count += 1
            return True
        task = entry[0]
        detail = {
            "node": node.name(),
            "incoming": [stats(g) for g in grad_outputs],
            "outgoing": [_outgoing(node, i, grad_inputs[i]) for i in bad_outputs],
            "path": _path(task, node),
            "call": "backward" if task.accumulate else "grad",
        }
        self.origins[key] = _Origin(kind, key, node.name(), trace, entry[3], detail)
        return True

    # --- results --------------------------------------------------------------------------

    def findings(self, names_by_id: dict | None = None) -> list[Finding]:
        """One Finding per distinct origin site, forward ones first, each in discovery order."""
        names_by_id = names_by_id or {}
        out = []
        order = {"nan_forward": 0, "inf_forward": 0, "nan_backward": 1, "inf_backward": 1}
        for o in sorted(self.origins.values(), key=lambda o: order[o.kind]):
            if not o.reported():
                continue  # NOTE [Masked origins]
            out.append(_finding(o, names_by_id))
        return out


def _outgoing(node, i: int, g) -> dict:
    """The gradient ``node`` sent through its ``i``-th edge, and where it went."""
    child = children(node)[i]
    out = {"input": i, "to": child.name() if child is not None else None, "grad": stats(g)}
    v = leaf_variable(child) if child is not None else None
    if v is not None:
        out["_leaf"] = weakref.ref(v)  # named at the end, from the namespace
    return out


def _path(task, target) -> list[str]:
    """Node names from a root of ``task`` down to ``target`` (shortest path, iterative BFS)."""
    from autodiag.tensor import Tensor

    starts = []
    for r in task.roots:
        if isinstance(r, Tensor) and r.grad_fn is not None:
            starts.append(r.grad_fn)
    parent: dict = {}
    frontier = []
    for s in starts:
        if s not in parent:
            parent[s] = None
            frontier.append(s)
    while frontier:
        nxt = []
        for n in frontier:
            if n is target:
                names = []
                while n is not None:
                    names.append(n.name())
                    n = parent[n]
                return names[::-1]
            for c in children(n):
                if c is None:
                    continue
                if c not in parent:
                    parent[c] = n
                    nxt.append(c)
        frontier = nxt
    return [target.name()]


_WHAT = {
    "nan_forward": "produced NaN from inputs without NaN",
    "inf_forward": "produced ±inf from finite inputs",
    "nan_backward": "returned a NaN gradient from finite incoming gradients",
    "inf_backward": "returned an infinite gradient from finite incoming gradients",
}
# NOTE [Values from outside]: what a forward op that met them first is said to have done
_ENTERED = {
    "nan_forward": "received NaN that no op of the run produced",
    "inf_forward": "received ±inf that no op of the run produced",
}
_ENTERED_HINT = (
    "The input held NaN/Inf before this op read it, written where no op is seen: an "
    "optimizer step (a learning rate too large, eps=0), a write through .data or numpy, "
    "loaded data, BatchNorm's running statistics. The input statistics say which input."
)

_HINTS = {
    "log": "log of 0 is -inf and of a negative number NaN: clamp the input (x.clamp_min(eps)) "
    "or use log1p / log_softmax.",
    "div": "a division by 0: add an epsilon to the denominator or mask the zeros.",
    "sqrt": "sqrt of a negative number is NaN: clamp the input at 0 (and add an eps: its "
    "gradient at 0 is infinite).",
    "exp": "exp overflows above ~88 in float32 (~709 in float64): subtract the max first "
    "(logsumexp / softmax) or clamp the input.",
    "mul": "0 * inf is NaN: an input already holds ±inf (its origin is reported above, or it "
    "came from data); mask it before multiplying.",
    "sub": "inf - inf is NaN: both inputs hold infinities of the same sign.",
    "add": "inf + (-inf) is NaN: the inputs hold infinities of opposite signs.",
    "softmax": "a row where every input is -inf (fully masked) has no softmax: NaN.",
    "log_softmax": "a row where every input is -inf (fully masked) has no log_softmax: NaN.",
    "pow": "a negative base with a fractional exponent is NaN; 0 to a negative power is inf.",
    "rsqrt": "rsqrt of 0 is inf and of a negative number NaN: add an epsilon.",
    "SqrtBackward0": "the gradient of sqrt at 0 is infinite: add an epsilon inside the sqrt "
    "(torch.sqrt(x + eps)).",
    "PowBackward0": "the gradient of x**p with p < 1 is infinite at 0: add an epsilon.",
    "DivBackward0": "the gradient of a/b is infinite where b is 0: add an epsilon to the "
    "denominator.",
    "LogBackward0": "the gradient of log is infinite at 0: clamp the input (x.clamp_min(eps)).",
    "NormBackward1": "the gradient of a norm at 0 is undefined: add an epsilon.",
}


def _hint(o: _Origin) -> str:
    if o.detail.get("entered"):
        return _ENTERED_HINT
    h = _HINTS.get(o.op)
    if h is None and o.kind.endswith("_forward"):
        base = o.op.rstrip("_").lstrip("_").removeprefix("i")
        h = _HINTS.get(base)
    if h is None and o.kind.endswith("_forward"):
        return "Look at the input statistics: zeros, negatives or huge values explain most cases."
    if h is None:
        return (
            "A backward formula met a point where the derivative is undefined or infinite; "
            "the forward stack shows the op that recorded this node."
        )
    return h


def _finding(o: _Origin, names_by_id: dict) -> Finding:
    loc = o.stack.location() if o.stack is not None else None
    frames = o.stack.frames() if o.stack is not None else []
    what = (_ENTERED if o.detail.get("entered") else _WHAT)[o.kind]
    extra = {"step": o.first_step, "count": o.count, **o.detail}
    if o.kind.endswith("_forward"):
        extra["propagated"] = o.propagated
        names = []
        for r in o.input_refs:
            t = r()
            names.append(names_by_id.get(id(t)) if t is not None else None)
        if o.detail.get("inplace"):
            names = names[1:]
        for s, n in zip(extra["inputs"], names):
            if s is not None:
                s["name"] = n
        msg = f"{o.op} {what}"
    else:
        for out in extra["outgoing"]:
            ref = out.pop("_leaf", None)
            t = ref() if ref is not None else None
            if t is not None and id(t) in names_by_id:
                out["variable"] = names_by_id[id(t)]
        msg = f"{o.op} {what}"
        if loc is None:
            msg += " (created outside the traced run: no forward location)"
    return Finding(
        kind=o.kind,
        severity="error",
        message=msg,
        location=loc,
        stack=frames,
        hint=_hint(o),
        extra=extra,
    )


def _weak(t):
    """A weak reference to ``t``, or a dead one for what cannot be weakly referenced."""
    try:
        return weakref.ref(t)
    except TypeError:
        return _dead


def _dead():
    return None
