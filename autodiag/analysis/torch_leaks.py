"""``leaks --engine torch``: graphs kept alive across training steps in a PyTorch program,
found by the observer (``engines/torch/observe.py``) and reported as ``analysis/leaks.py``
reports them on autodiag's engine (its steps, census, verdict and findings; only the
bookkeeping differs).

NOTE [Step tokens]
A PyTorch node cannot be weakly referenced, so the census cannot hold weak references to nodes
as on autodiag's engine. Instead each step has a token object, and every node an op of the step
made gets the token in its ``metadata`` (the observer already tags each new node there; the
dict lives and dies with the C++ node). The number of the step's nodes still alive is then the
token's reference count minus ours: counted at no per-node cost, and never keeping a graph
alive. The step also keeps weak references to the tensors its ops returned (a tensor can be
weakly referenced): the retained graph is reached from those still alive, to measure its bytes
and to name who holds them (``gc.get_referrers`` from the tensor, ``referrers.find_holder``).

Steps end at ``optimizer.step()`` (a global post-step hook, ``torch.optim.optimizer.
register_optimizer_step_post_hook``), or at each outermost ``backward()`` when no optimizer
steps. ``backward(retain_graph=True)`` calls mark the nodes of their graph (a walk when the call
begins); a later call that meets a marked node of another call used the retained graph.

What is not seen: graphs held only from C++ (a hook closure registered on a node, a custom
Function's ``ctx`` attribute) are counted but their holder cannot be named; nodes made inside
``torch.compile`` regions count as the one node the region shows.
"""

from __future__ import annotations

import collections
import sys
import weakref

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from autodiag.analysis.leaks import (
    MAX_SEARCHES,
    LeakFinder,
    _Leak,
    _RetainCall,
    _Step,
)
from autodiag.analysis.referrers import find_holder
from autodiag.engines.torch import seam
from autodiag.trace import events
from autodiag.trace.sites import capture_stack

_Tensor = torch.Tensor
_ACCUMULATE = seam.ACCUMULATE
_STEP = "autodiag.step"  # node.metadata key: the token of the step that made the node
_RETAINED = "autodiag.retained"  # node.metadata key: the retain_graph=True call that ran it
_OWN_REFS = sys.getrefcount(object()) + 1  # a token's count with only the step holding it


class _Token:
    __slots__ = ()


class _TorchStep(_Step):
    """A step of a PyTorch program (NOTE [Step tokens])."""

    __slots__ = ("token", "tensors")

    def __init__(self, index: int):
        self.token = _Token()
        self.tensors: list = []  # weak references to the tensors its ops returned
        super().__init__(index)

    @property
    def alive(self) -> int:  # noqa: D102 - the nodes of the step still alive
        return sys.getrefcount(self.token) - _OWN_REFS

    @alive.setter
    def alive(self, value) -> None:
        pass  # counted by the token, never kept

    def live_tensors(self) -> list:
        out = []
        for r in self.tensors:
            t = r()
            if t is not None and t.grad_fn is not None:
                out.append(t)
        return out


class TorchLeakFinder(LeakFinder):
    """``LeakFinder`` for a script on real PyTorch: the observer calls ``torch_op`` for each
    op and ``on_backward_begin``/``on_backward_end`` for each backward call."""

    step_type = _TorchStep

    def __init__(self, grow_steps: int = 3):
        super().__init__(grow_steps)
        self._hook = None  # the optimizer step hooks' handles, once registered
        # per thread, ``_here.stepping``: its optimizer step() calls in progress, whose ops are
        # not the script's (another thread's step says nothing about this thread's ops)

    # --- events ---------------------------------------------------------------------------

    def torch_op(self, name, args, kwargs, out, made) -> None:
        if self._hook is None:
            self._watch_optimizers()
        here = self._here
        if here.stepping or not made:
            # an optimizer's update, or an op that made no node (``optimizer.step()`` runs
            # some before its hooks): a step that ended at a backward ends at the next node
            return
        tl = here.tl  # the steps of the thread that made the nodes (NOTE [Steps per thread])
        if tl.pending:
            tl.pending = False
            tl.mode = "backward"
            self._end_step(tl)
        elif tl.owner is not None:
            self._owner_op(tl)
        step = tl.steps[-1]
        token = step.token
        for n in made.values():
            n.metadata[_STEP] = token
        tensors = step.tensors
        if out is None and args and isinstance(args[0], _Tensor):
            out = args[0]  # x[i] = v returns None; x has the new node
        if out.__class__ is _Tensor or isinstance(out, _Tensor):
            tensors.append(weakref.ref(out))
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, _Tensor) and o.grad_fn is not None:
                    tensors.append(weakref.ref(o))
        if len(tensors) > 4096 and len(tensors) & 4095 == 0:
            tensors[:] = [r for r in tensors if r() is not None]  # now and then

    def on_op(self, op, node, inputs, outputs, stack) -> None:
        pass  # autodiag's engine's event: PyTorch's ops come through ``torch_op``

    def on_node_backward(self, node, grad_outputs, grad_inputs) -> None:
        pass  # autodiag's engine's event: retained graphs are marked at the call's start

    def _watch_optimizers(self) -> None:
        ref = weakref.ref(self)

        def stepping(optimizer, args, kwargs):
            finder = ref()
            if finder is not None and finder in events.TRACERS:
                finder.step_begins()

        def stepped(optimizer, args, kwargs):
            finder = ref()
            if finder is None or finder not in events.TRACERS:
                return  # the run is over (the hooks are removed by ``finish``)
            finder.step_ends(optimizer)

        self._hook = (
            register_optimizer_step_pre_hook(stepping),
            register_optimizer_step_post_hook(stepped),
        )

    def step_begins(self) -> None:
        """An optimizer's ``step()`` starts in this thread (its pre-hook)."""
        self._here.stepping += 1

    def step_ends(self, optimizer) -> None:
        """``optimizer.step()`` returned in this thread (its post-hook): a step boundary."""
        here = self._here
        here.stepping = max(here.stepping - 1, 0)
        with seam.own_calls():  # the census is autodiag's, not the script's ops (observe.py)
            self.on_optimizer_step(optimizer)

    def on_backward_begin(self, task) -> None:
        here = self._here
        here.bw_depth += 1
        if here.bw_depth != 1:
            return
        rec = None
        if task.retain_graph and not task.create_graph:
            here.retain = rec = _RetainCall(capture_stack(3).site)
        if rec is not None or self._retain_calls:
            self._mark_retained(task, rec)
        if len(self._timelines) > 1:
            self._claim_workers(here.tl, task)

    def _made(self, o, task) -> bool:
        token = o.steps[-1].token
        return any(
            r.grad_fn is not None and r.grad_fn.metadata.get(_STEP) is token for r in task.roots
        )

    def _mark_retained(self, task, rec) -> None:
        """Mark the nodes a ``retain_graph=True`` call (``rec``) runs; a call (any call) that
        meets a node marked by another such call used that call's retained graph."""
        todo = [r.grad_fn for r in task.roots if r.grad_fn is not None]
        seen: set = set()
        keep = []  # the metadata dicts whose ids are in ``seen``
        while todo:
            n = todo.pop()
            if type(n) is _ACCUMULATE:
                continue
            md = n.metadata
            if id(md) in seen:
                continue
            seen.add(id(md))
            keep.append(md)
            other = md.get(_RETAINED)
            if other is not None and other is not rec:
                other.reused = True
            if rec is not None:
                md[_RETAINED] = rec
                rec.nodes += 1
                rec.saved_bytes += sum(e.nbytes for e in seam.saved_entries(n))
            todo.extend(c for c, _ in n.next_functions if c is not None)

    def finish(self) -> None:
        if self._hook:
            for h in self._hook:
                h.remove()
            self._hook = False
        super().finish()

    # --- census and holders -----------------------------------------------------------------

    def _bytes_of_step(self, tl, s) -> int:
        """Bytes held by the step's live nodes reachable from its live tensors (or, when none
        is alive, from those of the step just ended: a carried state): saved tensors and the
        node objects."""
        token = s.token
        starts = [t.grad_fn for t in s.live_tensors()]
        if not starts:
            starts = [t.grad_fn for t in tl.steps[-1].live_tensors()]
        total = 0
        seen: set = set()
        keep = []
        while starts:
            n = starts.pop()
            md = n.metadata
            if id(md) in seen:
                continue
            seen.add(id(md))
            keep.append(md)
            mine = md.get(_STEP)
            if mine is None:
                continue  # a leaf's AccumulateGrad, or a node made outside the mode
            if mine is token:
                total += sys.getsizeof(n) + sum(e.nbytes for e in seam.saved_entries(n))
            starts.extend(c for c, _ in n.next_functions if c is not None)
        return total

    def _holders(self, tl, step: int, growing: bool) -> list[_Leak]:
        old = {id(s.token): s.index for s in tl.steps[:-1] if s.index < step}
        tensors = [t for s in tl.steps for t in s.live_tensors()]
        counts = []  # per tensor: (old nodes reachable, the steps they were made in)
        referenced: set = set()
        keep: list = []
        for t in tensors:
            counts.append(_reachable(t.grad_fn, old, referenced, keep))
        # the tops: tensors whose node no other live node points to (an activation that a
        # node saved is held from C++ by the graph, not by the script)
        order = [
            i
            for i, (c, _) in enumerate(counts)
            if c and id(tensors[i].grad_fn.metadata) not in referenced
        ]
        seqs = [seam.sequence_nr(t.grad_fn) for t in tensors]
        order.sort(key=lambda i: (-counts[i][0], seqs[i]))
        covered: set = set()
        found: dict = {}
        searches = 0
        t = None
        try:
            for i in order:
                t = tensors[i]
                if id(t) in covered:
                    continue
                if searches >= (MAX_SEARCHES if growing else 2):
                    break
                searches += 1
                count, spans = counts[i]
                holder, chain = find_holder(t, ignore=(tensors, counts, order, found, covered))
                held = _held_tensors(chain) or [t]
                covered.update(id(x) for x in held)
                del chain
                if not growing and holder.container != "closure" and "hook" not in holder.path:
                    continue  # a constant retention by a plain variable: prev_loss = loss
                key = f"{holder.kind}:{holder.name}:{holder.path}"
                if key in found:
                    found[key][0].tensors += len(held)
                    found[key][1] |= spans
                    continue
                trace = seam.site(t.grad_fn)
                created = trace.location() if trace is not None else None
                nodes = sorted(counts[j][0] for j in order if id(tensors[j]) in covered) or [count]
                leak = _Leak(holder, len(held), nodes[len(nodes) // 2], created, growing)
                found[key] = [leak, set(spans)]
                del held
        finally:
            del tensors, t, keep
        leaks = list(found.values())
        if growing:
            many = [lk for lk, spans in leaks if lk.tensors >= 2 or len(spans) >= 2]
            return many or [max(leaks, key=lambda x: x[0].nodes_each)[0]] if leaks else []
        return [lk for lk, _ in leaks]


def _reachable(top, old: dict, referenced: set, keep: list) -> tuple[int, set]:
    """How many nodes of earlier steps (``old``: id(token) -> step) are reachable from ``top``,
    and the steps they were made in. Adds to ``referenced`` the ids of the metadata of the nodes
    something points to (``keep`` keeps those dicts alive while their ids are used)."""
    count = 0
    steps: set = set()
    seen: set = set()
    todo = [top]
    while todo:
        n = todo.pop()
        md = n.metadata
        if id(md) in seen:
            continue
        seen.add(id(md))
        keep.append(md)
        token = md.get(_STEP)
        if token is None:
            continue
        s = old.get(id(token))
        if s is not None:
            count += 1
            steps.add(s)
        for c, _ in n.next_functions:
            if c is not None:
                cm = c.metadata
                keep.append(cm)
                referenced.add(id(cm))
                todo.append(c)
    return count, steps


def _held_tensors(chain: list) -> list:
    """The tensors with grad_fn in the container that holds the retained tensor (the tensor
    itself when it is held directly)."""
    if not chain or not isinstance(chain[-1], _Tensor):
        return []
    container = chain[-2] if len(chain) >= 2 else None
    if isinstance(container, dict):
        items = list(container.values())
    elif isinstance(container, (list, tuple, set, frozenset, collections.deque)):
        items = list(container)
    else:
        return [chain[-1]]
    return [t for t in items if isinstance(t, _Tensor) and t.grad_fn is not None]
