"""In-place ops (``add_``, ``mul_``, ``zero_``, ``copy_``, ``__setitem__``, ``+=`` ...).

One mechanism serves all of them: compute the out-of-place op (which records its node exactly as
the out-of-place version would, with edges to the tensor's *old* history), then write the result
into the tensor's own buffer (so views see it), bump the shared version counter, and make the
recorded node the tensor's new ``grad_fn``. If that node saved the tensor itself, the saved copy
is snapshotted first, as PyTorch saves ``original_self``.

Writes through a view whose base takes part in autograd would need PyTorch's CopySlices rebase;
autodiag raises a clear error there instead of risking a wrong gradient.
"""

from __future__ import annotations

import numpy as np

from autodiag.autograd.graph import Node, SavedTensor
from autodiag.ops import pointwise as pw
from autodiag.ops._core import _state, as_tensor_operand, check_broadcast, edge, result, wrap
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


def check_inplace(t: Tensor, op_name: str) -> None:
    """PyTorch's checks before any write (nothing is modified when they raise)."""
    if t._inference and not _state.inference:
        raise RuntimeError(INFERENCE_ERROR)
    if _state.record and t.requires_grad:
        if t.grad_fn is None and t._base is None:
            raise RuntimeError(LEAF_ERROR)
        base = t._base
        if base is not None and base.grad_fn is None and base.requires_grad:
            raise RuntimeError(VIEW_OF_LEAF_ERROR)


def bump_version(t: Tensor, op_name: str) -> None:
    """Bump the shared version counter and remember where the write happened."""
    vc = vc_of(t)
    vc[0] += 1
    site = user_site()
    if len(vc) == 1:
        vc.append((op_name, site))
    else:
        vc[1] = (op_name, site)
    if events.TRACERS:
        events.emit_inplace(t, op_name)


def apply_inplace(t: Tensor, op_name: str, compute, *others) -> Tensor:
    """Run ``compute(t)`` (an out-of-place op on t) and store its result into ``t``."""
    check_inplace(t, op_name)
    recording = _state.record and (t.requires_grad or any(
        isinstance(o, Tensor) and o.requires_grad for o in others))
    if recording and t._base is not None:
        # a refusal, so NotImplementedError (a RuntimeError, as this was before)
        raise NotImplementedError(
            f"autodiag: in-place {op_name} on a view of a tensor that takes part in autograd is "
            f"not supported (PyTorch rebases the base's history through CopySlices). Write the "
            f"operation out of place, e.g. build the new tensor with torch.cat/torch.where, or "
            f"clone() the view before modifying it.")
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
    np.copyto(t._data, rd, casting="unsafe")
    bump_version(t, op_name)
    if node is not None:
        t.grad_fn = node
        t.requires_grad = True
        if t._output_nr:
            t._output_nr = 0
        _rebind_saved_result(node, r, t)
    return t


def _snapshot_saved_self(node, t: Tensor) -> None:
    saved = node._saved
    if not saved or saved.__class__ is not tuple:
        return
    new = list(saved)
    changed = False
    for i, s in enumerate(saved):
        if s is t or (s.__class__ is SavedTensor and s.tensor is t):
            snap = Tensor._make(t._data.copy(), t.grad_fn, t.requires_grad, None, t._output_nr)
            if t.grad_fn is None and t.requires_grad:
                snap._acc = t._acc
            new[i] = SavedTensor(snap, False)
            changed = True
    if changed:
        node._saved = tuple(new)


def _rebind_saved_result(node, r: Tensor, t: Tensor) -> None:
    saved = node._saved
    if not saved or saved.__class__ is not tuple:
        return
    for s in saved:
        if s.__class__ is SavedTensor and s.tensor is None and s.vc is r._vc:
            s.data, s.vc = t._data, vc_of(t)
            s.version = s.vc[0]


# --- the in-place methods ---------------------------------------------------------------------


def _method(name: str, fn):
    # the in-place method is the traced op; the out-of-place op it runs inside needs no second
    # tracing check, so it calls the registered op's unwrapped function
    raw = getattr(fn, "__wrapped__", fn)

    def inplace(self, *args, **kwargs):
        return apply_inplace(self, name, lambda t: raw(t, *args, **kwargs), *args)

    inplace.__name__ = name
    inplace.__doc__ = f"In-place version of ``{fn.__name__}``."
    inplace = events.traced(name, inplace)
    setattr(Tensor, name, inplace)
    return inplace


for _name, _fn in (("add_", pw.add), ("sub_", pw.sub), ("mul_", pw.mul), ("div_", pw.div),
                   ("pow_", pw.pow), ("clamp_", pw.clamp), ("clamp_min_", pw.clamp_min),
                   ("clamp_max_", pw.clamp_max), ("relu_", pw.relu), ("neg_", pw.neg),
                   ("exp_", pw.exp), ("log_", pw.log), ("sqrt_", pw.sqrt), ("abs_", pw.abs),
                   ("sigmoid_", pw.sigmoid), ("tanh_", pw.tanh), ("sin_", pw.sin),
                   ("cos_", pw.cos), ("floor_", pw.floor), ("ceil_", pw.ceil),
                   ("round_", pw.round), ("sign_", pw.sign), ("reciprocal_", pw.reciprocal),
                   ("subtract_", pw.sub), ("multiply_", pw.mul), ("divide_", pw.div),
                   ("clip_", pw.clamp)):
    _method(_name, _fn)

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
        nf = self._next
        gv = None
        if nf[1] is not None:
            gv = np.asarray(g.sum()) if xp.arrays else g.sum()
        return (xp.zeros_like(g) if nf[0] is not None else None, gv)


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
    return apply_inplace(self, "fill_", lambda t: _fill_like(t, value), value)


def zero_(self):
    return apply_inplace(self, "zero_", lambda t: _fill_like(t, 0, ZeroBackward0))


Tensor.fill_ = events.traced("fill_", fill_)
Tensor.zero_ = events.traced("zero_", zero_)


class CopyBackwards(Node):
    __slots__ = ("src_shape", "src_dtype")

    def name(self) -> str:
        return "torch::autograd::CopyBackwards"  # a C++ node in PyTorch

    def backward(self, xp, g):
        nf = self._next
        gs = xp.sum_to(g, self.src_shape) if nf[1] is not None else None
        return (xp.zeros_like(g) if nf[0] is not None else None, gs)


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
    return apply_inplace(self, "copy_", lambda t: _copy_result(t, src), src)


Tensor.copy_ = events.traced("copy_", copy_)


# --- __setitem__ ------------------------------------------------------------------------------


class CopySlices(Node):
    """``x[idx] = v``: x's old gradient with the written region zeroed; v gets that region."""

    __slots__ = ("index", "src_shape")

    def name(self) -> str:
        return "torch::autograd::CopySlices"  # a C++ node in PyTorch, named with its namespace

    def backward(self, xp, g):
        nf = self._next
        gx = gv = None
        idx = self.index
        if nf[0] is not None:
            if xp.arrays:
                gx = np.array(g)  # a copy, and an array even for a numpy scalar (0-d grads)
                gx[idx] = 0
            else:
                keep = np.ones(g._data.shape, dtype=bool)
                keep[idx] = False
                gx = xp.mask(keep, g)
        if nf[1] is not None:
            shape = self.src_shape
            lead = _leading_ones(shape)
            gv = xp.sum_to(g[idx], shape[lead:])
            if lead:
                gv = xp.reshape(gv, shape)
        return (gx, gv)


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

