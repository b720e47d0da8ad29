"""Observing a PyTorch program through PyTorch's public extension points, and feeding what is seen
to autodiag's tracers (``autodiag.trace``), so the same analyses and reports serve both engines.

* A ``TorchFunctionMode`` sees every outermost torch call of the script: it writes the user's
  ``Stack`` into the ``metadata`` of each graph node the call made (``seam.SITE``: the creation
  line ``graph`` shows), notices in-place writes (``mul_``, ``x[i] = ...``, ``out=``,
  ``inplace=True``, ``_foreach_*_``) and wraps ``backward()``/``autograd.backward``/
  ``autograd.grad`` in the ``on_backward_begin``/``on_backward_end`` events.
* ``saved_tensors_hooks``, only when an in-place analysis listens (``InplaceWatcher``): each
  saved tensor is packed as ``_Packed(t.detach(), version at save)``. NOTE [Two pitfalls]
  (reference/torch_backend.md, both verified): (1) while such hooks are installed PyTorch does
  not check versions at unpack, so a modified saved tensor would silently give a wrong gradient:
  ``_unpack`` redoes the check and raises PyTorch's own error; (2) a pack hook that returns the
  tensor itself makes a reference cycle through C++ for a node that saves its own output, and
  leaks the graph: ``detach()`` shares the version counter without the cycle.

Every hook steps aside under ``torch.compiler.is_compiling()``: a compiled region is traced as
plain PyTorch and shows as one node at the line that called it. Each thread the run starts
gets an observer of its own (``workers.py``: modes and hooks are per thread). Ops inside
``torch.func`` transforms and inside ``checkpoint``/``save_on_cpu`` regions (only the innermost
saved-tensor hooks apply) are not seen; nor are writes that C++ kernels make themselves
(BatchNorm's running statistics).
"""

from __future__ import annotations

import contextlib
import inspect as _pyinspect
import itertools
import os
import re
import sys
import sysconfig
import threading
import types
import weakref

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.overrides import TorchFunctionMode

from autodiag import inspect
from autodiag.core import errors
from autodiag.engines.torch import hooks, modules, seam
from autodiag.trace import events, sites
from autodiag.trace.sites import Stack, capture_stack

_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_SITE = seam.SITE
_ACCUMULATE = seam._ACCUMULATE

# The calls that run a backward pass, and what each is.
_BACKWARD = {
    torch.Tensor.backward: "backward",
    torch.autograd.backward: "backward",
    torch.autograd.grad: "grad",
}
_SIGNATURES = {f: _pyinspect.signature(f) for f in _BACKWARD}
_TENSOR_BACKWARD = torch.Tensor.backward
_KEYWORDS = frozenset(_SIGNATURES[_TENSOR_BACKWARD].parameters) - {"self"}
SWEEP_EVERY = 10_000  # watched saves between sweeps of the storages whose saves are all gone

# Names ending in "_" that do not write the tensor's values.
_NOT_WRITES = frozenset(
    {"requires_grad_", "retain_grad_", "detach_", "share_memory_", "pin_memory_", "rename_"}
)
_OPERATOR_WRITES = frozenset(
    {
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
        "__ipow__", "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
        "__irshift__", "__setitem__",
    }
)  # fmt: skip


def register() -> None:
    """Make ``autodiag.inspect`` answer for PyTorch's nodes and tensors, and keep torch's own
    Python frames out of the user's stacks (a line in ``torch/nn/modules/linear.py`` is not
    where the user's op ran)."""
    inspect.register_engine(seam)
    sites.hide_library(os.path.dirname(torch.__file__))


class BackwardCall:
    """A ``backward()``/``autograd.grad()`` call, as the ``on_backward_*`` events describe it
    (``autodiag.trace``). ``roots``/``inputs`` are dropped when the call ends."""

    __slots__ = (
        "roots", "inputs", "accumulate", "retain_graph", "create_graph", "error", "stack",
        "number", "leaf_targets",
    )  # fmt: skip

    def __init__(self, roots, inputs, accumulate, retain_graph, create_graph, stack, number):
        self.roots, self.inputs = roots, inputs
        self.accumulate, self.retain_graph, self.create_graph = (
            accumulate,
            retain_graph,
            create_graph,
        )
        self.error = None
        self.stack, self.number = stack, number
        # backward(inputs=...): PyTorch runs only those leaves' AccumulateGrad, so no other
        # leaf's accumulation is ever reported (autodiag's engine says which it runs)
        self.leaf_targets = None


class _Packed:
    """A saved tensor as the pack hook keeps it: ``detach()`` of it (same storage and version
    counter, no graph) and its version then. It lives exactly as long as the node holds the
    saved tensor (PyTorch frees it with the node's saved variables), so a weak reference to it
    says whether a pending backward still needs it."""

    __slots__ = (
        "tensor", "version", "producer", "out_seq", "key", "node_name", "site", "output",
        "ran", "hazards", "__weakref__",
    )  # fmt: skip

    def __init__(self, tensor, version, producer, out_seq, key):
        self.tensor, self.version, self.producer, self.out_seq, self.key = (
            tensor,
            version,
            producer,
            out_seq,
            key,
        )
        self.node_name = None
        self.site = None
        self.output = False
        self.ran = None  # the last backward call that ran its node keeping it (retain_graph)
        self.hazards = None


class Observer:
    """What one run of a script on PyTorch is watched with: the thread that runs it, or (with
    ``run``, the observer of that thread) one more thread the run started (workers.py), which
    shares the run's saved tensors (a write in one thread to a tensor saved in another is a
    hazard too) and backward call numbers; the rest is per thread, as PyTorch's modes, hooks
    and sequence numbers are."""

    def __init__(self, run: Observer | None = None):
        self.sinks = [t for t in events.TRACERS if hasattr(type(t), "note_hazard")]
        # tracers that look at every op of the script (``torch_op``: anomaly, leaks)
        self.op_watchers = [t for t in events.TRACERS if hasattr(type(t), "torch_op")]
        self.last_seq = -1  # the newest node sequence number tagged so far
        self.last_stack = None  # the stack of the last op that ran with grad disabled
        self.pending: list = []  # saves packed during the op in progress
        self.saves: dict = {}  # storage data_ptr -> WeakSet of _Packed still held by a node
        # NOTE [Shared saves]: ``saves`` and its sets are shared by the run's threads; they are
        # changed and scanned under ``lock`` (a set changed during another thread's scan raises)
        self.lock = threading.Lock()
        self.numbers = itertools.count(1)  # backward call numbers, in the order calls begin
        if run is not None:
            self.saves, self.lock, self.numbers = run.saves, run.lock, run.numbers
        self.calls: list = []  # this thread's backward calls in progress, innermost last
        # modules.ModuleTagger.made, while module paths are recorded: told of each new node
        self.made_in_module = run.made_in_module if run is not None else None
        self.nsaves = 0  # saves watched since the last sweep
        self.mode = _Mode(self)
        # the analyses that listen to every op / node (check, trace): engines/torch/hooks.py
        self.op_listeners = ready("on_op")
        self.node_listeners = ready("on_node_backward")
        self.wanted_nodes = hooks.wanted_nodes(self.node_listeners)

    # --- ops ------------------------------------------------------------------------------

    def after_op(self, name: str, args, kwargs, out, n0: int, written) -> None:
        # NOTE [Per-op cost]: this runs for every op of the script (with the mode's own call,
        # the floor of every ``--engine torch`` command: tests/perf/bench_torch_engine.py);
        # the common case (one tensor out, one node made) takes the short paths
        reported = events.REPORTED
        reported[0] += 1
        reported[3] += 1  # PyTorch's: autodiag's own engine counts only [0]
        node = out.grad_fn if isinstance(out, _Tensor) else _node_of(out)
        if node is None and written:
            node = _node_of(written[0])  # x[i] = v returns None; x's CopySlices is new
        stack = None
        before = self.last_seq
        made = None
        if node is not None and type(node) is not _ACCUMULATE:
            seq = node._sequence_nr()
            if seq > before:
                stack = capture_stack(3)
                made = self.tag(node, stack, before)
        elif node is None and written is None and not torch.is_grad_enabled():
            # perhaps inside a custom Function's forward, whose apply() no mode sees: its node
            # is found later, and named after the line that called apply (``_apply_site``)
            self.last_stack = stack = capture_stack(3)
        pending = self.pending
        if len(pending) > n0:
            if made is not None:
                node_name, node_seq = node.name(), node._sequence_nr()
                for p in pending[n0:]:
                    # NOTE: a pack hook is not told which node saves; a tensor this op made
                    # whose node saves its own result (log_softmax inside cross_entropy) was
                    # saved by that node, any other by the node of the op's output
                    maker = made.get(p.out_seq)
                    if maker is not None and maker is not node and _saves_result(maker):
                        p.node_name, p.output = maker.name(), True
                    else:
                        p.node_name, p.output = node_name, p.out_seq == node_seq
                    p.site = stack
                    if p.key is None:
                        continue  # a tensor without storage (sparse, meta): not watched
                    self.keep(p)
                self.nsaves += len(pending) - n0
                if self.nsaves > SWEEP_EVERY:
                    self.sweep()
            del pending[n0:]
        if written and self.saves:
            for t in written:
                if t.__class__ is _Tensor or isinstance(t, _Tensor):
                    self.wrote(name, t, stack)
        if hooks.STEPPING.n and not torch.is_grad_enabled():
            return  # an optimizer's own arithmetic: NOTE [Optimizer internals] in hooks.py
        for w in self.op_watchers:
            w.torch_op(name, args, kwargs, out, made)
        if self.op_listeners:
            if stack is None:
                stack = capture_stack(3)
            inputs, outputs = _tensors_in(args, kwargs), _tensors_in((out,), None)
            new = node if made is not None else None
            for t in self.op_listeners:
                t.on_op(name, new, inputs, outputs, stack)

    def keep(self, p: _Packed) -> None:
        """Note saved tensor ``p`` under its storage (NOTE [Shared saves])."""
        with self.lock:
            box = self.saves.get(p.key)
            if box is None:
                box = self.saves[p.key] = weakref.WeakSet()
            box.add(p)

    def sweep(self) -> None:
        """Forget storages whose saved tensors are all gone (their nodes ran or died)."""
        self.nsaves = 0
        with self.lock:  # NOTE [Shared saves]
            for key in [k for k, box in self.saves.items() if not box]:
                del self.saves[key]

    def tag(self, node, stack, before: int, own: bool = True) -> dict:
        """Give ``node`` and the other nodes this op made (numbered above ``before``; a composite
        such as ``cross_entropy`` makes several) the user's stack; those nodes by number."""
        md = node.metadata
        seq = node._sequence_nr()
        if seq == before + 1:
            # NOTE [Per-op cost]: sequence numbers count up per thread and a node's inputs are
            # older than it, so no other node numbered above ``before`` can be under it: this
            # op made one node (a chain of tiny ops: every op), and there is nothing to walk
            if _SITE in md:
                return {}
            md[_SITE] = stack if own else self._apply_site(node) or stack
            if _TRACEBACK in md:  # PyTorch's anomaly mode is on (NOTE [Autodiag's own calls])
                md[_TRACEBACK] = _without_own_frames(md[_TRACEBACK])
            self.last_seq = seq
            if self.made_in_module is not None:
                self.made_in_module(node)
            return {seq: node}
        todo = [node]
        newest = before
        made = {}
        while todo:
            n = todo.pop()
            md = n.metadata
            if _SITE in md:
                continue
            md[_SITE] = stack if own and n is node else self._apply_site(n) or stack
            if _TRACEBACK in md:
                md[_TRACEBACK] = _without_own_frames(md[_TRACEBACK])
            s = n._sequence_nr()
            made[s] = n
            if self.made_in_module is not None:
                self.made_in_module(n)
            if s > newest:
                newest = s
            for c, _ in n.next_functions:
                if c is not None and type(c) is not _ACCUMULATE and c._sequence_nr() > before:
                    todo.append(c)
        self.last_seq = newest
        return made

    def _apply_site(self, node):
        """The user's stack at the ``apply()`` that made a custom Function's ``node``: the frames
        outside its ``forward`` in the stack of the last op that ran inside it; None when that
        is not known (then the op that found the node names it)."""
        fwd = getattr(getattr(node, "_forward_cls", None), "forward", None)
        code = getattr(fwd, "__code__", None)
        last = self.last_stack
        if code is None or last is None:
            return None
        frames = last.sites
        if not sites._user(code):
            # a forward of torch's own (a compiled region's CompiledFunction): the last op ran
            # inside it. A frame Dynamo runs compiled reports its ``def`` line: the region is
            # the function of that frame, and its call the frame outside it
            if len(frames) > 1 and frames[-1][1] == frames[-1][0].co_firstlineno:
                return Stack(frames[:-1])
            return last
        for k in range(len(frames) - 1, 0, -1):
            if frames[k][0] is code:
                return Stack(frames[:k])
        return None

    def wrote(self, op: str, t, stack) -> None:
        key = _key(t)
        box = self.saves.get(key) if key is not None else None
        if not box:
            return
        now = t._version
        with self.lock:  # NOTE [Shared saves]
            hazards = [p for p in box if p.version != now]
        if not hazards:
            return
        if stack is None:
            stack = capture_stack(4)
        no_grad = not torch.is_grad_enabled()
        by_optimizer = hooks.STEPPING.n > 0  # inside an optimizer's step (NOTE [Retained saves])
        for p in hazards:
            for sink in self.sinks:
                h = sink.note_hazard(
                    op=op,
                    stack=stack,
                    node_name=p.node_name,
                    node_ref=weakref.ref(p),
                    save_stack=p.site,
                    saved_version=p.version,
                    version=now,
                    shape=list(t.shape),
                    dtype=seam.dtype_name(t),
                    is_output=p.output,
                    no_grad=no_grad,
                    after_call=p.ran,
                    by_optimizer=by_optimizer,
                )
                if p.hazards is None:
                    p.hazards = []
                if h not in p.hazards:
                    p.hazards.append(h)

    # --- saved tensors (only when an in-place analysis listens) ---------------------------

    def pack(self, t):
        if _is_compiling():
            return t
        mode = self.mode
        own, mode.own = mode.own, True  # NOTE [Autodiag's own calls]
        try:
            fn = t.grad_fn
            p = _Packed(
                t.detach(),  # NOTE [Two pitfalls] (2): never the tensor itself
                t._version,
                (fn.name(), t.output_nr) if fn is not None else None,
                fn._sequence_nr() if fn is not None and type(fn) is not _ACCUMULATE else -1,
                _key(t),
            )
        finally:
            mode.own = own
        self.pending.append(p)
        return p

    def unpack(self, p):
        if p.__class__ is not _Packed:
            return p
        t = p.tensor
        call = self.calls[-1] if self.calls else None
        bad = t._version != p.version
        if call is not None and p.hazards:
            for h in p.hazards:
                if h.needed_at is None:
                    h.needed_at, h.needed_call = call.stack, call.number
                if bad:
                    h.failed = True
        if bad:  # NOTE [Two pitfalls] (1): PyTorch's own check, which the hooks turn off
            raise RuntimeError(_version_error(p, t))
        if call is not None and call.retain_graph:
            p.ran = call.number  # a later write matters only if a later backward needs it
        return t

    # --- backward calls -------------------------------------------------------------------

    def backward(self, kind: str, func, args, kwargs, call_op=None):
        if func is _TENSOR_BACKWARD and len(args) == 1 and _KEYWORDS.issuperset(kwargs):
            # loss.backward(): once per step, without a signature bind (Tensor.backward hands
            # itself to the mode with its four parameters as keywords, whatever the call)
            a = dict(kwargs)
            a["self"] = args[0]
        else:
            a = _SIGNATURES[func].bind(*args, **kwargs).arguments
        if func is torch.Tensor.backward:
            roots = [a["self"]]
        else:
            roots = _as_list(a.get("tensors", a.get("outputs")))
        create = bool(a.get("create_graph", False))
        retain = a.get("retain_graph")
        call = BackwardCall(
            [r for r in roots if isinstance(r, _Tensor)],
            a.get("inputs"),
            kind == "backward",
            create if retain is None else bool(retain),
            create,
            capture_stack(3),
            next(self.numbers),
        )
        del self.pending[:]
        for r in call.roots:  # a custom Function's output, say, that no later op reached
            fn = r.grad_fn
            if fn is not None and fn._sequence_nr() > self.last_seq:
                self.tag(fn, call.stack, self.last_seq, own=False)
        events.REPORTED[1] += 1
        for t in events.LISTENERS["on_backward_begin"]:
            t.on_backward_begin(call)
        self.calls.append(call)
        handles = (
            hooks.hook_graph(call.roots, self.node_listeners, self.wanted_nodes)
            if self.node_listeners
            else None
        )
        try:
            if call_op is None:
                return func(*args, **kwargs)
            return call_op(func, args, kwargs)  # NOTE [Warnings at the user's line]
        except BaseException as e:
            _drop_call_frame(e)
            call.error = e
            raise
        finally:
            if handles:
                hooks.remove(handles)
            self.calls.pop()
            del self.pending[:]  # saves of a create_graph backward: no op of the script's
            for t in events.LISTENERS["on_backward_end"]:
                t.on_backward_end(call)
            call.roots = call.inputs = call.error = None  # hold no graph past the call

    @contextlib.contextmanager
    def installed(self):
        """The mode, and the saved-tensor hooks when an in-place analysis listens."""
        with contextlib.ExitStack() as stack:
            if self.sinks:
                stack.enter_context(saved_tensors_hooks(self.pack, self.unpack))
            # the step hooks also when an in-place analysis listens: hooks.STEPPING tells it
            # an optimizer's writes (NOTE [Retained saves] in analysis/inplace.py)
            watch_steps = self.op_watchers or self.sinks
            stack.enter_context(
                hooks.installed(ready("on_op"), ready("on_optimizer_step"), watch_steps)
            )
            tagger = stack.enter_context(modules.installed_for(events.TRACERS))
            self.made_in_module = tagger.made if tagger is not None else None
            stack.enter_context(self.mode)
            try:
                yield self
            finally:
                self.made_in_module = None


# NOTE [Autodiag's own calls]: the mode sees every torch call made while it is installed, and
# not only the script's: a hook PyTorch runs outside any call the mode handles runs under it
# too. Inside ``__torch_function__`` (an op, a ``backward()``: the node hooks) PyTorch has
# taken the mode off its stack, but the pack hook of a custom Function's ``save_for_backward``
# (run by ``apply``, which no mode sees) and the optimizer step hooks are not inside one: their
# ``t.detach()`` was counted, traced and tested as the script's op. The pack hook raises the
# mode's ``own`` flag (``DisableTorchFunction`` would also switch off a tensor subclass's
# ``__torch_function__``, and a subclass's saved tensor would come back as a plain Tensor); the
# step and module hooks, which only read values, run under ``DisableTorchFunction`` (NOTE
# [Listeners' own reads] in hooks.py). PyTorch's anomaly mode records the Python stack of
# every node it makes (``metadata["traceback_"]``, printed when backward fails): ``tag`` takes
# the mode's frames out of it, and the CLI's runner frames (``_without_own_frames``).


# the modes made (an Observer's, per thread of the run): in a process the script forks, each
# calls ops as its own calls, reported to no one (NOTE [Forked children] in target/script.py)
_MODES: weakref.WeakSet = weakref.WeakSet()


def _quiet_in_child() -> None:
    for mode in list(_MODES):
        mode.own = True


events.QUIET_IN_CHILD.append(_quiet_in_child)


class _Mode(TorchFunctionMode):
    def __init__(self, observer: Observer):
        super().__init__()
        self.observer = observer
        self.own = False  # autodiag's own calls in progress (NOTE [Autodiag's own calls])
        _MODES.add(self)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "__get__" or name == "__set__":  # attribute reads (x.grad_fn, x.shape)
            # (half the calls of a training step: first, before anything else is asked)
            attr = getattr(getattr(func, "__self__", None), "__name__", None)
            if attr not in _WARN_ATTRS or (attr == "grad" and getattr(args[0], "is_leaf", 0)):
                # (a leaf's .grad, the optimizers' many reads, never warns)
                return func(*args) if not kwargs else func(*args, **kwargs)
            kwargs = kwargs or _NO_KWARGS
            if _is_compiling():
                return func(*args, **kwargs)
            try:  # NOTE [Warnings at the user's line]: ``x.grad`` of a non-leaf warns
                return _from_callers_line(_getframe(1))(func, args, kwargs)
            except BaseException as e:
                _drop_call_frame(e)
                raise
        if kwargs is None:
            kwargs = {}
        if self.own or _is_compiling():
            return func(*args, **kwargs)
        # NOTE [Warnings at the user's line] (``_from_callers_line``, inlined: every op)
        f = _getframe(1)
        if f.f_code is _HANDLE:
            f = f.f_back.f_back
        site = _call_sites.get((id(f.f_code), f.f_lasti))
        call = site[0] if site is not None else _new_call_site(f)
        k = _torch_codes.get(id(f.f_code))
        if (k is None or k >= _TORCH) and _building_module(f):
            return func(*args, **kwargs)  # NOTE [Module construction]
        kind = _BACKWARD.get(func)
        if kind is not None:
            return self.observer.backward(kind, func, args, kwargs, call)
        obs = self.observer
        written = (
            _written(name, args, kwargs)
            if kwargs or name.endswith("_") or name in _OPERATOR_WRITES
            else None
        )
        n0 = len(obs.pending)
        try:
            out = call(func, args, kwargs)
        except BaseException as e:
            _drop_call_frame(e)
            raise
        obs.after_op(name, args, kwargs, out, n0, written)
        return out


# NOTE [Warnings at the user's line]: a warning raised inside an op names the innermost Python
# frame when it comes from PyTorch's C++ (``TORCH_WARN``: ``torch.tensor(t)``'s copy-construct
# advice, ``x.grad`` of a non-leaf), and the frame ``stacklevel`` frames up when it comes from
# its Python (``F.softmax`` without ``dim``: 3). Plain PyTorch, that frame is the line of the
# script that called the op. Under the mode, the op is called by ``__torch_function__``, three
# frames deeper (with ``handle_torch_function`` and the torch function the script called,
# for a torch function written in Python): the warning named this file, and went through
# ``warnings.filters`` with autodiag's module name and registry (a script's filter on its own
# module, or its ``"error"`` filter on one message, missed it). So the mode calls the op from
# a function of one line that stands for the caller's frame: its code is a copy of
# ``_call_op``'s with the caller's file, line and name (and no columns, so a traceback draws
# no carets under the wrong part of the line), its globals the caller's. A warning then names
# the script's file and line, with the script's module and registry, as plain PyTorch does.
# Made once per calling instruction (keyed by ``f_lasti``: ``f_lineno`` decodes the line
# table on every read); at most ``MAX_CALL_SITES`` per run, past which ops are called from
# here. The frame is autodiag's: stacks skip it (``sites.hide_code``), a traceback through
# the op drops it (``_drop_call_frame``), and so does an anomaly-mode stack
# (``_without_own_frames``). Attribute reads (half the mode's calls) take this path only for
# the attributes that warn (``_WARN_ATTRS``).


def _call_op(func, args, kwargs):
    return func(*args, **kwargs)


_NO_KWARGS: dict = {}
_getframe = sys._getframe
# the attributes whose reads (or writes) PyTorch warns about: ``.grad`` of a non-leaf, ``.T`` of
# a tensor that is not 2-D, ``.volatile``; any other attribute is read without the call site
_WARN_ATTRS = frozenset({"grad", "T", "volatile"})
_HANDLE = torch.overrides.handle_torch_function.__code__


# NOTE [Module construction]: the ops PyTorch's own modules run while they are built (the
# ``torch.empty`` of ``Linear.__init__``, ``kaiming_uniform_`` and the ``dim()``/``size()`` reads
# of ``reset_parameters``) are the backend's, not the script's, as the ops inside any op are:
# autodiag's engine reports none of its modules' construction either. An op called from torch's
# code, inside a torch ``__init__`` of an ``nn.Module`` reached through torch's frames only, runs
# as the mode's own call: reported to no tracer (an analysis took ``kaiming_uniform_`` for a use
# of the weight). A script's own ``nn.init.xavier_uniform_(layer.weight)``, in its code or in
# its module's ``__init__``, is called from the user's frame: still the script's op; so is a
# ``layer.reset_parameters()`` the script calls. Ops called from the user's code or from an
# optimizer's (``torch/optim/``: it builds no module) pay one dict read; other ops from torch's
# code a walk of the torch frames above them, up to the user's code or to a module call in
# progress (``_call_impl``, or torch's ``forward``: not a construction).
_torch_codes: dict = {}  # id(code) -> _ELSEWHERE, _CALL, _TORCH or _TORCH_INIT (_code_kind)
_kept_codes: list = []  # the codes classified (their ids stay theirs)
_ELSEWHERE, _CALL, _TORCH, _TORCH_INIT = 0, 1, 2, 3


def _code_kind(code) -> int:
    k = _torch_codes.get(id(code))
    if k is None:
        name = code.co_filename
        if code is _CALL_IMPL or code.co_name == "forward":
            k = _CALL
        elif not name.startswith(_TORCH_DIR) or name.startswith(_OPTIM_DIR):
            k = _ELSEWHERE
        else:
            k = _TORCH_INIT if code.co_name == "__init__" else _TORCH
        _torch_codes[id(code)] = k
        _kept_codes.append(code)
    return k


def _building_module(f) -> bool:
    """Whether frame ``f`` runs inside the ``__init__`` of one of PyTorch's modules, through
    torch's frames alone (NOTE [Module construction])."""
    kinds = _torch_codes
    while f is not None:
        k = kinds.get(id(f.f_code))
        if k is None:
            k = _code_kind(f.f_code)
        if k == _TORCH_INIT:
            if isinstance(f.f_locals.get("self"), _Module):
                return True
        elif k != _TORCH:
            return False
        f = f.f_back
    return False


_Module = torch.nn.Module
_CALL_IMPL = torch.nn.Module._call_impl.__code__
_OPTIM_DIR = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "optim") + os.sep
_CALL_CODE = _call_op.__code__
# the line table of _call_op (RESUME on its def line, the call on the next) without columns:
# entries of code 13 (no columns), each for up to 8 code units, and a line delta (svarint)
_units = len(_CALL_CODE.co_code) // 2
_NO_COLUMNS = bytes([0x80 | 13 << 3, 0]) + b"".join(
    bytes([0x80 | 13 << 3 | (min(8, _units - i) - 1), 2 if i == 1 else 0])
    for i in range(1, _units, 8)
)
MAX_CALL_SITES = 50_000
_call_sites: dict = {}  # (id(code), f_lasti) -> (the function calling from there, code)
_call_codes: set = set()  # ids of their code objects


def _from_callers_line(f):
    """The function that calls an op from the line of frame ``f`` (the caller of the torch
    function, or ``handle_torch_function`` for one written in Python): NOTE [Warnings at the
    user's line]."""
    if f.f_code is _HANDLE:
        f = f.f_back.f_back  # the torch function that handed the call on, and its caller
    site = _call_sites.get((id(f.f_code), f.f_lasti))
    if site is not None:
        return site[0]
    return _new_call_site(f)


def _new_call_site(f):
    code = f.f_code
    if code.co_flags & _pyinspect.CO_COROUTINE or len(_call_sites) >= MAX_CALL_SITES:
        return _call_op
    mine = _CALL_CODE.replace(
        co_filename=code.co_filename,
        co_name=code.co_name,
        co_qualname=code.co_qualname,
        co_firstlineno=max(1, (f.f_lineno or 1) - 1),
        co_linetable=_NO_COLUMNS,
    )
    fn = types.FunctionType(mine, f.f_globals, code.co_name)
    _call_sites[(id(code), f.f_lasti)] = (fn, code)
    _call_codes.add(id(mine))
    sites.hide_code(mine)
    return fn


def _drop_call_frame(e: BaseException) -> None:
    """Take the frame of ``_from_callers_line``'s function out of the traceback of ``e``,
    raised by the op it called (the traceback's next entry after this frame's)."""
    tb = e.__traceback__
    nxt = tb.tb_next if tb is not None else None
    if nxt is not None and id(nxt.tb_frame.f_code) in _call_codes:
        tb.tb_next = nxt.tb_next


def forget_call_sites() -> None:
    """Drop the functions made for a run's call sites (they hold its modules' globals), and
    their code objects from the stack walk's tables."""
    sites.unhide_codes([fn.__code__ for fn, _ in _call_sites.values()])
    _call_sites.clear()
    _call_codes.clear()
    _torch_codes.clear()
    _kept_codes.clear()  # (the run's code objects)


# --- helpers ----------------------------------------------------------------------------------


def _node_of(out):
    if isinstance(out, _Tensor):
        return out.grad_fn
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, _Tensor) and o.grad_fn is not None:
                return o.grad_fn
    return None


def _written(name: str, args, kwargs) -> tuple | None:
    """The tensors a call writes in place, or None."""
    if name.endswith("_") and name not in _NOT_WRITES:
        if name.startswith("_foreach_") and args and isinstance(args[0], (list, tuple)):
            return tuple(args[0])
        if not name.startswith("_") and args and isinstance(args[0], _Tensor):
            return (args[0],)
    if name in _OPERATOR_WRITES and args and isinstance(args[0], _Tensor):
        return (args[0],)
    if kwargs:
        out = kwargs.get("out")
        if isinstance(out, _Tensor):
            return (out,)
        if isinstance(out, (tuple, list)):
            return tuple(o for o in out if isinstance(o, _Tensor))
        if kwargs.get("inplace") is True and args and isinstance(args[0], _Tensor):
            return (args[0],)
    return None


_TRACEBACK = "traceback_"  # node.metadata key: the stack PyTorch's anomaly mode recorded
_FRAME_FILE = re.compile(r'  File "(.*?)", line \d+, in ')
_OWN_DIR = sites._PKG_DIR  # autodiag's package
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_OVERRIDES = os.path.abspath(torch.overrides.__file__)
_THIS_FILE = os.path.abspath(__file__)
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


def _without_own_frames(stack: list) -> list:
    """PyTorch's anomaly-mode stack of a node (``traceback.format_stack()`` entries, outermost
    first) without autodiag's frames: the CLI's runner (with the thread it starts) outside the
    script's first frame, and the mode's ``__torch_function__`` with the dispatch that led to
    it (``handle_torch_function`` and the torch function that called it, which runs again
    inside the mode's call): what plain PyTorch records (NOTE [Autodiag's own calls])."""
    files = []
    for entry in stack:
        m = _FRAME_FILE.match(entry) if isinstance(entry, str) else None
        files.append(m.group(1) if m is not None else "")
    start = 0  # the runner's frames: stdlib (threading) and autodiag's, before the script's
    for i, f in enumerate(files):
        if f.startswith(_OWN_DIR):
            start = i + 1
        elif not f.startswith(_STDLIB) or "site-packages" in f:
            break
    drop = set()
    for i in range(start, len(files)):
        if files[i].startswith(_OWN_DIR):
            drop.add(i)
            if i - 1 >= start and files[i - 1] == _OVERRIDES:
                drop.add(i - 1)
                if i - 2 >= start and files[i - 2].startswith(_TORCH_DIR):
                    drop.add(i - 2)
            # the mode's call of the op, made from the script's line (NOTE [Warnings at the
            # user's line]): the entry after this module's, in the script's file
            j = i + 1
            if (
                files[i] == _THIS_FILE
                and j < len(files)
                and files[j]
                and not files[j].startswith((_OWN_DIR, _TORCH_DIR))
            ):
                drop.add(j)
    if not start and not drop:
        return stack
    return [e for i, e in enumerate(stack) if i >= start and i not in drop]


def _saves_result(node) -> bool:
    return "result" in seam._saved_names(node)


def _key(t) -> int | None:
    """Which storage ``t`` is a view of (its views share the version counter); None for a
    tensor without one (sparse, meta, nested), which is then not watched."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def ready(event: str) -> tuple:
    """The installed tracers listening to ``event`` that read PyTorch's objects through the seam
    alone (their class says ``observes_torch = True``): only they get the op, node and
    optimizer events of a PyTorch run. (The in-place analysis gets its own: ``note_hazard``.)"""
    return tuple(t for t in events.LISTENERS[event] if getattr(type(t), "observes_torch", False))


def _tensors_in(args, kwargs) -> tuple:
    """The tensors among a call's arguments or results (one level into lists and tuples)."""
    T = _Tensor
    found = []
    for a in args:
        if isinstance(a, T):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend([x for x in a if isinstance(x, T)])
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, T):
                found.append(a)
    return tuple(found)


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _version_error(p: _Packed, t) -> str:
    """PyTorch's "modified by an inplace operation" message for saved tensor ``p``."""
    which = ""
    if p.producer is not None:
        which = f", which is output {p.producer[1]} of {errors.forward_name(p.producer[0])},"
    hint = errors.INPLACE_HINT if torch.is_anomaly_enabled() else errors.ENABLE_ANOMALY_HINT
    return (
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{t.type()} {list(t.shape)}]{which} is at version {t._version}; "
        f"expected version {p.version} instead. {hint}"
    )


@contextlib.contextmanager
def observing():
    """Observe the PyTorch code run inside (the calling thread's) with the installed tracers;
    PyTorch's grad mode and default dtype are put back afterwards."""
    register()
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    obs = Observer()
    try:
        with obs.installed():
            yield obs
    finally:
        forget_call_sites()
        with obs.lock:  # threads the run started may still be running (workers.py)
            obs.saves.clear()
        del obs.pending[:]
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
