"""Gradient health: tracer events -> Findings (``autodiag check``). Data only, never prints.

``GradHealth`` watches one run and keeps what every detector needs to know about the run's
parameters (which leaves the script means to train and what it calls them, the backward calls,
the optimizer steps); it hands each event to its detectors, one per concern, each declaring the
finding kinds it reports (``KINDS`` is theirs, in order):

* ``NoneGrad``: ``none_grad``, a parameter no backward reached, and why.
* ``UnplannedAccumulation``: ``unplanned_accumulation``, gradients piled up across updates.
* ``GradNorms``: ``exploding_grad`` / ``vanishing_grad``, per-parameter gradient norms.
* ``DeadRelu``: ``dead_relu``, relu units through which no gradient passed.

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
>>> KINDS
('none_grad', 'unplanned_accumulation', 'exploding_grad', 'vanishing_grad', 'dead_relu')

A run watched by some of the detectors only:

>>> with tracing(GradHealth(detectors=[NoneGrad])) as health:
...     for _ in range(3):
...         (w * w).sum().backward()
...         opt.step()
>>> health.findings({"w": w, "opt": opt})
[]
"""

from __future__ import annotations

import dataclasses
import math
import traceback
import weakref
from collections import deque

import numpy as np

from autodiag import inspect
from autodiag._interrupts import callback
from autodiag._look import attributes, is_a, look, static_attr, variables
from autodiag.analysis.findings import Finding
from autodiag.analysis.flow import Flow
from autodiag.core.sumsq import sum_of_squares
from autodiag.nn.parameter import Parameter
from autodiag.optim.optimizer import Optimizer
from autodiag.tensor import Tensor
from autodiag.trace import Tracer, events
from autodiag.trace.per_thread import PerThread
from autodiag.trace.sites import capture_stack, live_user_frames

CONVERT_OPS = frozenset({"item", "tolist", "numpy"})
DETACH_OPS = frozenset({"detach", "detach_"})
# reads of a tensor's shape, not of its values: no use of a parameter. (--engine torch sees the
# ``dim()``/``size()`` reads of PyTorch's nn.init when the script calls it, as in
# ``nn.init.xavier_uniform_(aside.weight)``; a module's own construction is not reported: NOTE
# [Module construction] in engines/torch/observe.py)
SHAPE_READS = frozenset(
    {"dim", "ndimension", "size", "numel", "nelement", "stride", "is_contiguous"}
)
MAX_WALK = 10_000  # nodes walked from a detached/converted tensor to its leaves
MAX_FRAMES_SCANNED = 16  # user frames whose locals are searched for parameters
RECENT = 8  # norms kept per parameter for the report


@dataclasses.dataclass
class Thresholds:
    """When norms are exploding or vanishing, and how long a ReLU unit must stay silent."""

    max_update: float = 1.0  # ||p_new - p_old|| / ||p_old|| of one update
    min_norm: float = 1e-7
    growth: float = 10.0
    growth_steps: int = 3
    dead_steps: int = 5


# --- what the run did with its parameters: shared by every detector ---------------------------


class _Leaf:
    """One leaf that requires grad: what the detectors share about it, and each detector's own
    record of it (``state``, by detector)."""

    __slots__ = (
        "ref",
        "shape",
        "name",
        "candidate",
        "needs_grad",
        "frozen",
        "handled",
        "state",
        "in_optimizer",
    )

    def __init__(self, t: Tensor):
        self.ref = weakref.ref(t)
        # NOTE [Findings outlive their tensors]: a training loop inside a function drops its
        # model when the function returns, before the findings are made; what a finding says
        # about a parameter (name, shape, whether it requires grad) is copied here while it
        # lives, so the record can be judged after the tensor is gone.
        self.shape = list(t.shape)
        self.name = None  # the name the script's frames gave it (set by GradHealth.adopt)
        self.candidate = False  # the script means to train it: in an optimizer, model, variable
        self.needs_grad = t.requires_grad
        self.frozen = False  # a Parameter with requires_grad False: frozen on purpose
        self.handled = False  # autograd.grad took it, or it was in a backward call that raised
        self.state: dict = {}  # detector -> its record of this leaf
        self.in_optimizer = False  # an optimizer of the run holds it (NOTE [Untrained on purpose])


class HealthDetector:
    """One concern of ``GradHealth``: the finding kinds it reports (``KINDS``), the events it
    needs (every hook receives the ``GradHealth`` that runs it, ``health``) and its findings.
    The base class ignores every event; ``GradHealth`` calls only the hooks a detector
    overrides."""

    KINDS: tuple[str, ...] = ()
    State = None  # the class of its record of one leaf (``of``), if it keeps one
    # the names of the nodes whose ``on_node_backward`` it reads (None: every node); the
    # others are not handed to it (one dict lookup per node for all the detectors)
    NODES: frozenset | None = None
    # the names of the ops whose ``on_op`` it reads (None: every op), as ``NODES``
    OPS: frozenset | None = None

    def of(self, rec: _Leaf):
        """This detector's record of the leaf ``rec`` (made on first use)."""
        s = rec.state.get(self)
        if s is None:
            s = rec.state[self] = self.State()
        return s

    def keeps(self, rec: _Leaf) -> bool:
        """Whether ``rec`` must be judged even though its tensor died and is no candidate."""
        return False

    def on_op(self, health, op, node, inputs, outputs, stack) -> None:
        """A traced op ran (``Tracer.on_op``)."""

    def on_backward_begin(self, health, task) -> None:
        """A backward/grad call began (every call)."""

    def on_node_backward(self, health, node, grad_outputs, grad_inputs) -> None:
        """A node that is not a leaf's ``AccumulateGrad`` ran its backward."""

    def on_accumulated(self, health, rec: _Leaf, var, node, g, grad, data, stack) -> None:
        """An accumulating backward added ``g`` into ``var.grad`` (``grad``, its array
        ``data``); ``stack`` is the backward call's."""

    def on_backward_end(self, health, task, stack) -> None:
        """The backward call of the matching ``on_backward_begin`` ended (``task.error`` if
        it raised); ``stack`` is the call's."""

    def on_parameter_step(self, health, rec: _Leaf, p, stack) -> None:
        """An optimizer (its step at ``stack``) stepped ``p``, which has a gradient."""

    def findings(self, health, every: list, records: list, names: dict) -> list[Finding]:
        """Its findings: ``every`` leaf record, the candidate ``records`` (parameters the script
        means to train, neither frozen nor handled), ``names`` of the script's variables."""
        return []


def _hooks(detectors, name: str) -> tuple:
    """The bound ``name`` hooks of the detectors that override it, in order."""
    base = getattr(HealthDetector, name)
    return tuple(getattr(d, name) for d in detectors if getattr(type(d), name) is not base)


class GradHealth(Tracer):
    """Watches a run's gradients; ``findings(namespace)`` returns the health findings of its
    ``detectors`` (classes; all of ``DETECTORS`` unless given), in their order."""

    observes_torch = True  # reads nodes and tensors through the seam alone (engines/torch)

    def __init__(self, thresholds: Thresholds | None = None, detectors=None):
        self.th = thresholds or Thresholds()
        self.detectors = [d() for d in (DETECTORS if detectors is None else detectors)]
        ds = self.detectors
        self._op_hooks = _hooks(ds, "on_op")
        self._op_hooks_by_name: dict = {}  # op name -> the hooks that read it
        self._begin_hooks = _hooks(ds, "on_backward_begin")
        self._node_hooks = _hooks(ds, "on_node_backward")
        self._node_hooks_by_class: dict = {}  # node class -> the hooks that read it, or _LEAF
        self._accumulated_hooks = _hooks(ds, "on_accumulated")
        self._end_hooks = _hooks(ds, "on_backward_end")
        self._step_hooks = _hooks(ds, "on_parameter_step")
        self._leaves: dict = {}  # id(leaf) -> _Leaf of a live leaf (or of one that died)
        self._retired: list = []  # _Leaf records of dead leaves still to judge, id reused
        # [task, backward stack] of this thread's calls in progress (two threads' backward
        # calls at once are two stacks, not one: trace/per_thread.py)
        self._here = PerThread()
        self._optimizers: dict = {}  # id(opt) -> (weakref, step stack)
        self.optimizers_seen = False  # the run made an optimizer (stepped, or in its frames)
        self._module_names: dict = {}  # id(module) -> (weakref, the name the script gave it)
        # id(type) -> type, of the types whose values hold no parameter, whatever the value (a
        # str, a function, a module): skipped when the frames are looked at again, every
        # backward call (by id: hashing a user's class may run its metaclass's code)
        self._inert: dict = {}
        self.backward_calls = 0  # accumulating calls that finished
        self.first_backward = None  # stack of the first accumulating backward() call
        self.steps = 0  # optimizer steps
        # the optimizer step (by index: ``steps`` when it began) whose closure the accumulating
        # backward in progress runs in, or None (NOTE [Closure evaluations])
        self.evaluating: int | None = None

    def detector(self, cls: type[HealthDetector]) -> HealthDetector:
        """The detector of class ``cls`` this tracer runs (``KeyError`` if it runs none)."""
        for d in self.detectors:
            if type(d) is cls:
                return d
        raise KeyError(f"GradHealth runs no {cls.__name__} detector")

    def leaf(self, t: Tensor) -> _Leaf:
        """The record of the leaf ``t`` (made on first sight)."""
        rec = self._leaves.get(id(t))
        if rec is None or rec.ref() is not t:
            if rec is not None and (rec.candidate or any(d.keeps(rec) for d in self.detectors)):
                self._retired.append(rec)  # its tensor died and the id was reused
            rec = self._leaves[id(t)] = _Leaf(t)
        return rec

    def known(self, leaf_id: int) -> _Leaf | None:
        """The record kept under ``id(leaf)``, if any (its tensor may have died)."""
        return self._leaves.get(leaf_id)

    @property
    def stepping(self) -> bool:
        """Whether an optimizer has stepped yet."""
        return bool(self._optimizers)

    def module_name(self, module) -> str | None:
        """The name the script gave ``module`` (a variable holding it), if it did."""
        named = self._module_names.get(id(module))
        return named[1] if named is not None and named[0]() is module else None

    def adopt(self, t: Tensor, name: str | None, optimizer: bool = False) -> _Leaf:
        """``t`` is a parameter the script means to train, known as ``name`` (``optimizer``:
        an optimizer holds it); its record."""
        rec = self.leaf(t)
        rec.candidate = True
        if optimizer:
            rec.in_optimizer = self.optimizers_seen = True
        rec.needs_grad = needs = t.requires_grad
        rec.frozen = not needs and _is_parameter(t)  # (the type test only when it matters)
        if rec.name is None and name is not None:
            rec.name = name
        return rec

    def _adopt_frames(self) -> None:
        """Adopt the parameters the user's live frames hold, named as those frames name them:
        a loop in ``train()`` or ``Trainer.run`` is judged like one at module level."""
        for i, f in enumerate(live_user_frames(2)):
            self._adopt_namespace(f.f_locals, with_self=True)
            if f.f_code.co_name == "<module>" or i >= MAX_FRAMES_SCANNED:
                break  # the script's module frame: what calls it is not the script

    # --- events, handed on to the detectors ------------------------------------------------

    def on_op(self, op, node, inputs, outputs, stack):
        # NOTE: leaves are recorded as ops first use them, whatever the detectors: findings
        # that list parameters list them in that order
        for t in inputs:
            if t.grad_fn is None and t.requires_grad:
                self.leaf(t)
        hooks = self._op_hooks_by_name.get(op)
        if hooks is None:
            hooks = self._op_hooks_by_name[op] = tuple(
                h for h in self._op_hooks if h.__self__.OPS is None or op in h.__self__.OPS
            )
        for hook in hooks:
            hook(self, op, node, inputs, outputs, stack)

    def on_backward_begin(self, task):
        stack = capture_stack(1)  # the user's backward()/grad() call
        self._here.tasks.append([task, stack])
        if task.accumulate:
            self.evaluating = self.steps if _in_optimizer_step() else None
        for hook in self._begin_hooks:
            hook(self, task)
        if not task.accumulate and task.inputs is not None:
            for t in task.inputs:
                if inspect.is_tensor(t) and t.grad_fn is None:
                    self.leaf(t).handled = True

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        # by the node's class: whether it is a leaf's (each engine's AccumulateGrad is a class
        # of its own), else the hooks that read it
        hooks = self._node_hooks_by_class.get(node.__class__)
        if hooks is None:
            hooks = self._node_hooks_by_class[node.__class__] = self._hooks_of(node)
        if hooks is _LEAF:
            self._accumulated(node, grad_outputs)
            return
        for hook in hooks:
            hook(self, node, grad_outputs, grad_inputs)

    def _hooks_of(self, node):
        if inspect.is_leaf_node(node):
            return _LEAF
        name = node.__class__.__name__
        return tuple(
            h for h in self._node_hooks if h.__self__.NODES is None or name in h.__self__.NODES
        )

    def _accumulated(self, node, grads) -> None:
        task, stack = self._here.tasks[-1]
        var = inspect.leaf_variable(node)
        if var is None:
            return
        if not task.accumulate or (task.leaf_targets is not None and node not in task.leaf_targets):
            self.leaf(var).handled = True
            return
        grad = inspect.grad(var)
        g = grads[0] if grads else None
        if grad is None or g is None:
            return
        rec = self.leaf(var)
        data = inspect.array(grad)
        for hook in self._accumulated_hooks:
            hook(self, rec, var, node, g, grad, data, stack)

    def on_backward_end(self, task):
        tasks = self._here.tasks
        if not tasks or tasks[-1][0] is not task:
            return
        _, stack = tasks.pop()
        for hook in self._end_hooks:
            hook(self, task, stack)
        if task.error is not None:
            # a call that raised: its leaves are the script's error, not unreached parameters
            for r in task.roots:
                if inspect.is_tensor(r) and r.grad_fn is not None:
                    for v in _leaf_variables(r.grad_fn):
                        self.leaf(v).handled = True
            return
        if task.accumulate:
            self.backward_calls += 1
            if self.first_backward is None:
                self.first_backward = stack
            self._adopt_frames()

    def on_optimizer_step(self, optimizer):
        self.steps += 1
        known = self._optimizers.get(id(optimizer))
        if known is None or known[0]() is not optimizer:
            known = self._optimizers[id(optimizer)] = (weakref.ref(optimizer), capture_stack(1))
            self._adopt_frames()  # name its parameters as the script's frames name them
        hooks = self._step_hooks
        for group in optimizer.param_groups:
            for p in group["params"]:
                rec = self.adopt(p, None, optimizer=True)
                if hooks and p.grad is not None:
                    for hook in hooks:
                        hook(self, rec, p, known[1])

    # --- results ---------------------------------------------------------------------------

    def findings(self, *namespaces: dict) -> list[Finding]:
        """The run's findings, parameters named from ``namespaces`` (the script's globals, then
        the locals of the frames that were live when it failed: ``Run.scopes``)."""
        from autodiag.analysis.graph import names_by_id

        for namespace in namespaces:
            self._adopt_namespace(namespace or {}, with_self=True)
        names = names_by_id(*[ns for ns in namespaces if ns])
        every = self._records()
        records = [r for r in every if r.candidate and not r.handled and not r.frozen]
        out = []
        for d in self.detectors:
            out += d.findings(self, every, records, names)
        return out

    def parameters(self, *namespaces: dict) -> list:
        """``(record, name)`` of each parameter the script trained (the candidates of
        ``findings``: neither frozen nor handled), named as the findings name them, in the
        order ops first used them."""
        from autodiag.analysis.graph import names_by_id

        for namespace in namespaces:
            self._adopt_namespace(namespace or {}, with_self=True)
        names = names_by_id(*[ns for ns in namespaces if ns])
        return [
            (r, _name(r, names))
            for r in self._records()
            if r.candidate and not r.handled and not r.frozen
        ]

    def _records(self) -> list:
        """Every leaf record, of live and of dead tensors (what they said is copied in), with a
        live tensor's state read afresh."""
        out = list(self._retired)
        for rec in self._leaves.values():
            t = rec.ref()
            if t is not None:
                rec.needs_grad = t.requires_grad
                rec.frozen = _is_parameter(t) and not t.requires_grad
                rec.shape = list(t.shape)
            out.append(rec)
        return out

    def _adopt_namespace(self, namespace: dict, with_self: bool = False) -> None:
        """Adopt the parameters ``namespace`` (globals or a frame's locals) holds: its
        optimizers' parameters, its leaf tensors that require grad, its modules' parameters
        (with ``with_self``, also those of ``self``'s attributes, one level down)."""
        inert = self._inert
        for k, v in variables(namespace):
            if k == "self" and with_self:
                attrs = attributes(v)
                if attrs:
                    self._adopt_namespace({f"self.{a}": x for a, x in variables(attrs)})
                continue
            if id(type(v)) not in inert:
                look(self._adopt_value, k, v)

    def _adopt_value(self, k: str, v) -> None:
        """Adopt what the variable ``k`` holds (a user object: the caller skips it if it
        raises)."""
        if _is_optimizer(v):
            for gi, group in enumerate(v.param_groups):
                for pi, p in enumerate(group["params"]):
                    if inspect.is_tensor(p):
                        self.adopt(p, f"{k}.param_groups[{gi}]['params'][{pi}]", optimizer=True)
        elif inspect.is_tensor(v):
            if v.requires_grad and v.grad_fn is None:
                self.adopt(v, k)
        elif not is_a(v, type) and _has_method(v, "named_parameters"):
            if id(v) not in self._module_names:
                self._module_names[id(v)] = (weakref.ref(v), k)
            for pname, p in v.named_parameters():
                if inspect.is_tensor(p) and p.requires_grad:
                    self.adopt(p, f"{k}.{pname}")
        elif not _STEPPERS.get(type(v)):
            # neither an optimizer (its type has no step method), a tensor nor a module, by
            # its type alone
            self._inert[id(type(v))] = type(v)


_LEAF = object()  # GradHealth._node_hooks_by_class: a leaf's node (its accumulation is read)


def _is_parameter(t) -> bool:
    """An ``nn.Parameter`` of autodiag's, or of an engine it observes."""
    return is_a(t, Parameter) or inspect.foreign_parameter(t)


def _is_optimizer(v) -> bool:
    """An optimizer of autodiag's, or of an engine it observes (PyTorch's ``torch.optim``: a
    class with ``step``, an instance with a ``param_groups`` list)."""
    if is_a(v, Optimizer):
        return True
    t = type(v)
    stepper = _STEPPERS.get(t)
    if stepper is None:  # NOTE: asked of every variable of the frames at each backward call
        stepper = _STEPPERS[t] = not issubclass(t, type) and static_attr(v, "step") is not None
    return stepper and type(attributes(v).get("param_groups")) is list


_STEPPERS: dict = {}  # type -> whether its instances have a step method
_METHODS: dict = {}  # (type, name) -> whether the type has that method


def _has_method(v, name: str) -> bool:
    """Whether ``v``'s class defines ``name`` (asked once per class: the frames' variables are
    looked at at every backward call)."""
    key = (type(v), name)
    has = _METHODS.get(key)
    if has is None:
        has = _METHODS[key] = static_attr(type(v), name) is not None
    return has


# --- none_grad -----------------------------------------------------------------------------


class _Uses:
    """What the run did with one leaf, as far as why it got no gradient goes (sites are trace
    Stacks)."""

    __slots__ = ("graph", "no_grad", "convert", "detach", "used", "received", "nonzero")

    def __init__(self):
        self.graph = None  # first op that recorded a node with it
        self.no_grad = None  # (mode, stack): first use with grad disabled
        self.convert = None  # (op, stack, of a tensor computed from it or its detach())
        self.detach = None  # stack of a detach whose result fed a recorded op
        self.used = False  # some op of the run took it as an input
        self.received = 0  # accumulating backward calls that reached it
        self.nonzero = False


class NoneGrad(HealthDetector):
    """``none_grad`` (error; warning when the gradient is only ever all zero): a parameter — in
    an optimizer, in a module-level ``nn.Module``, or a module-level leaf with requires_grad —
    that no accumulating ``backward()`` of the whole run reached. One finding per parameter,
    with the reason autodiag saw happen, in this order: ``requires_grad`` never set (a plain
    tensor given to an optimizer); cut by ``detach()`` (of it, or of a tensor made from it,
    whose result then fed a recorded op); converted with ``.item()``/``.numpy()``/
    ``.tolist()``; used only under ``no_grad``/``inference_mode``; never used by any op;
    otherwise "not reached by the backward of loss at file:line". Judged over the whole run,
    from the leaves' ``AccumulateGrad`` events, never from ``.grad`` at the end: a
    ``zero_grad(set_to_none=True)`` after the last backward cannot make a parameter look
    unreached. Not candidates: a ``Parameter`` with requires_grad False (frozen on purpose),
    leaves taken by ``autograd.grad`` or left out by ``backward(inputs=...)``, and leaves in
    the graph of a backward call that raised."""

    KINDS = ("none_grad",)
    State = _Uses

    def __init__(self):
        self._detached: dict = {}  # id(detached result) -> (weakref, leaf ids, stack, derived)

    def on_op(self, health, op, node, inputs, outputs, stack):
        detached = self._detached
        for t in inputs:
            if t.grad_fn is None:
                if t.requires_grad:
                    use = self.of(health.leaf(t))
                    if node is not None or not (
                        op in SHAPE_READS or op[-1:] == "_" and t is inputs[0]
                    ):  # a value written in place without a graph (initialised) is not used
                        use.used = True
                    if node is not None:
                        if use.graph is None:
                            use.graph = stack
                    elif op in CONVERT_OPS:
                        use.convert = use.convert or (op, stack, False)
                    elif op in DETACH_OPS:
                        self._track_detach((id(t),), outputs, stack, False)
                    elif use.no_grad is None and (mode := inspect.grad_mode()) != "grad":
                        use.no_grad = (mode, stack)
                elif detached:
                    d = detached.get(id(t))
                    if d is not None and d[0]() is t:
                        if op in CONVERT_OPS:  # w.detach().numpy(): a conversion in the end
                            for use in self._uses(health, d[1]):
                                if use.convert is None:
                                    use.convert = (op, stack, d[3])
                        elif node is not None:  # the cut value fed the graph: the proof
                            for use in self._uses(health, d[1]):
                                if use.detach is None:
                                    use.detach = d[2]
                        else:  # follow it through ops that record nothing (w.detach() * 2)
                            self._track_detach(d[1], outputs, d[2], d[3])
            elif op in DETACH_OPS or op in CONVERT_OPS:
                ids = self._leaves_of(health, t.grad_fn)
                if op in DETACH_OPS:
                    self._track_detach(ids, outputs, stack, True)
                else:
                    for use in self._uses(health, ids):
                        if use.convert is None:
                            use.convert = (op, stack, True)

    def _uses(self, health, leaf_ids) -> list:
        """The records of the leaves ``leaf_ids`` that are known."""
        recs = (health.known(lid) for lid in leaf_ids)
        return [self.of(rec) for rec in recs if rec is not None]

    def _track_detach(self, leaf_ids, outputs, stack, derived: bool) -> None:
        """Follow the detached ``outputs`` of the leaves ``leaf_ids`` (``derived``: detached
        from a tensor computed from them, not from the leaves themselves)."""
        table = self._detached
        for o in outputs:
            key = id(o)

            @callback
            def gone(_, key=key):
                table.pop(key, None)

            table[key] = (weakref.ref(o, gone), tuple(leaf_ids), stack, derived)

    @staticmethod
    def _leaves_of(health, node) -> list:
        """ids of the leaves (already recorded) in the graph of ``node`` (iterative, bounded)."""
        return [id(v) for v in _leaf_variables(node, MAX_WALK) if health.known(id(v)) is not None]

    def on_accumulated(self, health, rec, var, node, g, grad, data, stack):
        use = self.of(rec)
        use.received += 1
        if not use.nonzero:
            use.nonzero = bool(data.any())

    def findings(self, health, every, records, names):
        if not health.backward_calls:
            return []
        out = []
        for rec in records:
            f = self._none_grad(health, rec, _name(rec, names))
            if f is not None:
                out.append(f)
        return out

    def _none_grad(self, health, rec: _Leaf, name: str) -> Finding | None:
        if 0 in rec.shape:
            # no elements, nothing to learn: ``nn.Parameter(torch.empty(0))`` is the idiom that
            # finds a module's device (pytorch/examples time_sequence_prediction), never used
            return None
        use = self.of(rec)
        steps = health.backward_calls
        calls = f"{steps} backward call{'s' if steps != 1 else ''}"
        first_backward = health.first_backward
        loss = first_backward.location() if first_backward is not None else None
        if use.received:
            if use.nonzero:
                return None
            return _make(
                "none_grad",
                "warning",
                f"{name}.grad is all zero after every one of {use.received} backward calls",
                loss,
                first_backward,
                "Check what multiplies it in the forward pass (a zero-initialised "
                "layer, a mask, a ReLU that never fires).",
                parameter=name,
                reason="zero",
                steps=use.received,
            )
        if health.optimizers_seen and not rec.in_optimizer and use.used:
            # NOTE [Untrained on purpose]: the run trains with optimizers, none of them holds
            # this parameter, and the script used it (ran it in a graph or under no_grad, read
            # it out with detach()/.numpy()): a module it uses but does not train (the LSTM
            # tutorial's demonstration ``lstm = nn.LSTM(3, 3)`` run once, a DQN target network
            # under no_grad, a model whose values start another, a frozen layer used through
            # ``w.detach()``), so no gradient is no bug. One an optimizer holds is judged; so
            # is one no op used (a layer built and forgotten), and every parameter of a script
            # without optimizer (manual SGD: ``p -= lr * p.grad``)
            return None
        convert = use.convert
        if convert is not None and (
            _read_only(convert[1]) or use.graph is not None and not convert[2]
        ):
            # NOTE: a read to print or log it is not the cause, nor is a read of the parameter
            # itself when it also fed the graph (then the graph missed the loss elsewhere)
            convert = None
        if not rec.needs_grad:
            reason, stack, msg = (
                "requires_grad",
                None,
                (f"{name} is in an optimizer but requires_grad was never set"),
            )
            hint = f"Create it with requires_grad=True (or call {name}.requires_grad_())."
        elif use.detach is not None:
            reason, stack = "detach", use.detach
            msg = f"{name} gets no gradient: detach() cut it from the graph"
            hint = "Use the tensor itself instead of its detach() where it should learn."
        elif convert is not None:
            op, stack, _ = convert
            reason = op
            msg = f"{name} gets no gradient: .{op}() turned its value into a non-tensor"
            hint = (
                f"Keep the computation in tensors: a value taken out with .{op}() carries "
                f"no gradient."
            )
        elif use.graph is None and use.no_grad is not None:
            mode, stack = use.no_grad
            reason = mode
            msg = f"{name} gets no gradient: it is used only under {mode}"
            hint = f"Move the computation that should train {name} out of the {mode} block."
        elif use.graph is None:
            reason, stack = "unused", first_backward
            what = "no op autograd records used it" if use.used else "no op of the run used it"
            if use.convert is not None:  # read to print it only: say so, it is not the cause
                read = use.convert[1].location()
                at = f" at line {read['line']}" if read else ""
                what += f" (its value was only read, with .{use.convert[0]}(){at})"
            msg = f"{name} gets no gradient: {what}"
            hint = (
                f"Use {name} in the forward pass, or leave it out of the optimizer and the model."
            )
        else:
            reason, stack = "not_reached", first_backward
            used = use.graph.location()
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


# --- unplanned_accumulation ----------------------------------------------------------------


class _Arrivals:
    """How one leaf's gradients arrived (cleared before, or added to a stale one), and which
    updates consumed a stale sum."""

    __slots__ = (
        "grad_ref",
        "grad_version",
        "version",
        "cleared",
        "mixed_at",
        "stale",
        "stale_at",
        "order",
        "hooked",
    )

    def __init__(self):
        self.grad_ref = None  # weakref to the .grad object after the last accumulation
        self.grad_version = None  # that .grad's version then (an in-place zero_() bumps it)
        self.version = None  # the leaf's version then
        self.cleared = False  # its gradient was cleared at least once in the run
        # the stack of the backward call that first added to a gradient left from before the
        # leaf's last update, while that stale sum is still in ``.grad`` (None: there is none)
        self.mixed_at = None
        self.stale = 0  # updates that consumed a stale sum
        self.stale_at = None  # (backward stack, update stack) of the first of them
        self.order = None  # the consuming optimizer's rank of the leaf (NOTE [Listed in order])
        self.hooked = False


class UnplannedAccumulation(HealthDetector):
    """``unplanned_accumulation`` (error): an update of a parameter (its optimizer's step, or a
    manual ``p -= lr * p.grad``) consumed a ``.grad`` in which a backward had added its gradient
    to the gradient of a backward from *before the parameter was last updated*, with no clear in
    between.

    NOTE [Telling accumulation from clearing]
    How a gradient arrived is read at the leaf's ``AccumulateGrad`` event (after accumulation),
    from the ``.grad`` tensor object and the incoming gradient ``g``: a new ``.grad`` object
    means it was None before (``zero_grad()``, ``p.grad = None``); the same object holding
    exactly ``g`` means it was zero (``zero_grad(set_to_none=False)``, ``p.grad.zero_()``:
    0 + g == g exactly); the same object holding something else means ``g`` was added to an
    older gradient. Values, not events: no list of clearing idioms to keep up to date. An older
    gradient is *stale* when the parameter's version counter moved since that gradient arrived
    (optimizers and manual updates write parameters in place). Micro-batch accumulation (k
    backward calls, one step, one clear) adds onto gradients of the same version: never stale.
    Leaves with gradient hooks are not classified (a hook may change ``g``).

    NOTE [A stale sum is a bug only when an update consumes it]
    A stale sum in ``.grad`` is harmless until an update of *that* parameter reads it: in the
    GAN loop (``netD.zero_grad(); errD.backward(); optimizerD.step(); netG.zero_grad();
    errG.backward(); optimizerG.step()``) ``errG.backward()`` adds to netD's gradient from
    before ``optimizerD.step()``, but only ``optimizerG`` steps before the next
    ``netD.zero_grad()`` clears it. The sum is consumed when the parameter's own optimizer steps
    while ``.grad`` is still that object, untouched since (``on_parameter_step``), or when the
    parameter's version moved while it held the sum (a manual update: seen at the next
    accumulation, or at the end of the run)."""

    KINDS = ("unplanned_accumulation",)
    State = _Arrivals

    def __init__(self):
        self._ranked = 0  # leaves ranked so far (NOTE [Listed in order])

    def keeps(self, rec):
        s = rec.state.get(self)
        return s is not None and s.stale > 0

    def on_accumulated(self, health, rec, var, node, g, grad, data, stack):
        s = self.of(rec)
        version = inspect.version(var)
        if inspect.has_hooks(var) or inspect.has_hooks(node):
            s.hooked = True
        elif s.grad_ref is not None:
            if s.mixed_at is not None and s.version != version:
                self._consumed(s, None)  # an update that was no optimizer step read the sum
            # NOTE [Telling accumulation from clearing]
            ga = inspect.values(g)
            if s.grad_ref() is not grad or _same_values(data, ga):
                s.cleared = True
                s.mixed_at = None
            elif s.version != version and s.mixed_at is None:
                s.mixed_at = stack
        s.grad_ref = weakref.ref(grad)
        s.grad_version = inspect.version(grad)
        s.version = version

    def on_parameter_step(self, health, rec, p, stack):
        s = self.of(rec)
        if s.mixed_at is None:
            return
        grad = inspect.grad(p)
        # written in place since the backward (clip_grad_norm_, or zero_()): consumed unless
        # it was zeroed
        if grad is s.grad_ref() and (
            inspect.version(grad) == s.grad_version or inspect.array(grad).any()
        ):
            self._consumed(s, stack)
            # NOTE [Listed in order]: the leaves of a finding are listed in the order their
            # optimizer holds them (the model's order), the same on every engine, not in the
            # order an engine's backward reached them
            if s.order is None:
                s.order = self._ranked
                self._ranked += 1
        s.mixed_at = None

    def _consumed(self, s: _Arrivals, update_stack) -> None:
        s.stale += 1
        if s.stale_at is None:
            s.stale_at = (s.mixed_at, update_stack)
        s.mixed_at = None

    def findings(self, health, every, records, names):
        """One finding per backward site whose gradients piled up across updates."""
        by_site: dict = {}
        for i, rec in enumerate(every):
            s = rec.state.get(self)
            if s is None or s.hooked:
                continue
            t = rec.ref()
            if s.mixed_at is not None and t is not None and inspect.version(t) != s.version:
                self._consumed(s, None)  # the run's last update read the sum
            if not s.stale:
                continue
            bstack, ustack = s.stale_at
            entry = by_site.setdefault(bstack.site, [bstack, ustack, [], 0, True])
            key = (0, s.order) if s.order is not None else (1, i)
            entry[2].append((key, _name(rec, names)))
            entry[3] = max(entry[3], s.stale)
            entry[4] = entry[4] and not s.cleared
        out = []
        for bstack, ustack, params, stale, never in by_site.values():
            params = [name for _, name in sorted(params, key=lambda kn: kn[0])]
            step = ustack.location() if ustack is not None else None
            what = f"the optimizer step at line {step['line']}" if step else "each update"
            how = "is never cleared" if never else "is not cleared before that update"
            msg = (
                f"backward() added to gradients left from before {what}: .grad {how}, so "
                f"{', '.join(params)} accumulated over {stale + 1} steps"
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


# --- exploding_grad / vanishing_grad ---------------------------------------------------------


class _Norms:
    """A norm series, judged as it grows (no list of every norm is kept: ``flow`` holds it
    downsampled, for the gradient-flow plot)."""

    __slots__ = ("n", "first", "recent", "below", "growth_at", "max", "flow", "moves")

    def __init__(self):
        self.n = 0
        # per norm of ``recent``: whether the parameter moved since the norm before it
        self.moves: deque = deque(maxlen=RECENT)
        self.first = None  # the first nonzero norm: what "growth" is measured against
        self.recent: deque = deque(maxlen=RECENT)
        self.below = []
        self.growth_at = None
        self.max = 0.0
        self.flow = Flow()

    def add(
        self, norm: float, th: Thresholds, x: int, floor: float = 0.0, moved: bool = True
    ) -> None:
        """Judge the norm at step ``x`` (optimizer step or backward call of the run);
        ``floor``, the rounding noise of the gradient that reached the parameter (NOTE
        [Cancelled gradients]): a norm at or below it is a zero, not a vanishing gradient;
        ``moved``, whether the parameter changed since the norm before (NOTE [Frozen
        parameters])."""
        self.flow.add(x, norm)
        self.n += 1
        self.recent.append(norm)
        self.moves.append(moved)
        self.max = max(self.max, norm)
        if self.first is None and norm > 0:
            self.first = norm
        if max(0.0, floor) < norm < th.min_norm:
            self.below = [self.below[0] + 1, self.below[1]] if self.below else [1, self.n]
        k = th.growth_steps
        if self.growth_at is None and len(self.recent) > k:
            w = list(self.recent)[-k - 1 :]
            # NOTE: a gradient crossing zero (a bias near its optimum) grows by any ratio from
            # a tiny start; growth counts only when it also ends above ``growth`` times the
            # first nonzero norm of the run, and starts above the rounding noise of what
            # reached the parameter (NOTE [Cancelled gradients]: the tutorial's `a` of an odd
            # fit gets only noise, which wanders by any ratio below its floor)
            if (
                w[0] > max(0.0, floor)
                and all(list(self.moves)[-k:])
                and all(a < b for a, b in zip(w, w[1:]))
                and w[-1] > th.growth * w[0]
                and w[-1] > th.growth * self.first
            ):
                self.growth_at = self.n


# NOTE [Closure evaluations]: an optimizer such as LBFGS evaluates its closure several times in
# one ``step(closure)``, moving the parameters between evaluations to the trial points of its
# quasi-Newton model and line search. Those moves are the optimizer's search, sized by the
# curvature it measured, not a learning rate times a gradient: pytorch/examples'
# time_sequence_prediction (LBFGS, lr=0.8) moves linear.weight 2.1x and linear.bias 2.7x their
# norms between evaluations 3 and 5 of its first step, and 5.4x and 8.4x over that whole
# step, while the loss falls from 0.50 to 0.0026 in that step and to 0.0010 after the next.
# The update/weight rule (the step must stay smaller than the parameter) is a rule for
# first-order steps, so it does not judge the moves of a step that moved a parameter between
# two evaluations of its closure (``GradHealth.evaluating`` says which step a backward runs
# in); such an optimizer diverging shows as gradient norms growing over its steps (the growth
# rule) and as NaN losses (``autodiag anomaly``). A step whose closure runs once, or runs
# several backward calls with no move in between (SGD, Adam with a closure), is judged like
# any other.


def _in_optimizer_step() -> bool:
    """Whether this thread is inside the ``step()`` of an optimizer (its closure, say): a frame
    of a ``step`` method whose ``self`` is an ``Optimizer`` (autodiag's or, on ``--engine
    torch``, PyTorch's: by class name). While every optimizer's step counts itself in
    ``events.STEPPING`` (autodiag's ``_hooked_step``; PyTorch's, while the observer's global
    step hooks are installed), the frames are walked only when a step is running: a closure's
    backward."""
    if events.FOREIGN_STEPS_COUNTED[0] and not events.STEPPING.n:
        return False
    for f, _ in traceback.walk_stack(None):
        if f.f_code.co_name == "step":
            owner = f.f_locals.get("self")
            if owner is not None and any(c.__name__ == "Optimizer" for c in type(owner).__mro__):
                return True
    return False


def _settling(s: _Sizes, norm: float) -> bool:
    """Whether the gradient that followed a large update says the parameter is settling toward
    its optimum: smaller than every recent norm, yet not collapsed (NOTE [Large updates])."""
    series = s.step_norms or s.bwd_norms
    if series is None or not series.recent:
        return False
    low = min(series.recent)
    return SETTLED_FLOOR * low < norm < low


# NOTE [Large updates]: an update larger than the parameter is judged when the next gradient
# arrives. A parameter that starts near zero (a bias) moves by more than its own norm on its way
# to the optimum while every gradient is smaller than the last: that update is not counted. A
# learning rate too high shows otherwise: the next gradient grows (overshoot), or collapses
# (units saturated or dead), or stays where it was (an outlier step far from the optimum).
# a gradient that fell below this fraction of the recent ones in one update collapsed (a
# tenfold drop: saturated or dead units), it did not settle
SETTLED_FLOOR = 0.1


class _Sizes:
    """One leaf's gradient norms and how far its updates moved it."""

    __slots__ = (
        "step_norms",
        "bwd_norms",
        "before",
        "updates",
        "floor",
        "floor_call",
        "bwd_version",
    )

    def __init__(self):
        self.bwd_version = None  # its version at its last backward call (no optimizer)
        self.step_norms = None  # _Norms over optimizer steps
        self.bwd_norms = None  # _Norms over backward calls
        self.floor = 0.0  # rounding noise of what its .grad accumulated (since it was fresh)
        self.floor_call = 0.0  # ... of what reached it in the backward call in progress
        # at its last accumulation: (version, copy of the value, largest norm yet, whether its
        # gradient was rounding noise, the optimizer step it was evaluated in or None)
        self.before = None
        self.updates = None  # [updates measured, above max_update, first such, max ratio]


# The nodes whose gradient for an input (slot) is its coefficient (an attribute, or 1) times
# the incoming gradient summed over the broadcast dimensions (NOTE [Cancelled gradients]).
_EPS: dict = {}  # float dtype -> its machine epsilon (np.finfo is slow to ask every time)
_SUMMED_SLOTS = {
    "AddBackward0": {0: None, 1: "_saved_alpha"},
    "SubBackward0": {0: None, 1: "_saved_alpha"},
    "AddmmBackward0": {0: "_saved_beta"},
}


class GradNorms(HealthDetector):
    """``exploding_grad`` / ``vanishing_grad`` (warning): per-parameter gradient norms, at every
    optimizer step (or at every backward for parameters no optimizer steps): exploding when an
    update moved the parameter by more than ``max_update`` times its own norm (the step outgrew
    the parameter: relative, so a sum-reduced loss with a small learning rate is not flagged
    for its large raw norms), or when the norm grew more than ``growth`` times over
    ``growth_steps`` steps of strict growth; vanishing when below ``min_norm`` and above the
    rounding noise of the gradient that reached it (NOTE [Cancelled gradients])."""

    KINDS = ("exploding_grad", "vanishing_grad")
    State = _Sizes
    NODES = frozenset(_SUMMED_SLOTS)

    def __init__(self):
        # optimizer steps (by index) that moved a parameter between evaluations of their
        # closure: a search (NOTE [Closure evaluations])
        self._searching: set = set()

    def on_node_backward(self, health, node, grad_outputs, grad_inputs):
        # NOTE [Cancelled gradients]: a parameter whose gradient is zero in exact arithmetic
        # (the key bias of attention: softmax ignores a shift shared by a row of scores; a bias
        # right before a normalisation) gets, in floating point, the rounding noise of a sum
        # that cancels: ~eps * |the terms summed|, 1e-11 in a float32 GPT. That is a zero, not
        # a vanishing gradient: the gradient reaching the layer is healthy. Where a node hands
        # a leaf the plain sum of what reached it (an addend: a bias), that noise floor is
        # known and kept per leaf; a norm at or below it is not judged vanishing. A truly
        # vanishing gradient is small because what reaches the layer is small (or is scaled
        # down on the way, which no node here counts as a plain sum): far above its floor.
        slots = _SUMMED_SLOTS.get(node.__class__.__name__)
        if slots is None:
            return
        # the leaves first: in a chain of adds almost no node hands one a gradient, and the
        # norm below is the cost (NOTE [Measuring cost])
        leaves = [
            (slots[i], fn)
            for i, fn in enumerate(inspect.children(node))
            if i in slots and fn is not None and inspect.is_leaf_node(fn)
        ]
        if not leaves:
            return
        arrays = [_array(g) for g in grad_outputs if g is not None]
        if len(arrays) != 1 or arrays[0].dtype.kind != "f" or not arrays[0].size:
            return
        a = arrays[0]
        eps = _EPS.get(a.dtype)
        if eps is None:
            eps = _EPS[a.dtype] = float(np.finfo(a.dtype).eps)
        noise = eps * _norm(a)
        for attr, fn in leaves:
            var = inspect.leaf_variable(fn)
            if var is None:
                continue
            scale = abs(float(getattr(node, attr, 1.0))) if attr else 1.0
            # a sum of n rounding errors grows like sqrt(n): n terms per element of the leaf
            terms = max(1.0, a.size / max(1, var.numel()))
            self.of(health.leaf(var)).floor_call += scale * noise * math.sqrt(terms)

    def on_accumulated(self, health, rec, var, node, g, grad, data, stack):
        s = self.of(rec)
        # the noise adds up as .grad accumulates; a fresh .grad (or one zeroed) is this call's
        # (NOTE: with no noise carried over, either way it is this call's: no comparison)
        fresh = not s.floor or _same_values(data, _array(g))
        floor = s.floor_call if fresh else s.floor + s.floor_call
        s.floor_call = 0.0
        # NOTE [Measuring cost]: once an optimizer steps, the gradient's norm is measured at
        # the step (``on_parameter_step``), where the norm series is made; here it is needed
        # only to tell rounding noise (a parameter with a noise floor: a bias) or to judge an
        # update that was large (``_measure_update``), so it is measured only then
        norm = _norm(data) if floor > 0.0 or not health.stepping else None
        noise = norm is not None and 0.0 < floor and norm <= floor
        self._measure_update(health, rec, s, var, data, norm, noise)
        s.floor = floor
        if not health.stepping:  # no optimizer (yet): norms per backward call
            # NOTE [Frozen parameters]: a gradient grows "over backward calls" only while
            # something updates the parameter between them (a manual step bumps its version).
            # A model that nothing updates (fgsm_tutorial's attack: one backward per test
            # sample, for the input's gradient) has gradients as large as each sample makes
            # them, in any order: growth among them is the data's, not an explosion.
            version = inspect.version(var)
            moved = s.bwd_version is not None and version != s.bwd_version
            s.bwd_version = version
            if s.bwd_norms is None:
                s.bwd_norms = _Norms()
            s.bwd_norms.add(norm, health.th, health.backward_calls + 1, s.floor, moved)

    def _measure_update(
        self,
        health,
        rec: _Leaf,
        s: _Sizes,
        var: Tensor,
        grad: np.ndarray,
        norm: float | None,
        noise: bool,
    ) -> None:
        """How far the parameter moved since its last accumulation, relative to its norm (the
        update/weight ratio of whatever updated it: an optimizer or a manual step); the norm
        of the gradient arriving now (``grad``; ``norm`` if measured already) judges a large
        one (NOTE [Large updates]); ``noise``, whether that gradient is rounding noise (NOTE
        [Cancelled gradients])."""
        value = inspect.array(var)
        before = s.before
        # NOTE: against the largest norm the parameter has had, not its last one: a scalar
        # crossing zero on its way to the optimum moves by many times its (tiny) current norm
        weight = _norm(value)
        size = max(before[2], weight) if before is not None else weight
        buffer = None  # the copy of the value before, once it holds the difference
        if (
            before is not None
            and before[0] != inspect.version(var)
            and before[1].shape == value.shape
            and before[2] > 0
        ):
            # NOTE: the difference is written over the copy, which is refreshed below: no new
            # array per parameter and step (a training step on PyTorch is fast enough for
            # allocating them to show, tests/perf/bench_torch_engine.py)
            if before[1].dtype == value.dtype:
                buffer = np.subtract(value, before[1], out=before[1])
                moved = _norm(buffer)
            else:
                moved = _norm(value - before[1])
            ratio = moved / before[2]
            # the plot's update/weight ratio: the forum recipe's, against the weight the update
            # started from, for the last step (optimizer step or backward call) before now
            series = s.step_norms if health.stepping else s.bwd_norms
            start = before[3]
            if series is not None and start > 0:
                x = health.steps if health.stepping else health.backward_calls
                series.flow.add_ratio(x, moved / start)
            # not judged: a move driven by a gradient that is rounding noise (zero in exact
            # arithmetic: the tutorial's `a` of an odd fit, whose every gradient is at or
            # below its noise floor, moves by float32 ulps around 0, "2x its norm"), nor one
            # made by a step that moved the parameter between evaluations of its closure
            step = before[5]
            if step is not None and step == health.evaluating:
                self._searching.add(step)  # NOTE [Closure evaluations]
            if not (before[4] or step in self._searching):
                u = s.updates
                if u is None:
                    u = s.updates = [0, 0, None, 0.0]
                u[0] += 1
                u[3] = max(u[3], ratio)
                if ratio > health.th.max_update and not _settling(
                    s, _norm(grad) if norm is None else norm
                ):
                    u[1] += 1
                    if u[2] is None:
                        u[2] = u[0]
        if rec.candidate or not health.backward_calls:
            # NOTE: copies only of parameters (adopted at the end of each backward call; the
            # first call's are not known yet): a loop that makes a fresh input leaf with
            # requires_grad each step must not keep a copy of every one
            if buffer is not None:
                np.copyto(buffer, value)
            else:
                buffer = value.copy()
            # (version, the value, the largest norm so far, this norm, whether the gradient
            # that arrived is rounding noise, the closure evaluation it arrived in)
            s.before = (inspect.version(var), buffer, size, weight, noise, health.evaluating)
        elif buffer is not None:
            s.before = None  # its copy holds the difference now

    def on_parameter_step(self, health, rec, p, stack):
        s = self.of(rec)
        if s.step_norms is None:
            s.step_norms = _Norms()
        s.step_norms.add(_norm(inspect.array(p.grad)), health.th, health.steps, s.floor)

    def findings(self, health, every, records, names):
        out = []
        for rec in records:
            out += self._norm_findings(health, rec, _name(rec, names))
        return out

    def _norm_findings(self, health, rec: _Leaf, name: str) -> list[Finding]:
        s = rec.state.get(self)
        series = (s.step_norms or s.bwd_norms) if s is not None else None
        if series is None:
            return []
        unit = "optimizer step" if s.step_norms is not None else "backward call"
        th = health.th
        norms = [float(f"{x:.6g}") for x in series.recent]
        common = {
            "parameter": name,
            "norms": norms,
            "max_norm": series.max,
            "steps": series.n,
            "per": unit,
        }
        out = []
        upd = s.updates
        if upd is not None:
            common["max_update_ratio"] = float(f"{upd[3]:.6g}")
        big_updates = upd is not None and upd[1]
        if big_updates or series.growth_at is not None:
            if big_updates:
                n, first = upd[1], upd[2]
                msg = (
                    f"{name}: an update moved it by up to {upd[3]:.3g}x its own norm ({n} of "
                    f"{upd[0]} update{'s' if upd[0] != 1 else ''} above {th.max_update:g}x, "
                    f"first at update {first}; gradient norm up to {series.max:.4g})"
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
                    "A step larger than the parameter itself overwrites what it learned: lower "
                    "the learning rate, clip gradients (nn.utils.clip_grad_norm_) or normalise "
                    "the inputs.",
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


# --- dead_relu -------------------------------------------------------------------------------


class _Relu:
    """One relu call site (and its position among that site's relus in a backward call)."""

    __slots__ = ("stack", "alive", "calls", "ordinal", "module")

    def __init__(self, stack, width: int, ordinal: int, module):
        self.stack, self.ordinal = stack, ordinal
        self.module = module  # (id of the outermost module, path in it) of an nn.ReLU, or None
        self.alive = np.zeros(width, dtype=bool)
        self.calls = 0


# the nodes whose output is a feature map with channels in dim 1 (N, C, ...)
_CHANNELS_FIRST = frozenset(
    ("ConvolutionBackward0", "NativeBatchNormBackward0", "NativeGroupNormBackward0")
)


def _channels_first(node, a: np.ndarray) -> bool:
    """Whether a relu's units are the channels (dim 1) of its input rather than its last dim:
    a 4-D or larger input (an image batch), or one a convolution or a batch/group norm made."""
    if a.ndim >= 4:
        return True
    if a.ndim < 3:
        return False
    fn = node.next_functions[0][0]
    return fn is not None and fn.name() in _CHANNELS_FIRST


class DeadRelu(HealthDetector):
    """``dead_relu`` (warning): units (last dimension; channels of a feature map) of a ``relu``
    call site through which no gradient passed — exactly zero for every sample — in each of
    at least ``dead_steps`` backward calls."""

    KINDS = ("dead_relu",)
    NODES = frozenset({"ReluBackward0"})
    # relu_ too: nn.ReLU(inplace=True) calls it on autodiag's engine, and its node is a
    # ReluBackward0 all the same (without it, such a relu's findings named no module there
    # while PyTorch's engine named it)
    OPS = frozenset({"relu", "relu_"})

    def __init__(self):
        self._calls: list = []  # per backward call in progress: (site, alive, module, layer)
        self._relus: dict = {}  # (site, module, layer or ordinal, width) -> _Relu
        self._relu_modules: dict = {}  # id(relu node) -> (id(root module), path), until backward
        self._relu_layers: dict = {}  # id(relu node) -> its layer's parameters, until backward
        self._module_paths: dict = {}  # id(root module) -> (weakref, {id(submodule): path})

    def on_op(self, health, op, node, inputs, outputs, stack):
        if op in self.OPS and node is not None:
            modules = events.module_calls()
            if modules:
                self._relu_modules[id(node)] = self._module_path(modules)
            else:
                self._relu_modules.pop(id(node), None)
            layer = _layer_of(node)
            if layer is not None:
                self._relu_layers[id(node)] = layer
            else:
                self._relu_layers.pop(id(node), None)

    def on_backward_begin(self, health, task):
        self._calls.append([])

    def on_node_backward(self, health, node, grad_outputs, grad_inputs):
        relu = node.__class__.__name__ == "ReluBackward0"  # either engine's node
        if relu and grad_inputs and grad_inputs[0] is not None:
            g = grad_inputs[0]
            a = g if g.__class__ is np.ndarray else np.asarray(inspect.values(g))
            where = inspect.site(node)
            if a.ndim and where is not None:
                if _channels_first(node, a):
                    # a feature map (N, C, ...): a unit is a channel, as a conv's filter
                    alive = np.moveaxis(a != 0, 1, -1).reshape(-1, a.shape[1]).any(axis=0)
                else:
                    alive = (a != 0).reshape(-1, a.shape[-1]).any(axis=0)
                module = self._relu_modules.pop(id(node), None)
                layer = self._relu_layers.pop(id(node), None)
                self._calls[-1].append((where, alive, module, layer))

    def on_backward_end(self, health, task, stack):
        relus = self._calls.pop()
        if relus and task.error is None:
            self._relu_call(relus)

    def _relu_call(self, relus: list) -> None:
        """Fold one call's relu gradients in. A site seen several times in the call is one
        relu per layer: the calls after the same parameters (an unrolled loop over time steps,
        one network on two inputs) are the same units, their samples pooled; calls after other
        parameters, or after none, are told apart by forward order (backward runs them last
        first). NOTE: REINFORCE's policy runs once per time step with one sample; judged per
        time step, units that fire only later in an episode looked dead at every step."""
        groups: dict = {}  # (site, module, layer or ordinal) -> [stack, alive], forward order
        unkeyed: dict = {}  # (site, module) -> its calls after no parameter so far
        for st, alive, module, layer in reversed(relus):
            if layer is None:
                k = unkeyed.get((st.site, module), 0)
                unkeyed[st.site, module] = k + 1
                layer = ("call", k)
            key = (st.site, module, layer, alive.shape[0])
            g = groups.get(key)
            if g is None:
                groups[key] = [st, alive.copy()]
            else:
                g[1] |= alive
        ordinals: dict = {}
        for (site, module, layer, width), (st, alive) in groups.items():
            ordinal = ordinals.get((site, module), 0)
            ordinals[site, module] = ordinal + 1
            key = (site, module, layer if layer[0] != "call" else ordinal, width)
            r = self._relus.get(key)
            if r is None:
                r = self._relus[key] = _Relu(st, width, ordinal, module)
            r.alive |= alive
            r.calls += 1

    def _module_path(self, modules: list) -> tuple:
        """(id of the outermost module running, the innermost one's path in it: "3")."""
        root, inner = modules[0], modules[-1]
        known = self._module_paths.get(id(root))
        if known is None or known[0]() is not root or id(inner) not in known[1]:
            paths = {}
            try:
                paths = {id(m): name for name, m in root.named_modules()}
            except Exception:  # noqa: BLE001 - a user module with an odd named_modules
                pass
            known = self._module_paths[id(root)] = (weakref.ref(root), paths)
        return (id(root), known[1].get(id(inner), ""))

    def _module_name(self, health, module) -> str | None:
        """``model.3``: a relu's module path, from the name the script gave the outermost
        module (its class name when none did)."""
        if module is None:
            return None
        root_id, path = module
        known = self._module_paths.get(root_id)
        root = known[0]() if known is not None else None
        name = "a module" if root is None else health.module_name(root) or type(root).__name__
        return f"{name}.{path}" if path else name

    def findings(self, health, every, records, names):
        out = []
        # forward order (``_relu_call`` records a call's relus first first)
        for r in sorted(self._relus.values(), key=lambda r: r.ordinal):
            if r.calls < health.th.dead_steps:
                continue
            dead = np.flatnonzero(~r.alive).tolist()
            if not dead:
                continue
            width = r.alive.shape[0]
            module = self._module_name(health, r.module)
            if module is not None:
                nth = f" of {module}" + (f" (call #{r.ordinal + 1})" if r.ordinal else "")
            else:
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
                    module=module,
                )
            )
        return out


def _layer_of(relu_node, depth: int = 3) -> tuple | None:
    """The parameters of the layer a relu follows: the ids of the leaves requiring grad nearest
    above its input's node (a Linear's bias one edge up, its weight two; a conv's weight and
    bias; a norm's affine parameters), within ``depth`` edges; None when none is that near."""
    level = [c for c in inspect.children(relu_node) if c is not None]
    for _ in range(depth):
        found, params, below = [], [], []
        for n in level:
            if inspect.is_leaf_node(n):
                v = inspect.leaf_variable(n)
                if v is not None:
                    found.append(id(v))
                    if _is_parameter(v):
                        params.append(id(v))
            else:
                below.extend(c for c in inspect.children(n) if c is not None)
        if found:
            # NOTE: the layer's nn.Parameters when it has some, not an input that requires
            # grad beside them (fgsm_tutorial's ``data.requires_grad = True``: a new tensor
            # per sample, whose id, reused by later ones, split and merged the calls of one
            # relu by chance, differently on each engine)
            return tuple(sorted(params or found))
        level = below[:16]
    return None


# The nodes whose backward the detectors read (``on_node_backward``): an engine that must hook
# each node to report it (PyTorch's, engines/torch/hooks.py) hooks only these.
GradHealth.torch_nodes = frozenset({"AccumulateGrad", *GradNorms.NODES, *DeadRelu.NODES})

# The detectors GradHealth runs, in the order their findings come; KINDS is theirs.
DETECTORS: tuple[type[HealthDetector], ...] = (NoneGrad, UnplannedAccumulation, GradNorms, DeadRelu)
KINDS: tuple[str, ...] = tuple(k for d in DETECTORS for k in d.KINDS)


def _array(g) -> np.ndarray:
    """The array of a gradient a node received (a Tensor under create_graph, or another
    engine's tensor)."""
    return inspect.array(g) if isinstance(g, Tensor) else np.asarray(inspect.values(g))


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal(a, b)``, at once when both view the same memory the same way (a fresh
    ``.grad`` that is the incoming gradient itself, as PyTorch stores it)."""
    if (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
    ):
        return True
    return np.array_equal(a, b)


def _norm(a: np.ndarray) -> float:
    return math.sqrt(sum_of_squares(a.ravel()))  # NOTE [BLAS threads]


def _leaf_variables(node, limit: int | None = None) -> list:
    """The variables of the AccumulateGrad nodes under ``node`` (iterative; at most ``limit``
    nodes visited)."""
    out, seen, todo = [], set(), [node]
    while todo and (limit is None or len(seen) < limit):
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if inspect.is_leaf_node(n):
            v = inspect.leaf_variable(n)
            if v is not None:
                out.append(v)
            continue
        todo.extend(c for c in inspect.children(n) if c is not None)
    return out


def _name(rec: _Leaf, names: dict) -> str:
    """A record's name: its module-level name at the end of the run, else the name a live frame
    gave it, else its shape."""
    t = rec.ref()
    name = names.get(id(t)) if t is not None else None
    return name or rec.name or f"a parameter of shape {rec.shape}"


# What a line that only *reads* a value looks like: a call of one of these (print(...),
# logger.info(...), f"{...}", str.format(...)) around the conversion.
_READERS = frozenset(
    {
        "print",
        "format",
        "repr",
        "str",
        "write",
        "info",
        "debug",
        "warning",
        "log",
        "set_postfix",
        "set_description",
        "add_scalar",
    }
)


def _read_only(stack) -> bool:
    """Whether the line of ``stack`` uses a converted value only to show it (printing,
    logging, formatting): such a read is not why a parameter got no gradient."""
    import ast

    loc = stack.location() if stack is not None else None
    code = loc.get("code") if loc else None
    if not code:
        return False
    try:
        tree = ast.parse(code.rstrip(":") if code.endswith(":") else code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f.id
                if isinstance(f, ast.Name)
                else f.attr
                if isinstance(f, ast.Attribute)
                else None
            )
            if name in _READERS:
                return True
    return False


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
