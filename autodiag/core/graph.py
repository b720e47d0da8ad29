"""The autograd graph: ``Node``, ``AccumulateGrad``, saved tensors and hook handles.

NOTE [Graph ownership]
The graph is owned in one direction only, from outputs towards inputs:
``tensor.grad_fn -> Node -> next_functions -> Node ... -> AccumulateGrad -> leaf``.
Nothing points back: a node never holds the tensor it produced (a saved *output* is stored as its
numpy array plus version counter and rebuilt on unpack), a leaf holds its ``AccumulateGrad`` only
through a weak reference, and ``retain_grad`` hooks hold their tensor weakly. So dropping the last
reference to a loss frees its whole graph by reference counting alone, with no cyclic GC.

NOTE [Version counters]
A tensor's ``_vc`` is a list ``[version]`` shared by the tensor, all its views and its base, or
None until something needs it (a view, a save at a non-zero version, an in-place write): most
tensors never do, and a missing counter reads as version 0 (``tensor.vc_of`` creates it).
In-place ops bump ``_vc[0]`` and store ``(op name, site)`` of the write in ``_vc[1]``, so the
"modified by an inplace operation" error can name the line that wrote. A saved tensor records
the version it had; on unpack a different version raises that error.

NOTE [Version checks at backward]
PyTorch unpacks, so version-checks, every saved tensor of a node before its formula runs, also
those the formula then does not read (``(2 ** x)`` saves x, read only when the base is 0). So
does autodiag (``check_saved``), where a write could have happened: every write stores a fresh
sequence number, negated, in ``last_write[0]`` (``note_write``), and a node made after the last
write cannot hold a stale saved tensor, so the engine checks only nodes older than it, at the
cost of one comparison per node with its heap key ``-seq`` (graphs with no in-place op in them,
the common case, check nothing).

NOTE [Saving sites]
The "modified by an inplace operation" error names the line that saved the tensor, also with no
tracer and no anomaly mode. A node that saves tensors remembers the code object and instruction
offset of the user's frame that recorded it (``trace.sites.note_saver``: one frame walk, two
slots, no new object); the line is decoded only when the error is raised. The hot ops
(``pointwise.binary_op``/``unary_op``) call it themselves, every other public op through its
``traced`` wrapper, and ``autograd.Function.apply`` for custom functions.

NOTE [Freed graphs]
A backward call without ``retain_graph`` frees the saved tensors of every node it runs by
setting ``node._saved`` to the call's ``Freed`` marker: one small object per call, shared by all
the nodes it frees, which records the call's number, the user's line that made it (code object
and instruction offset, decoded only when reported, as NOTE [Saving sites]) and the newest
sequence number of its graph. A node is freed when ``node._saved.__class__ is Freed``. So when a
later backward reaches such a node, the "backward through the graph a second time" error can
say which call freed it and where, and (engine.py) through which tensor, made before that call,
the new backward got there: nodes numbered up to the marker's ``last_seq`` existed before it.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from operator import attrgetter

from autodiag.core import bindings
from autodiag.core.zeros import MATERIALIZED_BY, materializing

__all__ = [
    "Node",
    "FlatNode",
    "AccumulateGrad",
    "SavedTensor",
    "RemovableHandle",
    "saved_tensors_hooks",
]

_new_object = object.__new__
_seq_counter = itertools.count()  # next(_seq_counter): 3.11 specializes it, not a bound __next__

ERR_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)


class RemovableHandle:
    """Returned by every ``register_*hook``; ``.remove()`` unregisters the hook."""

    __slots__ = ("_dict_ref", "id")
    _ids = itertools.count()

    def __init__(self, hooks_dict: dict):
        self._dict_ref = weakref.ref(hooks_dict) if _weakrefable(hooks_dict) else lambda: hooks_dict
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        d = self._dict_ref()
        if d is not None:
            d.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False


class _HookDict(OrderedDict):
    """An OrderedDict that can be weakly referenced (handles must not keep hooks alive)."""


def _add_hook(d: _HookDict, fn) -> RemovableHandle:
    h = RemovableHandle(d)
    d[h.id] = fn
    return h


# ---------------------------------------------------------------------------------------------
# Saved tensors
# ---------------------------------------------------------------------------------------------

# Innermost (pack, unpack) pair of autograd.graph.saved_tensors_hooks, or None.
_saved_hooks_stack: list = []
# The Tensor class: tensor.py, a layer above, binds it (core.bindings.bind_tensor_type).
_Tensor: type = type(None)


class SavedTensor:
    """A tensor saved for backward, with the version it had when saved.

    An *input* is kept as the Tensor itself. An *output* of the node that saves it is kept as its
    array and version counter, never as the Tensor (that would be a reference cycle: the tensor's
    grad_fn would own the tensor); ``unpack`` rebuilds a Tensor whose grad_fn is the node.
    """

    __slots__ = ("tensor", "data", "vc", "version", "output_nr", "packed", "unpack_hook")

    def __init__(self, t, is_output: bool):
        vc = t._vc
        if vc is None:
            vc = t._vc = [0]
        self.vc = vc
        self.version = vc[0]
        self.packed = None
        self.unpack_hook = None
        if is_output:
            self.tensor = None
            self.data = t._data
            self.output_nr = t._output_nr
        else:
            self.tensor = t
            self.data = None
            self.output_nr = 0
        if _saved_hooks_stack:
            pack, unpack = _saved_hooks_stack[-1]
            self.packed = pack(t)
            self.unpack_hook = unpack
            self.tensor = None
            self.data = None

    @classmethod
    def compact(cls, t) -> SavedTensor:
        """The full record of a compactly saved input (the tensor itself, saved at version 0)."""
        s = cls.__new__(cls)
        s.tensor, s.data, s.vc, s.version, s.output_nr = t, None, t._vc or [0], 0, 0
        s.packed = s.unpack_hook = None
        return s

    def unpack_tensor(self, node):
        """The saved value as a Tensor (version-checked), as ``grad_fn._saved_x`` returns it."""
        if self.unpack_hook is not None:
            return self.unpack_hook(self.packed)
        if self.vc[0] != self.version:
            _raise_version_error(self, node)
        if self.tensor is not None:
            return self.tensor
        return _Tensor._make(self.data, node, True, self.vc, self.output_nr)

    def unpack_data(self, node):
        """The saved value as a numpy array (version-checked), for first-order backward."""
        if self.unpack_hook is not None:
            return self.unpack_hook(self.packed)._data
        if self.vc[0] != self.version:
            _raise_version_error(self, node)
        t = self.tensor
        return t._data if t is not None else self.data


# Minus the sequence number drawn at the last in-place write of any tensor (NOTE [Version checks
# at backward]), 0 before the first: a node is older than the write when ``-node._seq >
# last_write[0]``. Negated, as the engine's heap keys are, so that its check allocates nothing.
last_write = [0]


def note_write() -> None:
    """Every version bump calls this (NOTE [Version checks at backward])."""
    last_write[0] = -next(_seq_counter)


def check_saved(node) -> None:
    """Raise the "modified by an inplace operation" error if any tensor ``node`` saved was
    written since (NOTE [Version checks at backward]). Custom Functions are left out: their
    ``ctx.saved_tensors`` is checked when read, as in PyTorch."""
    saved = node._saved
    if saved.__class__ is not tuple or not node._unpacks_saved:
        return
    for s in saved:
        if s.__class__ is SavedTensor:
            if s.unpack_hook is None and s.vc[0] != s.version:
                _raise_version_error(s, node)
        elif isinstance(s, _Tensor):
            vc = s._vc  # NOTE [Compact saves]: saved at version 0
            if vc is not None and vc[0]:
                _raise_version_error(SavedTensor.compact(s), node)


def _raise_version_error(saved: SavedTensor, node) -> None:
    from autodiag.core import errors

    raise RuntimeError(errors.inplace_modified_message(saved, node))


class saved_tensors_hooks:
    """Context manager that packs every tensor saved for backward, as in PyTorch.

    >>> import autodiag as torch
    >>> x = torch.ones(3, requires_grad=True)
    >>> with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
    ...     y = x.exp()
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        _saved_hooks_stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _saved_hooks_stack.pop()
        return False


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


class Freed:
    """``Node._saved`` of a node whose saved tensors a backward call released (NOTE [Freed
    graphs]): one per call, shared by every node it freed."""

    # ``call``: the backward call's number (engine.backward_calls); ``code``/``lasti``: the
    # user's frame that made it (None/-1 if unknown) and its instruction offset there;
    # ``last_seq``: the newest node sequence number of the call's graph. Made by
    # engine._freed_marker (without an __init__ frame: it runs once per backward call).
    __slots__ = ("call", "code", "lasti", "last_seq")

    def __repr__(self) -> str:
        return f"<freed by backward call {self.call}>"


def raise_freed(node):
    """Raise PyTorch's "backward through the graph a second time" error for a freed ``node``,
    with what autodiag knows about it (core/errors.py)."""
    from autodiag.core import errors

    raise errors.freed_error(node)


def compact_edge(e):
    """(node, nr) -> node when nr is 0 (NOTE [Compact edges]); None and nodes pass through."""
    if e.__class__ is tuple:
        node, nr = e
        return node if nr == 0 or node is None else e
    return e


def edge_pair(e) -> tuple:
    """A compact edge as PyTorch's (node, input_nr) pair."""
    return e if e.__class__ is tuple else (e, 0)


def children(node) -> tuple:
    """The nodes ``node``'s edges point at, in input order (None for no gradient)."""
    nx = node._next
    for e in nx:
        if e.__class__ is tuple:  # NOTE [Compact edges]: a pair only for an output > 0
            return tuple([e[0] if e.__class__ is tuple else e for e in nx])
    return nx


def mark_needed(roots, target_nodes: set) -> set:
    """Nodes on some path from a root to a target node (iterative post-order)."""
    needed = set()
    done = set()
    stack = [(n, False) for n in roots if n is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            if node in target_nodes or any(c in needed for c in children(node) if c is not None):
                needed.add(node)
            done.add(node)
            continue
        if node in done:
            continue
        stack.append((node, True))
        for child in children(node):
            if child is not None and child not in done:
                stack.append((child, False))
    return needed


class NodeHooks:
    """Hooks of one node, kept apart so that nodes without hooks pay one slot."""

    __slots__ = ("pre", "post", "tensor_pre", "retain")

    def __init__(self):
        self.pre = _HookDict()  # fn(grad_outputs)
        self.post = _HookDict()  # fn(grad_inputs, grad_outputs)
        self.tensor_pre = {}  # output_nr -> _HookDict of fn(grad) (Tensor.register_hook)
        self.retain = {}  # output_nr -> weakref to the tensor that retains its grad


class NodeExtras:
    """What few nodes carry, kept apart so that the others pay one slot (NOTE [Node layout]):
    ``input_meta`` (per input, the (shape, dtype) its gradient must get back, for ops that
    broadcast or promote), user ``metadata`` (or anomaly mode's record), ``hooks`` (a
    NodeHooks) and ``trace`` (the user's Stack where the node was recorded, set only while
    tracing)."""

    __slots__ = ("input_meta", "metadata", "hooks", "trace")


class _NoStack:
    pass


# trace.sites.Stack, bound by trace/events.py when it loads (trace/__init__ imports this module)
Stack: type = _NoStack

# NOTE [Stack for extras]: while tracing, every node an op records gets the user's Stack
# (``_trace``), and most nodes get nothing else. Such a node keeps the Stack itself in ``_x``
# (Stacks are shared between the nodes of one line: NOTE [Shared stacks] in trace/sites.py),
# not a NodeExtras holding it: one object less per traced node (64 bytes, 64 MB on a
# 1,000,000-op chain, and one more object for every collection to visit). A Stack reads as a
# NodeExtras (``hooks``, ``input_meta``, ``metadata`` None, ``trace`` itself), so the engine's
# and the seam's reads of ``_x`` are unchanged; setting another field moves the Stack into a
# new NodeExtras.


def _extra(field: str) -> property:
    """``node._<field>``: the field of the node's NodeExtras, None when it has none; setting a
    value other than None creates the NodeExtras (every field None; built without an
    ``__init__`` frame, since anomaly mode makes one per node). ``_x`` may hold a Stack instead
    (NOTE [Stack for extras]): it reads as a NodeExtras whose only field is ``trace``."""
    member = NodeExtras.__dict__[field]
    get, put = member.__get__, member.__set__
    is_trace = field == "trace"

    def fget(node):
        x = node._x
        if x is None:
            return None
        if x.__class__ is not NodeExtras:  # a Stack
            return x if is_trace else None
        return get(x)

    def fset(node, value):
        x = node._x
        if x.__class__ is not NodeExtras:
            if is_trace and (value is None or value.__class__ is Stack):
                node._x = value  # the trace alone: no NodeExtras (NOTE [Stack for extras])
                return
            if value is None:
                return  # nothing to clear: a Stack's other fields are None
            trace, x = x, _new_object(NodeExtras)
            x.input_meta = x.metadata = x.hooks = None
            x.trace = trace  # None, or the Stack ``_x`` held
            node._x = x
        put(x, value)

    return property(fget, fset, doc=f"NodeExtras.{field} of this node (None if unset)")


# NOTE [Backward vocabulary]
# A backward formula names what it reads, as derivatives.yaml does (``self``, ``other``,
# ``result``, ...) and tinygrad's ``needs_input_grad``:
#   * ``self.saved_<name>(xp)`` reads the saved value ``<name>`` of ``_saved_names`` (version-
#     checked; an array, or a Tensor under create_graph; a constant or None as it was saved).
#     ``Node.__init_subclass__`` makes one reader per name when the class is created, with the
#     name's position fixed in it: a read is one call, with no lookup by name. A class that
#     saves fewer names than its base gets, for each name it drops, a reader that raises
#     AttributeError, never one that reads another name's position (or it defines that reader
#     itself).
#   * ``self.needs_grad``: per input, in input order, a true value when that input needs a
#     gradient (it is the input's edge, ``_next`` itself: no copy, no call) and None when not.
#     Formulas unpack it under the inputs' names, ``needs_self, needs_other = self.needs_grad``,
#     and index it only where the number of inputs varies (cat, stack, CopySlices over a view).
#     An edge is a Node or a (node, nr) pair, always true: no Node class may define
#     ``__bool__`` or ``__len__``.
# tests/test_backward_vocabulary.py fails on a node method in ops/ or autograd/ that reads a
# saved value by an integer position (``self._saved[1]``) or the edges as ``self._next``.


def _saved_reader(name: str, i: int):
    """The reader ``saved_<name>(xp)`` of the saved value at position ``i``."""

    def reader(self, xp):
        saved = self._saved
        try:
            s = saved[i]
        except TypeError:  # NOTE: a Freed marker is not subscriptable (a zero-cost check)
            if saved.__class__ is Freed:
                raise_freed(self)
            raise
        if s.__class__ is SavedTensor:
            return s.unpack_data(self) if xp.arrays else s.unpack_tensor(self)
        if isinstance(s, _Tensor):
            # NOTE [Compact saves]: an input saved at version 0 is stored as the tensor itself
            # (one object less per op for the cyclic GC to scan); any write since bumps it.
            vc = s._vc
            if vc is not None and vc[0]:
                _raise_version_error(SavedTensor.compact(s), self)
            return s._data if xp.arrays else s
        return s  # a constant (Python scalar, array) or None, kept with the tensors

    reader.__name__ = reader.__qualname__ = f"saved_{name}"
    reader.__doc__ = (
        f"The saved ``{name}`` for the backward formula: an array, or a Tensor "
        f"under create_graph (NOTE [Backward vocabulary])."
    )
    reader._saved_position = i
    return reader


def _flat_reader(name: str, i: int):
    """``saved_<name>(xp)`` of a FlatNode: the value in slot ``_s0`` or ``_s1`` (NOTE [Flat
    nodes]); the same checks and results as ``_saved_reader``'s."""
    slot = Node.__dict__["_s0" if i == 0 else "_s1"].__get__

    def reader(self, xp):
        held = self._held
        if held.__class__ is not int:
            if held.__class__ is Freed:
                raise_freed(self)
            raise TypeError(f"{type(self).__name__} saved nothing for backward")
        if i >= held:
            raise IndexError(f"{type(self).__name__} saved {held} value(s), not '{name}'")
        s = slot(self)
        if s.__class__ is SavedTensor:
            return s.unpack_data(self) if xp.arrays else s.unpack_tensor(self)
        if isinstance(s, _Tensor):
            vc = s._vc  # NOTE [Compact saves]
            if vc is not None and vc[0]:
                _raise_version_error(SavedTensor.compact(s), self)
            return s._data if xp.arrays else s
        return s

    reader.__name__ = reader.__qualname__ = f"saved_{name}"
    reader.__doc__ = _saved_reader(name, i).__doc__
    reader._saved_position = i
    return reader


def _not_saved_reader(name: str, cls_name: str, names: tuple):
    """For a class that drops ``name`` from its base's saved names: reading it is an error."""

    def reader(self, xp):
        raise AttributeError(
            f"{cls_name} saves no '{name}' (its saved names: {', '.join(names) or 'none'})"
        )

    reader.__name__ = reader.__qualname__ = f"saved_{name}"
    reader._saved_position = None
    return reader


class Node:
    """A backward function in the graph, as ``torch.autograd.graph.Node``.

    Subclasses implement ``backward(self, xp, grad)`` in one vocabulary (NOTE [Backward
    vocabulary]): ``grad`` is the gradient of the node's output, a saved value is read by its
    PyTorch name (``self.saved_self(xp)``, ``self.saved_other(xp)``, ``self.saved_result(xp)``:
    one reader per name in ``_saved_names``), ``self.needs_grad`` says which inputs need a
    gradient (``needs_self, needs_other = self.needs_grad``), and ``xp`` is the array namespace
    (numpy arrays for plain backward, differentiable Tensors for ``create_graph=True``). It
    returns one gradient per entry of ``next_functions`` (``None`` for no gradient).

    >>> import autodiag as torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> y = x * 2
    >>> y.grad_fn.name(), y.grad_fn.next_functions[0][0].name()
    ('MulBackward0', 'torch::autograd::AccumulateGrad')
    """

    # NOTE [Node layout]: every slot is one more pointer the cyclic GC visits, twice per
    # collection, for every node of every live graph. The rule: a node keeps only what most
    # nodes have; what few have lives in ``_x`` (a NodeExtras, a Stack standing for one: NOTE
    # [Stack for extras], or None), read and written
    # through the ``_input_meta``/``_metadata``/``_hooks``/``_trace`` properties (the engine
    # reads ``_x`` once per node). ``_src_code``/``_src_lasti``: the user's line that recorded
    # a node which saves tensors, left unset by every other node (NOTE [Saving sites]).
    # ``_e0``/``_e1``/``_s0``/``_s1``/``_held`` hold the edges and saved values of a FlatNode
    # (NOTE [Flat nodes]) and are never set on other nodes (an unset slot costs the GC one NULL
    # test), as ``_next``/``_saved`` are never set on a FlatNode. They are declared here, not on
    # FlatNode, so that every node has one size, in a pymalloc size class numpy's arrays do not
    # use: the two kinds of object do not interleave in memory the full collections walk
    # (CHANGELOG, "Performance", has the figures). No ``__dict__`` anywhere in the hierarchy
    # (test_graph_lifetime.py).
    __slots__ = (
        "_next",
        "_saved",
        "_seq",
        "_x",
        "_src_code",
        "_src_lasti",
        "_e0",
        "_e1",
        "_s0",
        "_s1",
        "_held",
        "__weakref__",
    )

    _input_meta = _extra("input_meta")
    _metadata = _extra("metadata")
    _hooks = _extra("hooks")
    _trace = _extra("trace")

    # Names of the saved tensors, in the order of self._saved (as PyTorch spells them).
    _saved_names: tuple = ()
    # Keys of _saved_extra() (NOTE [Saved attributes]).
    _extra_names: tuple = ()
    # Outputs of the forward op = gradients this node receives (multi-output nodes shadow it).
    _num_outputs = 1
    # Whether backward version-checks all saved tensors first (check_saved).
    _unpacks_saved = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for attr in ("__bool__", "__len__"):
            if attr in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__} defines {attr}: an edge to a node must always "
                    f"be true (NOTE [Backward vocabulary])"
                )
        if cls.__name__ in MATERIALIZED_BY:  # NOTE [Efficient zero gradients]
            cls._apply = materializing(cls._apply)
        _add_saved_attributes(cls)
        names = cls.__dict__.get("_saved_names")
        if names is None:
            return  # the readers of the base's names serve
        flat = issubclass(cls, FlatNode)
        if flat and len(names) > 2:
            raise TypeError(
                f"{cls.__name__}: a FlatNode saves at most 2 values (NOTE [Flat nodes])"
            )
        inherited = {n for base in cls.__mro__[1:] for n in getattr(base, "_saved_names", ())}
        for name in inherited.difference(names):
            if f"saved_{name}" not in cls.__dict__:
                setattr(cls, f"saved_{name}", _not_saved_reader(name, cls.__name__, names))
        for i, name in enumerate(names):
            attr = f"saved_{name}"
            own = cls.__dict__.get(attr)
            if own is not None and not hasattr(own, "_saved_position"):
                raise TypeError(f"{cls.__name__}.{attr} is defined by hand and as a saved name")
            found = getattr(cls, attr, None)
            if found is not None and own is None and not hasattr(found, "_saved_position"):
                raise TypeError(
                    f"{cls.__name__}: the saved name '{name}' clashes with {attr} of a base class"
                )
            setattr(cls, attr, (_flat_reader if flat else _saved_reader)(name, i))

    def __init__(self, next_functions=(), saved=None):
        # NOTE [Compact edges]: an edge is stored as the node itself when its input_nr is 0,
        # None for no gradient, and (node, input_nr) only for outputs of multi-output nodes:
        # one tuple per node instead of one per edge, fewer objects for the cyclic GC to scan.
        self._next = next_functions
        self._saved = saved
        self._seq = next(_seq_counter)
        self._x = None

    # --- PyTorch's public Node API --------------------------------------------------------

    @property
    def next_functions(self) -> tuple:
        """((node, input_nr), ...) in input order; (None, 0) for inputs that need no grad."""
        return tuple(e if e.__class__ is tuple else (e, 0) for e in self._next)

    @next_functions.setter
    def next_functions(self, edges) -> None:
        self._next = tuple(compact_edge(e) for e in edges)

    def name(self) -> str:
        return type(self).__name__

    @property
    def metadata(self) -> dict:
        m = self._metadata
        if m.__class__ is not dict:
            # None, or the AnomalyRecord of a node recorded in anomaly mode (autograd/anomaly.py)
            m = self._metadata = {} if m is None else m.as_dict(self)
        return m

    def register_hook(self, fn) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs) -> tuple | None`` runs after this node's backward."""
        return _add_hook(self._hook_table().post, fn)

    def register_prehook(self, fn) -> RemovableHandle:
        """``fn(grad_outputs) -> tuple | None`` runs before this node's backward."""
        return _add_hook(self._hook_table().pre, fn)

    def _hook_table(self) -> NodeHooks:
        if self._hooks is None:
            self._hooks = NodeHooks()
        return self._hooks

    def _sequence_nr(self) -> int:
        return self._seq

    @property
    def requires_grad(self) -> bool:
        return True

    def __call__(self, *grads):
        """Run this node's backward on explicit gradients (as calling a PyTorch node does)."""
        return bindings.call_node(self, grads)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    def _saved_attr(self, name: str, raw: bool):
        names = type(self)._saved_names
        if name in names:
            if self._saved.__class__ is Freed:
                raise_freed(self)
            s = self._saved[names.index(name)]
            if isinstance(s, _Tensor):
                s = SavedTensor.compact(s)
            if raw or s.__class__ is not SavedTensor:
                return s
            return s.unpack_tensor(self)
        extra = self._saved_extra()
        if name in extra:
            return extra[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '_saved_{name}'")

    def _saved_extra(self) -> dict:
        """Non-tensor saved values (dims, scalars) under their PyTorch names."""
        return {}

    # --- engine side ------------------------------------------------------------------------

    def _apply(self, xp, grads):
        """grads: one per output of the forward op. Returns one per next_functions entry."""
        return self.backward(xp, grads[0])

    def backward(self, xp, grad):  # pragma: no cover - every op overrides it
        raise NotImplementedError(f"the derivative of {self.name()} is not implemented")

    def _release(self, freed: Freed) -> None:
        """Free saved tensors after a backward without retain_graph (NOTE [Freed graphs])."""
        if self._saved is not None:
            self._saved = freed


# NOTE [Saved attributes]
# PyTorch's ``grad_fn._saved_<name>`` (and ``_raw_saved_<name>`` for a saved tensor) are
# properties generated per class when it is created: one per name of ``_saved_names`` and of
# ``_extra_names`` (the keys of ``_saved_extra()``, the non-tensor values: dims, scalars). Not a
# ``__getattr__`` on Node: a class with one gets CPython's slow attribute hook for every read
# (3.11 specialises no attribute read or method load on its instances), and the engine and the
# formulas read nodes' slots several times per node (a quarter of the backward's instructions
# on the 10k-op chain went to that hook). A class that overrides ``_saved_extra`` without
# naming its keys in ``_extra_names`` gets the lookup by name as a ``__getattr__`` of its own:
# correct, and slow only for its instances.


def _saved_property(name: str, raw: bool) -> property:
    def get(self):
        return self._saved_attr(name, raw)

    prefix = "_raw_saved_" if raw else "_saved_"
    get.__name__ = get.__qualname__ = prefix + name
    return property(get)


def _saved_getattr(self, attr: str):
    """``_saved_<name>`` of a class whose ``_saved_extra`` keys are not declared."""
    if attr.startswith("_saved_"):
        return self._saved_attr(attr[7:], raw=False)
    if attr.startswith("_raw_saved_"):
        return self._saved_attr(attr[11:], raw=True)
    raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attr}'")


def _add_saved_attributes(cls) -> None:
    own = cls.__dict__
    names = tuple(own.get("_saved_names", ())) + tuple(own.get("_extra_names", ()))
    for name in names:
        for raw in (False, True):
            attr = ("_raw_saved_" if raw else "_saved_") + name
            if attr not in own:
                setattr(cls, attr, _saved_property(name, raw))
    if "_saved_extra" in own and "_extra_names" not in own and "__getattr__" not in own:
        cls.__getattr__ = _saved_getattr


# NOTE [Backward vocabulary]: which inputs need a gradient is the ``_next`` slot itself, read
# under a second name (the slot's own descriptor: as fast as reading ``_next``).
Node.needs_grad = Node.__dict__["_next"]
# The engine's read of a node's edges: ``_next`` itself but for a FlatNode (see FlatNode._edges).
Node._edges = Node.__dict__["_next"]


# NOTE [Flat nodes]
# A node of a one- or two-input pointwise op (the bulk of the graphs of elementwise code: every
# op of the 10k-op chain) keeps its edges in the slots ``_e0``/``_e1`` and its saved values in
# ``_s0``/``_s1`` instead of a tuple each: two objects fewer per op that the cyclic GC counts
# towards its next collection and scans in each one (tests/perf/gc_census.py: 3.0 tracked
# objects per node of the chain before, 1.33 after). ``_held`` says what ``_s0``/``_s1`` hold:
# the number of saved values (0, 1 or 2), None when the node saved nothing, or the Freed
# marker once a backward freed them (NOTE [Freed graphs]). ``_next``, ``needs_grad`` and
# ``_saved`` still read (and write) as on every node, as tuples built on demand, so that the
# code that walks graphs needs no second case; the backward formulas' ``saved_<name>`` readers
# read the slots directly (``_flat_reader``). The number of edges is the class's ``_arity``,
# fixed: a unary op has one, a binary op two (None for an input that needs no gradient).


def _first_edge(node) -> tuple:
    return (node._e0,)


class FlatNode(Node):
    """A node whose edges and saved values live in slots (NOTE [Flat nodes])."""

    __slots__ = ()
    _arity = 1

    def __init__(self, next_functions=(), saved=None):
        self._set_next(next_functions)
        self._set_saved(saved)
        self._seq = next(_seq_counter)
        self._x = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the engine reads a node's edges two or three times per backward: a getter per
        # arity, the binary one a C function (no Python frame, no test of the arity)
        get = _first_edge if cls._arity == 1 else attrgetter("_e0", "_e1")
        cls._next = cls.needs_grad = property(get, FlatNode._set_next)

    def _get_next(self) -> tuple:
        return (self._e0,) if self._arity == 1 else (self._e0, self._e1)

    def _set_next(self, edges) -> None:
        edges = tuple(edges)
        if len(edges) != self._arity:
            raise TypeError(
                f"{type(self).__name__} takes {self._arity} edge(s), not {len(edges)} "
                f"(NOTE [Flat nodes])"
            )
        self._e0 = edges[0]
        self._e1 = edges[1] if self._arity == 2 else None  # see _edges

    _next = property(_get_next, _set_next)
    needs_grad = _next  # NOTE [Backward vocabulary]
    # The engine's read of the edges (twice per node and backward): a C getter for both
    # arities, no Python frame. A unary node's ``_e1`` is None (its writers set it): the
    # engine skips a None edge and zips the edges with the node's one gradient.
    _edges = property(attrgetter("_e0", "_e1"))

    def _get_saved(self):
        held = self._held
        if held.__class__ is not int:
            return held  # None, or the Freed marker
        return (self._s0, self._s1) if held == 2 else (self._s0,) if held else ()

    def _set_saved(self, saved) -> None:
        if saved is None or saved.__class__ is Freed:
            self._held, self._s0, self._s1 = saved, None, None
            return
        saved = tuple(saved)
        n = len(saved)
        if n > 2:
            raise TypeError(
                f"{type(self).__name__} saves at most 2 values, not {n} (NOTE [Flat nodes])"
            )
        self._s0 = saved[0] if n else None
        self._s1 = saved[1] if n == 2 else None
        self._held = n

    _saved = property(_get_saved, _set_saved)

    def _release(self, freed: Freed) -> None:
        if self._held is not None:
            self._held, self._s0, self._s1 = freed, None, None


class AccumulateGrad(Node):
    """The node of a leaf that requires grad: it adds incoming gradients into ``variable.grad``.

    One per leaf, shared by every op that uses the leaf. The leaf keeps it through a weak
    reference, so it lives exactly as long as some graph uses it.
    """

    __slots__ = ("variable",)

    def __init__(self, variable):
        super().__init__()
        self._seq = 1 << 62  # PyTorch gives AccumulateGrad the highest priority
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def _apply(self, xp, grads):
        raise AssertionError("the engine accumulates directly")  # pragma: no cover
