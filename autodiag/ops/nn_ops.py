"""Neural-network ops: addmm/linear, losses (mse, nll, cross-entropy, BCE with logits),
layer_norm, embedding, dropout.

Each op records the node PyTorch records (``AddmmBackward0``, ``NllLossBackward0``,
``NativeLayerNormBackward0`` ...); composites (``linear``, ``cross_entropy``, ``dropout``) are
built from recorded ops in PyTorch's order, so the graph is PyTorch's node for node. Backward
formulas are written once in the ``xp`` vocabulary: first-order backward runs on arrays,
``create_graph=True`` records them (double backward).
"""

from __future__ import annotations

import math

import numpy as np

from autodiag import _warnings, dtypes
from autodiag.core.graph import Node
from autodiag.ops import rng
from autodiag.ops._cascade import cascade_mean, cascade_sum
from autodiag.ops._core import (
    ARRAY,
    TENSOR,
    _state,
    as_tensor_operand,
    broadcast_error,
    edge,
    register,
    result,
    save,
    save_output,
    wrap,
)
from autodiag.ops._products import matmul_array
from autodiag.ops.factories import _rng
from autodiag.ops.inplace import apply_inplace, bump_version
from autodiag.ops.linalg import matmul
from autodiag.ops.pointwise import _np_sigmoid, softplus
from autodiag.ops.pointwise import pow as _pow
from autodiag.ops.reduction import log_softmax
from autodiag.ops.reduction import sum as _sum
from autodiag.ops.shape import embed, expand, masked_fill
from autodiag.ops.shape import t as transpose2d
from autodiag.tensor import Tensor, _new

# PyTorch's reduction enum (``_saved_reduction``)
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def reduction_enum(reduction: str) -> int:
    """``'mean'`` -> 1, as ``torch.nn._reduction.get_enum`` (same error for a bad name)."""
    r = _REDUCTIONS.get(reduction)
    if r is None:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return r


def legacy_reduction(size_average, reduce) -> str:
    """The reduction named by the deprecated ``size_average``/``reduce`` pair (with PyTorch's
    warning)."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else ("sum" if reduce else "none")
    _warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        UserWarning,
    )
    return ret


def _size(shape) -> str:
    return f"[{', '.join(map(str, shape))}]"


def _reduce(a: np.ndarray, r: int) -> np.ndarray:
    if r == 1:
        if a.size == 0:  # the mean of nothing is nan (PyTorch), without numpy's warning
            return np.asarray(np.nan, dtype=a.dtype)
        return cascade_mean(a)
    if r == 2:
        return cascade_sum(a)
    return a


def _record(node: Node, out: np.ndarray) -> Tensor:
    """``result(out, node)`` inlined (hot path of the training step)."""
    r = _new(Tensor)
    r._data, r.grad_fn, r.requires_grad, r._vc = out, node, True, None
    return r


# --- scalar mul/div (PyTorch's Scalar overloads; composites below record them) ---------------


class MulBackward1(Node):
    """``tensor * scalar`` from C++ code (``mul.Scalar``), e.g. inside cross_entropy."""

    __slots__ = ("other",)

    def backward(self, xp, g):
        return (g * self.other,)

    def _saved_extra(self):
        return {"other": self.other}


class DivBackward1(MulBackward1):
    """``tensor / scalar`` (``div.Scalar``)."""

    __slots__ = ()

    def backward(self, xp, g):
        return (g / self.other,)


def _scalar_op(x: Tensor, s, np_fn, cls) -> Tensor:
    out = np.asarray(np_fn(x._data, s))
    if out.dtype != x._data.dtype and x._data.dtype.kind == "f":
        out = out.astype(x._data.dtype)
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.other = s
        return _record(node, out)
    return result(out, None)


def mul_scalar(x: Tensor, s) -> Tensor:
    return _scalar_op(x, s, np.multiply, MulBackward1)


def div_scalar(x: Tensor, s) -> Tensor:
    return _scalar_op(x, s, np.true_divide, DivBackward1)


class AddBackward1(Node):
    """``tensor + scalar`` from C++ code (``add.Scalar``): the gradient passes through."""

    __slots__ = ()

    def backward(self, xp, g):
        return (g,)


class SubBackward1(AddBackward1):
    """``tensor - scalar`` (``sub.Scalar``)."""

    __slots__ = ()


def _shift(x: Tensor, s, np_fn, cls) -> Tensor:
    out = np.asarray(np_fn(x._data, s))
    if out.dtype != x._data.dtype and x._data.dtype.kind == "f":
        out = out.astype(x._data.dtype)
    if _state.record and x.requires_grad:
        return _record(cls((edge(x),)), out)
    return result(out, None)


def add_scalar(x: Tensor, s) -> Tensor:
    return _shift(x, s, np.add, AddBackward1)


def sub_scalar(x: Tensor, s) -> Tensor:
    return _shift(x, s, np.subtract, SubBackward1)


# ---------------------------------------------------------------------------------------------
# addmm and linear
# ---------------------------------------------------------------------------------------------


def _cname(t: Tensor) -> str:
    return t.dtype.scalar_name


class AddmmBackward0(Node):
    """``beta * self + alpha * mat1 @ mat2``. self's gradient is summed back to its (broadcast)
    shape by the engine (``_input_meta``)."""

    __slots__ = ("alpha", "beta", "shapes", "mat2_transposed")
    _saved_names = ("mat1", "mat2")

    def backward(self, xp, g):
        needs_self, needs_mat1, needs_mat2 = self.needs_grad
        alpha, beta = self.alpha, self.beta
        gs = g1 = g2 = None
        if needs_self:
            gs = g if beta == 1 else g * beta
            shape = self.shapes[2]
            if shape != self.shapes[3]:
                # self was broadcast (a bias row): sum it back here rather than through the
                # engine's generic _input_meta pass (the training step's hot path)
                gs = (
                    cascade_sum(gs, (0,))
                    if xp.arrays and shape == self.shapes[3][1:]
                    else xp.sum_to(gs, shape)
                )
        if needs_mat1:
            g1 = xp.matmul(g, xp.mT(self.saved_mat2(xp)))
            if alpha != 1:
                g1 = g1 * alpha
        if needs_mat2:
            m1 = self.saved_mat1(xp)
            if xp.arrays and self.mat2_transposed:
                # NOTE: mat2 is a transposed view (linear's weight.t()): compute the product in
                # the weight's own layout, (g^T @ mat1)^T, so that after TBackward0 the weight's
                # gradient is C-ordered like the weight. A Fortran-ordered .grad makes every
                # elementwise update of the C-ordered parameter ~20x slower (optimizer step).
                g2 = matmul_array(g.T, m1).T
            else:
                g2 = xp.matmul(xp.mT(m1), g)
            if alpha != 1:
                g2 = g2 * alpha
        return (gs, g1, g2)

    def _saved_extra(self):
        m1, m2 = self.shapes[:2]
        return {"alpha": self.alpha, "beta": self.beta, "mat1_sym_sizes": m1, "mat2_sym_sizes": m2}


@register()
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` in one node, as PyTorch's ``addmm``.

    >>> import autodiag as torch
    >>> b = torch.ones(2, requires_grad=True)
    >>> torch.addmm(b, torch.ones(3, 4), torch.ones(4, 2)).grad_fn.name()
    'AddmmBackward0'
    """
    a = mat1 if isinstance(mat1, Tensor) else as_tensor_operand(mat1)
    b = mat2 if isinstance(mat2, Tensor) else as_tensor_operand(mat2)
    s = input if isinstance(input, Tensor) else as_tensor_operand(input)
    ad, bd, sd = a._data, b._data, s._data
    if ad.ndim != 2:
        raise RuntimeError(f"mat1 must be a matrix, got {ad.ndim}-D tensor")
    if bd.ndim != 2:
        raise RuntimeError(f"mat2 must be a matrix, got {bd.ndim}-D tensor")
    if ad.shape[1] != bd.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({ad.shape[0]}x"
            f"{ad.shape[1]} and {bd.shape[0]}x{bd.shape[1]})"
        )
    if sd.dtype != bd.dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {_cname(s)} and {_cname(b)}"
        )
    if ad.dtype != bd.dtype:
        raise RuntimeError(
            f"mat1 and mat2 must have the same dtype, but got {_cname(a)} and {_cname(b)}"
        )
    shape = (ad.shape[0], bd.shape[1])
    ss = sd.shape
    if ss != shape and (
        len(ss) > 2 or any(a != b and a != 1 for a, b in zip(ss[::-1], shape[::-1]))
    ):
        expand(s, shape)  # raises PyTorch's "The expanded size of the tensor ..." error
    out = matmul_array(ad, bd)
    if alpha != 1:
        out *= alpha
    if beta != 0:
        # NOTE: in place into the fresh product: one allocation for the whole op
        out += sd if beta == 1 else sd * beta
    if _state.record and (a.requires_grad or b.requires_grad or s.requires_grad):
        ea, eb = edge(a), edge(b)
        node = AddmmBackward0((edge(s), ea, eb))
        # shapes: mat1, mat2, self, output
        node.alpha, node.beta, node.shapes = alpha, beta, (ad.shape, bd.shape, ss, shape)
        node.mat2_transposed = not bd.flags.c_contiguous and bd.T.flags.c_contiguous
        # mat1 is needed for mat2's gradient and vice versa: save only what is used
        node._saved = (save(a) if eb is not None else None, save(b) if ea is not None else None)
        return _record(node, out)
    return result(out, None)


@register(method=False, home="nn.functional")
def linear(input, weight, bias=None):
    """``input @ weight.T + bias``, dispatched as PyTorch's ``at::linear``: a 2-D input with a
    bias is one ``addmm``; other contiguous inputs are flattened to 2-D around it; the rest is
    ``matmul`` (+ ``add``).

    >>> import autodiag as torch
    >>> x, w = torch.ones(4, 3), torch.ones(2, 3, requires_grad=True)
    >>> torch.nn.functional.linear(x, w, torch.zeros(2)).grad_fn.name()
    'AddmmBackward0'
    """
    x = input
    xd = x._data
    if xd.ndim == 0 or weight._data.ndim == 0:
        raise RuntimeError(
            f"both arguments to linear need to be at least 1D, but they are "
            f"{xd.ndim}D and {weight._data.ndim}D"
        )
    if bias is not None:
        if xd.ndim == 2:
            return addmm(bias, x, transpose2d(weight))
        if xd.flags.c_contiguous and (xd.ndim == 3 or bias._data.ndim == 1):
            # PyTorch's _flatten_nd_linear: one addmm on the flattened batch, viewed back
            lead = xd.shape[:-1]
            flat = x.reshape(int(np.prod(lead)), xd.shape[-1])
            out = addmm(bias, flat, transpose2d(weight))
            return out.view(*lead, out._data.shape[1])
        return matmul(x, transpose2d(weight)) + bias
    return matmul(x, transpose2d(weight))


# ---------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------


class MseLossBackward0(Node):
    __slots__ = ("reduction", "count")
    _saved_names = ("self", "target")

    def backward(self, xp, g):
        needs_self, needs_target = self.needs_grad
        # NOTE: PyTorch's form: norm * (input - target) * grad, norm = 2/numel for 'mean'
        # (an empty input has an empty gradient: any norm will do, and 2/0 would raise)
        norm = 2.0 / self.count if self.reduction == 1 and self.count else 2.0
        gx = (self.saved_self(xp) - self.saved_target(xp)) * norm * g
        return (gx if needs_self else None, -gx if needs_target else None)

    def _saved_extra(self):
        return {"reduction": self.reduction}


def _broadcast_pair(a: Tensor, b: Tensor):
    """``torch.broadcast_tensors(a, b)``: expand each to the common shape (ExpandBackward0) when
    it differs."""
    sa, sb = a._data.shape, b._data.shape
    if sa == sb:
        return a, b
    try:
        shape = np.broadcast_shapes(sa, sb)
    except ValueError:
        raise RuntimeError(broadcast_error(sa, sb)) from None
    return (a if sa == shape else expand(a, shape)), (b if sb == shape else expand(b, shape))


@register(method=False, home="nn.functional")
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error, one ``MseLossBackward0`` node (as ``torch.nn.functional.mse_loss``).

    >>> import autodiag as torch
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> torch.nn.functional.mse_loss(x, torch.zeros(2))
    tensor(2.5000, grad_fn=<MseLossBackward0>)
    """
    if tuple(target._data.shape) != tuple(input._data.shape):
        _warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size.",
            UserWarning,
        )
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    x, t = _broadcast_pair(input, target)
    if weight is not None:
        if tuple(weight._data.shape) != tuple(input._data.shape):
            raise ValueError("Weights and input must have the same size.")
        sq = _pow(x - t, 2) * weight
        if reduction == "none":
            return sq
        if reduction == "sum":
            return _sum(sq)
        if reduction == "mean":
            return _sum(sq) / _sum(weight)
        raise ValueError(
            f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'."
        )
    r = reduction_enum(reduction)
    xd, td = x._data, t._data
    if xd.dtype != td.dtype:
        dt = dtypes.promote_types(x.dtype, t.dtype).np
        xd, td = xd.astype(dt), td.astype(dt)
    if xd.dtype.kind != "f":
        name = dtypes.from_numpy_dtype(xd.dtype).scalar_name
        raise NotImplementedError(f"\"mse_cpu\" not implemented for '{name}'")
    d = xd - td
    out = _reduce(d * d, r)
    if _state.record and (x.requires_grad or t.requires_grad):
        node = MseLossBackward0((edge(x), edge(t)))
        node.reduction, node.count = r, d.size
        node._saved = (save(x), save(t))
        if xd.dtype != x._data.dtype or td.dtype != t._data.dtype:
            node._input_meta = ((x._data.shape, x._data.dtype), (t._data.shape, t._data.dtype))
        return _record(node, out)
    return result(out, None)


# --- nll_loss ---------------------------------------------------------------------------------


class NllLossBackward0(Node):
    """Gradient -w[t] (over the total weight for 'mean') at each target class, zero elsewhere.

    The formula is linear in ``grad``: under create_graph it is ``grad * M`` with ``M`` a
    constant, so the second derivative with respect to the input is zero, as in PyTorch.
    """

    __slots__ = ("reduction", "ignore_index", "total_weight", "coef", "safe")
    _saved_names = ("self", "target", "weight", "total_weight")
    _extra_names = ("ignore_index", "reduction")

    def backward(self, xp, g):
        # coef: -w[t] (/ total for 'mean'), zero where ignored; safe: the target with ignored
        # entries replaced by class 0. Both have the target's shape. Reading the saved input and
        # target checks that neither was modified in place since the forward.
        shape = self.saved_self(ARRAY).shape
        self.saved_target(ARRAY)
        coef, safe = self.coef, self.safe
        cdim = 0 if len(shape) == 1 else 1
        if xp.arrays:
            gi = np.zeros(shape, dtype=coef.dtype)
            vals = coef * g if self.reduction == 0 else coef * g.reshape(())
            if len(shape) == 1:
                gi[safe] = vals
            elif len(shape) == 2:
                gi[np.arange(shape[0]), safe] = vals
            else:
                np.put_along_axis(
                    gi, np.expand_dims(safe, cdim), np.expand_dims(vals, cdim), axis=cdim
                )
            return (gi,)
        classes = np.arange(shape[cdim]).reshape((-1,) + (1,) * (len(shape) - cdim - 1))
        onehot = np.expand_dims(coef, cdim) * (classes == np.expand_dims(safe, cdim))
        if self.reduction == 0 and len(shape) > 1:
            g = g.unsqueeze(cdim)
        return (g * wrap(onehot.astype(coef.dtype)),)

    def _saved_extra(self):
        return {"ignore_index": self.ignore_index, "reduction": self.reduction}


class NllLoss2DBackward0(NllLossBackward0):
    """nll_loss on 4-D (N, C, H, W) inputs; other N-D inputs are viewed as 4-D first."""

    __slots__ = ()


def _nll_check(x: Tensor, target: Tensor, weight) -> None:
    xd, td = x._data, target._data
    if xd.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {xd.ndim})")
    if xd.ndim != 1 and td.ndim and xd.shape[0] != td.shape[0]:
        raise ValueError(
            f"Expected input batch_size ({xd.shape[0]}) to match target batch_size ({td.shape[0]})."
        )
    if td.dtype not in (np.int64, np.uint8):
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {target.dtype.scalar_name}"
        )
    if xd.ndim in (1, 2):
        if td.ndim > 1 or (xd.ndim == 1 and td.ndim != 0):
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    elif td.shape[1:] != xd.shape[2:]:
        raise RuntimeError(
            f"Expected target size {_size((xd.shape[0],) + xd.shape[2:])}, got {_size(td.shape)}"
        )
    c = xd.shape[0 if xd.ndim == 1 else 1]
    if weight is not None:
        if weight.requires_grad and _state.record:
            raise RuntimeError(
                "The function 'nll_loss_forward' is not differentiable with "
                "respect to argument 'weight'. This input cannot have "
                "requires_grad True."
            )
        if weight._data.shape != (c,):
            raise RuntimeError(
                f"weight tensor should be defined either for all {c} classes or no "
                f"classes but got weight tensor of shape: "
                f"{_size(weight._data.shape)}"
            )


def _nll_core(x: Tensor, target: Tensor, weight, r: int, ignore_index: int, cls) -> Tensor:
    """nll_loss on a 1-D/2-D input (class axis 0/1) or a 4-D one (class axis 1)."""
    xd, td = x._data, target._data
    cdim = 0 if xd.ndim == 1 else 1
    c = xd.shape[cdim]
    t = td.astype(np.int64, copy=False)
    ignored = t == ignore_index
    any_ignored = bool(ignored.any())
    bad = (t < 0) | (t >= c)
    if any_ignored:
        bad &= ~ignored
    if bad.any():
        raise IndexError(f"Target {int(t[bad].flat[0])} is out of bounds.")
    safe = np.where(ignored, 0, t) if any_ignored else t
    if weight is None:
        wt = np.ones(t.shape, dtype=xd.dtype)
    else:
        wt = weight._data.astype(xd.dtype, copy=False)[safe]
    if any_ignored:
        wt[ignored] = 0
    if xd.ndim == 2:
        picked = xd[np.arange(xd.shape[0]), safe]
    elif xd.ndim == 1:
        picked = xd[safe]
    else:
        picked = np.take_along_axis(xd, np.expand_dims(safe, cdim), cdim).squeeze(cdim)
    losses = -wt * picked
    total = wt.sum(dtype=xd.dtype)
    if r == 0:
        out = losses.astype(xd.dtype, copy=False)
    elif r == 2:
        out = np.asarray(losses.sum(dtype=xd.dtype))
    else:
        out = np.asarray(losses.sum(dtype=xd.dtype) / total, dtype=xd.dtype)
    if _state.record and x.requires_grad:
        node = cls((edge(x),))
        node.reduction, node.ignore_index, node.total_weight = r, ignore_index, total
        node.coef = -wt / total if r == 1 else -wt
        node.safe = safe
        node._saved = (
            save(x),
            save(target),
            None if weight is None else save(weight),
            wrap(np.asarray(total)),  # PyTorch saves the total weight too (a 0-d tensor)
        )
        return _record(node, np.asarray(out))
    return result(np.asarray(out), None)


@register(method=False, home="nn.functional")
def nll_loss(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
):
    """Negative log-likelihood of class indices (``NllLossBackward0``), as
    ``torch.nn.functional.nll_loss``; 3-D and >4-D inputs are viewed as 4-D
    (``NllLoss2DBackward0``), as PyTorch does.

    >>> import autodiag as torch
    >>> logp = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    >>> torch.nn.functional.nll_loss(logp, torch.tensor([1]))
    tensor(1., grad_fn=<NllLossBackward0>)
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    x = input
    _nll_check(x, target, weight)
    nd = x._data.ndim
    if nd in (1, 2):
        return _nll_core(x, target, weight, r, ignore_index, NllLossBackward0)
    if nd == 4:
        return _nll_core(x, target, weight, r, ignore_index, NllLoss2DBackward0)
    n, c = x._data.shape[:2]
    out_size = (n,) + x._data.shape[2:]
    x4 = x.contiguous().view(n, c, 1, -1)
    t3 = target.contiguous().view(n, 1, -1)
    out = _nll_core(x4, t3, weight, r, ignore_index, NllLoss2DBackward0)
    return out.view(*out_size) if r == 0 else out


@register(method=False, home="nn.functional")
def cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """``nll_loss(log_softmax(input, 1), target)`` for class indices (the graph is
    NllLossBackward0 over LogSoftmaxBackward0, as PyTorch's); class probabilities when the target
    has the input's shape; optional label smoothing.

    >>> import autodiag as torch
    >>> logits = torch.tensor([[2.0, 0.5, -1.0]], requires_grad=True)
    >>> loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0]))
    >>> loss.grad_fn.name(), loss.grad_fn.next_functions[0][0].name()
    ('NllLossBackward0', 'LogSoftmaxBackward0')
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    xd = input._data
    cdim = 0 if xd.ndim == 1 else 1
    logp = log_softmax(input, cdim)
    if tuple(target._data.shape) == tuple(xd.shape):
        if target._data.dtype.kind != "f":
            raise RuntimeError(
                f"Expected floating point type for target with class "
                f"probabilities, got {target.dtype.scalar_name}"
            )
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return _ce_probabilities(logp, target, weight, r, label_smoothing, cdim)
    if label_smoothing > 0.0:
        return _ce_label_smoothing(logp, target, weight, r, ignore_index, label_smoothing, cdim)
    return nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)


def _class_view(weight: Tensor, ndim: int, cdim: int) -> Tensor:
    shape = [1] * ndim
    shape[cdim] = weight._data.shape[0]
    return weight.view(*shape)


def _ce_probabilities(logp, target, weight, r, label_smoothing, cdim):
    """PyTorch's cross_entropy_loss_prob_target, op for op."""
    n_classes = logp._data.shape[cdim]
    if label_smoothing > 0.0:
        target = add_scalar(mul_scalar(target, 1 - label_smoothing), label_smoothing / n_classes)
    prod = logp * target
    if weight is not None:
        prod = prod * _class_view(weight, logp.ndim, cdim)
    if r == 0:
        return -prod.sum(cdim)
    if r == 2:
        return -prod.sum()
    if logp._data.size == 0:
        return -prod.sum().fill_(math.nan)  # ATen fills the sum in place
    return div_scalar(-prod.sum(), logp._data.size // n_classes)


def _ce_label_smoothing(logp, target, weight, r, ignore_index, label_smoothing, cdim):
    """PyTorch's cross_entropy_loss_label_smoothing, op for op."""
    n_classes = logp._data.shape[cdim]
    reduction = {0: "none", 1: "mean", 2: "sum"}[r]
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    ignore_mask = wrap(target._data == ignore_index)
    if weight is not None:
        smooth = -(logp * _class_view(weight, logp.ndim, cdim)).sum(cdim)
    else:
        smooth = -logp.sum(cdim)
    smooth = masked_fill(smooth, ignore_mask, 0.0)
    if r == 1:
        keep = ~ignore_mask._data
        if weight is not None:
            denom = wrap(np.asarray(weight._data[target._data[keep]].sum()))
        else:
            denom = wrap(np.asarray(keep.sum()))
        ret = smooth.sum() / denom
    elif r == 2:
        ret = smooth.sum()
    else:
        ret = smooth
    return mul_scalar(nll, 1 - label_smoothing) + mul_scalar(ret, label_smoothing / n_classes)


# --- binary cross-entropy with logits ---------------------------------------------------------


def _log_sigmoid(xp, x):
    if xp.arrays:
        # NOTE: min(x, 0) - log1p(exp(-|x|)) never overflows
        return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
    return -softplus(-x)


class BinaryCrossEntropyWithLogitsBackward0(Node):
    __slots__ = ("reduction",)
    _saved_names = ("self", "target", "weight", "pos_weight")

    def backward(self, xp, g):
        needs_self, needs_target = self.needs_grad
        x, t = self.saved_self(xp), self.saved_target(xp)
        w, pw = self.saved_weight(xp), self.saved_pos_weight(xp)  # None when not given
        n = x.size if xp.arrays else x.numel()
        gx = gt = None
        if needs_self:
            sig = xp.sigmoid(x) if not xp.arrays else _sigmoid_np(x)
            if pw is not None:
                pt = pw * t
                gx = (pt + 1 - t) * sig - pt
            else:
                gx = sig - t
            gx = _bce_finish(gx, w, self.reduction, n, g)
        if needs_target:
            if pw is not None:
                gt = _log_sigmoid(xp, -x) - _log_sigmoid(xp, x) * pw
            else:
                gt = -x
            gt = _bce_finish(gt, w, self.reduction, n, g)
        return (gx, gt)

    def _saved_extra(self):
        return {"reduction": self.reduction}


def _sigmoid_np(x):
    return _np_sigmoid(x)


def _bce_finish(gr, w, reduction, n, g):
    if w is not None:
        gr = gr * w
    if reduction == 1:
        gr = gr / n
    return gr * g


@register(method=False, home="nn.functional")
def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight=None,
):
    """Sigmoid + binary cross-entropy in one stable node
    (``BinaryCrossEntropyWithLogitsBackward0``).

    >>> import autodiag as torch
    >>> x = torch.tensor([0.0, 2.0], requires_grad=True)
    >>> torch.nn.functional.binary_cross_entropy_with_logits(x, torch.tensor([0.0, 1.0]))
    tensor(0.4100, grad_fn=<BinaryCrossEntropyWithLogitsBackward0>)
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    if tuple(target._data.shape) != tuple(input._data.shape):
        raise ValueError(
            f"Target size ({target.shape}) must be the same as input size ({input.shape})"
        )
    xd, td = input._data, target._data
    dt = xd.dtype
    if td.dtype != xd.dtype:
        dt = dtypes.promote_types(input.dtype, target.dtype).np
        xd, td = xd.astype(dt), td.astype(dt)
    ls = np.minimum(xd, 0) - np.log1p(np.exp(-np.abs(xd)))
    if pos_weight is not None:
        ls = ls * ((pos_weight._data - 1) * td + 1)
    loss = (1 - td) * xd - ls
    if weight is not None:
        loss = loss * weight._data
    out = _reduce(np.asarray(loss), r)
    if out.dtype != target._data.dtype:
        # NOTE: PyTorch builds the loss with in-place ops on (1 - target), so it has the
        # target's dtype whatever the input's, weight's and pos_weight's
        out = out.astype(target._data.dtype)
    if _state.record and (input.requires_grad or target.requires_grad):
        node = BinaryCrossEntropyWithLogitsBackward0((edge(input), edge(target)))
        node.reduction = r
        node._saved = (
            save(input),
            save(target),
            None if weight is None else save(weight),
            None if pos_weight is None else save(pos_weight),
        )
        if dt != input._data.dtype or dt != target._data.dtype:
            # promoted: the engine casts each gradient back to its input's dtype
            node._input_meta = ((xd.shape, input._data.dtype), (td.shape, target._data.dtype))
        return _record(node, out)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# layer_norm
# ---------------------------------------------------------------------------------------------


class NativeLayerNormBackward0(Node):
    """Gradients of ``(x - mean) * rstd * weight + bias`` over the last ``k`` dims.

    The gradients come from the saved mean and rstd, as PyTorch's CPU kernel forms them; under
    create_graph they are recorded as one NativeLayerNormBackwardBackward0 (NOTE [layer_norm
    double backward]).
    """

    __slots__ = ("normalized_shape", "eps", "axes", "batch_axes")
    _saved_names = ("input", "weight", "bias", "result1", "result2")

    def backward(self, xp, g):
        needs_input, needs_weight, needs_bias = self.needs_grad
        x = self.saved_input(xp)
        w = self.saved_weight(xp)  # None when not given
        axes, batch = self.axes, self.batch_axes
        if not xp.arrays:  # under create_graph (NOTE [layer_norm double backward])
            return _recorded_layer_norm_grads(self, g, x, w)
        mean, rstd = self.saved_result1(xp), self.saved_result2(xp)
        gx = gw = gb = None
        if needs_input:
            gx = _layer_norm_input_grad(g, w, x, mean, rstd, axes, self.normalized_shape)
        if needs_weight:
            gw = _sum_batch(xp, g * ((x - mean) * rstd), batch)
            if _kernel_rounding(x, axes):
                gw = _layer_norm_weight_grad(g, x, mean, rstd, axes)
        if needs_bias:
            gb = _sum_batch(xp, g, batch)
        return (gx, gw, gb)


# NOTE [layer_norm double backward]
# Under create_graph PyTorch records layer_norm's gradients as the outputs 0, 1, 2 (input,
# weight, bias gradients) of one NativeLayerNormBackwardBackward0 node, edges (grad_out, input,
# mean, rstd, weight, bias), whose derivative is FunctionsManual.cpp's
# layer_norm_double_backward: from the saved mean and rstd, over rows of (M, N), in its own
# order of operations (``all_sub``, ``gI_0t + gI_1t + gI_2t``, ``first_bwd_fn_grad_input``).
# Recorded from the textbook formula instead, the second derivatives rounded otherwise: float32
# cancellations ([[0.19, 0.24]] with eps=0: 0.0006 vs PyTorch's 0.0005) and zeros where
# PyTorch's are 1e-5. The values of the gradients are the first-order kernel's either way.


def _recorded_layer_norm_grads(node, g, x, w) -> tuple:
    """``node``'s gradients for Tensors under create_graph: the kernel's values, recorded as
    one NativeLayerNormBackwardBackward0 (NOTE [layer_norm double backward])."""
    wd = None if w is None else w._data
    outs = node.backward(ARRAY, g._data)
    b = node.saved_bias(TENSOR)
    deps = (g, x, w, b)
    bb = None
    if _state.record and any(t is not None and t.requires_grad for t in deps):
        bb = NativeLayerNormBackwardBackward0(
            (edge(g), edge(x), None, None) + tuple(None if t is None else edge(t) for t in (w, b))
        )
        bb.normalized_shape = node.normalized_shape
        bb._num_outputs = 3
        bb._saved = (
            save(g),
            save(x),
            node.saved_result1(ARRAY),
            node.saved_result2(ARRAY),
            None if w is None else save(w),
        )
    fixed = []
    for i, a in enumerate(outs):
        if a is None:
            fixed.append(None)
            continue
        dt = x._data.dtype if i == 0 or wd is None else wd.dtype
        t = result(np.asarray(a, dtype=dt), bb)
        if bb is not None:
            t._output_nr = i
        fixed.append(t)
    return tuple(fixed)


class NativeLayerNormBackwardBackward0(Node):
    """layer_norm's gradients under create_graph; its backward is PyTorch's
    layer_norm_double_backward (NOTE [layer_norm double backward])."""

    __slots__ = ("normalized_shape", "_num_outputs")
    _saved_names = ("grad_out", "input", "mean", "rstd", "weight")
    _extra_names = ("normalized_shape",)

    def _saved_attr(self, name: str, raw: bool):
        if name in ("mean", "rstd"):  # arrays (no gradient reaches them): as tensors
            s = super()._saved_attr(name, True)
            return s if s.__class__ is not np.ndarray else wrap(s)
        return super()._saved_attr(name, raw)

    def _saved_extra(self):
        return {"normalized_shape": self.normalized_shape}

    def _apply(self, xp, grads):
        ggI, ggG, ggB = grads
        needs_g, needs_x, _, _, needs_w, _ = self.needs_grad
        gO, x = self.saved_grad_out(xp), self.saved_input(xp)
        w = self.saved_weight(xp)
        mean, rstd = self.saved_mean(ARRAY), self.saved_rstd(ARRAY)
        if not xp.arrays:
            mean, rstd = wrap(mean), wrap(rstd)
        n = math.prod(self.normalized_shape)
        with np.errstate(all="ignore"):  # an empty row: PyTorch's inf/NaN
            gI, gG, ggO = _layer_norm_double_backward(xp, x, w, ggI, ggG, ggB, gO, mean, rstd, n)
        return (
            ggO if needs_g else None,
            gI if needs_x else None,
            None,
            None,
            gG if needs_w else None,
            None,
        )


def _layer_norm_double_backward(xp, x, w, ggI, ggG, ggB, gO, mean, rstd, n: int) -> tuple:
    """PyTorch's layer_norm_double_backward (FunctionsManual.cpp), operation for operation:
    ``(gI, gG, ggO)`` for the incoming gradients of the input, weight and bias gradients
    (each may be None), on arrays or recorded tensors (``xp``)."""
    shape = tuple(_shape_of(xp, x))
    m_rows = math.prod(shape) // n if n else math.prod(_shape_of(xp, mean))
    x2 = xp.reshape(x, (m_rows, n))
    g2 = xp.reshape(gO, (m_rows, n))
    mu = xp.reshape(mean, (m_rows, 1))
    r = xp.reshape(rstd, (m_rows, 1))
    gamma = None if w is None else xp.reshape(w, (1, n))
    ggI2 = None if ggI is None else xp.reshape(ggI, (m_rows, n))
    x_mu = x2 - mu
    r2 = r * r  # pow(2) and pow(3): multiplied out (ops/pointwise.py _pow_array)
    r3 = r * r * r
    x_mu_r3 = x_mu * r3
    gI = None
    if ggI2 is not None:
        gxhat = g2 if gamma is None else g2 * gamma
        gxhat_mu_sum = xp.sum(gxhat * x_mu, (1,), True)
        gxhat_sum = xp.sum(gxhat, (1,), True)
        ggI_sum = xp.sum(ggI2, (1,), True)
        ggI_mu_sum = xp.sum(ggI2 * x_mu, (1,), True)
        all_sub = (
            ggI_sum * gxhat_sum / n
            - xp.sum(ggI2 * gxhat, (1,), True)
            + r2 * gxhat_mu_sum * ggI_mu_sum * (3.0 / n if n else math.inf)
        )
        gI_0t = x_mu_r3 * all_sub / n
        gI_1t = ggI_mu_sum * r3 / n * (gxhat_sum / n - gxhat)
        gI_2t = gxhat_mu_sum * r3 / n * (ggI_sum / n - ggI2)
        gI = gI_0t + gI_1t + gI_2t
    if gamma is not None and ggG is not None:
        ggG2 = xp.reshape(ggG, (1, n))
        t0 = g2 * ggG2 * r
        t1 = r * xp.sum(g2 * ggG2, (1,), True) / -n
        t2 = x_mu_r3 * xp.sum(g2 * ggG2 * x_mu, (1,), True) / -n
        term = t0 + t1 + t2
        gI = term if gI is None else gI + term
    if gI is not None:
        gI = xp.reshape(gI, shape)

    def first_bwd(g_local, gamma_local):
        h0 = r / n if gamma_local is None else gamma_local * r / n
        h1 = (
            n * g_local
            - xp.sum(g_local, (1,), True)
            - x_mu * r2 * xp.sum(g_local * x_mu, (1,), True)
        )
        return h0 * h1

    gG = None
    if gamma is not None and ggI2 is not None:
        gG = xp.reshape(xp.sum(g2 * first_bwd(ggI2, None), (0,)), tuple(_shape_of(xp, w)))
    ggO = None
    if ggI2 is not None:
        ggO = first_bwd(ggI2, gamma)
    if gamma is not None and ggG is not None:
        term = xp.reshape(ggG, (1, n)) * x_mu * r
        ggO = term if ggO is None else ggO + term
    if gamma is None and ggB is not None and ggO is not None:
        # PyTorch's ggB_expanded is left undefined without a weight, and added
        raise RuntimeError(
            "Expected a proper Tensor but got None (or an undefined Tensor in C++) for "
            "argument #1 'other'"
        )
    if gamma is not None and ggB is not None:
        term = xp.reshape(ggB, (1, n))
        ggO = term if ggO is None else ggO + term
    if ggO is not None:
        ggO = xp.reshape(xp.broadcast_to(ggO, (m_rows, n)), shape)
    return gI, gG, ggO


def _shape_of(xp, t) -> tuple:
    return t.shape if xp.arrays else t._data.shape


def _layer_norm_input_grad(dy, w, x, mean, rstd, axes, normalized_shape) -> np.ndarray:
    """layer_norm's input gradient as PyTorch's CPU kernel (layer_norm_backward_frame) forms it
    from the saved statistics: with ds = sum(dy * x * w), db = sum(dy * w), it is
    a * dy * w + b * x + c, a = rstd, b = (db * mean - ds) * a^3 / N, c = -b * mean - db * a / N
    (``w`` None: no weight).

    NOTE: not the textbook rstd * (dy - mean(dy) - xhat * mean(dy * xhat)): an inf weight must
    make every element NaN (through b), and cancellation must round as PyTorch's does. Its
    AVX2 build contracts three of those steps into fused multiply-adds: ``db * mean - ds``,
    ``-b * mean - db * a / N`` and ``b * x + a * dy * w``; a row shorter than a SIMD vector
    sums its terms one after another (``_kernel_rounding``; longer rows: SIMD lanes, not
    emulated)."""
    n = math.prod(normalized_shape)
    dt = dy.dtype
    fused = _kernel_rounding(x, axes)
    scale = (dt.type(1) / dt.type(n) if fused else 1.0 / n) if n else math.inf
    with np.errstate(all="ignore"):
        dyx = dy * x
        if w is not None:
            dyx = dyx * w
        dyw = dy if w is None else dy * w
        if fused:
            ds, db = _row_sum(dyx, axes, n), _row_sum(dyw, axes, n)
        else:
            ds = dyx.sum(axis=axes, keepdims=True)
            db = dyw.sum(axis=axes, keepdims=True)
        ady = rstd * dy if w is None else rstd * dy * w
        if not fused:
            b = (db * mean - ds) * rstd * rstd * rstd * scale
            c = -b * mean - db * rstd * scale
            return np.asarray(ady + b * x + c, dtype=dt)
        b = _fma(db, mean, -ds) * rstd * rstd * rstd * scale
        c = _fma(-b, mean, -(db * rstd * scale))
        return np.asarray(_fma(np.broadcast_to(b, x.shape), x, ady) + c, dtype=dt)


_SEQUENTIAL_ROWS = 64  # rows summed one after another as PyTorch's single thread does
_EMULATED_SIZE = 1 << 16  # elements: beyond, the emulated fused multiply-adds cost too much


def _kernel_rounding(x: np.ndarray, axes: tuple) -> bool:
    """Does layer_norm round as PyTorch's kernel here? Rows shorter than a SIMD vector (whose
    statistics ``_row_moments`` emulates too) of a tensor up to _EMULATED_SIZE elements: the
    fused multiply-adds are emulated in numpy at some cost (a float64 one: ~0.4 us)."""
    n = math.prod(x.shape[a] for a in axes)
    return 0 < n < _SIMD_LANES.get(x.dtype, 0) and x.size <= _EMULATED_SIZE


def _layer_norm_weight_grad(dy, x, mean, rstd, axes) -> np.ndarray:
    """layer_norm's weight gradient as PyTorch's CPU kernel forms it: over the rows,
    ``dgamma += dy * (a * x + b)`` with a = rstd, b = -a * mean, both steps fused
    multiply-adds in its AVX2 build (so a row of one value gives rstd * x - rstd * mean
    rounded apart, not 0). Rows are added one after another (PyTorch's single-threaded
    order) up to _SEQUENTIAL_ROWS, beyond which PyTorch's threads split them anyway."""
    with np.errstate(all="ignore"):
        b = -rstd * mean
        inner = _fma(np.broadcast_to(rstd, x.shape), x, np.broadcast_to(b, x.shape))
        k = len(axes)
        shape = x.shape[x.ndim - k :]
        d = dy.reshape((-1,) + shape)
        h = inner.reshape((-1,) + shape)
        if d.shape[0] > _SEQUENTIAL_ROWS:
            return np.asarray((d * h).sum(axis=0), dtype=x.dtype)
        acc = np.zeros(shape, dtype=x.dtype)
        for i in range(d.shape[0]):
            acc = _fma(d[i], h[i], acc)
        return acc


def _row_sum(a: np.ndarray, axes: tuple, n: int) -> np.ndarray:
    """``a`` summed over ``axes`` (``n`` elements a row) one element after another, kept dims."""
    rows = a.reshape(a.shape[: a.ndim - len(axes)] + (n,))
    acc = rows[..., 0]
    for j in range(1, n):
        acc = acc + rows[..., j]
    return acc.reshape(a.shape[: a.ndim - len(axes)] + (1,) * len(axes))


def _sum_batch(xp, a, batch):
    if not batch:
        return a
    return a.sum(axis=batch) if xp.arrays else a.sum(batch)


@register(method=False, home="nn.functional")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalization over the trailing ``normalized_shape`` dims, one
    ``NativeLayerNormBackward0`` node (as ``torch.nn.functional.layer_norm``).

    >>> import autodiag as torch
    >>> x = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    >>> torch.nn.functional.layer_norm(x, (3,)).grad_fn.name()
    'NativeLayerNormBackward0'
    """
    if not isinstance(normalized_shape, (tuple, list)):
        raise TypeError(
            f"layer_norm(): argument 'normalized_shape' (position 2) must be tuple "
            f"of ints, not {type(normalized_shape).__name__}"
        )
    ns = tuple(int(s) for s in normalized_shape)
    xd = input._data
    k = len(ns)
    if k == 0 or xd.ndim < k or xd.shape[xd.ndim - k :] != ns:
        raise RuntimeError(
            f"Given normalized_shape={_size(ns)}, expected input with shape "
            f"[*, {', '.join(map(str, ns))}], but got input of size"
            f"{_size(xd.shape)}"
        )
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            if p._data.shape != ns:
                raise RuntimeError(
                    f"Expected {name} to be of same shape as normalized_shape, but "
                    f"got {name} of shape {_size(p._data.shape)} and "
                    f"normalized_shape = {_size(ns)}"
                )
            if p._data.dtype != xd.dtype:
                raise RuntimeError(
                    f"mixed dtype (CPU): expect parameter to have scalar type of "
                    f"{input.dtype.scalar_name}"
                )
    axes = tuple(range(xd.ndim - k, xd.ndim))
    mean, var = _row_moments(xd, axes)
    xc = xd - mean
    rstd = (1 / np.sqrt(var + eps)).astype(xd.dtype, copy=False)
    out = xc * rstd
    if weight is not None and bias is not None and _kernel_rounding(xd, axes):
        # PyTorch's kernel: (x - mean) * rstd * gamma + beta, the last step one fused
        # multiply-add (its AVX2 build contracts it); with one of them missing, no FMA
        out = _fma(out, weight._data, bias._data)
    else:
        if weight is not None:
            out *= weight._data
        if bias is not None:
            out += bias._data
    needs = (
        input.requires_grad
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    if _state.record and needs:
        node = NativeLayerNormBackward0(
            (
                edge(input),
                None if weight is None else edge(weight),
                None if bias is None else edge(bias),
            )
        )
        node.normalized_shape, node.eps, node.axes = ns, eps, axes
        node.batch_axes = tuple(range(xd.ndim - k))
        node._saved = (
            save(input),
            None if weight is None else save(weight),
            None if bias is None else save(bias),
            wrap(mean),  # tensors, as PyTorch's result1/result2: listed with the saved ones
            wrap(rstd),
        )
        return _record(node, out)
    return result(out, None)


# NOTE: PyTorch's CPU layer_norm takes a row's mean and variance with RowwiseMoments: Welford's
# update, one element at a time, for the elements past the last full SIMD vector (8 float32, 4
# float64 with AVX2) -- all of a row shorter than that -- in the input's precision. A two-pass
# mean/variance rounds differently there (``[-1.36, -2.45]`` in float32 normalizes to
# ``[0.99999976, -1.]`` in PyTorch, ``[0.9999999, -1.0000001]`` two-pass, which log1p turns
# into -inf vs NaN). Not emulated: longer rows, combined across SIMD lanes; and the merge of a
# row's moments into the empty SIMD accumulators, ``m2 += mean * mean * 0``, which makes the
# variance (and PyTorch's output) NaN where the mean squared overflows -- PyTorch's gradients
# stay finite there, by a path not yet understood, so autodiag keeps finite statistics.
_SIMD_LANES = {np.dtype(np.float32): 8, np.dtype(np.float64): 4}


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once, in ``a``'s dtype (float32 or float64)."""
    from autodiag.ops._avx_mathfun import fma32
    from autodiag.ops.rng import fma64

    with np.errstate(all="ignore"):
        out = (fma64 if a.dtype == np.float64 else fma32)(a, b, c)
    return np.asarray(out, dtype=a.dtype)


def _row_moments(xd: np.ndarray, axes: tuple) -> tuple:
    """Mean and (biased) variance over ``axes``, kept as dims, as PyTorch's kernel rounds them."""
    n = int(np.prod([xd.shape[a] for a in axes], dtype=np.int64))
    if not 0 < n < _SIMD_LANES.get(xd.dtype, 0):
        mean = xd.mean(axis=axes, keepdims=True)
        xc = xd - mean
        return mean, (xc * xc).mean(axis=axes, keepdims=True)
    rows = xd.reshape(xd.shape[: xd.ndim - len(axes)] + (n,))
    m1 = np.zeros(rows.shape[:-1], dtype=xd.dtype)
    m2 = np.zeros_like(m1)
    with np.errstate(all="ignore"):  # inf/NaN rows give PyTorch's inf/NaN statistics
        for i in range(n):  # a row's few columns, each step vectorised over the rows
            x = rows[..., i]
            delta = x - m1
            m1 = m1 + delta / xd.dtype.type(i + 1)
            m2 = m2 + delta * (x - m1)
        var = m2 / xd.dtype.type(n)
    keep = xd.shape[: xd.ndim - len(axes)] + (1,) * len(axes)
    return m1.reshape(keep), var.reshape(keep)


# ---------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------


class EmbeddingBackward0(Node):
    """Rows of ``grad`` added into zeros of the weight's shape at the looked-up indices."""

    __slots__ = ("num_weights", "padding_idx", "scale_grad_by_freq")
    _saved_names = ("indices",)

    def backward(self, xp, g):
        idx = self.saved_indices(ARRAY).reshape(-1)
        dim = g.shape[-1] if xp.arrays else g._data.shape[-1]
        g2 = g.reshape(idx.size, dim)  # not -1: rows of size 0 leave it undetermined
        scale = None
        if self.padding_idx is not None and self.padding_idx >= 0:
            scale = (idx != self.padding_idx)[:, None]
        if self.scale_grad_by_freq:
            counts = np.bincount(idx, minlength=self.num_weights)[idx][:, None]
            freq = 1.0 / counts
            scale = freq if scale is None else scale * freq
        if scale is not None:
            dt = g.dtype if xp.arrays else g._data.dtype
            g2 = g2 * scale.astype(dt)
        if xp.arrays:
            return (_rows_added_in_order(g2, idx, self.num_weights),)
        return (embed(xp, g2, (self.num_weights, dim), (idx,), True),)

    def _saved_extra(self):
        return {
            "padding_idx": -1 if self.padding_idx is None else self.padding_idx,
            "scale_grad_by_freq": self.scale_grad_by_freq,
            "sparse": False,
            "weight_sym_argsize_0": self.num_weights,
        }


def _rows_added_in_order(g: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """Zeros of ``(n, dim)`` with row ``k`` of ``g`` added at row ``idx[k]``, each row's terms
    added one by one in index order, as PyTorch's embedding backward (and ``np.add.at``) does.

    NOTE: ``np.add.at`` on rows costs ~1 us per index; here the k-th occurrence of every index
    goes to layer k of a zero-padded (K, n, dim) stack, which ``np.add.reduce`` sums over its
    outer axis one layer after another: the same additions in the same order (a padding zero
    leaves a sum unchanged, and the first term is added to +0 as in ``zeros + g``). When one
    index repeats far more than the others the stack would be mostly padding: ``np.add.at``.
    """
    m, dim = g.shape
    z = np.zeros((n, dim), dtype=g.dtype)
    if m == 0 or dim == 0:
        return z
    counts = np.bincount(idx, minlength=n)
    layers = int(counts.max())
    if layers * n > 4 * m + 64:
        np.add.at(z, idx, g)
        return z
    order = np.argsort(idx, kind="stable")
    rows = idx[order]
    rank = np.arange(m) - (np.cumsum(counts) - counts)[rows]
    stack = np.zeros((layers, n, dim), dtype=g.dtype)
    stack[rank, rows] = g[order]
    return np.add(z, np.add.reduce(stack, axis=0), out=z)


def _renorm_rows(weight: Tensor, idx: np.ndarray, max_norm: float, norm_type: float) -> None:
    """``embedding_renorm_``: rows looked up whose norm exceeds max_norm are scaled to it, in
    place (no gradient; the version counter is bumped as PyTorch's in-place op does)."""
    rows = np.unique(idx)
    w = weight._data
    norms = np.linalg.norm(w[rows].astype(np.float64), ord=norm_type, axis=1)
    big = norms > max_norm
    if big.any():
        scale = (max_norm / (norms[big] + 1e-7)).astype(w.dtype)
        w[rows[big]] *= scale[:, None]
        bump_version(weight, "embedding_renorm_")


@register(method=False, home="nn.functional")
def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
):
    """Rows of ``weight`` at the integer ``input`` indices (``EmbeddingBackward0``).

    >>> import autodiag as torch
    >>> w = torch.eye(3, requires_grad=True)
    >>> torch.nn.functional.embedding(torch.tensor([2, 0]), w)
    tensor([[0., 0., 1.],
            [1., 0., 0.]], grad_fn=<EmbeddingBackward0>)
    """
    idx_t = input if isinstance(input, Tensor) else as_tensor_operand(input)
    idx = idx_t._data
    if idx.dtype not in (np.int64, np.int32):
        raise RuntimeError(
            f"Expected tensor for argument #1 'indices' to have one of the "
            f"following scalar types: Long, Int; but got "
            f"{idx_t.dtype.legacy_type_name} instead (while checking arguments "
            f"for embedding)"
        )
    num = weight._data.shape[0]
    if padding_idx is not None:
        if padding_idx > 0:
            if padding_idx >= num:
                raise AssertionError("Padding_idx must be within num_embeddings")
        elif padding_idx < 0:
            if padding_idx < -num:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = num + padding_idx
    if sparse:
        raise NotImplementedError(
            "autodiag: embedding(sparse=True) is not supported (no sparse "
            "tensors); use sparse=False"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= num):
        raise IndexError("index out of range in self")
    if max_norm is not None:
        _renorm_rows(weight, idx.reshape(-1), max_norm, norm_type)
    out = weight._data[idx]
    if _state.record and weight.requires_grad:
        node = EmbeddingBackward0((edge(weight),))
        node.num_weights, node.padding_idx = num, padding_idx
        node.scale_grad_by_freq = scale_grad_by_freq
        node._saved = (save(idx_t),)
        return _record(node, out)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# dropout
# ---------------------------------------------------------------------------------------------


@register(method=False, home="nn.functional")
def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; the
    identity when ``p == 0`` or not training. Recorded as PyTorch records it on CPU: ``input *
    noise`` (``MulBackward0``), with the noise drawn from PyTorch's stream (``bernoulli_(1 - p)``).

    >>> import autodiag as torch
    >>> x = torch.ones(4, requires_grad=True)
    >>> torch.nn.functional.dropout(x, 0.5, training=False) is x
    True
    """
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    d = input._data
    if p == 0 or not training or d.size == 0:
        return input
    if p == 1:
        noise = np.zeros((), dtype=d.dtype)
    else:
        # PyTorch's CPU dropout: empty_like(input).bernoulli_(1 - p), then div_(1 - p)
        noise = rng.empty_like(d)  # drawn in its memory order (NOTE [Draw order] in rng.py)
        rng.fill(noise, rng.bernoulli_scalar(_rng[0], d.size, 1 - p).astype(d.dtype))
        noise /= 1 - p
    noise_t = wrap(noise)
    return input.mul_(noise_t) if inplace else input * noise_t


# ---------------------------------------------------------------------------------------------
# in-place leaky_relu_ (its own node: the formula reads the output, the input is overwritten)
# ---------------------------------------------------------------------------------------------


class LeakyReluBackward1(Node):
    __slots__ = ("negative_slope",)
    _saved_names = ("result",)

    def backward(self, xp, g):
        from autodiag.ops.pointwise import LeakyReluBackwardBackward0, _select_backward

        return (
            _select_backward(
                xp, g, self.saved_result(xp), 0, self.negative_slope, LeakyReluBackwardBackward0
            ),
        )

    def _saved_extra(self):
        return {"negative_slope": self.negative_slope}


def _leaky_relu_saving_result(t: Tensor, negative_slope: float) -> Tensor:
    d = t._data
    out = np.where(d > 0, d, d * negative_slope).astype(d.dtype, copy=False)
    if _state.record and t.requires_grad:
        if negative_slope < 0:
            raise RuntimeError(
                "In-place leakyReLu backward calculation is triggered with a "
                "negative slope which is not supported. This is caused by calling "
                "in-place forward function with a negative slope, please call "
                "out-of-place version instead. File an issue at "
                "https://github.com/pytorch/pytorch if you do require supporting "
                "in-place leakRelu backward calculation with negative slope"
            )
        node = LeakyReluBackward1((edge(t),))
        node.negative_slope = negative_slope
        r = _record(node, out)
        node._saved = (save_output(r),)
        return r
    return result(out, None)


@register(method=False, home="nn.functional")
def leaky_relu_(input, negative_slope: float = 0.01):
    """In-place leaky ReLU (``LeakyReluBackward1``, which saves the output)."""
    return apply_inplace(
        input, "leaky_relu_", lambda t: _leaky_relu_saving_result(t, negative_slope)
    )
