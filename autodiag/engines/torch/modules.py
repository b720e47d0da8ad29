"""Which ``nn.Module`` made each PyTorch graph node, for ``graph --engine torch`` (the module path
autodiag's engine shows, ``model.h.0.mlp.0 (Linear)``), from PyTorch's global module forward
hooks alone — a hook set of its own, apart from the function mode's per-op path:

* the pre hook notes, per thread, the module starting and the sequence number the next graph
  node of this thread will get (PyTorch numbers nodes per thread, in creation order);
* the post hook (``always_call``) walks back from the module's outputs through the nodes
  numbered since, and writes into each node's ``metadata`` (``MODULE``) the module that made it:
  the innermost one, as on autodiag's engine (an inner module's post hook runs first, so an
  outer one only fills the nodes left). Modules are named by their path in the outermost module
  running (``named_modules``), which the report names after the script's variable.

The entry holds a weak reference to that outermost module: a node never keeps a module alive
(a module that stores its output would otherwise make a cycle through C++ that no collector
sees). Nodes a module made that its outputs do not reach (a tensor it only stored on itself) are
handed to its call by the observer's mode as they are made (``made``), and walked from too.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref

import torch
from torch.nn.modules import module as _module
from torch.utils._pytree import tree_leaves

from autodiag.engines.torch.seam import ACCUMULATE as _ACCUMULATE
from autodiag.engines.torch.seam import MODULE
from autodiag.engines.torch.seam import own_calls as _own

_is_compiling = torch.compiler.is_compiling
# NOTE: the number the next node made in this thread gets (PyTorch's thread-local counter);
# nodes made inside a module's forward are numbered from the mark taken when it started
_next_sequence_nr = torch._C._autograd._get_sequence_nr
_Tensor = torch.Tensor


class _Calls(threading.local):
    """Per thread: the module calls in progress, outermost first, as ``[module, mark, handed]``
    (``handed``: the nodes its finished inner calls reached that they did not make)."""

    def __init__(self):
        self.stack: list = []


class ModuleTagger:
    """The hook set: ``installed()`` for the run; ``entry_of`` caches module paths per root."""

    def __init__(self):
        self.calls = _Calls()
        self.paths: dict = {}  # id(root) -> (weakref to root, {id(submodule): path})
        self.lock = threading.Lock()  # paths is shared by the threads that run modules

    def entered(self, module, args) -> None:
        if not _is_compiling():
            self.calls.stack.append([module, _next_sequence_nr(), []])

    def left(self, module, args, out) -> None:
        if _is_compiling():
            return
        stack = self.calls.stack
        for i in range(len(stack) - 1, -1, -1):  # its innermost call (always_call: also
            if stack[i][0] is module:  # after a forward that raised)
                _, mark, handed = stack[i]
                root = stack[0][0]
                del stack[i:]
                break
        else:
            return
        with _own():  # reading out.grad_fn is autodiag's read, not the script's op
            starts = _nodes_of(out)
        if handed:
            starts.extend(handed)
        if starts:
            older = _tag(starts, mark, self.entry_of(root, module))
            if older and stack:
                stack[-1][2].extend(older)  # the caller's, if it made them (NOTE below)

    def made(self, node) -> None:
        """The observer's mode made ``node`` (observe.py): while a module call runs in this
        thread, its walk starts from the node too, so a node the call made that its outputs do
        not reach (a loss it keeps on itself, a value only a later op reads) is still the
        module's, as on autodiag's engine (which names the module running when a node is
        made)."""
        stack = self.calls.stack
        if stack:
            stack[-1][2].append(node)

    def entry_of(self, root, module) -> tuple:
        known = self.paths.get(id(root))
        if known is None or known[0]() is not root or id(module) not in known[1]:
            known = self._paths_of(root)
        return (known[0], known[1].get(id(module), ""), type(module).__name__, type(root).__name__)

    def _paths_of(self, root) -> tuple:
        """(weakref to ``root``, {id(submodule): path}), listed afresh (a new root, or one
        given a submodule since)."""
        paths: dict = {}
        try:
            paths = {id(m): name for name, m in root.named_modules()}
        except Exception:  # noqa: BLE001 - a user module with an odd named_modules
            pass
        known = (weakref.ref(root), paths)
        with self.lock:
            self.paths[id(root)] = known
        return known

    @contextlib.contextmanager
    def installed(self):
        """The two global hooks for the ``with`` block, removed after it whatever happens."""
        handles = []
        try:
            with warnings.catch_warnings():
                # torch.compile(module) warns about global module hooks: these only name modules
                warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when")
                handles.append(_module.register_module_forward_pre_hook(self.entered))
                handles.append(_module.register_module_forward_hook(self.left, always_call=True))
                yield self
        finally:
            for h in handles:
                h.remove()
            self.paths.clear()


def _nodes_of(out) -> list:
    """The grad_fn of each tensor a forward returned (a tensor, or one inside tuples, lists,
    dicts, named tuples: ``tree_leaves``)."""
    if isinstance(out, _Tensor):
        fn = out.grad_fn
        return [fn] if fn is not None else []
    found = []
    try:
        leaves = tree_leaves(out)
    except Exception:  # noqa: BLE001 - an output pytree cannot take apart: none found
        return found
    for t in leaves:
        if isinstance(t, _Tensor) and t.grad_fn is not None:
            found.append(t.grad_fn)
    return found


# NOTE [Walking each node once]: a call's nodes are those numbered from its mark on that its
# outputs reach; those an inner call made are tagged already, and are not walked again (an
# outer module's walk would otherwise cover its whole subtree at every level of nesting:
# ~3x the cost on a 3-level model). What an inner call's nodes point at that it did not make
# (``model.fc2``'s AddmmBackward0 -> the ReluBackward0 that ``model`` made before calling it)
# is handed to its caller, which starts from it as well.


def _tag(starts: list, mark: int, entry: tuple) -> list:
    """Give the nodes numbered ``mark`` or above reachable from ``starts`` without passing a
    node tagged already the module ``entry``; the older nodes reached (a leaf's
    ``AccumulateGrad`` is nobody's, and not returned). Iterative; each node seen once."""
    seen = set()
    older = []
    todo = starts
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if type(n) is _ACCUMULATE:
            continue
        if n._sequence_nr() < mark:
            older.append(n)
            continue
        md = n.metadata
        if MODULE in md:
            continue  # an inner call's (what it reached of ours was handed to us)
        md[MODULE] = entry
        todo.extend([c for c, _ in n.next_functions if c is not None])
    return older


def installed_for(tracers):
    """The hook set for a run, when one of ``tracers`` shows modules (``records_modules``)."""
    if any(getattr(type(t), "records_modules", False) for t in tracers):
        return ModuleTagger().installed()
    return contextlib.nullcontext()
