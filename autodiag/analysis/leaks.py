"""Graphs kept alive across training steps (``autodiag leaks``).

``losses.append(loss)`` keeps every step's graph, and with it the tensors saved for backward:
memory creeps up step by step. ``LeakFinder`` watches from the tracing hooks:

* **Steps** end at each optimizer ``step()`` (of the first optimizer that steps), or at each
  outermost ``backward()`` when the script never steps an optimizer, or at each
  ``autodiag.trace.step()`` marker when the script has any (markers win, then optimizers).
  Steps are counted per thread (NOTE [Steps per thread]).
* **Census**: every graph node an op records is tagged, through a weak reference, with the step
  that made it. At each step's end the census counts the nodes of *earlier* steps that are still
  alive and the bytes they hold (saved tensors plus the node objects). The references are weak:
  the census never changes what the script keeps alive.
* **Verdict**: a leak is retained graph that grows at ``grow_steps`` (3) consecutive step ends.
  A graph kept for one step (``prev_loss = loss``) is constant, not a leak.
* **Who holds it**: when the verdict is reached (the script's frames are still running), the
  retained graph's top nodes — those no other live node points to — are traced back through
  ``gc.get_referrers`` to a variable the user knows (``referrers.find_holder``): "list
  `history` (train.py:8) holds 30 tensors with grad_fn".

Findings:

* ``graph_leak`` (error): growing retention, with its holder, the line that created the retained
  tensors, and the growth per step. A constant retention whose holder is a hook or a closure is
  reported as a warning (it stays for the whole run, and grows if the hook is added again).
* ``retained_graph`` (warning): ``backward(retain_graph=True)`` calls (without
  ``create_graph``) at a line none of whose graphs was ever backpropagated again: their saved
  tensors were kept for nothing.
"""

from __future__ import annotations

import ast
import collections
import gc
import linecache
import re
import threading
import weakref

from autodiag import inspect
from autodiag._interrupts import callback
from autodiag._look import is_a, look
from autodiag.analysis.findings import Finding
from autodiag.analysis.graph import _grad_fn, saved_info
from autodiag.analysis.referrers import Holder, container_kind, find_holder
from autodiag.analysis.summary import fmt_bytes
from autodiag.inspect import LEAF_SEQUENCE_NR, children, sequence_nr
from autodiag.tensor import Tensor
from autodiag.trace import Tracer
from autodiag.trace.events import new_nodes
from autodiag.trace.sites import capture_stack, format_site, short_path

MAX_SEARCHES = 6  # holder searches per investigation (each scans the heap once per expansion)
MAX_INVESTIGATIONS = 3  # of growing retention, per run; and 2 of constant retention


class _Step:
    """The nodes recorded in one step, weakly; ``alive`` is kept by the refs' callbacks."""

    __slots__ = ("index", "refs", "alive", "bytes", "measured_at", "__weakref__")

    def __init__(self, index: int):
        self.index = index
        self.refs: list = []
        self.alive = 0
        self.bytes = 0
        self.measured_at = -1  # the ``alive`` count when ``bytes`` was measured

    @callback
    def dead(self, _ref) -> None:
        self.alive -= 1


class _Leak:
    """One holder of growing (or hook-captured) retained graph, with the census figures of the
    step at which it was found."""

    def __init__(self, holder: Holder, tensors: int, nodes_each: int, created, growing: bool):
        self.holder = holder
        self.tensors = tensors
        self.nodes_each = nodes_each
        self.created = created  # location dict of the retained tensor's op, or None
        self.growing = growing
        self.census: dict = {}  # the census entry of the step it was found at
        self.timeline: _Timeline | None = None  # the steps of the thread whose graph it holds
        self.growth = (0.0, 0.0)  # (nodes, bytes) per step over the steps before it was found


class _RetainCall:
    __slots__ = ("site", "reused", "nodes", "saved_bytes")

    def __init__(self, site):
        self.site = site
        self.reused = False
        self.nodes = 0
        self.saved_bytes = 0


# NOTE [Steps per thread]: two threads that each train a model (each with its own optimizer, or
# each ending its steps at its backward calls) have steps of their own. With one process-wide
# step count, one thread's step end judged the other thread's graph in progress (a loss summed
# over ten micro-batches, built while the other thread stepped ten times) as graph kept across
# steps, and it "grew": a false graph_leak. So each thread has its own ``_Timeline``: its step
# model (markers, optimizer or backward), its steps, its census and its verdict; a node belongs
# to the steps of the thread whose op made it, and only that thread's step ends count it.
# The report's census table is the busiest thread's (``LeakFinder.census``).
#
# NOTE [Worker threads]: a thread that never ends a step of its own (no backward, optimizer step
# or marker of its own: a pool worker that runs the forward for the training loop, whose thread
# calls backward on the loss) would keep its nodes in a step that never ends, judged by no one:
# a list keeping every step's loss went unreported (a false pass). So a backward call whose
# roots were made by such a thread makes that thread the caller's worker (``owner``): at each of
# the owner's step ends, the worker's nodes of the step join the owner's, as if its own thread
# had made them. A thread whose graph no other thread runs backward through (two threads each
# building its own graph) is never claimed, so its graph in progress is never judged by another
# thread's steps.


class _Timeline:
    """The steps of one thread (NOTE [Steps per thread]): ``mode`` ("marker", "optimizer" or
    "backward"), ``steps`` (those with live nodes, and the current one, last), ``census`` (per
    step end: step, nodes, bytes, steps of earlier steps still alive), the verdict's counters."""

    def __init__(self, step_type, thread: str):
        self.thread = thread
        self.mode: str | None = None
        self.steps: list = [step_type(1)]
        # the current step and its ``dead`` bound once: one callback object shared by the step's
        # weakrefs, not a bound method per node (a million of them on a million-op chain)
        self.dead: tuple = (None, None)
        self.optimizer = None  # weakref to the optimizer whose step() ends a step
        self.pending = False  # a backward ended: the step ends at the next op (or backward)
        self.census: list[dict] = []
        self.growth = 0  # consecutive step ends at which retention grew
        self.flat = 0  # consecutive step ends of constant, non-zero retention
        self.leak_open = False
        self.owner: _Timeline | None = None  # the thread it works for (NOTE [Worker threads])


class _ThreadState(threading.local):
    """What is in progress in one thread (a script's threads report to the same finder, and two
    threads' backward calls at once are not nested calls): ``hi``, the highest sequence number
    this thread's ops recorded; ``bw_depth``, its backward calls in progress; ``retain``, the
    ``retain_graph=True`` call among them (its outermost); ``stepping``, its optimizer steps in
    progress (``--engine torch``: their ops are the optimizer's); ``tl``, its steps
    (``_Timeline``), also listed in ``timelines`` (the finder's, for the end of the run)."""

    hi = -1
    bw_depth = 0
    retain = None
    stepping = 0

    def __init__(self, timelines: list, step_type):
        self.tl = _Timeline(step_type, threading.current_thread().name)
        timelines.append(self.tl)


class LeakFinder(Tracer):
    """Finds graphs kept alive across steps; ``findings()`` after the run."""

    step_type = _Step  # what records a step's nodes (another engine's finder has its own)

    def __init__(self, grow_steps: int = 3):
        self.grow_steps = grow_steps
        self._timelines: list[_Timeline] = []  # each thread's steps, the script's thread first
        # per thread: its sequence numbers, backward calls and steps
        self._here = _ThreadState(self._timelines, self.step_type)
        self._leaks: dict = {}  # holder key -> _Leak (one finding per holder)
        self._investigations = {True: 0, False: 0}  # growing, constant
        # retain_graph=True calls (the one in progress: per thread, ``_here.retain``): the nodes
        # they ran, all of them by site
        self._ran: dict = {}  # id(node) -> (weakref to node, the _RetainCall that ran it)
        self._retain_calls: dict = {}  # site -> [_RetainCall]

    # --- the steps of the run's threads -----------------------------------------------------

    def _main(self) -> _Timeline:
        """The busiest thread's steps (the most step ends; the script's thread on a tie)."""
        return max(self._timelines, key=lambda tl: len(tl.census))

    @property
    def census(self) -> list[dict]:
        """Per step end of the busiest thread: step, nodes, bytes (of earlier steps), steps."""
        return self._main().census

    @property
    def mode(self) -> str | None:
        """What ends the busiest thread's steps: "marker", "optimizer", "backward" or None."""
        return self._main().mode

    @property
    def _steps(self) -> list:
        """The calling thread's steps with live nodes, and its current one (last)."""
        return self._here.tl.steps

    # --- events -----------------------------------------------------------------------------

    def on_op(self, op, node, inputs, outputs, stack) -> None:
        here = self._here
        tl = here.tl
        if tl.pending:
            tl.pending = False
            tl.mode = "backward"
            self._end_step(tl)
        elif tl.owner is not None:
            self._owner_op(tl)
        if node is not None:
            seq = sequence_nr(node)  # read once: a node's attribute reads are slow
            hi = here.hi
            if seq == hi + 2:
                # ``_record``'s common case, inlined (once per op of the run): the op's own
                # node alone (its NOTE)
                step = tl.steps[-1]
                cached = tl.dead
                if cached[0] is not step:
                    cached = tl.dead = (step, step.dead)
                step.refs.append(weakref.ref(node, cached[1]))
                step.alive += 1
                here.hi = seq
            elif seq > hi:
                self._record(node, seq)

    def _owner_op(self, tl: _Timeline) -> None:
        """An op of a worker of thread ``tl.owner`` (NOTE [Worker threads]): as an op of the
        owner's own, it ends the owner's step that ended at a backward."""
        owner = tl.owner
        if owner.pending and tl.mode is None:
            owner.pending = False
            owner.mode = "backward"
            self._end_step(owner)

    def _record(self, node, seq: int) -> None:
        """Record the nodes the op made: ``node`` (numbered ``seq``) and any of ops it called."""
        here = self._here
        hi = here.hi
        tl = here.tl
        step = tl.steps[-1]
        cached = tl.dead
        if cached[0] is not step:
            cached = tl.dead = (step, step.dead)
        dead = cached[1]
        # NOTE: the op's own node alone (the common case) when it is numbered two above the
        # last one recorded: the one number between is the op's mark (trace/events.py), so no
        # op it called made a node (``on_op`` records that case itself, inline). Otherwise its
        # inputs are looked at: one made by this op is a node of an op it called.
        if not any(
            c is not None and hi < sequence_nr(c) < LEAF_SEQUENCE_NR for c in children(node)
        ):
            step.refs.append(weakref.ref(node, dead))
            step.alive += 1
            here.hi = seq
            return
        nodes = new_nodes(node, hi)
        add = step.refs.append
        for n in nodes:
            add(weakref.ref(n, dead))
        step.alive += len(nodes)
        here.hi = max(sequence_nr(n) for n in nodes)

    def on_backward_begin(self, task) -> None:
        here = self._here
        here.bw_depth += 1
        if here.bw_depth == 1:
            if task.retain_graph and not task.create_graph:
                here.retain = _RetainCall(capture_stack(3).site)
            if len(self._timelines) > 1:
                self._claim_workers(here.tl, task)

    def _claim_workers(self, tl: _Timeline, task) -> None:
        """Make ``tl``'s thread the owner of the threads without steps of their own that made
        the roots of its backward call ``task`` (NOTE [Worker threads])."""
        for o in list(self._timelines):
            if o is not tl and o.mode is None and o.owner is None and self._made(o, task):
                o.owner = tl

    def _made(self, o: _Timeline, task) -> bool:
        """Whether the current step of thread ``o`` made a root of backward call ``task``."""
        ids = {id(r.grad_fn) for r in task.roots if r.grad_fn is not None}
        return bool(ids) and any(id(r()) in ids for r in reversed(o.steps[-1].refs))

    def on_node_backward(self, node, grad_outputs, grad_inputs) -> None:
        if sequence_nr(node) >= LEAF_SEQUENCE_NR:
            return  # a leaf's AccumulateGrad is shared by every step's graph
        retain = self._here.retain
        entry = self._ran.get(id(node))
        if entry is not None and entry[0]() is node and entry[1] is not retain:
            entry[1].reused = True
        if retain is not None:
            self._ran[id(node)] = (weakref.ref(node), retain)
            retain.nodes += 1
            retain.saved_bytes += sum(s[3] for s in saved_info(node))

    def on_backward_end(self, task) -> None:
        here = self._here
        here.bw_depth -= 1
        if here.bw_depth:
            return
        rec, here.retain = here.retain, None
        if rec is not None:
            self._retain_calls.setdefault(rec.site, []).append(rec)
        tl = here.tl
        if tl.mode in (None, "backward") and task.accumulate:
            # NOTE: the step ends at the next op, not here: an optimizer step() may follow, and
            # then it is the optimizer's steps that count (this boundary never happened).
            if tl.pending:
                tl.mode = "backward"
                self._end_step(tl)
            tl.pending = True

    def on_optimizer_step(self, optimizer) -> None:
        tl = self._here.tl  # the steps of the thread that stepped (NOTE [Steps per thread])
        if tl.mode == "marker":
            return
        ref = tl.optimizer
        if ref is None or ref() is None:
            # the first optimizer that steps ends the steps (a GAN's second one does not);
            # when it is gone, the next one takes over (a new optimizer every epoch)
            tl.optimizer = weakref.ref(optimizer)
            if ref is None:
                if tl.mode == "backward":  # the backward ends so far were not the steps
                    self._restart(tl)
                tl.mode = "optimizer"
                tl.pending = False
        if tl.optimizer() is optimizer:
            self._end_step(tl)

    def on_step(self) -> None:
        tl = self._here.tl
        tl.pending = False
        if tl.mode != "marker":
            self._restart(tl)
            tl.mode = "marker"
        self._end_step(tl)

    # --- census and verdict -----------------------------------------------------------------

    def _restart(self, tl: _Timeline) -> None:
        tl.census.clear()
        tl.growth = tl.flat = 0
        # the steps are counted afresh: the one ending now is step 1 (LBFGS's 20 closure
        # evaluations before its first step() returns are not 20 steps: the table said "2
        # steps" over rows 21 and 22); earlier steps, still alive or not, count from 0 down
        shift = tl.steps[-1].index - 1
        for st in tl.steps:
            st.index -= shift

    def _end_step(self, tl: _Timeline) -> None:
        steps = tl.steps
        nodes = total = 0
        for s in steps[:-1]:
            if s.alive and s.measured_at != s.alive:
                s.bytes = self._bytes_of_step(tl, s)
                s.measured_at = s.alive
            nodes += s.alive
            total += s.bytes if s.alive else 0
        current = steps[-1].index
        census = tl.census
        prev = census[-1] if census else {"nodes": 0, "steps": 0}
        # (distinct steps: a worker's part of a step is a _Step of its own, NOTE [Worker threads])
        alive_steps = len({s.index for s in steps[:-1] if s.alive})
        census.append({"step": current, "nodes": nodes, "bytes": total, "steps": alive_steps})
        # steps whose nodes all died are dropped; the current one becomes an earlier one
        tl.steps = [s for s in steps if s.alive]
        for o in self._timelines:  # the step's nodes its workers made (NOTE [Worker threads])
            if o.owner is tl and o.mode is None:
                part, o.steps = o.steps[-1], [self.step_type(1)]
                part.index = current
                if part.alive:
                    tl.steps.append(part)
        for s in tl.steps:
            if len(s.refs) > 2 * s.alive + 64:  # drop dead refs now and then
                s.refs = [r for r in s.refs if r() is not None]
        tl.steps.append(self.step_type(current + 1))
        if len(self._ran) > 4096:
            self._ran = {k: v for k, v in self._ran.items() if v[0]() is not None}

        # Growth means more nodes *and* more earlier steps alive: one step's graph that gets
        # bigger (a longer sequence each step, kept as ``last = h``) is not a leak.
        grew = nodes > prev["nodes"] and alive_steps > prev["steps"]
        tl.growth = tl.growth + 1 if grew else 0
        tl.flat = tl.flat + 1 if nodes and nodes == prev["nodes"] else 0
        if tl.growth >= self.grow_steps and not tl.leak_open:
            tl.leak_open = True
            self._investigate(tl, current, growing=True)
        elif tl.flat == self.grow_steps:
            self._investigate(tl, current, growing=False)
        if tl.growth == 0 and tl.flat:
            tl.leak_open = False  # growth stopped; a new growth is investigated again

    def _bytes_of_step(self, tl: _Timeline, s: _Step) -> int:
        return _bytes_of(s.refs)

    def _investigate(self, tl: _Timeline, step: int, growing: bool) -> None:
        """Find who holds the retained graph (while the script's frames still run). Never
        raises into the script: a search that fails reports an unknown holder."""
        limit = MAX_INVESTIGATIONS if growing else 2
        if self._investigations[growing] >= limit:
            return
        self._investigations[growing] += 1
        census, growth = tl.census[-1], self.growth_per_step(tl)
        try:
            found = self._holders(tl, step, growing)
        except Exception:  # noqa: BLE001 - an odd user object must not break the user's run
            found = []
        if growing and not found:
            found = [
                _Leak(Holder("unknown", "", None, None, None, "", "unknown"), 0, 0, None, True)
            ]
        for leak in found:
            leak.census, leak.growth, leak.timeline = census, growth, tl
            key = (
                leak.holder.kind,
                leak.holder.name,
                leak.holder.function,
                re.sub(r"\[[^\[\]]*\]", "[]", leak.holder.path),
            )
            if key not in self._leaks:  # found again after a pause in growth: the same leak
                self._leaks[key] = leak

    def _holders(self, tl: _Timeline, step: int, growing: bool) -> list[_Leak]:
        alive, old = [], {}
        for s in tl.steps[:-1]:
            for r in s.refs:
                n = r()
                if n is not None:
                    alive.append(n)
                    if s.index < step:
                        old[id(n)] = s.index
        for r in tl.steps[-1].refs:  # nodes of the step just begun (none yet, usually)
            n = r()
            if n is not None:
                alive.append(n)
        referenced = set()
        for n in alive:
            for c in children(n):
                if c is not None:
                    referenced.add(id(c))
        tops = []
        recorded = {id(n) for n in alive}
        for n in alive:
            if id(n) not in referenced:
                count, spans = _reachable(n, old, recorded)
                if count:
                    tops.append((count, spans, n))
        tops.sort(key=lambda t: (-t[0], sequence_nr(t[2])))
        covered: set = set()
        found: dict = {}  # the holder's path without indices -> [_Leak, steps spanned]
        searches = 0
        try:
            for count, spans, top in tops:
                if id(top) in covered:
                    continue
                if searches >= (MAX_SEARCHES if growing else 2):
                    break
                searches += 1
                # the search starts at the tensor whose grad_fn the top node is, if any (the
                # user knows tensors, not nodes)
                owners = [
                    r for r in gc.get_referrers(top) if is_a(r, Tensor) and look(_grad_fn, r) is top
                ]
                start = owners[0] if owners else top
                holder, chain = find_holder(start, ignore=(alive, tops, found, covered, owners))
                chain = _to_tensor(holder, chain)
                tensors = _held_tensors(chain)
                covered.update(id(t.grad_fn) for t in tensors)
                del chain, owners, start
                if not growing and holder.container != "closure" and "hook" not in holder.path:
                    continue  # a constant retention by a plain variable: prev_loss = loss
                key = re.sub(r"\[[^\[\]]*\]", "[]", f"{holder.kind}:{holder.name}:{holder.path}")
                if key in found:  # another tensor of the same kind of holder (hooks[1], ...)
                    found[key][0].tensors += max(len(tensors), 1)
                    found[key][1] |= spans
                    continue
                trace = inspect.site(top)
                created = trace.location() if trace is not None else None
                counts = [c for c, _, t in tops if id(t) in covered] or [count]
                leak = _Leak(
                    holder, max(len(tensors), 1), sorted(counts)[len(counts) // 2], created, growing
                )
                found[key] = [leak, set(spans)]
        finally:
            del alive, tops
        leaks = list(found.values())
        if growing:
            # a growing leak holds graphs of several steps: several tensors in a collection,
            # or one tensor whose graph spans steps (total += loss); a holder of one step's
            # graph (prev = out) beside the real leak is not it
            many = [lk for lk, spans in leaks if lk.tensors >= 2 or len(spans) >= 2]
            return many or [max(leaks, key=lambda x: x[0].nodes_each)[0]] if leaks else []
        return [lk for lk, _ in leaks]

    # --- findings -------------------------------------------------------------------------

    def growth_per_step(self, tl: _Timeline | None = None) -> tuple[float, float]:
        """Average growth of retained nodes and bytes over the last ``grow_steps`` step ends
        (of thread ``tl``'s steps; the busiest thread's by default)."""
        c = (tl or self._main()).census
        k = min(self.grow_steps, len(c) - 1)
        if k <= 0:
            return 0.0, 0.0
        last, first = c[-1], c[-1 - k]
        return (last["nodes"] - first["nodes"]) / k, (last["bytes"] - first["bytes"]) / k

    def finish(self) -> None:
        """End the run: a backward() that ended a thread's last step has no op after it to
        flush it."""
        for tl in list(self._timelines):
            if tl.pending:
                tl.pending = False
                tl.mode = "backward"  # as at the next op: the backward's end was the step's end
                self._end_step(tl)

    def findings(self) -> list[Finding]:
        """The findings of the run (call after it ended; ``finish()`` is applied first)."""
        self.finish()
        out = [self._leak_finding(leak) for leak in self._leaks.values()]
        for site, calls in self._retain_calls.items():
            if any(c.reused for c in calls):
                continue
            out.append(_retained_finding(site, calls))
        return out

    def _leak_finding(self, leak: _Leak) -> Finding:
        h = leak.holder
        c = leak.census
        dn, db = leak.growth
        census = leak.timeline.census if leak.timeline is not None else self.census
        last = census[-1] if census else c
        after = [e for e in census if e["step"] > c.get("step", 0)]
        # bounded: at least grow_steps steps after it was found, and no more than one step's
        # growth beyond it (a deque(maxlen=k), a window cleared every k steps)
        bounded = (
            leak.growing
            and len(after) >= self.grow_steps
            and max(e["nodes"] for e in after) <= c["nodes"] + max(dn, 0)
        )
        what = _holder_phrase(h)
        created = (
            f", created at {short_path(leak.created['file'])}:{leak.created['line']}"
            if leak.created
            else ""
        )
        if h.kind == "unknown":
            held = "holds graph nodes of earlier steps (the holder could not be named)"
        elif h.container in ("list", "dict", "tuple", "set", "deque"):
            held = (
                f"holds tensors with grad_fn{created}; each retains a graph of "
                f"{leak.nodes_each} nodes"
            )
        else:
            held = f"holds a tensor{created} whose graph retains {leak.nodes_each} nodes"
        # a thread the script started: its steps are its own (NOTE [Steps per thread])
        thread = None
        if leak.timeline is not None and leak.timeline is not self._timelines[0]:
            thread = leak.timeline.thread
        of = f" of thread {thread}" if thread else ""
        if leak.growing:
            msg = (
                f"{what} {held}. By step {c['step']}{of}, {c['nodes']} nodes "
                f"({fmt_bytes(c['bytes'])}) from {c['steps']} earlier steps were alive, "
                f"growing by +{dn:.0f} nodes / +{fmt_bytes(db)} per step"
            )
            if bounded:
                msg += (
                    f"; then it stopped growing (at the end: {last['nodes']} nodes from "
                    f"{last['steps']} steps): the holder drops old tensors, but each one it "
                    f"keeps still holds its graph"
                )
            elif last is not c:
                msg += (
                    f"; at the end of the run: {last['nodes']} nodes "
                    f"({fmt_bytes(last['bytes'])}) from {last['steps']} steps"
                )
        else:
            msg = f"{what} {held}, for the rest of the run"
        captured = re.search(r"closure variable `(\w+)`", h.path)
        hint = _fix_hint(leak.created, captured.group(1) if captured else None, h)
        loc = None
        if h.file and h.line:
            loc = {
                "file": h.file,
                "line": h.line,
                "function": h.function or "<module>",
                "code": linecache.getline(h.file, h.line).strip(),
            }
        extra = {
            "holder": h.to_json(),
            "tensors_at_detection": leak.tensors,
            "nodes_per_tensor": leak.nodes_each,
            "created_at": leak.created,
            "detected_at_step": c.get("step"),
            "growth_nodes_per_step": round(dn, 2),
            "growth_bytes_per_step": round(db),
            "retained_nodes": c.get("nodes"),
            "retained_bytes": c.get("bytes"),
            "retained_steps": c.get("steps"),
            "retained_at_end": {k: last[k] for k in ("nodes", "bytes", "steps")},
            "growing": leak.growing,
            "bounded": bounded,
            **({"thread": thread} if thread else {}),
        }
        severity = "error" if leak.growing and not bounded else "warning"
        return Finding(
            "graph_leak", severity, msg, loc, [leak.created] if leak.created else [], hint, extra
        )


# --- helpers ---------------------------------------------------------------------------------


def _bytes_of(refs: list) -> int:
    """Bytes held by the live nodes of ``refs``: saved tensors (each array once) and the node
    objects themselves."""
    seen: set = set()
    total = 0
    for r in refs:
        n = r()
        if n is None:
            continue
        total += inspect.footprint(n)
        for s in saved_info(n):
            total += s[3]
        seen.add(id(n))
    return total


def _reachable(top, old: dict, recorded: set) -> tuple[int, set]:
    """How many nodes of ``old`` (id -> step) are reachable from ``top`` through
    next_functions, and the steps they were made in. The walk goes through the recorded nodes
    of the current step too: a carried state that was never detached (an RNN's hidden state)
    reaches the old graph through this step's nodes."""
    count = 0
    steps: set = set()
    seen = set()
    todo = [top]
    while todo:
        n = todo.pop()
        i = id(n)
        if i in seen:
            continue
        seen.add(i)
        if i in old:
            count += 1
            steps.add(old[i])
        for m in children(n):
            if m is not None:
                if id(m) in recorded:
                    todo.append(m)
    return count, steps


def _to_tensor(holder: Holder, chain: list) -> list:
    """Cut a holder's chain at the first tensor whose graph leads to the retained node (a
    search that started at a node may have gone through ``t.grad_fn.next_functions...``): the
    holder is that tensor's holder, and the path stops there."""
    for i in range(len(chain) - 1):
        t = chain[i]
        if issubclass(type(t), Tensor) and chain[i + 1] is t.grad_fn:
            if i < len(chain) - 2 and ".grad_fn" in holder.path:
                holder.path = holder.path.split(".grad_fn")[0]
                holder.container = container_kind(chain[: i + 1])
            return chain[: i + 1]
    return chain


def _held_tensors(chain: list) -> list:
    """The tensors with grad_fn in the container that holds the retained tensor (the tensor
    itself when it is held directly)."""
    if not chain or not issubclass(type(chain[-1]), Tensor):
        return []
    container = chain[-2] if len(chain) >= 2 else None
    kind = type(container)
    if issubclass(kind, dict):
        items = list(container.values())
    elif issubclass(kind, (list, tuple, set, frozenset, collections.deque)):
        items = list(container)
    else:
        return [chain[-1]]
    return [t for t in items if issubclass(type(t), Tensor) and t.grad_fn is not None]


def _holder_phrase(h: Holder) -> str:
    where = f" ({short_path(h.file)}:{h.line})" if h.file and h.line else ""
    path = h.path
    if h.kind == "unknown":
        return f"an object autodiag could not name ({path})" if path else "Something"
    if h.container in ("list", "dict", "tuple", "set", "deque"):
        base = re.sub(r"\[[^\[\]]*\]$", "", path)
        scope = f" in {h.function}()" if h.kind == "local" else ""
        return f"{h.container} `{base}`{scope}{where}"
    if h.container == "closure":
        return f"{path}{where}"
    target = path
    if h.kind == "global" and target == h.name:
        return f"module-level variable `{target}`{where}"
    if h.kind == "local" and target == h.name:
        return f"local variable `{target}` in {h.function}(){where}"
    if h.kind == "unknown":
        return f"an object the script cannot name ({path})"
    return f"`{target}`{where}"


def _retained_finding(site, calls: list) -> Finding:
    loc = format_site(site)
    n = len(calls)
    kept = max(c.saved_bytes for c in calls)
    where = f"{short_path(loc['file'])}:{loc['line']}" if loc else "<unknown location>"
    msg = (
        f"backward(retain_graph=True) at {where} kept the graph of {n} call"
        f"{'s' if n != 1 else ''} (up to {fmt_bytes(kept)} of saved tensors each), and no later "
        f"backward used them"
    )
    hint = (
        "Drop retain_graph=True: it is only needed when a second backward goes through "
        "the same graph."
    )
    return Finding(
        "retained_graph",
        "warning",
        msg,
        loc,
        [loc] if loc else [],
        hint,
        {"calls": n, "saved_bytes": kept, "nodes": max(c.nodes for c in calls)},
    )


def _fix_hint(created: dict | None, captured: str | None, holder: Holder | None = None) -> str:
    """One sentence: what to store instead, in the words of the line that made the tensor
    (``captured``: the closure variable that holds it, if a closure does)."""
    target, value = _assignment((created or {}).get("code") or "")
    if holder is not None and holder.container == "tuple" and holder.name and "," in target:
        # a state unpacked from an op's result and fed back at the next step (an RNN's hidden
        # state): each step's graph hangs on the previous one
        name = holder.name
        return (
            f"Detach the state carried from step to step: `{name} = tuple(h.detach() for h "
            f"in {name})` before it is used again (truncated backpropagation through time), "
            f"or compute it under torch.no_grad() when no gradient should flow through it."
        )
    if captured:
        return (
            f"Let the function capture `{captured}.detach()` (or `{captured}.item()`) instead "
            f"of the tensor, and remove hooks you no longer need (handle.remove())."
        )
    if value is not None:  # total = total + loss / total += loss: accumulate a number
        return (
            f"Accumulate a number: `{target} += {value}.item()` (or add `{value}.detach()`),"
            f" so each step's graph is freed."
        )
    return (
        f"Store `{target}.item()` (a number) or `{target}.detach()` instead of the tensor, "
        f"so each step's graph is freed."
    )


def _assignment(code: str) -> tuple[str, str | None]:
    """(what the line assigns, what it adds to it when it accumulates) for a line of code."""
    try:
        stmt = ast.parse(code.strip()).body[0]
    except (SyntaxError, IndexError, ValueError):
        return "loss", None
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
        return ast.unparse(stmt.target), ast.unparse(stmt.value)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = ast.unparse(stmt.targets[0])
        v = stmt.value
        if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
            if ast.unparse(v.left) == target:
                return target, ast.unparse(v.right)
            if ast.unparse(v.right) == target:
                return target, ast.unparse(v.left)
        return target, None
    return "loss", None
