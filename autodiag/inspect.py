"""The inspection seam: what an analysis may know about an engine's graph and tensors.

Analyses (``autodiag/analysis``) and reports read the engine only through these functions and
the tracing events (``autodiag.trace``), never through the engine's private fields: how a node
stores its edges (NOTE [Compact edges]), its saved tensors (NOTE [Compact saves]) or its extras
is the engine's business. This is the surface a second engine implements to be analysed (issue
21: the same functions over PyTorch's graphs), so it speaks in plain data — tuples, ints, dtype
names as strings — and hands out values (arrays) only where asked.

Nodes:

* ``edges(node)``: ``((node, input_nr), ...)`` in input order, ``(None, 0)`` for an input that
  needs no gradient — PyTorch's ``next_functions``; ``children(node)`` the nodes alone.
* ``sequence_nr(node)``: creation order (a node made later has a larger number; a leaf's
  ``AccumulateGrad`` has ``LEAF_SEQUENCE_NR``, above every op's).
* ``site(node)``: the user's ``Stack`` where the op that recorded it ran (set only while tracing),
  or None.
* ``is_leaf_node(node)``: an ``AccumulateGrad``; ``leaf_variable(node)``: the leaf tensor of an
  ``AccumulateGrad`` node, None for other nodes.
* ``is_freed(node)``: a backward without ``retain_graph`` released its saved tensors;
  ``holds_saved(node)``: it saved tensors and still holds them.
* ``saved_entries(node, values=False)``: its saved tensors as ``SavedEntry`` tuples (name, shape,
  dtype, bytes, version at save, current version, and the array only with ``values=True``).
* ``node_info(node)``: what a whole-graph walk reads of a node, in one call (the hot path of
  graph capture).
* ``has_hooks(node_or_tensor)``, ``footprint(node)`` (bytes of the node object and its edges).

Tensors and gradients:

* ``gradient_edge(t)``: ``(node, output_nr)`` through which gradient reaches ``t``, or None.
* ``values(x)``: the array of a tensor (a gradient passes through as it is; ``array(t)`` for
  what is known to be a tensor), ``version(t)``,
  ``version_counter(t)`` (an object shared by a tensor and its views, compared by identity; None
  until something needs one), ``shape(t)`` (a tuple), ``dtype_name(t)``, ``grad(t)`` (a leaf's
  ``.grad``, without the non-leaf warning).

Grad mode: ``grad_mode()`` is ``"grad"``, ``"no_grad"`` or ``"inference_mode"`` for the
calling thread.

Other engines (NOTE [Foreign engines]): ``is_tensor(x)`` says whether ``x`` is a tensor of any
engine; a node or tensor that is not autodiag's goes to the seam of the engine that owns it
(``register_engine``), so the same analyses read PyTorch's graphs under ``--engine torch``.

>>> import autodiag as torch
>>> from autodiag import inspect
>>> x = torch.ones(2, requires_grad=True)
>>> y = (x * x).sum()
>>> [type(n).__name__ for n in inspect.children(y.grad_fn)]
['MulBackward0']
>>> mul = inspect.children(y.grad_fn)[0]
>>> [(e.name, e.shape, e.dtype, e.version) for e in inspect.saved_entries(mul)]
[('self', (2,), 'float32', 0), ('other', (2,), 'float32', 0)]
>>> inspect.leaf_variable(inspect.children(mul)[0]) is x
True
"""

from __future__ import annotations

import sys
from operator import attrgetter
from typing import NamedTuple

from autodiag.core import grad_mode as _grad_mode
from autodiag.core.graph import AccumulateGrad, FlatNode, Freed, Node, SavedTensor
from autodiag.core.graph import children as _children
from autodiag.ops._core import edge as _edge
from autodiag.tensor import Tensor
from autodiag.tensor import vc_of as _vc_of
from autodiag.trace.sites import Stack

__all__ = [
    "SavedEntry",
    "register_engine",
    "is_tensor",
    "LEAF_SEQUENCE_NR",
    "edges",
    "children",
    "name_of_dtype",
    "node_info",
    "sequence_nr",
    "site",
    "is_leaf_node",
    "leaf_variable",
    "gradient_edge",
    "is_freed",
    "holds_saved",
    "saved_entries",
    "has_hooks",
    "footprint",
    "values",
    "array",
    "version",
    "version_counter",
    "shape",
    "dtype_name",
    "grad",
    "grad_mode",
    "foreign_parameter",
    "recorded_modules",
]

LEAF_SEQUENCE_NR = 1 << 62  # an AccumulateGrad's sequence number: above every op's node

# NOTE [Foreign engines]
# Another engine (``autodiag/engines/torch``) implements this seam for its own nodes and tensors
# and registers it here when it is loaded — never before, so the default path imports nothing of
# it. Every function below serves autodiag's objects first, as before; only an object that is
# not autodiag's is handed to the registered seam that owns it (``seam.owns(obj)``). With no
# foreign engine registered, the price is one failed attribute read or one type test on a path
# that was going to fail anyway.
_FOREIGN: list = []


def register_engine(seam) -> None:
    """Let ``seam`` (a module with this seam's functions and ``owns(obj) -> bool``) answer for
    the nodes and tensors it owns."""
    if seam not in _FOREIGN:
        _FOREIGN.append(seam)
        # the C-level getters cannot dispatch: the Python versions that can take their place
        globals().update(
            sequence_nr=_any_sequence_nr, site=_any_site, children=_any_children, shape=_any_shape
        )
        globals().update(array=_any_array, values=_any_values, grad_mode=_any_grad_mode)


def _seam_of(obj):
    for seam in _FOREIGN:
        if seam.owns(obj):
            return seam
    raise TypeError(
        f"autodiag.inspect: a {type(obj).__name__} is neither a node nor a tensor of autodiag "
        f"or of an engine autodiag observes"
    )


def _ours(obj) -> bool:
    """Whether ``obj`` is one of autodiag's nodes or tensors (not a foreign engine's)."""
    return not _FOREIGN or isinstance(obj, (Node, Tensor))


def is_tensor(x) -> bool:
    """Whether ``x`` is a tensor of autodiag's engine or of an engine it observes (by its real
    type: no code of ``x`` runs)."""
    if issubclass(type(x), Tensor):
        return True
    for seam in _FOREIGN:  # (a loop, not any(): asked of every variable of the live frames)
        if seam.is_tensor(x):
            return True
    return False


class SavedEntry(NamedTuple):
    """One tensor a node saved for backward. ``shape``/``dtype`` are None (and ``nbytes`` 0)
    when saved-tensor hooks packed it into something that is not a tensor; ``value`` is the
    array only when asked for (``saved_entries(node, values=True)``)."""

    name: str  # as PyTorch names it: "self", "other", "result", ...
    shape: tuple | None
    dtype: str | None
    nbytes: int
    version: int  # the tensor's version when it was saved
    current_version: int  # its version now (different: modified in place since)
    value: object = None


# --- nodes -----------------------------------------------------------------------------------

# NOTE: the accessors tracers call per op are C-level getters (attrgetter), not Python
# functions: a tracer on a 1,000,000-op chain pays a C call per read, no frame.
# NOTE: the accessors tracers call per op are C-level getters (attrgetter), not Python
# functions: a tracer on a 1,000,000-op chain pays a C call per read, no frame. Registering a
# foreign engine (NOTE [Foreign engines]) replaces them, and ``children``/``shape``, with the
# dispatching versions below; read them as ``inspect.site`` at call time to get those.
sequence_nr = attrgetter("_seq")  # (node) -> int: creation order
site = attrgetter("_trace")  # (node) -> Stack | None: where the op that recorded it ran
children = _children  # (node) -> the nodes its edges point at, None for no gradient


def _foreign(obj):
    """The registered seam that owns ``obj`` (a node or tensor of another engine), or None.

    NOTE: asked by type before any attribute of autodiag's is read from ``obj``: a failed
    attribute read on a PyTorch object costs microseconds (7 of ``array``'s 9 on a tensor),
    and the analyses read every node and gradient of a PyTorch backward through here."""
    for seam in _FOREIGN:
        if seam.owns(obj):
            return seam
    return None


def _any_sequence_nr(node) -> int:
    if not isinstance(node, Node):
        seam = _foreign(node)
        if seam is not None:
            return seam.sequence_nr(node)
    try:
        return node._seq
    except AttributeError:
        return _seam_of(node).sequence_nr(node)


def _any_site(node):
    if not isinstance(node, Node):
        seam = _foreign(node)
        if seam is not None:
            return seam.site(node)
    try:
        return node._trace
    except AttributeError:
        return _seam_of(node).site(node)


def _any_children(node) -> tuple:
    if not isinstance(node, Node):
        seam = _foreign(node)
        if seam is not None:
            return seam.children(node)
    try:
        return _children(node)
    except AttributeError:
        return _seam_of(node).children(node)


def edges(node) -> tuple:
    """``((node, input_nr), ...)`` in input order; ``(None, 0)`` for no gradient."""
    if not _ours(node):
        return _seam_of(node).edges(node)
    return tuple(e if e.__class__ is tuple else (e, 0) for e in node._next)


def node_info(node) -> tuple:
    """What a graph walk reads of a node, in one call: ``(sequence_nr, children, input_nrs,
    site, leaf variable or None, saved)``. ``children`` and ``input_nrs`` are ``edges(node)``
    split in two, ``input_nrs`` None when every one is 0 (``zip(children, input_nrs or
    repeat(0))`` walks the pairs without making them); ``saved`` is ``saved_entries(node)``
    without values, as plain tuples, or None when a backward call freed them.

    NOTE: one call instead of five, and no pair per edge, for the walk every graph format
    pays on every node; plain tuples of numbers and strings are untracked by the cyclic GC."""
    if _FOREIGN and not isinstance(node, Node):
        seam = _foreign(node)  # NOTE: by type, not by a failed read of ``_next``
        if seam is not None:
            return seam.node_info(node)
    try:
        nx = node._next
    except AttributeError:
        return _seam_of(node).node_info(node)
    nrs = None
    for e in nx:
        if e.__class__ is tuple:
            nrs = tuple(e[1] if e.__class__ is tuple else 0 for e in nx)
            nx = tuple(e[0] if e.__class__ is tuple else e for e in nx)
            break
    saved = node._saved
    if saved is None:
        saved = ()
    elif saved.__class__ is Freed:
        saved = None
    else:
        saved = tuple(_saved_tuples(node, saved, False))
    x = node._x  # None, a Stack or a NodeExtras (NOTE [Stack for extras] in core/graph.py)
    return (
        node._seq,
        nx,
        nrs,
        x if x.__class__ is Stack else None if x is None else x.trace,
        node.variable if node.__class__ is AccumulateGrad else None,
        saved,
    )


def is_leaf_node(node) -> bool:
    """Whether ``node`` is a leaf's ``AccumulateGrad`` (it accumulates into ``.grad``)."""
    if node.__class__ is AccumulateGrad:
        return True
    return not _ours(node) and _seam_of(node).is_leaf_node(node)


def leaf_variable(node):
    """The leaf tensor of an ``AccumulateGrad`` node (None for any other node, or a leaf that
    is gone)."""
    if node.__class__ is AccumulateGrad:
        return node.variable
    return None if _ours(node) else _seam_of(node).leaf_variable(node)


def is_freed(node) -> bool:
    """Whether a backward call without ``retain_graph`` released the node's saved tensors."""
    if not _ours(node):
        return _seam_of(node).is_freed(node)
    return node._saved.__class__ is Freed


def holds_saved(node) -> bool:
    """Whether the node saved tensors for its backward and still holds them."""
    if not _ours(node):
        return _seam_of(node).holds_saved(node)
    s = node._saved
    return s is not None and s.__class__ is not Freed


def saved_entries(node, values: bool = False) -> tuple:
    """The node's saved tensors (``SavedEntry``), in the order of its ``_saved_*`` names; ()
    when it saved none or they were freed. Constants kept with them (Python scalars) are not
    tensors and are left out."""
    if not _ours(node):
        return _seam_of(node).saved_entries(node, values)
    saved = node._saved
    if saved.__class__ is not tuple:
        return ()
    return tuple([SavedEntry(*t) for t in _saved_tuples(node, saved, values)])


def _saved_tuples(node, saved: tuple, values: bool) -> list:
    """``saved_entries`` as plain tuples (six fields, seven with ``values``)."""
    out = []
    names = node._saved_names
    for k, s in enumerate(saved):
        if s is None:
            continue
        c = s.__class__
        if c is Tensor:  # NOTE [Compact saves]: an input saved at version 0, stored as itself
            d, vc = s._data, s._vc
            t = (names[k], d.shape, name_of_dtype(d.dtype), d.nbytes, 0, vc[0] if vc else 0)
            out.append(t + (d,) if values else t)
            continue
        if c is SavedTensor:
            src = s.packed if s.unpack_hook is not None else s.tensor
            version, current = s.version, s.vc[0]
        elif isinstance(s, Tensor):
            src, version, current = s, 0, (s._vc[0] if s._vc else 0)
        else:
            continue  # a constant kept with the tensors
        name = names[k] if k < len(names) else f"saved_{k}"
        if getattr(src, "is_sparse", False):
            # a sparse operand: its size, its values' dtype, and as bytes its indices' and
            # values' (as on --engine torch); densified only when its values are asked for
            vals = src._sp_values
            nbytes = src._sp_indices.nbytes + vals.nbytes
            t = (name, tuple(src._sp_size), name_of_dtype(vals.dtype), nbytes, version, current)
            out.append(t + (src._data,) if values else t)
            continue
        if c is SavedTensor and s.unpack_hook is None and src is None:
            data = s.data  # an output, kept as its array
        else:
            data = src._data if isinstance(src, Tensor) else None
        if data is None:
            out.append((name, None, None, 0, version, current))
        else:
            t = (name, data.shape, name_of_dtype(data.dtype), data.nbytes, version, current)
            out.append(t + (data,) if values else t)
    return out


def has_hooks(obj) -> bool:
    """Whether a node or a tensor has gradient hooks registered (they may change gradients)."""
    if not _ours(obj):
        return _seam_of(obj).has_hooks(obj)
    if isinstance(obj, Tensor):
        return bool(obj._hooks)
    return obj._hooks is not None


def footprint(node) -> int:
    """Bytes of the node object and its edge tuple (its saved tensors not counted); a FlatNode
    keeps its edges in its own slots (NOTE [Flat nodes])."""
    if isinstance(node, FlatNode):
        return sys.getsizeof(node)
    return sys.getsizeof(node) + sys.getsizeof(node._next)


# --- tensors and gradients ---------------------------------------------------------------------


def gradient_edge(t) -> tuple | None:
    """``(node, output_nr)``: where gradient reaches ``t`` (its grad_fn and which output of it
    ``t`` is, or a leaf's ``AccumulateGrad`` and 0), as PyTorch's
    ``autograd.graph.get_gradient_edge``; None when ``t`` needs no gradient."""
    if not _ours(t):
        return _seam_of(t).gradient_edge(t)
    e = _edge(t)
    return None if e is None else e if e.__class__ is tuple else (e, 0)


def values(x):
    """The array of a tensor; anything else (a gradient that is already an array) as it is."""
    return x._data if isinstance(x, Tensor) else x


array = attrgetter("_data")  # (tensor) -> its array: ``values`` for a known tensor, C-level
version = attrgetter("_version")  # (tensor) -> int: in-place writes bump it
shape = attrgetter("_data.shape")  # (tensor) -> tuple


def _any_array(t):
    if not isinstance(t, Tensor):
        seam = _foreign(t)
        if seam is not None:
            return seam.array(t)
    try:
        return t._data
    except AttributeError:
        return _seam_of(t).array(t)


def _any_values(x):
    if isinstance(x, Tensor):
        return x._data
    seam = _foreign(x)
    return seam.array(x) if seam is not None and seam.is_tensor(x) else x


def _any_shape(t) -> tuple:
    if not isinstance(t, Tensor):
        seam = _foreign(t)
        if seam is not None:
            return seam.shape(t)
    try:
        return t._data.shape
    except AttributeError:
        return _seam_of(t).shape(t)


def version_counter(t, create: bool = False):
    """The object that counts ``t``'s versions, shared by ``t``, its base and all its views
    (compare it by identity), or None if nothing has needed one yet (then ``t`` is at version 0
    and no tensor saved for backward shares its storage) unless ``create``."""
    if not _ours(t):
        return _seam_of(t).version_counter(t, create)
    return _vc_of(t) if create else t._vc


def dtype_name(t) -> str:
    """``"float32"``, ``"int64"``, ...: the tensor's dtype as a string."""
    if _FOREIGN and not isinstance(t, Tensor):
        seam = _foreign(t)
        if seam is not None:
            return seam.dtype_name(t)
    try:
        return name_of_dtype(t._data.dtype)
    except AttributeError:
        return _seam_of(t).dtype_name(t)


_DTYPE_NAMES: dict = {}


def name_of_dtype(dt) -> str:
    """numpy dtype -> "float32" (cached: ``dtype.name`` costs microseconds per call)."""
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = dt.name
    return name


def grad(t):
    """A tensor's ``.grad`` (without the warning ``.grad`` gives for non-leaf tensors)."""
    return t._grad


def grad_mode() -> str:
    """The calling thread's grad mode: ``"grad"``, ``"no_grad"`` or ``"inference_mode"``."""
    if _grad_mode.is_inference_mode_enabled():
        return "inference_mode"
    return "grad" if _grad_mode.is_grad_enabled() else "no_grad"


def _any_grad_mode() -> str:
    """``grad_mode`` once another engine is observed: the first engine (autodiag's, then the
    registered ones) whose grad mode is not ``"grad"`` says it."""
    if _grad_mode.is_inference_mode_enabled():
        return "inference_mode"
    mode = "grad" if _grad_mode.is_grad_enabled() else "no_grad"
    for seam in _FOREIGN:
        if mode != "grad":
            break
        mode = seam.grad_mode()
    return mode


def foreign_parameter(x) -> bool:
    """Whether ``x`` is an ``nn.Parameter`` of an engine autodiag observes, by its real type
    (autodiag's own are ``autodiag.nn.Parameter``, a layer above this one)."""
    return any(seam.is_parameter(x) for seam in _FOREIGN)


def recorded_modules(nodes) -> dict:
    """node -> the module that made it, for the ``nodes`` whose engine records that on the node
    itself (PyTorch's: ``engines/torch/modules.py``), as ``(weakref to the outermost module
    running, the innermost one's path in it, the class names of both)``. autodiag's engine
    reports modules through events instead (``trace.events.MODULES``): {} for its nodes."""
    found: dict = {}
    if not _FOREIGN:
        return found
    for node in nodes:
        if not isinstance(node, Node):
            entry = _seam_of(node).module_entry(node)
            if entry is not None:
                found[node] = entry
    return found
