"""Gradient health: tracer events -> Findings (``autodiag check``). Data only, never prints.

``GradHealth`` watches one run and reports five kinds:

* ``none_grad`` (error; warning when the gradient is only ever all zero): a parameter — in an
  optimizer, in a module-level ``nn.Module``, or a module-level leaf with requires_grad — that no
  accumulating ``backward()`` of the whole run reached. One finding per parameter, with the
  reason autodiag saw happen, in this order: ``requires_grad`` never set (a plain tensor given to
  an optimizer); cut by ``detach()`` (of it, or of a tensor made from it, whose result then fed a
  recorded op); converted with ``.item()``/``.numpy()``/``.tolist()``; used only under
  ``no_grad``/``inference_mode``; never used by any op; otherwise "not reached by the backward
  of loss at file:line". Judged over the whole run, from the leaves' ``AccumulateGrad`` events,
  never from ``.grad`` at the end: a ``zero_grad(set_to_none=True)`` after the last backward
  cannot make a parameter look unreached. Not candidates: a ``Parameter`` with requires_grad
  False (frozen on purpose), leaves taken by ``autograd.grad`` or left out by
  ``backward(inputs=...)``, and leaves in the graph of a backward call that raised.
* ``unplanned_accumulation`` (error): a backward added its gradient to a ``.grad`` that still
  held the gradient of a backward from *before the parameter was last updated* (the optimizer
  step, or a manual ``p -= lr * p.grad``, bumped the parameter's version in between), and that
  parameter's gradient was never cleared in the whole run.
* ``exploding_grad`` / ``vanishing_grad`` (warning): per-parameter gradient norms, at every
  optimizer step (or at every backward for parameters no optimizer steps): above
  ``max_norm``, growing more than ``growth`` times over ``growth_steps`` steps of strict growth,
  or nonzero and below ``min_norm``.
* ``dead_relu`` (warning): units (last dimension) of a ``relu`` call site through which no
  gradient passed — exactly zero for every sample — in each of at least ``dead_steps`` backward
  calls.

NOTE [Telling accumulation from clearing]
How a gradient arrived is read at the leaf's ``AccumulateGrad`` event (after accumulation),
from the ``.grad`` tensor object and the incoming gradient ``g``: a new ``.grad`` object means it
was None before (``zero_grad()``, ``p.grad = None``); the same object holding exactly ``g``
means it was zero (``zero_grad(set_to_none=False)``, ``p.grad.zero_()``: 0 + g == g exactly);
the same object holding something else means ``g`` was added to an older gradient. Values,
not events: no list of clearing idioms to keep up to date. An older gradient is *stale* when the
parameter's version counter moved since that gradient arrived (optimizers and manual updates
write parameters in place). Micro-batch accumulation (k backward calls, one step, one clear)
adds onto gradients of the same version: never stale. Leaves with gradient hooks are not
classified (a hook may change ``g``).

>>> import autodiag as torch
>>> from autodiag.trace import tracing
>>> w = torch.nn.Parameter(torch.ones(2))
>>> opt = torch.optim.SGD([w], lr=0.1)
>>> with tracing(GradHealth()) as health:
...     for _ in range(3):
...         (w * w).sum().backward()
...         opt.step()
>>> [f.kind for f in health.findings({"w": w, "opt": opt})]
['unplanned_accumulation']
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections import deque

import numpy as np

from autodiag.analysis.findings import Finding
from autodiag.autograd import grad_mode
from autodiag.autograd.graph import AccumulateGrad
from autodiag.nn.parameter import Parameter
from autodiag.ops.pointwise import ReluBackward0
from autodiag.optim.optimizer import Optimizer
from autodiag.tensor import Tensor
from autodiag.trace import Tracer
from autodiag.trace.sites import capture_stack

CONVERT_OPS = frozenset({"item", "tolist", "numpy"})
DETACH_OPS = frozenset({"detach", "detach_"})
MAX_WALK = 10_000  # nodes walked from a detached/converted tensor to its leaves
RECENT = 8  # norms kept per parameter for the report


@dataclasses.dataclass
class Thresholds:
    """When norms are exploding or vanishing, and how long a ReLU unit must stay silent."""

    max_norm: float = 1e3
    min_norm: float = 1e-7
    growth: float = 10.0
    growth_steps: int = 3
    dead_steps: int = 5


class _Leaf:
    """What the run did with one leaf that requires grad (sites are trace Stacks)."""

    __slots__ = (
        "ref",
        "graph",
        "no_grad",
        "convert",
        "detach",
        "received",
        "nonzero",
        "grad_ref",
        "version",
        "cleared",
        "stale",
        "stale_at",
        "hooked",
        "step_norms",
        "bwd_norms",
        "updated_at",
    )

    def __init__(self, t: Tensor):
        self.ref = weakref.ref(t)
        self.graph = None  # first op that recorded a node with it
        self.no_grad = None  # (mode, stack): first use with grad disabled
        self.convert = None  # (op, stack)
        self.detach = None  # stack of a detach whose result fed a recorded op
        self.received = 0  # accumulating backward calls that reached it
        self.nonzero = False
        self.grad_ref = None  # weakref to the .grad object after the last accumulation
        self.version = None  # the leaf's version then
        self.cleared = False
        self.stale = 0
        self.stale_at = None  # (backward stack, update stack) of the first stale accumulation
        self.hooked = False
        self.step_norms = None  # _Norms over optimizer steps
        self.bwd_norms = None  # _Norms over backward calls
        self.updated_at = None  # stack of the optimizer step that updates it


class _Norms:
    """A norm series, judged as it grows (no list of every norm is kept)."""

    __slots__ = ("n", "first", "recent", "above", "below", "growth_at", "max")

    def __init__(self):
        self.n = 0
        self.first = None  # the first nonzero norm: what "growth" is measured against
        self.recent: deque = deque(maxlen=RECENT)
        self.above = []  # [count, first step]
        self.below = []
        self.growth_at = None
        self.max = 0.0

    def add(self, norm: float, th: Thresholds) -> None:
        self.n += 1
        self.recent.append(norm)
        self.max = max(self.max, norm)
        if self.first is None and norm > 0:
            self.first = norm
        if norm > th.max_norm:
            self.above = [self.above[0] + 1, self.above[1]] if self.above else [1, self.n]
        elif 0 < norm < th.min_norm:
            self.below = [self.below[0] + 1, self.below[1]] if self.below else [1, self.n]
        k = th.growth_steps
        if self.growth_at is None and len(self.recent) > k:
            w = list(self.recent)[-k - 1 :]
            # NOTE: a gradient crossing zero (a bias near its optimum) grows by any ratio from
            # a tiny start; growth counts only when it also ends above ``growth`` times the
            # first nonzero norm of the run
            if (
                w[0] > 0
                and all(a < b for a, b in zip(w, w[1:]))
                and w[-1] > th.growth * w[0]
                and w[-1] > th.growth * self.first
            ):
                self.growth_at = self.n


class _Relu:
    """One relu call site (and its position among that site's relus in a backward call)."""

    __slots__ = ("stack", "alive", "calls", "ordinal")

    def __init__(self, stack, width: int, ordinal: int):
        self.stack, self.ordinal = stack, ordinal
        self.alive = np.zeros(width, dtype=bool)
        self.calls = 0


class GradHealth(Tracer):
    """Watches a run's gradients; ``findings(namespace)`` returns the health findings."""

    def __init__(self, thresholds: Thresholds | None = None):
        self.th = thresholds or Thresholds()
        self._leaves: dict = {}  # id(leaf) -> _Leaf
        self._detached: dict = {}  # id(detached result) -> (weakref, leaf ids, stack)
        self._tasks: list = []  # [task, backward stack, relu list] of calls in progress
        self._handled: set = set()  # ids of leaves autograd.grad took, or a failed call held
        self._optimizers: dict = {}  # id(opt) -> (weakref, step stack)
        self._opt_params: dict = {}  # id(param) -> weakref
        self._relus: dict = {}  # (site, ordinal, width) -> _Relu
        self.backward_calls = 0  # accumulating calls that finished
        self.first_backward = None  # stack of the first accumulating backward() call
        self.steps = 0  # optimizer steps

    def _leaf(self, t: Tensor) -> _Leaf:
        rec = self._leaves.get(id(t))
        if rec is None or rec.ref() is not t:
            rec = self._leaves[id(t)] = _Leaf(t)
        return rec

    # --- forward: what happens to leaves ---------------------------------------------------

    def on_op(self, op, node, inputs, outputs, stack):
        detached = self._detached
        for t in inputs:
            if t.grad_fn is None:
                if t.requires_grad:
                    rec = self._leaf(t)
                    if node is not None:
                        if rec.graph is None:
                            rec.graph = stack
                    elif op in CONVERT_OPS:
                        rec.convert = rec.convert or (op, stack)
                    elif op in DETACH_OPS:
                        self._track_detach((id(t),), outputs, stack)
                    elif not grad_mode._state[0] and rec.no_grad is None:
                        rec.no_grad = (
                            "inference_mode" if grad_mode._state[1] else "no_grad",
                            stack,
                        )
                elif detached:
                    d = detached.get(id(t))
                    if d is not None and d[0]() is t:
                        if op in CONVERT_OPS:  # w.detach().numpy(): a conversion in the end
                            for lid in d[1]:
                                rec = self._leaves.get(lid)
                                if rec is not None and rec.convert is None:
                                    rec.convert = (op, stack)
                        elif node is not None:  # the cut value fed the graph: the proof
                            for lid in d[1]:
                                rec = self._leaves.get(lid)
                                if rec is not None and rec.detach is None:
                                    rec.detach = d[2]
                        else:  # follow it through ops that record nothing (w.detach() * 2)
                            self._track_detach(d[1], outputs, d[2])
            elif op in DETACH_OPS or op in CONVERT_OPS:
                ids = self._leaves_of(t.grad_fn)
                if op in DETACH_OPS:
                    self._track_detach(ids, outputs, stack)
                else:
                    for lid in ids:
                        rec = self._leaves.get(lid)
                        if rec is not None and rec.convert is None:
                            rec.convert = (op, stack)

    def _track_detach(self, leaf_ids, outputs, stack) -> None:
        table = self._detached
        for o in outputs:
            key = id(o)

            def gone(_, key=key):
                table.pop(key, None)

            table[key] = (weakref.ref(o, gone), tuple(leaf_ids), stack)

    def _leaves_of(self, node) -> list:
        """ids of the leaves (already recorded) in the graph of ``node`` (iterative, bounded)."""
        out, seen, todo = [], set(), [node]
        while todo and len(seen) < MAX_WALK:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.__class__ is AccumulateGrad:
                v = n.variable
                if v is not None and id(v) in self._leaves:
                    out.append(id(v))
                continue
            for e in n._next:
                if e is not None:
                    todo.append(e[0] if e.__class__ is tuple else e)
        return out

    # --- backward --------------------------------------------------------------------------

    def on_backward_begin(self, task):
        stack = capture_stack(1)  # the user's backward()/grad() call
        self._tasks.append([task, stack, []])
        if not task.accumulate and task.inputs is not None:
            for t in task.inputs:
                if isinstance(t, Tensor):
                    self._handled.add(id(t))

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        cls = node.__class__
        if cls is AccumulateGrad:
            self._accumulated(node, grad_outputs)
        elif cls is ReluBackward0 and grad_inputs and grad_inputs[0] is not None:
            g = grad_inputs[0]
            a = g if g.__class__ is np.ndarray else np.asarray(getattr(g, "_data", g))
            if a.ndim and node._trace is not None:
                alive = (a != 0).reshape(-1, a.shape[-1]).any(axis=0)
                self._tasks[-1][2].append((node._trace, alive))

    def _accumulated(self, node, grads) -> None:
        entry = self._tasks[-1]
        task = entry[0]
        var = node.variable
        if var is None:
            return
        if not task.accumulate or (task.leaf_targets is not None and node not in task.leaf_targets):
            self._handled.add(id(var))
            return
        grad = var._grad
        g = grads[0] if grads else None
        if grad is None or g is None:
            return
        rec = self._leaf(var)
        rec.received += 1
        data = grad._data
        if not rec.nonzero:
            rec.nonzero = bool(data.any())
        if var._hooks or node._hooks is not None:
            rec.hooked = True
        elif rec.grad_ref is not None:
            # NOTE [Telling accumulation from clearing]
            ga = g._data if isinstance(g, Tensor) else g
            if rec.grad_ref() is not grad or data is ga or np.array_equal(data, ga):
                rec.cleared = True
            elif rec.version != var._version:
                rec.stale += 1
                if rec.stale_at is None:
                    rec.stale_at = (entry[1], rec.updated_at)
        rec.grad_ref = weakref.ref(grad)
        rec.version = var._version
        if not self._optimizers:  # no optimizer (yet): norms per backward call
            if rec.bwd_norms is None:
                rec.bwd_norms = _Norms()
            rec.bwd_norms.add(_norm(data), self.th)

    def on_backward_end(self, task):
        if not self._tasks or self._tasks[-1][0] is not task:
            return
        _, stack, relus = self._tasks.pop()
        if task.error is not None:
            # a call that raised: its leaves are the script's error, not unreached parameters
            for r in task.roots:
                if isinstance(r, Tensor) and r.grad_fn is not None:
                    self._handled.update(_leaf_ids(r.grad_fn))
            return
        if relus:
            self._relu_call(relus)
        if task.accumulate:
            self.backward_calls += 1
            if self.first_backward is None:
                self.first_backward = stack

    def _relu_call(self, relus: list) -> None:
        """Fold one call's relu gradients in; sites seen several times in the call are told
        apart by forward order (backward runs them last first)."""
        per_site: dict = {}
        for st, _ in relus:
            per_site[st.site] = per_site.get(st.site, 0) + 1
        seen: dict = {}
        for st, alive in relus:
            k = seen.get(st.site, 0)
            seen[st.site] = k + 1
            ordinal = per_site[st.site] - 1 - k
            key = (st.site, ordinal, alive.shape[0])
            r = self._relus.get(key)
            if r is None:
                r = self._relus[key] = _Relu(st, alive.shape[0], ordinal)
            r.alive |= alive
            r.calls += 1

    def on_optimizer_step(self, optimizer):
        self.steps += 1
        known = self._optimizers.get(id(optimizer))
        if known is None or known[0]() is not optimizer:
            known = self._optimizers[id(optimizer)] = (weakref.ref(optimizer), capture_stack(1))
        for group in optimizer.param_groups:
            for p in group["params"]:
                self._opt_params[id(p)] = weakref.ref(p)
                if p.grad is None:
                    continue
                rec = self._leaf(p)
                rec.updated_at = rec.updated_at or known[1]
                if rec.step_norms is None:
                    rec.step_norms = _Norms()
                rec.step_norms.add(_norm(p.grad._data), self.th)

    # --- results ---------------------------------------------------------------------------

    def findings(self, namespace: dict | None = None) -> list[Finding]:
        """The run's findings, parameters named from ``namespace`` (the script's globals)."""
        namespace = namespace or {}
        params, names = self._candidates(namespace)
        out = []
        if self.backward_calls:
            for p in params:
                f = self._none_grad(p, names)
                if f is not None:
                    out.append(f)
        out += self._accumulation(names)
        for p in params:
            out += self._norm_findings(p, names)
        out += self._dead_relus()
        return out

    def _candidates(self, namespace: dict) -> tuple[list, dict]:
        """Parameters the script means to train, in a stable order, and their names."""
        from autodiag.analysis.graph import names_by_id

        names = names_by_id(namespace)
        found: dict = {}
        for ref in self._opt_params.values():
            p = ref()
            if p is not None:
                found[id(p)] = p
        for k, v in namespace.items():
            if isinstance(v, Optimizer):
                for gi, group in enumerate(v.param_groups):
                    for pi, p in enumerate(group["params"]):
                        found.setdefault(id(p), p)
                        names.setdefault(id(p), f"{k}.param_groups[{gi}]['params'][{pi}]")
            elif isinstance(v, Tensor) and not k.startswith("__"):
                if v.requires_grad and v.grad_fn is None:
                    found.setdefault(id(v), v)
            elif callable(getattr(v, "named_parameters", None)) and not isinstance(v, type):
                try:
                    for _, p in v.named_parameters():
                        if p.requires_grad:
                            found.setdefault(id(p), p)
                except Exception:  # noqa: BLE001 - a user object with an odd named_parameters
                    pass
        params = [
            p
            for p in found.values()
            if id(p) not in self._handled and not (isinstance(p, Parameter) and not p.requires_grad)
        ]
        return params, names

    def _none_grad(self, p: Tensor, names: dict) -> Finding | None:
        rec = self._leaves.get(id(p))
        rec = rec if rec is not None and rec.ref() is p else None
        name = names.get(id(p), f"a parameter of shape {list(p.shape)}")
        steps = self.backward_calls
        calls = f"{steps} backward call{'s' if steps != 1 else ''}"
        loss = self.first_backward.location() if self.first_backward is not None else None
        if rec is not None and rec.received:
            if rec.nonzero:
                return None
            return _make(
                "none_grad",
                "warning",
                f"{name}.grad is all zero after every one of {rec.received} backward calls",
                loss,
                self.first_backward,
                "Check what multiplies it in the forward pass (a zero-initialised "
                "layer, a mask, a ReLU that never fires).",
                parameter=name,
                reason="zero",
                steps=rec.received,
            )
        if not p.requires_grad:
            reason, stack, msg = (
                "requires_grad",
                None,
                (f"{name} is in an optimizer but requires_grad was never set"),
            )
            hint = f"Create it with requires_grad=True (or call {name}.requires_grad_())."
        elif rec is not None and rec.detach is not None:
            reason, stack = "detach", rec.detach
            msg = f"{name} gets no gradient: detach() cut it from the graph"
            hint = "Use the tensor itself instead of its detach() where it should learn."
        elif rec is not None and rec.convert is not None:
            op, stack = rec.convert
            reason = op
            msg = f"{name} gets no gradient: .{op}() turned its value into a non-tensor"
            hint = (
                f"Keep the computation in tensors: a value taken out with .{op}() carries "
                f"no gradient."
            )
        elif rec is not None and rec.graph is None and rec.no_grad is not None:
            mode, stack = rec.no_grad
            reason = mode
            msg = f"{name} gets no gradient: it is used only under {mode}"
            hint = f"Move the computation that should train {name} out of the {mode} block."
        elif rec is None or rec.graph is None:
            reason, stack = "unused", self.first_backward
            what = "no op of the run used it" if rec is None else "no op autograd records used it"
            msg = f"{name} gets no gradient: {what}"
            hint = (
                f"Use {name} in the forward pass, or leave it out of the optimizer and the model."
            )
        else:
            reason, stack = "not_reached", self.first_backward
            used = rec.graph.location()
            where = f" (used at line {used['line']})" if used else ""
            at = f" at line {loss['line']}" if loss else ""
            msg = f"{name} gets no gradient: not reached by the backward of loss{at}{where}"
            hint = "Make the loss depend on it, or call backward on the loss that does."
        loc = stack.location() if stack is not None else loss
        return _make(
            "none_grad",
            "error",
            f"{msg} ({calls})",
            loc,
            stack,
            hint,
            parameter=name,
            reason=reason,
            steps=steps,
            backward=loss,
        )

    def _accumulation(self, names: dict) -> list[Finding]:
        """One finding per backward site whose gradients piled up across updates."""
        by_site: dict = {}
        for rec in self._leaves.values():
            p = rec.ref()
            if p is None or not rec.stale or rec.cleared or rec.hooked:
                continue
            bstack, ustack = rec.stale_at
            entry = by_site.setdefault(bstack.site, [bstack, ustack, [], 0])
            entry[2].append(names.get(id(p), f"a parameter of shape {list(p.shape)}"))
            entry[3] = max(entry[3], rec.stale)
        out = []
        for bstack, ustack, params, stale in by_site.values():
            step = ustack.location() if ustack is not None else None
            what = f"the optimizer step at line {step['line']}" if step else "each update"
            msg = (
                f"backward() added to gradients left from before {what}: .grad is never "
                f"cleared, so {', '.join(params)} accumulated over {stale + 1} steps"
            )
            out.append(
                _make(
                    "unplanned_accumulation",
                    "error",
                    msg,
                    bstack.location(),
                    bstack,
                    "Call opt.zero_grad() at the start of each step (before backward()).",
                    parameters=params,
                    steps=stale + 1,
                    optimizer_step=step,
                )
            )
        return out

    def _norm_findings(self, p: Tensor, names: dict) -> list[Finding]:
        rec = self._leaves.get(id(p))
        if rec is None or rec.ref() is not p:
            return []
        series = rec.step_norms or rec.bwd_norms
        if series is None:
            return []
        unit = "optimizer step" if rec.step_norms is not None else "backward call"
        name = names.get(id(p), f"a parameter of shape {list(p.shape)}")
        th = self.th
        norms = [float(f"{x:.6g}") for x in series.recent]
        common = {
            "parameter": name,
            "norms": norms,
            "max_norm": series.max,
            "steps": series.n,
            "per": unit,
        }
        out = []
        if series.above or series.growth_at is not None:
            if series.above:
                n, first = series.above
                msg = (
                    f"{name}: gradient norm above {th.max_norm:g} at {n} {unit}"
                    f"{'s' if n != 1 else ''} (first at {unit} {first}, max "
                    f"{series.max:.4g})"
                )
            else:
                first = series.growth_at
                msg = (
                    f"{name}: gradient norm grew more than {th.growth:g}x over "
                    f"{th.growth_steps} {unit}s (up to {unit} {first})"
                )
            out.append(
                _make(
                    "exploding_grad",
                    "warning",
                    msg,
                    None,
                    None,
                    "Lower the learning rate, clip gradients "
                    "(nn.utils.clip_grad_norm_) or normalise the inputs.",
                    first=first,
                    **common,
                )
            )
        if series.below:
            n, first = series.below
            msg = (
                f"{name}: gradient norm below {th.min_norm:g} at {n} {unit}"
                f"{'s' if n != 1 else ''} (first at {unit} {first})"
            )
            out.append(
                _make(
                    "vanishing_grad",
                    "warning",
                    msg,
                    None,
                    None,
                    "Check for saturating activations (sigmoid/tanh), tiny "
                    "initialisations or a loss scaled down to nothing.",
                    first=first,
                    **common,
                )
            )
        return out

    def _dead_relus(self) -> list[Finding]:
        out = []
        for r in sorted(self._relus.values(), key=lambda r: r.ordinal):
            if r.calls < self.th.dead_steps:
                continue
            dead = np.flatnonzero(~r.alive).tolist()
            if not dead:
                continue
            width = r.alive.shape[0]
            nth = f" (relu #{r.ordinal + 1} on this line)" if r.ordinal else ""
            msg = (
                f"{len(dead)} of {width} relu units{nth} passed no gradient for any sample "
                f"in {r.calls} backward calls"
            )
            out.append(
                _make(
                    "dead_relu",
                    "warning",
                    msg,
                    r.stack.location(),
                    r.stack,
                    "Lower the learning rate, use leaky_relu, or check the "
                    "initialisation of the layer before this relu.",
                    units=dead,
                    width=width,
                    steps=r.calls,
                    ordinal=r.ordinal,
                )
            )
        return out


def _norm(a: np.ndarray) -> float:
    r = a.ravel()
    return math.sqrt(abs(float(np.vdot(r, r))))


def _leaf_ids(node) -> set:
    """ids of the variables of the AccumulateGrad nodes under ``node`` (iterative)."""
    out, seen, todo = set(), set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.__class__ is AccumulateGrad:
            if n.variable is not None:
                out.add(id(n.variable))
            continue
        for e in n._next:
            if e is not None:
                todo.append(e[0] if e.__class__ is tuple else e)
    return out


def _make(kind, severity, message, loc, stack, hint, **extra) -> Finding:
    return Finding(
        kind=kind,
        severity=severity,
        message=message,
        location=loc,
        stack=stack.frames() if stack is not None else [],
        hint=hint,
        extra=extra,
    )
