"""Views and in-place ops: how a view's history follows writes to its base, as in PyTorch.

NOTE [Views and in-place]
A view (``_base`` set, see shape.py's ``_make_view``) shares its base's buffer and version
counter (NOTE [Version counters] in core/graph.py). Two things keep its gradient right when
that buffer is written in place:

* A write through the view itself (``v.mul_(w)``, ``v[0] = w``) rebases the *base*: the
  in-place op's node ``fn`` is wrapped in a ``CopySlices`` node that becomes the base's grad_fn.
  Its backward runs ``fn`` on the view's region of the base's gradient and writes ``fn``'s
  gradient for the old view back into that region (inplace.py).
* Every other view of the same base (and the written view) is *stale* after the write: its
  grad_fn still describes the old values. PyTorch regenerates a view's grad_fn lazily, when it
  is next read and the version counter moved: an ``AsStridedBackward0`` over the base's current
  history. autodiag does the same without making ``grad_fn`` a property of every tensor: the
  version counter keeps weak references to the views made of it (``vc[2]``), and a write
  switches each live view's class to a ``Tensor`` subclass whose ``grad_fn``/``requires_grad``
  are properties; the first read regenerates the grad_fn and switches the class back. Tensors
  that are no view and have none pay nothing; a view pays one weak reference when made.

Views PyTorch refuses to rebase (its CreationMeta): outputs of functions returning several views
(split, chunk, unbind), views made in no_grad or inference mode, and views made by a custom
Function raise PyTorch's error when written with grad mode on, or, when their base (or another
view) was written, when their grad_fn is read.
"""

from __future__ import annotations

import weakref

import numpy as np

from autodiag.core import grad_mode
from autodiag.core.graph import Node, note_write
from autodiag.tensor import Tensor

_state = grad_mode._state

# PyTorch's CreationMeta of a view (Tensor._creation)
DEFAULT, NO_GRAD_MODE, MULTI_OUTPUT_NODE, INFERENCE_MODE, IN_CUSTOM_FUNCTION = range(5)

_PRUNE_FROM = 64  # the view list of a version counter drops dead references from this length


def creation_meta(x: Tensor, multi_output: bool = False) -> int:
    """The CreationMeta of a view of ``x`` made now (PyTorch's propagate_creation_meta)."""
    if _state.inference:
        new = INFERENCE_MODE
    elif not _state.record:
        new = NO_GRAD_MODE
    else:
        new = MULTI_OUTPUT_NODE if multi_output else DEFAULT
    prev = x._creation
    if new == DEFAULT or prev == INFERENCE_MODE:
        return prev
    return new


def register_view(vc: list, t: Tensor) -> None:
    """Remember view ``t`` on its version counter (weakly), so a write can mark it stale."""
    n = len(vc)
    if n < 3:
        if n == 1:
            vc.append(None)  # vc[1]: the last write, none yet
        vc.append([])
    views = vc[2]
    views.append(weakref.ref(t))
    n = len(views)
    if n >= _PRUNE_FROM and not n & (n - 1):  # at powers of two: amortized O(1) per view
        views[:] = [r for r in views if r() is not None]


def write_version(vc: list, op_site: tuple | None = None) -> None:
    """One write into the storage of version counter ``vc``: bump it (NOTE [Version counters]
    in core/graph.py), tell the backward's version check (``note_write``), remember
    ``(op, site)`` for the "modified by an inplace operation" message when given, and make the
    storage's live views regenerate their history. Every in-place write goes through here."""
    vc[0] += 1
    note_write()
    n = len(vc)
    if op_site is not None:
        if n == 1:
            vc.append(op_site)
        else:
            vc[1] = op_site
    if n > 2:  # views were made of this storage (NOTE [Views and in-place])
        mark_stale(vc)


def mark_stale(vc: list) -> None:
    """After a write: every live view of this counter regenerates its grad_fn when next read."""
    for r in vc[2]:
        v = r()
        if v is not None:
            cls = v.__class__
            if cls not in _STALE_CLASSES:
                v.__class__ = _stale_class(cls)


# ---------------------------------------------------------------------------------------------
# Stale views
# ---------------------------------------------------------------------------------------------

_grad_fn_slot = Tensor.grad_fn  # the member descriptors of Tensor's slots
_requires_grad_slot = Tensor.requires_grad
_STALE = {}  # class -> its stale subclass
_STALE_CLASSES: set = set()


def _stale_class(cls):
    s = _STALE.get(cls)
    if s is None:
        s = type(
            cls.__name__,
            (cls,),
            {
                "__slots__": (),
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "grad_fn": property(_stale_grad_fn, _set_grad_fn),
                "requires_grad": property(_stale_requires_grad, _set_requires_grad),
                "_fresh_class": cls,
            },
        )
        _STALE[cls] = s
        _STALE_CLASSES.add(s)
    return s


def raw_grad_fn(v: Tensor):
    """The grad_fn a view was made with (or last regenerated), without regenerating it."""
    return _grad_fn_slot.__get__(v)


def _stale_requires_grad(v) -> bool:
    # PyTorch: a view requires grad when it does itself or when its base does
    return _requires_grad_slot.__get__(v) or v._base.requires_grad


def _set_requires_grad(v, value) -> None:
    _requires_grad_slot.__set__(v, value)


def _set_grad_fn(v, node) -> None:
    _grad_fn_slot.__set__(v, node)


def _stale_grad_fn(v):
    """Regenerate the grad_fn of a view whose buffer was written (PyTorch's VariableHooks::
    grad_fn): an AsStridedBackward0 over the base's current history."""
    old = _grad_fn_slot.__get__(v)
    base = v._base
    if old is None and not base.requires_grad:
        return None  # nothing to regenerate (yet): it stays stale, as PyTorch's attr_version
    if v._creation != DEFAULT:
        raise RuntimeError(rebase_error(v, old, indirect=True))
    from autodiag.ops._core import edge

    node = AsStridedBackward0((edge(base),))
    set_geometry(node, base._data, v._data)
    if not node.overlap:  # windows that overlap (Tensor.unfold, step < size): summed too
        node.overlap = _repeats(v._data, node.positions)
    _grad_fn_slot.__set__(v, node)
    _requires_grad_slot.__set__(v, True)
    if v._retains_grad:  # retain_grad follows the tensor to its new grad_fn, as in PyTorch
        node._hook_table().retain[0] = weakref.ref(v)
    v.__class__ = v._fresh_class
    return node


def rebase_error(v: Tensor, grad_fn, indirect: bool) -> str:
    """PyTorch's handle_view_on_rebase message for a view it refuses to rebase."""
    from autodiag.core.errors import forward_op_name

    meta = v._creation
    what = "its base or another view of its base has been" if indirect else "is being"
    if grad_fn is not None:
        msg = (
            f"Output {v._output_nr} of {forward_op_name(grad_fn)} is a view and {what} "
            f"modified inplace."
        )
    elif meta == INFERENCE_MODE:
        msg = f"A view was created in inference mode and {what} modified inplace in normal mode."
    else:
        msg = (
            f"A view was created in no_grad mode and {what} modified inplace with grad mode "
            f"enabled."
        )
    if meta == MULTI_OUTPUT_NODE:
        msg += (
            " This view is the output of a function that returns multiple views. Such "
            "functions do not allow the output views to be modified inplace. You should "
            "replace the inplace operation by an out-of-place one."
        )
    elif meta == NO_GRAD_MODE:
        msg += (
            " Given that this use case is ambiguous and error-prone, it is forbidden. You "
            "can clarify your code by moving both the view and the inplace either both "
            "inside the no_grad block (if you don't want the inplace to be tracked) or both "
            "outside (if you want the inplace to be tracked)."
        )
    elif meta == INFERENCE_MODE:
        msg += (
            " Given that this use case is ambiguous and error-prone, it is forbidden. You "
            "can clarify your code by moving both the view and the inplace either both "
            "inside the inference_mode block (if you don't want the inplace to be tracked) "
            "or both outside (if you want the inplace to be tracked)."
        )
    else:
        msg += (
            " This view was created inside a custom Function (or because an input was "
            "returned as-is) and the autograd logic to handle view+inplace would override "
            "the custom backward associated with the custom Function, leading to incorrect "
            "gradients. This behavior is forbidden. You can fix this by cloning the output "
            "of the custom Function."
        )
    return msg


# ---------------------------------------------------------------------------------------------
# Where a view's elements sit in its base
# ---------------------------------------------------------------------------------------------


def positions(base: np.ndarray, view: np.ndarray) -> np.ndarray:
    """For each element of ``view`` (a numpy view into ``base``'s memory), the C-order flat
    index of the element of ``base`` it is (an int64 array of the view's shape)."""
    idx = _positions(base, view)
    if idx.size and (idx.min() < 0 or idx.max() >= base.size):
        # never a wrong gradient: a "view" that does not share its base's memory is a bug
        raise NotImplementedError(
            "autodiag: an in-place write through a view whose memory is "
            "not its base's is not supported; clone() the view first"
        )
    return idx


def _positions(base: np.ndarray, view: np.ndarray) -> np.ndarray:
    isz = base.itemsize
    b0 = base.__array_interface__["data"][0]
    off = view.__array_interface__["data"][0] - b0
    if base.flags.c_contiguous:
        idx = np.full(view.shape, off // isz, dtype=np.int64)
        for k, (n, s) in enumerate(zip(view.shape, view.strides)):
            shape = [1] * view.ndim
            shape[k] = n
            idx = idx + (np.arange(n, dtype=np.int64) * (s // isz)).reshape(shape)
        return idx
    # any other layout: lay the base's flat indices out in a buffer shaped like its memory,
    # then read that buffer with the view's strides
    lo = hi = 0
    for n, s in zip(base.shape, base.strides):
        if n:
            lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    buf = np.full((hi - lo) // isz + 1, -1, dtype=np.int64)
    st = np.lib.stride_tricks.as_strided
    bst = tuple(s // isz * 8 for s in base.strides)
    st(buf[-lo // isz :], base.shape, bst)[...] = np.arange(base.size).reshape(base.shape)
    vst = tuple(s // isz * 8 for s in view.strides)
    return st(buf[(off - lo) // isz :], view.shape, vst).copy()


def overlaps(a: np.ndarray) -> bool:
    """Do two elements of ``a`` share memory (a dimension of stride 0, as expand makes)?"""
    return a.size > 1 and any(s == 0 and n > 1 for n, s in zip(a.shape, a.strides))


def _repeats(view: np.ndarray, pos: np.ndarray) -> bool:
    """Does ``view`` reach one element of memory twice through nonzero strides (the windows of
    ``Tensor.unfold`` with step < size)? Only a view ``may_repeat`` cannot clear counts its
    positions."""
    return may_repeat(view) and np.unique(pos).size != pos.size


def may_repeat(view: np.ndarray) -> bool:
    """False when no two elements of ``view`` can share memory: its strides, smallest first,
    each clear the extent of the smaller ones (a test on the strides only)."""
    flags = view.flags
    if flags.c_contiguous or flags.f_contiguous:
        return False
    extent = 0
    for s, n in sorted((abs(s), n) for n, s in zip(view.shape, view.strides) if n > 1):
        if s <= extent:
            return True
        extent += (n - 1) * s
    return False


OVERLAP_ERROR = (
    "unsupported operation: more than one element of the written-to tensor refers "
    "to a single memory location. Please clone() the tensor before performing the "
    "operation."
)


def set_geometry(node, base: np.ndarray, view: np.ndarray) -> None:
    node.base_shape = base.shape
    node.positions = positions(base, view)
    node.overlap = overlaps(view)


def scatter(xp, g, base_shape: tuple, pos: np.ndarray, accumulate: bool):
    """Zeros of ``base_shape`` with ``g`` (a view-shaped gradient) added at ``pos``."""
    if xp.arrays:
        out = np.zeros(int(np.prod(base_shape, dtype=np.int64)), dtype=g.dtype)
        if accumulate:
            np.add.at(out, pos.ravel(), np.broadcast_to(g, pos.shape).ravel())
        else:
            out[pos.ravel()] = np.broadcast_to(g, pos.shape).ravel()
        return out.reshape(base_shape)
    from autodiag.ops.shape import embed

    size = int(np.prod(base_shape, dtype=np.int64))
    flat = embed(xp, g.reshape(-1), (size,), (pos.ravel(),), accumulate)
    return flat.reshape(base_shape)


class AsStridedBackward0(Node):
    """The regenerated grad_fn of a view whose base was written in place: the view's gradient
    goes to its elements' places in the base (summed where an expanded view repeats one)."""

    __slots__ = ("base_shape", "positions", "overlap")

    def backward(self, xp, g):
        if not self.positions.size:
            # PyTorch's as_strided_backward: a view with a size-0 dim gets plain zeros of the
            # base's shape, which depend on nothing (under create_graph they need no grad)
            return (xp.zeros(self.base_shape, g),)
        return (scatter(xp, g, self.base_shape, self.positions, self.overlap),)

    def _saved_extra(self):
        pos = self.positions
        size = pos.shape
        stride = (
            tuple(
                int(pos[(0,) * k + (1,) + (0,) * (pos.ndim - k - 1)] - pos.flat[0]) if n > 1 else 1
                for k, n in enumerate(size)
            )
            if pos.size
            else (1,) * pos.ndim
        )
        offset = int(pos.flat[0]) if pos.size else 0
        return {"size": size, "stride": stride, "storage_offset": offset}
