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

from autodiag.core.graph import Freed, Node, SavedTensor, check_saved, raise_freed
from autodiag.core.zeros import IMMUTABLE, ZeroArray
from autodiag.ops import pointwise as pw
from autodiag.ops import views
from autodiag.ops._core import (
    OPS,
    _state,
    as_tensor_operand,
    check_broadcast,
    edge,
    fix_shapes,
    result,
    wrap,
)
from autodiag.ops._scalar_convert import checked_scalar
from autodiag.tensor import Tensor, vc_of
from autodiag.trace import events
from autodiag.trace.sites import user_site

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_OF_LEAF_ERROR = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation."
)
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
    _check_autograd(t, requires_grad)
    # an efficient zero gradient (a custom Function's backward receives one): PyTorch's
    # ZeroTensor kernel refuses the write, after autograd's checks
    if t._data.__class__ is ZeroArray:
        raise RuntimeError(IMMUTABLE)


def _check_autograd(t: Tensor, requires_grad: bool | None) -> None:
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
    "a single memory location. Please clone() the tensor before performing the operation."
)


def check_overlap(t: Tensor, others) -> tuple:
    """An input that shares some, not all, of the written memory (``x.sub_(x[0])``): PyTorch's
    partial-overlap error, where its get_overlap_status can tell (both layouts dense). Returns
    the inputs it cannot tell about (``x.sub_(x[:, 0])``): PyTorch's loop then reads elements it
    has already written, so ``apply_inplace`` checks that the result does not depend on that
    order. Only tensors sharing ``t``'s version counter can share its memory."""
    vc = t._vc
    if vc is None:
        return ()
    d = t._data
    too_hard = []
    for o in others:
        if isinstance(o, Tensor) and o is not t and o._vc is vc:
            od = o._data
            if (
                od.__array_interface__["data"][0] == d.__array_interface__["data"][0]
                and od.shape == d.shape
                and all(n == 1 or a == b for n, a, b in zip(d.shape, od.strides, d.strides))
            ):
                continue  # the same memory, element for element
            status = _overlap(d, od, od.shape, _strides(od))
            if status == _PARTIAL:
                raise RuntimeError(PARTIAL_OVERLAP_ERROR)
            if status == _TOO_HARD:
                too_hard.append(o)
    return tuple(too_hard)


def bump_version(t: Tensor, op_name: str) -> None:
    """Bump the shared version counter and remember where the write happened."""
    views.write_version(vc_of(t), (op_name, user_site()))
    if events.TRACERS:
        events.emit_inplace(t, op_name)


def apply_inplace(
    t: Tensor,
    op_name: str,
    compute,
    *others,
    fills: bool = False,
    loop_read: tuple = (),
    written=None,
) -> Tensor:
    """Run ``compute(t)`` (an out-of-place op on t) and store its result into ``t``.
    ``loop_read``: inputs overlapping ``t`` in a way PyTorch does not analyse (check_overlap);
    the result must not depend on the order its loop reads them in. ``written``: for an op
    that writes only some elements of ``t`` (setitem), a function of ``t``'s array giving
    them as a mask, read when ``t`` is an expanded view (``_write``)."""
    base = t._base
    # a view requires grad when its base does (PyTorch), also one made in no_grad mode
    recording = _state.record and (
        t.requires_grad
        or (base is not None and base.requires_grad)
        or any(isinstance(o, Tensor) and o.requires_grad for o in others)
    )
    check_inplace(t, op_name, recording)
    r = compute(t)
    rd = r._data
    for o in loop_read:
        if rd.shape == t._data.shape:
            _check_order_free(t, t._data, o._data, rd, op_name)
    if rd.dtype != t._data.dtype:
        if not np.can_cast(rd.dtype, t._data.dtype, casting="same_kind") or (
            rd.dtype.kind == "f" and t._data.dtype.kind in "biu"
        ):
            raise RuntimeError(
                f"result type {r.dtype.scalar_name} can't be cast to the desired "
                f"output type {t.dtype.scalar_name}"
            )
    if rd.shape != t._data.shape:
        raise RuntimeError(
            f"output with shape [{', '.join(map(str, t._data.shape))}] doesn't "
            f"match the broadcast shape [{', '.join(map(str, rd.shape))}]"
        )
    if base is not None and not fills and views.may_repeat(t._data):
        _check_one_value_each(t, base, rd, op_name)
    node = r.grad_fn
    if node is not None:
        _snapshot_saved_self(node, t)
    _write(t, base, rd, fills, written)
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


def _check_one_value_each(t: Tensor, base: Tensor, rd: np.ndarray, op_name: str) -> None:
    """A view whose elements share memory through nonzero strides (``Tensor.unfold`` with
    step < size): PyTorch writes it element by element, a shared element once per alias, each
    write reading what the previous one wrote (``x.unfold(0, 3, 1).mul_(3)`` multiplies an
    element up to three times), so its result depends on its loop order. Computed out of place
    here: refuse, rather than differ, unless every shared element keeps its value (or, for a
    write that does not read the view, ``copy_``/``x[i] = v``, gets one value)."""
    d = t._data
    if views.overlaps(d):  # stride 0 (expand): PyTorch's own error, in _write
        return
    pos = views.positions(base._data, d).ravel()
    uniq, first, counts = np.unique(pos, return_index=True, return_counts=True)
    if uniq.size == pos.size:
        return
    flat = base._data.reshape(-1)
    written = rd.astype(d.dtype, copy=False).ravel()
    shared = np.isin(pos, uniq[counts > 1])
    if op_name in ("copy_", "__setitem__"):
        new = flat.copy()
        new[pos] = written
        expected = new[pos]
    else:
        expected = flat[pos]
    if not np.array_equal(expected[shared], written[shared], equal_nan=written.dtype.kind in "fc"):
        raise NotImplementedError(
            f"{op_name}: the view written has elements that share memory (overlapping "
            "windows, as Tensor.unfold with step < size makes), and PyTorch's result then "
            "depends on its loop order; clone() the view first"
        )


def _write(t: Tensor, base, rd: np.ndarray, fills: bool = False, written=None) -> None:
    """Store ``rd`` into ``t``'s memory (its base's too, when it is a view). ``fills``: one
    value everywhere (fill_, zero_), which PyTorch writes into overlapping views too.
    ``written``: the elements the op writes, as a mask of ``t``'s array (apply_inplace)."""
    d = t._data
    if not d.size:
        return  # nothing to write (an expanded empty view is read-only to numpy)
    if base is None or d.flags.writeable and not views.overlaps(d):
        np.copyto(d, rd, casting="unsafe")
        return
    pos = views.positions(base._data, d)
    if views.overlaps(d) and not fills:  # an expanded view: elements sharing memory
        if written is None:
            raise RuntimeError(views.OVERLAP_ERROR)
        # setitem through an expanded view writes only the elements indexed (PyTorch's copy_
        # into a view of it, or index_put_ on one): those, each memory location one value
        mask = written(d)
        pos, rd = pos[mask], rd[mask]
        _check_one_value_per_location(pos, rd)
    # a read-only numpy view with no overlap (expand to the same size): write through the base
    flat = base._data.reshape(-1)  # NOTE: a copy if the base is not contiguous
    flat[pos.ravel()] = rd.astype(d.dtype, copy=False).ravel()
    if not np.shares_memory(flat, base._data):
        base._data[...] = flat.reshape(base._data.shape)


def _check_one_value_per_location(pos: np.ndarray, values: np.ndarray) -> None:
    """PyTorch's index_put_ into an expanded tensor writes a location shared by several
    elements once per element, in its loop's order: the same result here only when they
    all get one value."""
    order = np.argsort(pos, kind="stable")
    p, v = pos[order], values[order]
    same = p[1:] == p[:-1]
    if same.any():
        a, b = v[1:][same], v[:-1][same]
        if not np.array_equal(a, b, equal_nan=v.dtype.kind in "fc"):
            raise NotImplementedError(
                "__setitem__: an advanced index into an expanded tensor writes different "
                "values to elements that share memory, and PyTorch's result then depends on "
                "its loop order; clone() the tensor first"
            )


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
    """The node saved its result ``r``: what it saves is ``t`` after the write (its buffer and
    version counter, at the version the write gave it).

    Unpacked (create_graph=True), the result's grad_fn is ``node`` itself, also when ``t`` is a
    view whose base was rebased: PyTorch then holds the view's regenerated grad_fn weakly
    (SavedVariable's weak_grad_fn_: AsStridedBackward0 over the base's CopySlices) and falls
    back to ``node`` once it is gone. Both reach the same leaves with the same gradient: the
    result depends only on the old view, which is ``node``'s input."""
    saved = node._saved
    if not saved or saved.__class__ is not tuple:
        return
    for s in saved:
        if s.__class__ is SavedTensor and s.tensor is None and s.vc is r._vc:
            s.data, s.vc = t._data, vc_of(t)
            s.version = s.vc[0]
            s.output_nr = 0


# --- the in-place methods ---------------------------------------------------------------------


# NOTE [In-place arithmetic]: ``p -= lr * p.grad`` under no_grad (a hand-written SGD step) runs
# the ufunc into p's memory, as PyTorch's kernel writes into self: the out-of-place op and the
# copy back cost a fresh full-size array and two passes more (sub_ on a 256x784 float32 weight:
# 316 us against torch's 96). Taken only where the two give the same: nothing recorded, no
# tracer, a float tensor that owns its memory, and a Python number or a tensor of its dtype and
# shape (no promotion, broadcasting or cast); everything else goes through apply_inplace.
_UFUNC_TWINS = {
    "add_": np.add,
    "__iadd__": np.add,
    "sub_": np.subtract,
    "__isub__": np.subtract,
    "mul_": np.multiply,
    "__imul__": np.multiply,
    "div_": np.true_divide,
    "__itruediv__": np.true_divide,
}


def _ufunc_in_place(t, other) -> bool:
    """May ``t op= other`` run as the ufunc writing into ``t`` (NOTE [In-place arithmetic])?"""
    if t.__class__ is not Tensor or t._base is not None or events.TRACERS:
        return False
    d = t._data
    if d.__class__ is not np.ndarray or d.dtype.kind != "f" or not d.flags.writeable:
        return False
    oc = other.__class__
    if oc is float or oc is int:
        return not (_state.record and t.requires_grad)
    if oc is not Tensor:
        return False
    od = other._data
    return (
        od.__class__ is np.ndarray
        and od.dtype is d.dtype
        and od.shape == d.shape
        and not (_state.record and (t.requires_grad or other.requires_grad))
    )


def _method(name: str, fn):
    # the in-place method is the traced op; the out-of-place op it runs inside needs no second
    # tracing check, so it calls the registered op's unwrapped function
    raw = getattr(fn, "__wrapped__", fn)
    # an op whose out-of-place result has checks its in-place twin skips names the computation
    # the twin runs (masked_fill: PyTorch refuses an int output requiring grad only out of place)
    raw = getattr(fn, "inplace_compute", raw)
    # the inputs read as arrays, for the overlap check (masked_fill_ reads its value's number)
    read = getattr(fn, "inplace_reads", None)
    ufunc = _UFUNC_TWINS.get(name)
    alpha_first = name[:-1] in pw.ALPHA_FIRST

    def inplace(self, *args, **kwargs):
        if alpha_first and len(args) > 1:  # add_(alpha, other): the warning names add_
            other, alpha = pw.deprecated_alpha_first(name, args[0], args[1:])
            args, kwargs = (other,), {**kwargs, "alpha": alpha}
        # tensors given by keyword (clamp_(min=t)) are inputs too: overlap, grad recording
        others = (*args, *kwargs.values()) if kwargs else args
        loop_read = check_overlap(self, read(*args, **kwargs) if read else others)
        if (
            ufunc is not None
            and len(args) == 1
            and not kwargs
            and not loop_read
            and _ufunc_in_place(self, args[0])
        ):
            check_inplace(self, name, False)
            other = args[0]
            ufunc(self._data, other._data if other.__class__ is Tensor else other, out=self._data)
            bump_version(self, name)
            return self
        written = None
        if name == "masked_fill_" and views.overlaps(self._data):
            _check_expanded_unrecorded(self)
            written = _masked_fill_written(args[0] if args else kwargs.get("mask"))
        return apply_inplace(
            self,
            name,
            lambda t: raw(t, *args, **kwargs),
            *others,
            loop_read=loop_read,
            written=written,
        )

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


for _op, _fn in (
    ("__iadd__", pw.add),
    ("__isub__", pw.sub),
    ("__imul__", pw.mul),
    ("__itruediv__", pw.div),
    ("__ipow__", pw.pow),
):
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
    """One value everywhere, as a read-only view of a 0-d array (``fills``: apply_inplace's
    write broadcasts it into ``t``; a full-size array would cost an allocation and a pass)."""
    if isinstance(value, Tensor):
        if value._data.ndim != 0:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with "
                f"{value._data.ndim} dimensions."
            )
        out = _filled(t._data, value._data)
        if _state.record and (t.requires_grad or value.requires_grad):
            node = FillBackward3((edge(t), edge(value)))
            if value._data.dtype != out.dtype:
                node._input_meta = (None, ((), value._data.dtype))
            return result(out, node)
        return result(out, None)
    d = t._data
    out = np.broadcast_to(checked_scalar(value, d.dtype, "fill_"), d.shape)
    if _state.record and t.requires_grad:
        return result(out, cls((edge(t),)))
    return result(out, None)


def _filled(like: np.ndarray, value: np.ndarray) -> np.ndarray:
    # a 0-d tensor's value cast (copy_'s rule, unchecked), without a full-size array
    return np.broadcast_to(value.astype(like.dtype, copy=False), like.shape)


def fill_(self, value):
    # PyTorch's fill_ of a tensor value (fill_.Tensor, also x[:] = v's copy_to) checks the
    # written tensor for internal overlap; fill_ of a number writes the shared elements
    if isinstance(value, Tensor) and self._data.size > 1 and views.overlaps(self._data):
        raise RuntimeError(views.OVERLAP_ERROR)
    return apply_inplace(self, "fill_", lambda t: _fill_like(t, value), value, fills=True)


def _plain_zero(t) -> bool:
    """May ``t.zero_()`` write zeros straight into ``t``'s memory? Where nothing is recorded, no
    tracer listens and ``t`` owns its memory, as NOTE [In-place arithmetic]: ``p.grad.zero_()``
    of a training loop then costs one fill, not an out-of-place op and its checks (a 256x784
    gradient: 51 us against torch's 16)."""
    if t.__class__ is not Tensor or t._base is not None or events.TRACERS:
        return False
    d = t._data
    return (
        d.__class__ is np.ndarray and d.flags.writeable and not (_state.record and t.requires_grad)
    )


def zero_(self):
    if _plain_zero(self):
        check_inplace(self, "zero_", False)
        self._data.fill(0)
        bump_version(self, "zero_")
        return self
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
            raise RuntimeError(
                f"output with shape [{', '.join(map(str, ts))}] doesn't match "
                f"the broadcast shape [{', '.join(map(str, shape))}]"
            )
    out = np.broadcast_to(s._data, ts).astype(t._data.dtype, copy=True)
    # PyTorch's copy_ records only into a differentiable dtype: a float that requires grad
    # copied into an int tensor leaves it not requiring grad
    if _state.record and (t.requires_grad or s.requires_grad) and t._data.dtype.kind == "f":
        node = CopyBackwards((edge(t), edge(s)))
        node.src_shape, node.src_dtype = s._data.shape, s._data.dtype
        if s._data.dtype != t._data.dtype:
            node._input_meta = (None, (s._data.shape, s._data.dtype))
        return result(out, node)
    return result(out, None)


def copy_(self, src, non_blocking: bool = False):
    loop_read = check_overlap(self, (src,))
    return apply_inplace(self, "copy_", lambda t: _copy_result(t, src), src, loop_read=loop_read)


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
        if self.fn is not None:
            # PyTorch's CopySlices::release_variables drops ``fn`` (its saved tensors go with
            # it) and a later backward through this node raises. Not ``fn._release``: a
            # create_graph gradient graph may still use ``fn``, as the grad_fn of the result
            # it saved (_rebind_saved_result), and run it after this node.
            self.fn = None
            self._saved = freed
            return
        super()._release(freed)

    def backward(self, xp, g):
        if self.fn is not None:
            return self._view_backward(xp, g)
        if self._saved.__class__ is Freed:  # a view's CopySlices, released (_release)
            raise_freed(self)
        needs_self, needs_value = self.needs_grad
        gx = gv = None
        steps = self.index  # the view's basic index, then an advanced one into it
        if needs_self:
            if xp.arrays:
                gx = np.array(g)  # a copy, and an array even for a numpy scalar (0-d grads)
                _assign(gx, steps, 0)
            else:
                keep = np.ones(g._data.shape, dtype=bool)
                _assign(keep, steps, False)
                gx = xp.mask(keep, g)
        if needs_value:
            shape = self.src_shape
            lead = _leading_ones(shape)
            region = g
            for step in steps:
                region = region[step]
            gv = xp.sum_to(region, shape[lead:])
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
        check_saved(fn)  # as the engine does for the nodes it runs
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
                # PyTorch copies fn's gradient into the view's region of the base's gradient:
                # a select, never ``g * mask`` (an inf there would turn into NaN, NOTE [Masked
                # gradients] in ops/_core.py)
                keep = np.ones(g._data.size, dtype=bool)
                keep[flat_pos] = False
                keep = keep.reshape(g._data.shape)
                if g0 is None:
                    gbase = xp.mask(keep, g)
                else:
                    gbase = xp.where(keep, g, views.scatter(xp, g0, self.base_shape, pos, False))
        return (gbase,) + tuple(res[1:])


def _assign(a: np.ndarray, steps: tuple, value) -> None:
    """``a[basic][advanced] = value``: the advanced step writes through the basic view."""
    if len(steps) == 1:
        a[steps[0]] = value
    else:
        a[steps[0]][steps[1]] = value


def _leading_ones(shape: tuple) -> int:
    """How many leading size-1 dims PyTorch's copy into a slice drops from the value
    (``slicePrefix1sDims``: ``x[0] = ones(1, 1, 3)`` writes a (3,) row)."""
    return next((i for i, s in enumerate(shape) if s != 1), len(shape))


class IndexPutBackward0(CopySlices):
    """``x[advanced index] = v`` with no view in between: PyTorch records ``index_put_``."""

    __slots__ = ()

    def name(self) -> str:
        return "IndexPutBackward0"


# NOTE [setitem as PyTorch does it]: THPVariable_setitem first makes a view of ``x`` with the
# basic parts of the index (select, slice, unsqueeze; IndexError for an int out of range), then
# either copies the value into that view (``copy_to``: copy_, fill_ for a 0-d value, else copy_
# of the value expanded; expand's error comes before the in-place checks) or, when tensors are
# in the index, calls ``index_put_`` on the view with the tensors in place of the dims they
# index. The basic step and the advanced step are kept apart here for that reason: numpy, given
# both in one tuple, treats an int beside an array as advanced (``x[0, :, [1, 2]]`` has another
# shape in numpy than in PyTorch). A bool (Python or 0-d tensor) is an unsqueeze indexed by
# ``[0]`` or ``[]``, as PyTorch's boolToIndexingTensor makes it.

_INDEX_TYPES_ERROR = (
    "only integers, slices (`:`), ellipsis (`...`), None and long or byte "
    "Variables are valid indices (got {})"
)
_INDEX_DTYPE_ERROR = "tensors used as indices must be long, int, byte or bool tensors"


def _index_plan(t: Tensor, index) -> tuple:
    """PyTorch's applySlicing for ``t[index] = ...``: ``(basic, advanced, user_mask)``, where
    ``basic`` is a numpy basic index (ints, slices, None) making the view, ``advanced`` is
    ``None`` or an index for that view (full slices and int64/bool arrays), ``user_mask`` whether
    its one array is a bool mask the user gave (index_put_'s masked_fill shortcut)."""
    if not isinstance(index, tuple):
        index = (index,)
    ndim, shape = t._data.ndim, t._data.shape
    items = []
    specified = 0
    for it in index:
        if isinstance(it, Tensor):
            it = it._data
        elif isinstance(it, list):
            it = np.asarray(it)
            if it.dtype.kind == "f":
                raise IndexError(_INDEX_DTYPE_ERROR)
        items.append(it)
        if isinstance(it, np.ndarray):
            specified += it.ndim if it.dtype == np.bool_ else 1
        elif not (it is None or it is Ellipsis or isinstance(it, (bool, np.bool_))):
            specified += 1
    if specified > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    basic: list = []
    adv: list = []  # per dim of the view: slice(None) or an array
    arrays = 0
    user_mask = False
    dim = 0  # the dim of t the next item reads
    real_dim = 0  # PyTorch's dim in messages: t's dims and the inserted ones
    for it in items:
        if it is None:
            basic.append(None)
            adv.append(slice(None))
            real_dim += 1
        elif it is Ellipsis:
            n = ndim - specified
            basic.extend([slice(None)] * n)
            adv.extend([slice(None)] * n)
            dim += n
            real_dim += n
        elif isinstance(it, (bool, np.bool_)) or (
            isinstance(it, np.ndarray) and it.ndim == 0 and it.dtype == np.bool_
        ):
            basic.append(None)
            adv.append(np.zeros(1 if bool(it) else 0, dtype=np.int64))
            arrays += 1
            real_dim += 1
        elif isinstance(it, (int, np.integer)) or (
            isinstance(it, np.ndarray) and it.ndim == 0 and it.dtype.kind in "iu"
        ):
            i, n = int(it), shape[dim]
            if not -n <= i < n:
                raise IndexError(
                    f"index {i} is out of bounds for dimension {real_dim} with size {n}"
                )
            basic.append(i)
            dim += 1
            real_dim += 1
        elif isinstance(it, slice):
            if it.step is not None and it.step <= 0:
                raise ValueError("step must be greater than zero")
            basic.append(it)
            adv.append(slice(None))
            dim += 1
            real_dim += 1
        elif isinstance(it, np.ndarray):
            if it.dtype.kind not in "iub":
                raise IndexError(_INDEX_DTYPE_ERROR)
            arr = it if it.dtype == np.bool_ else it.astype(np.int64, copy=False)
            n = arr.ndim if arr.dtype == np.bool_ else 1
            basic.extend([slice(None)] * n)
            adv.append(arr)
            arrays += 1
            user_mask = arr.dtype == np.bool_
            dim += n
            real_dim += n
        else:
            raise IndexError(_INDEX_TYPES_ERROR.format(type(it).__name__))
    if not arrays:
        return tuple(basic), None, False
    while isinstance(adv[-1], slice):
        adv.pop()
    return tuple(basic), tuple(adv), user_mask and arrays == 1


def _is_self(basic: tuple, shape: tuple) -> bool:
    """Is PyTorch's view the tensor itself (only full slices, which applySlice skips)?"""
    for it, n in zip(basic, shape):
        if not (
            isinstance(it, slice)
            and it.start in (None, 0)
            and it.step in (None, 1)
            and (it.stop is None or it.stop >= n)
        ):
            return False
    return len(basic) <= len(shape)


# --- overlap, as PyTorch's get_overlap_status (ATen/MemoryOverlap.cpp) -------------------------

_NO, _FULL, _PARTIAL, _TOO_HARD = range(4)


def _strides(a: np.ndarray) -> tuple:
    """``a``'s strides in elements as PyTorch has them: a size-1 dim numpy made with stride 0
    (None, broadcast_to) gets unsqueeze's stride, the extent of the dim after it."""
    st = [s // a.itemsize for s in a.strides]
    for d in range(a.ndim - 1, -1, -1):
        if a.shape[d] == 1 and st[d] == 0:
            st[d] = a.shape[d + 1] * st[d + 1] if d + 1 < a.ndim else 1
    return tuple(st)


def _expanded_strides(strides: tuple, shape: tuple, target: tuple) -> tuple:
    """The strides of ``expand(target)`` (PyTorch's inferExpandGeometry)."""
    out = [0] * len(target)
    k = len(target) - len(shape)
    for i in range(len(target) - 1, -1, -1):
        if i >= k:
            st = strides[i - k] if shape[i - k] == target[i] else 0
        else:  # a new dim: the extent of the next one (0 after a 0-d tensor)
            st = target[i + 1] * out[i + 1] if i + 1 < len(target) and target[i] == 1 else 0
        out[i] = st
    return tuple(out)


def _dense(shape: tuple, strides: tuple) -> bool:
    """PyTorch's is_non_overlapping_and_dense: a permutation of a contiguous layout."""
    if len(shape) == 1:
        return shape[0] < 2 or strides[0] == 1
    want = 1
    for d in sorted(range(len(shape)), key=lambda d: (shape[d] < 2, strides[d])):
        if shape[d] < 2:
            return True
        if strides[d] != want:
            return False
        want *= shape[d]
    return True


def _overlap(a: np.ndarray, b: np.ndarray, b_shape: tuple, b_st: tuple) -> int:
    """How the written ``a`` and the read ``b`` (seen with PyTorch's shape and strides, as
    expand makes them) share memory, in get_overlap_status's terms."""
    a_st = _strides(a)
    if a.size == 0 or b.size == 0:
        return _NO
    if not (_dense(a.shape, a_st) and _dense(b_shape, b_st)):
        return _TOO_HARD if np.shares_memory(a, b) else _NO
    a0 = a.__array_interface__["data"][0]
    b0 = b.__array_interface__["data"][0]
    a1 = a0 + a.size * a.itemsize
    b1 = b0 + int(np.prod(b_shape, dtype=np.int64)) * b.itemsize
    if a0 == b0 and a1 == b1:
        return _FULL if a_st == b_st else _PARTIAL
    return _PARTIAL if a0 < b1 and b0 < a1 else _NO


def _check_order_free(
    t: Tensor, dst: np.ndarray, src: np.ndarray, written: np.ndarray, op_name: str = "__setitem__"
) -> None:
    """PyTorch copies overlapping memory it cannot analyse element by element, so its result
    then depends on its loop order. Computed out of place here, the result is the same when no
    element read is also written with another value; otherwise refuse rather than differ."""
    root = t._base._data if t._base is not None else t._data
    flat = root.reshape(-1)
    ps = views.positions(root, src).ravel()
    new = flat.copy()
    new[views.positions(root, dst).ravel()] = np.broadcast_to(written, dst.shape).ravel()
    if not np.array_equal(new[ps], flat[ps], equal_nan=new.dtype.kind in "fc"):
        raise NotImplementedError(
            f"{op_name}: {'the value' if op_name == '__setitem__' else 'an input'} shares "
            "memory with the elements written, and PyTorch's "
            "result then depends on its loop order; clone() the value first"
        )


def _check_copy_overlap(
    t: Tensor, dst: np.ndarray, v: Tensor, src_shape: tuple, src_st: tuple, written: np.ndarray
) -> None:
    """copy_'s check (TensorIterator's): the value partly overlapping the view written."""
    if not _shares_storage(t, v):
        return
    vd = v._data
    if (
        dst.__array_interface__["data"][0] == vd.__array_interface__["data"][0]
        and dst.shape == src_shape
        and _strides(dst) == src_st
    ):
        return  # copy_'s early exit: the same elements
    status = _overlap(dst, vd, src_shape, src_st)
    if status == _PARTIAL:
        raise RuntimeError(PARTIAL_OVERLAP_ERROR)
    if status == _TOO_HARD:
        _check_order_free(t, dst, vd, written)


def _shares_storage(t: Tensor, v: Tensor) -> bool:
    # only tensors sharing a version counter share memory (a view made, or the tensor itself)
    return v is t or (t._vc is not None and v._vc is t._vc)


def _strip_leading_ones(a: np.ndarray) -> np.ndarray:
    """``a`` viewed without its leading size-1 dims (a view: ``...`` keeps a 0-d result one)."""
    return a[(0,) * _leading_ones(a.shape) + (Ellipsis,)]


def _value_tensor(t: Tensor, value) -> Tensor:
    """PyTorch's valueToTensor: a tensor as it is, a number as a 0-d tensor of ``t``'s dtype."""
    if isinstance(value, Tensor):
        return value
    # PyTorch takes Python numbers (np.float64 and np.complex128 are subclasses) and numpy
    # integers; np.float32, np.float16, np.bool_ and 0-d arrays are refused
    if isinstance(value, (bool, int, float, complex, np.integer)):
        return wrap(checked_scalar(value, t._data.dtype, "__setitem__", setitem=True))
    cls = type(value)
    what = f"numpy.{cls.__name__}" if cls.__module__ == "numpy" else cls.__name__  # tp_name
    raise TypeError(f"can't assign a {what} to a torch.{t.dtype.scalar_name}Tensor")


def _shape_str(shape) -> str:
    return f"[{', '.join(map(str, shape))}]"


def _expandable(shape: tuple, target: tuple) -> bool:
    return len(shape) <= len(target) and all(
        s == 1 or s == n for s, n in zip(shape[::-1], target[::-1])
    )


def _check_basic_shape(t: Tensor, basic: tuple, v: Tensor) -> None:
    """copy_to's expand of the value to the view, before any in-place check (a view op)."""
    target = t._data[basic].shape
    vs = v._data.shape
    if vs and vs != target:
        lead = _leading_ones(vs)
        if not _expandable(vs[lead:], target):
            from autodiag.ops.shape import expand

            expand(wrap(np.zeros(vs[lead:], dtype=v._data.dtype)), target)  # expand's error
            raise RuntimeError(
                f"setitem: cannot expand {_shape_str(vs)} to {_shape_str(target)}"
            )  # not reached: expand raised


def _basic_result(t: Tensor, basic: tuple, v: Tensor) -> Tensor:
    """``t[basic] = v`` (copy_to into the view), recorded as CopySlices."""
    out = t._data.copy()
    dst = t._data[basic]
    vd = v._data
    if vd.ndim and vd.shape != dst.shape:  # copy_ of the value without leading 1s, expanded
        src = _strip_leading_ones(vd)
        written = np.broadcast_to(src, dst.shape)
        _check_copy_overlap(
            t, dst, v, dst.shape, _expanded_strides(_strides(src), src.shape, dst.shape), written
        )
    else:
        written = vd
        if vd.ndim:  # copy_; a 0-d value is fill_, which clones a value sharing memory
            _check_copy_overlap(t, dst, v, vd.shape, _strides(vd), written)
    out[basic] = written
    if t._data.dtype.kind != "f" and (vd.ndim or not dst.ndim):
        return result(out, None)  # copy_ (not fill_) into the view: copy_ records no int output
    return _record(t, out, v, (basic,), CopySlices)


def _advanced_result(t: Tensor, basic: tuple, adv: tuple, user_mask: bool, v: Tensor) -> Tensor:
    """``t[basic][adv] = v`` (index_put_ on the view), with index_put_'s checks in its order:
    overlap, mask shapes, value shape, dtype, index bounds."""
    out = t._data.copy()
    dst = t._data[basic]
    vd = v._data
    vd = _strip_leading_ones(vd)  # PyTorch's valuesSliced
    masked = user_mask and vd.size == 1  # index_put_ dispatches to masked_fill_(value.item())
    if not masked and _shares_storage(t, v):
        status = _overlap(dst, vd, vd.shape, _strides(vd))
        if status in (_FULL, _PARTIAL):  # assert_no_overlap
            raise RuntimeError(PARTIAL_OVERLAP_ERROR)
        if status == _TOO_HARD and vd.size > 1:
            raise NotImplementedError(
                "__setitem__: the value shares memory with the tensor written through an "
                "advanced index, and PyTorch's result then depends on its loop order; clone() "
                "the value first"
            )
    probe = []  # the index with every int array at 0: the result's shape, bounds unchecked
    d = 0
    for it in adv:
        if isinstance(it, np.ndarray) and it.dtype == np.bool_:
            for j, n in enumerate(it.shape):
                if n != dst.shape[d + j]:
                    raise IndexError(
                        f"The shape of the mask {_shape_str(it.shape)} at index {j} does not "
                        f"match the shape of the indexed tensor {_shape_str(dst.shape)} at "
                        f"index {d + j}"
                    )
            probe.append(it)
            d += it.ndim
        else:
            probe.append(np.zeros_like(it) if isinstance(it, np.ndarray) else it)
            d += 1
    dummy = tuple(
        max(n, 1)
        if d < len(adv) and isinstance(adv[d], np.ndarray) and adv[d].dtype != np.bool_
        else n
        for d, n in enumerate(dst.shape)
    )
    try:
        target = np.broadcast_to(np.zeros((), np.int8), dummy)[tuple(probe)].shape
    except IndexError as e:  # index arrays that do not broadcast together
        raise IndexError(str(e)) from None
    if not _expandable(vd.shape, target):
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {_shape_str(vd.shape)} cannot "
            f"be broadcast to indexing result of shape {_shape_str(target)}"
        )
    if masked and vd.dtype != out.dtype:  # masked_fill_'s checked conversion of the number
        checked_scalar(vd.reshape(()).item(), out.dtype, "masked_fill")
    if not masked and vd.dtype != out.dtype:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got "
            f"{t.dtype.scalar_name} for the destination and "
            f"{v.dtype.scalar_name} for the source."
        )
    d = 0
    for it in adv:
        if isinstance(it, np.ndarray) and it.dtype != np.bool_:
            n = dst.shape[d]
            bad = (it >= n) | (it < -n)
            if bad.any():
                raise IndexError(
                    f"index {int(it[bad].flat[0])} is out of bounds for dimension {d} with size {n}"
                )
        d += it.ndim if isinstance(it, np.ndarray) and it.dtype == np.bool_ else 1
    out[basic][adv] = vd
    cls = IndexPutBackward0 if _is_self(basic, t._data.shape) else CopySlices
    return _record(t, out, v, (basic, adv), cls)


def _record(t: Tensor, out: np.ndarray, v: Tensor, index: tuple, cls) -> Tensor:
    """The result of ``t[index] = v`` with its node: ``index`` is the view's basic index, then
    (when there is one) the advanced index into that view."""
    if _state.record and (t.requires_grad or v.requires_grad):
        node = cls((edge(t), edge(v)))
        node.index, node.src_shape = index, v._data.shape
        # nothing saved, but released as PyTorch's are (its CopySlices drops ``fn``, its
        # IndexPutBackward0 frees the indices): a second backward through it raises
        node._saved = ()
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
    return all(
        it.start in (None, 0) and it.step in (None, 1) and (it.stop is None or it.stop >= n)
        for it, n in zip(slices, shape)
    )


def _copy_to(t: Tensor, value) -> None:
    """``t[whole] = value`` as PyTorch's ``copy_to``: copy_ for the same shape, fill_ for a 0-d
    value, else copy_ of the value viewed without leading 1s and expanded (View, Expand)."""
    v = value if isinstance(value, Tensor) else wrap(np.asarray(value, dtype=t._data.dtype))
    vs = v._data.shape
    if vs == t._data.shape:
        src, st = v, _strides(v._data)
    elif not vs:
        fill_(t, v)
        return
    else:
        from autodiag.ops.shape import expand, view

        k = _leading_ones(vs)
        src = expand(view(v, vs[k:]), t._data.shape)
        st = _expanded_strides(_strides(v._data)[k:], vs[k:], t._data.shape)

    def compute(t):  # copy_, with its overlap check as PyTorch's (check_overlap is stricter)
        _check_copy_overlap(t, t._data, v, t._data.shape, st, src._data)
        return _copy_result(t, src)

    apply_inplace(t, "copy_", compute, src)


def setitem(self, index, value):
    """``self[index] = value`` (NOTE [setitem as PyTorch does it])."""
    v = _value_tensor(self, value)
    if index is False:
        return  # PyTorch: nothing at all (a False in a tuple indexes an empty unsqueeze)
    if index is True:
        index = None  # a lone True: copy_to into self.unsqueeze(0)
    basic, adv, user_mask = _index_plan(self, index)
    if adv is None:
        if _whole(basic, self._data.shape):
            _copy_to(self, v)
            return
        _check_basic_shape(self, basic, v)
        if views.overlaps(self._data):
            # an expanded tensor: PyTorch's copy_to into its view (one without shared elements
            # is written, a row of ``x.expand(3, 4)``; one with them raises, in copy_/fill_)
            _copy_to(self[basic], v)
            return
        apply_inplace(self, "__setitem__", lambda t: _basic_result(t, basic, v), value)
        return
    if views.overlaps(self._data[basic]):
        _check_expanded_unrecorded(self)
    apply_inplace(
        self,
        "__setitem__",
        lambda t: _advanced_result(t, basic, adv, user_mask, v),
        value,
        written=lambda d: _advanced_mask(d, basic, adv, user_mask and v._data.size == 1),
    )


def _masked_fill_written(mask):
    """masked_fill_ of an expanded tensor: PyTorch warns, then writes its one value where the
    mask is set (a bad mask fails the op's own checks first, before this is read)."""

    def written(d):
        expanded_write_warning("masked_fill_")
        return np.broadcast_to(mask._data, d.shape)

    return written


def _check_expanded_unrecorded(t: Tensor) -> None:
    """index_put_/masked_fill_ into an expanded tensor: PyTorch writes it (with a warning)
    unless the tensor written (or its base) requires grad; a value requiring grad is written
    and recorded."""
    base = t._base
    if _state.record and (t.requires_grad or (base is not None and base.requires_grad)):
        raise RuntimeError(views.OVERLAP_ERROR)


def _advanced_mask(d: np.ndarray, basic: tuple, adv: tuple, masked: bool) -> np.ndarray:
    """The elements of ``d`` that ``d[basic][adv] = v`` writes: PyTorch's index_put_ (or
    masked_fill_) into a view with elements sharing memory warns, then writes."""
    if views.overlaps(d[basic]):
        expanded_write_warning("index_put_")
        if masked:  # index_put_ goes on to masked_fill_, which warns too
            expanded_write_warning("masked_fill_")
    m = np.zeros(d.shape, dtype=bool)
    _assign(m, (basic, adv), True)
    return m


def expanded_write_warning(op: str) -> None:
    from autodiag import _warnings

    example = "tensor[mask] = scalar" if op != "index_put_" else "tensor[indices] = tensor"
    _warnings.warn(
        f"Use of {op} on expanded tensors is deprecated. Please clone() the tensor before "
        f"performing this operation. This also applies to advanced indexing e.g. {example}"
    )


Tensor.__setitem__ = events.traced("__setitem__", setitem)


def _delitem(self, index):
    raise TypeError("Tensor does not support deleting items")


Tensor.__delitem__ = _delitem
