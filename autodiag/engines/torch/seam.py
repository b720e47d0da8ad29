"""The inspection seam (``autodiag/inspect.py``) over PyTorch's graphs.

``autodiag.inspect`` hands every node or tensor that is not autodiag's to the engine that owns
it (NOTE [Foreign engines]); this module answers for PyTorch's, through its public graph API
only: ``next_functions``, ``name()``, ``metadata``, ``_sequence_nr()``, the ``_saved_*``
attributes and ``AccumulateGrad.variable``. It imports torch: ``observe.register()`` loads it
only under ``--engine torch``.

Creation sites live in ``node.metadata`` (the observer writes them there; a PyTorch node wrapper
cannot be weak-referenced or given attributes, and ``metadata`` lives and dies with the C++
node). Saved tensors are read by unpacking them: an unpack that finds the tensor modified in
place raises PyTorch's version error, whose message gives both versions.
"""

from __future__ import annotations

import re

import torch
from torch.autograd.graph import Node, get_gradient_edge

from autodiag.inspect import LEAF_SEQUENCE_NR, SavedEntry

SITE = "autodiag.site"  # node.metadata key: the user's Stack where the op that made it ran
# node.metadata key: the module that made it, (weakref to the outermost module running, the
# innermost one's path in it, the class names of both) (engines/torch/modules.py)
MODULE = "autodiag.module"

_Tensor = torch.Tensor
_ACCUMULATE = type(torch.ones(1, requires_grad=True).view(1).grad_fn.next_functions[0][0])
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+) instead")
_WHAT = re.compile(r"\[torch\.(\w+)Tensor \[([\d, ]*)\]\]")  # [torch.FloatTensor [4, 3]]
_TYPES = {  # the legacy type names of PyTorch's message -> (dtype, bytes per element)
    "Float": ("float32", 4),
    "Double": ("float64", 8),
    "Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "Int": ("int32", 4),
    "Short": ("int16", 2),
    "Char": ("int8", 1),
    "Byte": ("uint8", 1),
    "Bool": ("bool", 1),
}
_FREED = "freed"  # in PyTorch's "... access saved tensors after they have already been freed"


# what the torch analyses (analysis/torch_*.py) read of PyTorch beyond the inspection seam
ACCUMULATE = _ACCUMULATE  # the AccumulateGrad node class
current_node = torch._C._current_autograd_node  # the node running in this backward thread


def base_of(t):
    """The tensor ``t`` is a view of (None for a tensor that owns its storage)."""
    return t._base


def owns(obj) -> bool:
    """Whether ``obj`` is a PyTorch tensor or graph node (by its real type)."""
    t = type(obj)
    mine = _OWNED.get(t)
    if mine is None:
        mine = _OWNED[t] = issubclass(t, (_Tensor, Node))
    return mine


# type -> whether its instances are PyTorch's (NOTE: ``Node`` is an ABC whose isinstance test
# costs a microsecond; ``autodiag.inspect`` asks this of every node and gradient it reads)
_OWNED: dict = {}


def is_tensor(x) -> bool:
    return issubclass(type(x), _Tensor)


# --- nodes -----------------------------------------------------------------------------------


def sequence_nr(node) -> int:
    if type(node) is _ACCUMULATE:
        return LEAF_SEQUENCE_NR  # PyTorch gives it UINT64_MAX; ours is above every op's too
    return node._sequence_nr()


def site(node):
    md = node.metadata
    return md.get(SITE) if md else None


def module_entry(node):
    md = node.metadata
    return md.get(MODULE) if md else None


def edges(node) -> tuple:
    return tuple(node.next_functions)


def children(node) -> tuple:
    return tuple([c for c, _ in node.next_functions])


def node_info(node) -> tuple:
    """``(sequence_nr, children, input_nrs, site, leaf variable, saved)`` as
    ``autodiag.inspect.node_info``."""
    nf = node.next_functions
    kids = tuple([c for c, _ in nf])
    nrs = tuple([nr for _, nr in nf])
    if not any(nrs):
        nrs = None
    if type(node) is _ACCUMULATE:
        return (LEAF_SEQUENCE_NR, kids, nrs, site(node), node.variable, ())
    saved = _saved_tuples(node, False)
    return (node._sequence_nr(), kids, nrs, site(node), None, saved)


def is_leaf_node(node) -> bool:
    return type(node) is _ACCUMULATE


def leaf_variable(node):
    return node.variable if type(node) is _ACCUMULATE else None


def is_freed(node) -> bool:
    return _saved_tuples(node, False) is None


def holds_saved(node) -> bool:
    return bool(_saved_tuples(node, False))


def saved_entries(node, values: bool = False) -> tuple:
    out = _saved_tuples(node, values)
    return tuple([SavedEntry(*t) for t in out]) if out else ()


# The ``_saved_*`` names of each node type (``dir`` is slow: once per type), without those
# found to hold a constant (``alpha``, ``mat1_sym_sizes``: never a tensor for that type).
_NAMES: dict = {}
_CONSTANT = (int, float, bool, str, torch.dtype, torch.device)


def _saved_names(node) -> tuple:
    t = type(node)
    names = _NAMES.get(t)
    if names is None:
        names = _NAMES[t] = tuple(a[7:] for a in dir(node) if a.startswith("_saved_"))
    return names


def _forget_constant(node, name: str) -> None:
    t = type(node)
    _NAMES[t] = tuple(n for n in _NAMES[t] if n != name)


def _saved_tuples(node, values: bool):
    """The node's saved tensors as ``(name, shape, dtype, bytes, version, current version)``
    (+ the tensor with ``values``); None when a backward call freed them."""
    out = []
    for name in _saved_names(node):
        try:
            v = getattr(node, "_saved_" + name)
        except RuntimeError as e:
            text = str(e)
            if _FREED in text:
                return None
            m = _VERSIONS.search(text)
            if m is None:
                raise
            # modified in place since it was saved: PyTorch's own check gives both versions,
            # and the tensor's type and shape
            out.append((name, *_described(text), int(m.group(2)), int(m.group(1))))
            continue
        if isinstance(v, _Tensor):
            out.append(_entry(name, v, values))
        elif isinstance(v, (tuple, list)):
            tensors = [(k, x) for k, x in enumerate(v) if isinstance(x, _Tensor)]
            if not tensors and all(isinstance(x, _CONSTANT) for x in v):
                _forget_constant(node, name)  # sizes, strides: read no more
            for k, x in tensors:
                out.append(_entry(f"{name}[{k}]", x, values))
        elif isinstance(v, _CONSTANT):
            _forget_constant(node, name)
    return tuple(out)


def _described(text: str) -> tuple:
    """``(shape, dtype, bytes)`` of the tensor a version error describes (None, None, 0)."""
    m = _WHAT.search(text)
    if m is None or m.group(1) not in _TYPES:
        return None, None, 0
    dtype, size = _TYPES[m.group(1)]
    shape = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    numel = 1
    for d in shape:
        numel *= d
    return shape, dtype, numel * size


def _entry(name: str, t, values: bool) -> tuple:
    version = t._version
    e = (name, tuple(t.shape), dtype_name(t), nbytes(t), version, version)
    return e + (array(t),) if values else e


def nbytes(t) -> int:
    """The bytes tensor ``t``'s values take: a sparse tensor's are its indices' and values'
    (PyTorch's ``nbytes`` refuses a sparse layout)."""
    if t.layout == torch.strided:
        return t.nbytes
    if t.layout == torch.sparse_coo:
        return t._indices().nbytes + t._values().nbytes
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (t.crow_indices(), t.col_indices(), t.values())
    elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = (t.ccol_indices(), t.row_indices(), t.values())
    else:  # another layout (a nested tensor, say): as many bytes as its elements
        return t.numel() * t.element_size()
    return sum(p.nbytes for p in parts)


# --- tensors ---------------------------------------------------------------------------------


def gradient_edge(t) -> tuple | None:
    if not t.requires_grad:
        return None
    e = get_gradient_edge(t)
    return (e.node, e.output_nr) if e.node is not None else None


def shape(t) -> tuple:
    return tuple(t.shape)


_DTYPE_NAMES: dict = {}


def dtype_name(t) -> str:
    dt = t.dtype
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt)[6:]  # "torch.float32" -> "float32"
    return name


# autodiag's own torch calls made where the observer's function mode would see them as the
# script's ops (NOTE [Listeners' own reads] in hooks.py): ``with own_calls(): ...``
own_calls = torch._C.DisableTorchFunction


def version_counter(t, create: bool = False):
    """An object shared by ``t`` and every view of it (compared by identity): its storage."""
    return t.untyped_storage()


def is_parameter(x) -> bool:
    return issubclass(type(x), torch.nn.Parameter)


def array(t):
    """The values of tensor ``t`` as a numpy array: a view of a CPU tensor's memory (no copy);
    a copy for what numpy cannot view (another device, bfloat16, a sparse layout)."""
    t = t.detach()
    try:
        return t.numpy()
    except (TypeError, RuntimeError):
        if t.layout != torch.strided:
            t = t.to_dense()
        t = t.cpu()
        if t.is_floating_point() and t.dtype not in (torch.float16, torch.float32, torch.float64):
            t = t.float()  # bfloat16, float8: numpy has no such dtype
        return t.resolve_conj().resolve_neg().numpy()


def has_hooks(obj) -> bool:
    """Whether a tensor has gradient hooks of the script's (PyTorch does not list a node's)."""
    if isinstance(obj, _Tensor):
        return bool(obj._backward_hooks) or bool(getattr(obj, "_post_accumulate_grad_hooks", None))
    return False


def grad_mode() -> str:
    if torch.is_inference_mode_enabled():
        return "inference_mode"
    return "grad" if torch.is_grad_enabled() else "no_grad"
