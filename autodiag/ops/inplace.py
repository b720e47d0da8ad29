"""In-place ops (``add_``, ``mul_``, ``zero_``, ``copy_``, ``__setitem__``, ``+=`` ...).

One mechanism serves all of them: compute the out-of-place op (which records its node exactly as
the out-of-place version would, with edges to the tensor's *old* history), then write the result
into the tensor's own buffer (so views see it), bump the shared version counter, and make the
recorded node the tensor's new ``grad_fn``. If that node saved the tensor itself, the saved copy
is snapshotted first, as PyTorch saves ``original_self``.

A write through a view rebases the history of its base (and of every view of it), as PyTorch's
CopySlices and AsStridedBackward0 do: NOTE [Views and in-place] in views.py.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node, SavedTensor
from autodiag.ops import pointwise as pw
from autodiag.ops import views
from autodiag.ops._core import (OPS, _state, as_tensor_operand, check_broadcast, edge, fix_shapes,
                                result, wrap)
from autodiag.tensor import Tensor, vc_of
from autodiag.trace import events
from autodiag.trace.sites import user_site

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_OF_LEAF_ERROR = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation.")
INFERENCE_ERROR = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone "
    "to get a normal tensor before doing inplace update.See "
    "https://github.com/pytorch/rfcs/pull/17 for more details."
)


def check_inplace(t: Tensor, op_name: str, requires_grad: bool | None = None) -> None:
    """PyTorch's checks before any write (nothing is modified when they raise).

    ``requires_grad``: whether the op will be recorded (an input requires grad); by default,
    whether ``t`` does."""
    if t._inference and not _state.inference:
        raise RuntimeError(INFERENCE_ERROR)
    if not _state.record:
        return
    if requires_grad is None:
        requires_grad = t.requires_grad
    if not requires_grad:
        return
    base = t._base
    if base is not None:
        if t._creation:  # NOTE [Views and in-place]: a view PyTorch refuses to rebase
            raise RuntimeError(views.rebase_error(t, views.raw_grad_fn(t), indirect=False))
        if t.requires_grad or base.requires_grad:
            if base.grad_fn is None:
                raise RuntimeError(VIEW_OF_LEAF_ERROR)
            # NOTE: PyTorch's C++ is_leaf reads the view's grad_fn as made, not regenerated: a
            # view made before its base required grad is a leaf here
            if views.raw_grad_fn(t) is None:
                raise RuntimeError(LEAF_ERROR)
    elif t.requires_grad and t.grad_fn is None:
        raise RuntimeError(LEAF_ERROR)


PARTIAL_OVERLAP_ERROR = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
    "a single memory location. Please clone() the tensor before performing the operation.")


def check_overlap(t: Tensor, others) -> None:
    """An input that shares some, not all, of the written memory (``x.sub_(x[0])``): PyTorch's
    partial-overlap error. Only tensors sharing ``t``'s version counter can share its memory."""
    vc = t._vc
    if vc is None:
        return
    d = t._data
    for o in others:
        if isinstance(o, Tensor) and o is not t and o._vc is vc:
            od = o._data
            if od.__array_interface__["data"][0] == d.__array_interface__["data"][0] and \
                    od.shape == d.shape and all(n == 1 or a == b for n, a, b in zip(
                        d.shape, od.strides, d.strides)):
                continue  # the same memory, element for element
            # NOTE: PyTorch checks only two contiguous tensors and otherwise reads what its loop
            # has already written (x.add_(x[:, :1]) differs by loop order); autodiag computes
            # out of place, so it refuses every partial overlap rather than differ silently
            if np.shares_memory(od, d):
                raise RuntimeError(PARTIAL_OVERLAP_ERROR)


def bump_version(t: Tensor, op_name: str) -> None:
    """Bump the shared version counter and remember where the write happened."""
    vc = vc_of(t)
    vc[0] += 1
    site = user_site()
    n = len(vc)
    if n == 1:
        vc.append((op_name, site))
    else:
        vc[1] = (op_name, site)
        if n > 2:  # views were made of this storage (NOTE [Views and in-place])
            views.mark_stale(vc)
    if events.TRACERS:
        events.emit_inplace(t, op_name)


def apply_inplace(t: Tensor, op_name: str, compute, *others, fills: bool = False) -> Tensor:
    """Run ``compute(t)`` (an out-of-place op on t) and store its result into ``t``."""
    base = t._base
    # a view requires grad when its base does (PyTorch), also one made in no_grad mode
    recording = _state.record and (t.requires_grad or (base is not None and base.requires_grad) or
                               any(isinstance(o, Tensor) and o.requires_grad for o in others))
    check_inplace(t, op_name, recording)
    r = compute(t)
    rd = r._data
    if rd.dtype != t._data.dtype:
        if not np.can_cast(rd.dtype, t._data.dtype, casting="same_kind") or (
                rd.dtype.kind == "f" and t._data.dtype.kind in "biu"):
            raise RuntimeError(f"result type {r.dtype.scalar_name} can't be cast to the desired "
                               f"output type {t.dtype.scalar_name}")
    if rd.shape != t._data.shape:
        raise RuntimeError(f"output with shape [{', '.join(map(str, t._data.shape))}] doesn't "
                           f"match the broadcast shape [{', '.join(map(str, rd.shape))}]")
    node = r.grad_fn
    if node is not None:
        _snapshot_saved_self(node, t)
    _write(t, base, rd, fills)
    bump_version(t, op_name)
    if node is not None:
        if base is None:
            t.grad_fn = node
            t.requires_grad = True
            if t._output_nr:
                t._output_nr = 0
        else:
            _rebase(t, base, node)
        _rebind_saved_result(node, r, t)
    return t


def _write(t: Tensor, base, rd: np.ndarray, fills: bool = False) -> None:
    """Store ``rd`` into ``t``'s memory (its base's too, when it is a view). ``fills``: one
    value everywhere (fill_, zero_), which PyTorch writes into overlapping views too."""
    d = t._data
    if base is None or d.flags.writeable and not views.overlaps(d):
        np.copyto(d, rd, casting="unsafe")
        return
    if views.overlaps(d) and not fills:  # an expanded view: elements sharing memory
        raise RuntimeError(views.OVERLAP_ERROR)
    # a read-only numpy view with no overlap (expand to the same size): write through the base
    flat = base._data.reshape(-1)  # NOTE: a copy if the base is not contiguous
    flat[views.positions(base._data, d).ravel()] = rd.astype(d.dtype, copy=False).ravel()
    if not np.shares_memory(flat, base._data):
        base._data[...] = flat.reshape(base._data.shape)


def _rebase(t: Tensor, base: Tensor, fn: Node) -> None:
    """An in-place op recorded as ``fn`` wrote through view ``t``: the base's history becomes
    CopySlices(base's old history, fn) (PyTorch's rebase_history). ``t`` itself was marked stale
    by the write and regenerates its grad_fn (AsStridedBackward0 over the base) when read."""
    from autodiag.ops._core import edge

    node = CopySlices((edge(base),) + tuple(fn._next[1:]))
    node.fn = fn
    views.set_geometry(node, base._data, t._data)
    base.grad_fn = node
    base.requires_grad = True
    if base._output_nr:
        base._output_nr = 0


def _snapshot_saved_self(node, t: Tensor) -> None:
    """PyTorch saves the original ``self`` of an in-place op (a copy); every other saved input
    that is ``t`` (``a.mul_(a)``'s other) stays ``t`` and fails the version check at backward,
    as PyTorch's does. A node saves ``self`` first."""
    saved = node._saved
    if not saved or saved.__class__ is not tuple:
        return
    names = type(node)._saved_names
    if names and names[0] != "self":
        return
    s = saved[0]
    if s is t or (s.__class__ is SavedTensor and s.tensor is t):
        snap = Tensor._make(t._data.copy(), t.grad_fn, t.requires_grad, None, t._output_nr)
        if t.grad_fn is None and t.requires_grad:
            snap._acc = t._acc
        node._saved = (SavedTensor(snap, False),) + saved[1:]


def _rebind_saved_result(node, r: Tensor, t: Tensor) -> None:
    saved = node._saved
    if not saved or saved.__class__ is not tuple:
        return
    for s in saved:
        if s.__class__ is SavedTensor and s.tensor is None and s.vc is r._vc:
            s.data, s.vc = t._data, vc_of(t)
            s.version = s.vc[0]
            if t._base is not None:
                s.output_nr = -1  # its history is the view's (SavedTensor.unpack_tensor)


# --- the in-place methods ---------------------------------------------------------------------


def _method(name: str, fn):
    # the in-place method is the traced op; the out-of-place op it runs inside needs no second
    # tracing check, so it calls the registered op's unwrapped function
    raw = getattr(fn, "__wrapped__", fn)

    def inplace(self, *args, **kwargs):
        # tensors given by keyword (clamp_(min=t)) are inputs too: overlap, grad recording
        others = (*args, *kwargs.values()) if kwargs else args
        check_overlap(self, others)
        return apply_inplace(self, name, lambda t: raw(t, *args, **kwargs), *others)

    inplace.__name__ = name
    inplace.__doc__ = f"In-place version of ``{fn.__name__}``."
    inplace = events.traced(name, inplace)
    setattr(Tensor, name, inplace)
    return inplace


def make_twins() -> None:
    """The in-place twins the registrations declare (``register(inplace=True)``: ``add_``,
    ``clamp_``, ``subtract_`` ...); run once every op is registered."""
    for info in OPS.values():
        if info.inplace:
            _method(info.inplace, info.op)


for _op, _fn in (("__iadd__", pw.add), ("__isub__", pw.sub), ("__imul__", pw.mul),
                 ("__itruediv__", pw.div), ("__ipow__", pw.pow)):
    setattr(Tensor, _op, _method(_op, _fn))


class ZeroBackward0(Node):
    """``zero_()``: the old values are gone, so no gradient reaches them."""

    __slots__ = ()

    def backward(self, xp, g):
        return (xp.zeros_like(g),)  # PyTorch's zeros_like(grad) (NOTE [Masked gradients])


class FillBackward2(ZeroBackward0):
    """``fill_(scalar)``."""

    __slots__ = ()


class FillBackward3(Node):
    """``fill_(value)`` with a 0-dim tensor: every element's gradient flows to ``value``."""

    __slots__ = ()

    def backward(self, xp, g):
        needs_self, needs_value = self.needs_grad
        gv = None
        if needs_value:
            gv = np.asarray(g.sum()) if xp.arrays else g.sum()
        return (xp.zeros_like(g) if needs_self else None, gv)


def _fill_like(t: Tensor, value, cls=FillBackward2) -> Tensor:
    if isinstance(value, Tensor):
        if value._data.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value._data.ndim} dimensions.")
        out = np.full(t._data.shape, value._data, dtype=t._data.dtype)
        if _state.record and (t.requires_grad or value.requires_grad):
            node = FillBackward3((edge(t), edge(value)))
            if value._data.dtype != out.dtype:
                node._input_meta = (None, ((), value._data.dtype))
            return result(out, node)
        return result(out, None)
    out = np.full(t._data.shape, value, dtype=t._data.dtype)
    if _state.record and t.requires_grad:
        return result(out, cls((edge(t),)))
    return result(out, None)


def fill_(self, value):
    return apply_inplace(self, "fill_", lambda t: _fill_like(t, value), value, fills=True)


def zero_(self):
    return apply_inplace(self, "zero_", lambda t: _fill_like(t, 0, ZeroBackward0), fills=True)


Tensor.fill_ = events.traced("fill_", fill_)
Tensor.zero_ = events.traced("zero_", zero_)


class CopyBackwards(Node):
    __slots__ = ("src_shape", "src_dtype")

    def name(self) -> str:
        return "torch::autograd::CopyBackwards"  # a C++ node in PyTorch

    def backward(self, xp, g):
        needs_self, needs_src = self.needs_grad
        gs = xp.sum_to(g, self.src_shape) if needs_src else None
        return (xp.zeros_like(g) if needs_self else None, gs)


def _copy_result(t: Tensor, src) -> Tensor:
    s = as_tensor_operand(src)
    ts, ss = t._data.shape, s._data.shape
    if ts != ss:
        check_broadcast(ts, ss)  # PyTorch's error for shapes that clash
        shape = np.broadcast_shapes(ts, ss)
        if shape != ts:
            raise RuntimeError(f"output with shape [{', '.join(map(str, ts))}] doesn't match "
                               f"the broadcast shape [{', '.join(map(str, shape))}]")
    out = np.broadcast_to(s._data, ts).astype(t._data.dtype, copy=True)
    if _state.record and (t.requires_grad or s.requires_grad):
        node = CopyBackwards((edge(t), edge(s)))
        node.src_shape, node.src_dtype = s._data.shape, s._data.dtype
        if s._data.dtype != t._data.dtype:
            node._input_meta = (None, (s._data.shape, s._data.dtype))
        return result(out, node)
    return result(out, None)


def copy_(self, src, non_blocking: bool = False):
    check_overlap(self, (src,))
    return apply_inplace(self, "copy_", lambda t: _copy_result(t, src), src)


Tensor.copy_ = events.traced("copy_", copy_)


# --- __setitem__ ------------------------------------------------------------------------------


class CopySlices(Node):
    """``x[idx] = v``: x's old gradient with the written region zeroed; v gets that region.

    Or (``fn`` set) the history of a base written through a view by an in-place op recorded as
    ``fn`` (NOTE [Views and in-place]): ``fn`` runs on the view's region of the gradient; its
    gradient for the old view goes back into that region, its other gradients to its other
    inputs (this node's edges after the base's)."""

    __slots__ = ("index", "src_shape", "fn", "base_shape", "positions", "overlap")

    def __init__(self, next_functions=(), saved=None):
        super().__init__(next_functions, saved)
        self.fn = None

    def name(self) -> str:
        return "torch::autograd::CopySlices"  # a C++ node in PyTorch, named with its namespace

    def _release(self, freed) -> None:
        fn = self.fn
        if fn is not None:
            fn._release(freed)
        super()._release(freed)

    def backward(self, xp, g):
        if self.fn is not None:
            return self._view_backward(xp, g)
        needs_self, needs_value = self.needs_grad
        gx = gv = None
        idx = self.index
        if needs_self:
            if xp.arrays:
                gx = np.array(g)  # a copy, and an array even for a numpy scalar (0-d grads)
                gx[idx] = 0
            else:
                keep = np.ones(g._data.shape, dtype=bool)
                keep[idx] = False
                gx = xp.mask(keep, g)
        if needs_value:
            shape = self.src_shape
            lead = _leading_ones(shape)
            gv = xp.sum_to(g[idx], shape[lead:])
            if lead:
                gv = xp.reshape(gv, shape)
        return (gx, gv)


    def _view_backward(self, xp, g):
        fn, pos = self.fn, self.positions
        needs_base = self.needs_grad[0]  # the other edges are fn's other inputs'
        if self.overlap and needs_base:
            # an expanded view filled in place: PyTorch cannot write its gradient back either
            raise RuntimeError(views.OVERLAP_ERROR)
        flat_pos = pos.ravel()
        if xp.arrays:
            result = np.array(g, copy=True, order="C")
            flat = result.reshape(-1)
            region = flat[flat_pos].reshape(pos.shape)
        else:
            region = g.reshape(-1)[flat_pos].reshape(pos.shape)
        res = fn._apply(xp, (region,))
        meta = fn._input_meta
        if meta is not None:
            res = fix_shapes(fn, res, meta, xp)
        gbase = None
        if needs_base:
            g0 = res[0]
            if xp.arrays:
                flat[flat_pos] = 0 if g0 is None else np.broadcast_to(g0, pos.shape).ravel()
                gbase = result
            else:
                mask = np.ones(g._data.size, dtype=bool)
                mask[flat_pos] = False
                gbase = g * mask.reshape(g._data.shape)
                if g0 is not None:
                    gbase = gbase + views.scatter(xp, g0, self.base_shape, pos, False)
        return (gbase,) + tuple(res[1:])


def _leading_ones(shape: tuple) -> int:
    """How many leading size-1 dims PyTorch's copy into a slice drops from the value
    (``slicePrefix1sDims``: ``x[0] = ones(1, 1, 3)`` writes a (3,) row)."""
    return next((i for i, s in enumerate(shape) if s != 1), len(shape))


def _normalize_index(index, t: Tensor):
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for it in index:
        if isinstance(it, Tensor):
            out.append(it._data if it.ndim else it._data.item())
        elif isinstance(it, list):
            out.append(np.asarray(it))
        else:
            out.append(it)
    return tuple(out)


class IndexPutBackward0(CopySlices):
    """``x[advanced index] = v`` with no view in between: PyTorch records ``index_put_``."""

    __slots__ = ()

    def name(self) -> str:
        return "IndexPutBackward0"


def _setitem_node_class(index: tuple):
    """IndexPutBackward0 when the index is advanced only (PyTorch calls index_put_ on the tensor
    itself); CopySlices when basic indexing makes a view first (an int, a real slice, None)."""
    advanced = False
    for it in index:
        if isinstance(it, np.ndarray):
            advanced = True
        elif it is Ellipsis or (isinstance(it, slice) and it == slice(None)):
            continue
        else:
            return CopySlices
    return IndexPutBackward0 if advanced else CopySlices


def _setitem_result(t: Tensor, index, value) -> Tensor:
    v = as_tensor_operand(value)
    out = t._data.copy()
    lead = _leading_ones(v._data.shape)
    try:
        out[index] = v._data[(0,) * lead] if lead else v._data
    except ValueError:
        target = out[index].shape
        if any(isinstance(it, np.ndarray) for it in index):  # advanced: index_put_'s error
            raise RuntimeError(f"shape mismatch: value tensor of shape "
                               f"[{', '.join(map(str, v._data.shape))}] cannot be broadcast to "
                               f"indexing result of shape [{', '.join(map(str, target))}]"
                               ) from None
        from autodiag.ops.shape import expand

        expand(v.detach(), target)  # basic: PyTorch copies into a view (expand's error)
        raise
    if _state.record and (t.requires_grad or v.requires_grad):
        node = _setitem_node_class(index)((edge(t), edge(v)))
        node.index, node.src_shape = index, v._data.shape
        if v._data.dtype != out.dtype:
            node._input_meta = (None, (v._data.shape, v._data.dtype))
        return result(out, node)
    return result(out, None)


def _whole(index: tuple, shape: tuple) -> bool:
    """True for an index that selects the whole tensor without a view (``()``, ``...``, full
    slices): PyTorch then copies into the tensor itself (CopyBackwards, not CopySlices)."""
    if any(not (it is Ellipsis or isinstance(it, slice)) for it in index):
        return False
    if index.count(Ellipsis) > 1 or len(index) - index.count(Ellipsis) > len(shape):
        return False
    slices = [it for it in index if it is not Ellipsis]  # an Ellipsis only adds full slices
    if Ellipsis not in index:
        slices += [slice(None)] * (len(shape) - len(slices))
    else:
        at = index.index(Ellipsis)
        slices[at:at] = [slice(None)] * (len(shape) - len(slices))
    return all(it.start in (None, 0) and it.step in (None, 1) and (it.stop is None or
               it.stop >= n) for it, n in zip(slices, shape))


def _copy_to(t: Tensor, value) -> None:
    """``t[whole] = value`` as PyTorch's ``copy_to``: copy_ for the same shape, fill_ for a 0-d
    value, else copy_ of the value viewed without leading 1s and expanded (View, Expand)."""
    v = value if isinstance(value, Tensor) else wrap(np.asarray(value, dtype=t._data.dtype))
    vs = v._data.shape
    if vs == t._data.shape:
        copy_(t, v)
    elif not vs:
        fill_(t, v)
    else:
        from autodiag.ops.shape import expand, view

        k = next((i for i, s in enumerate(vs) if s != 1), len(vs))
        copy_(t, expand(view(v, vs[k:]), t._data.shape))


def setitem(self, index, value):
    idx = _normalize_index(index, self)
    if _whole(idx, self._data.shape):
        _copy_to(self, value)
        return
    apply_inplace(self, "__setitem__", lambda t: _setitem_result(t, idx, value), value)


Tensor.__setitem__ = events.traced("__setitem__", setitem)

