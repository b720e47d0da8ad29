"""Losses beyond nn_ops.py's (mse, nll, cross-entropy, BCE with logits): l1, smooth_l1, huber,
binary_cross_entropy, kl_div, cosine_embedding, margin_ranking.

Where PyTorch computes a loss with one kernel, it records one node (``SmoothL1LossBackward0``,
``HuberLossBackward0``, ``BinaryCrossEntropyBackward0``) whose formula is written once in the
``xp`` vocabulary (first-order on arrays, recorded under create_graph). Where PyTorch's loss is a
composite of ATen ops (``l1_loss`` is ``(input - target).abs().mean()``), it is built here from
recorded ops in PyTorch's order, so the graph is PyTorch's node for node: C++ composites add a
Python number with ``add.Scalar`` (``AddBackward1``), not the ``AddBackward0`` of Python's ``+``.
"""

from __future__ import annotations

import numpy as np

from autodiag import _warnings, dtypes
from autodiag.core.graph import FlatNode, Node
from autodiag.ops._core import _state, as_tensor_operand, edge, register, result, save, wrap
from autodiag.ops.factories import zeros_like
from autodiag.ops.nn_ops import (
    _broadcast_pair,
    _record,
    _reduce,
    _size,
    add_scalar,
    legacy_reduction,
    reduction_enum,
    sub_scalar,
)
from autodiag.ops.pointwise import (
    _ALWAYS,
    binary_op,
    exp,
    sub,
    where,
)
from autodiag.ops.reduction import mean as _mean
from autodiag.ops.reduction import sum as _sum
from autodiag.tensor import Tensor

# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


def _apply_reduction(out: Tensor, r: int) -> Tensor:
    """ATen's ``apply_loss_reduction``: ``mean()`` (1), ``sum()`` (2) or the tensor (0)."""
    if r == 1:
        return _mean(out)
    if r == 2:
        return _sum(out)
    return out


def _size_warning(input: Tensor, target: Tensor) -> None:
    if tuple(target._data.shape) != tuple(input._data.shape):
        _warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size.",
            UserWarning,
        )


def _weighted(loss: Tensor, weight: Tensor, input: Tensor, reduction: str, mean_by_weight: bool):
    """The ``weight=`` path of l1/mse/huber in torch.nn.functional (Python ops)."""
    if tuple(weight._data.shape) != tuple(input._data.shape):
        raise ValueError("Weights and input must have the same size.")
    w = loss * weight
    if reduction == "none":
        return w
    if reduction == "sum":
        return _sum(w)
    if reduction == "mean":
        return _sum(w) / _sum(weight) if mean_by_weight else _mean(w)
    raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")


def _promoted(x: Tensor, t: Tensor):
    """Both operands' arrays in their promoted dtype (PyTorch's TensorIterator)."""
    xd, td = x._data, t._data
    if xd.dtype != td.dtype:
        dt = dtypes.promote_types(x.dtype, t.dtype).np  # float32 with int64 is float32
        xd, td = xd.astype(dt), td.astype(dt)
    return xd, td


def _float_kernel(x: Tensor, kernel: str) -> None:
    if x._data.dtype.kind != "f":
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{x.dtype.scalar_name}'")


# ---------------------------------------------------------------------------------------------
# l1_loss
# ---------------------------------------------------------------------------------------------


@register(method=False, home="nn.functional")
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error, recorded as PyTorch's composite: ``(input - target).abs().mean()``.

    >>> import autodiag as torch
    >>> x = torch.tensor([1.0, -2.0], requires_grad=True)
    >>> torch.nn.functional.l1_loss(x, torch.zeros(2))
    tensor(1.5000, grad_fn=<MeanBackward0>)
    """
    _size_warning(input, target)
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    x, t = _broadcast_pair(input, target)
    if weight is not None:
        return _weighted((x - t).abs(), weight, input, reduction, True)
    return _apply_reduction((x - t).abs(), reduction_enum(reduction))


# ---------------------------------------------------------------------------------------------
# smooth_l1_loss and huber_loss: one node each
# ---------------------------------------------------------------------------------------------


class SmoothL1LossBackward0(Node):
    """d = input - target: ``d / beta`` where ``|d| < beta``, else ``sign(d)``; times grad (and
    1 / numel for 'mean'). The target's gradient is the negative."""

    __slots__ = ("reduction", "beta", "count")
    _saved_names = ("self", "target")

    def _kink(self, xp, d):
        inner = xp.abs(d) < self.beta
        return xp.where(inner, d / self.beta, xp.sign(d))

    def backward(self, xp, g):
        needs_self, needs_target = self.needs_grad
        d = self.saved_self(xp) - self.saved_target(xp)
        if self.reduction == 1 and self.count:
            g = g / self.count
        gx = self._kink(xp, d) * g
        return (gx if needs_self else None, -gx if needs_target else None)

    def _saved_extra(self):
        return {"beta": self.beta, "reduction": self.reduction}


class HuberLossBackward0(SmoothL1LossBackward0):
    """d = input - target: ``d`` where ``|d| < delta``, else ``delta * sign(d)``."""

    __slots__ = ("mixed",)

    def _kink(self, xp, d):
        inner = xp.abs(d) < self.beta
        return xp.where(inner, d, xp.sign(d) * self.beta)

    def backward(self, xp, g):
        if self.mixed is not None:
            raise RuntimeError(self.mixed)
        return super().backward(xp, g)

    def _saved_extra(self):
        return {"delta": self.beta, "reduction": self.reduction}


def _kinked_loss(input, target, r: int, beta: float, cls, kernel: str) -> Tensor:
    _float_kernel(input, kernel)
    xd, td = _promoted(input, target)
    d = xd - td
    ad = np.abs(d)
    if cls is SmoothL1LossBackward0:
        loss = np.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta)
    else:
        loss = np.where(ad < beta, 0.5 * d * d, beta * (ad - 0.5 * beta))
    out = _reduce(np.asarray(loss, dtype=d.dtype), r)
    mixed = None
    if cls is HuberLossBackward0 and target._data.dtype != input._data.dtype:
        # NOTE: PyTorch's huber kernel writes into a tensor of the input's dtype, and its
        # backward then refuses the mixed pair (forward works, backward raises)
        out = out.astype(input._data.dtype)
        mixed = f"Found dtype {target.dtype.scalar_name} but expected {input.dtype.scalar_name}"
    if _state.record and (input.requires_grad or target.requires_grad):
        node = cls((edge(input), edge(target)))
        node.reduction, node.beta, node.count = r, beta, d.size
        if cls is HuberLossBackward0:
            node.mixed = mixed
        node._saved = (save(input), save(target))
        if xd.dtype != input._data.dtype or td.dtype != target._data.dtype:
            node._input_meta = (
                (input._data.shape, input._data.dtype),
                (target._data.shape, target._data.dtype),
            )
        return _record(node, out)
    return result(out, None)


@register(method=False, home="nn.functional")
def smooth_l1_loss(
    input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0
):
    """Quadratic below ``beta``, linear above (``SmoothL1LossBackward0``); ``beta=0`` is
    ``l1_loss``.

    >>> import autodiag as torch
    >>> x = torch.tensor([0.5, 3.0], requires_grad=True)
    >>> torch.nn.functional.smooth_l1_loss(x, torch.zeros(2))
    tensor(1.3125, grad_fn=<SmoothL1LossBackward0>)
    """
    _size_warning(input, target)
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    x, t = _broadcast_pair(input, target)
    if beta == 0.0:
        return _apply_reduction((x - t).abs(), reduction_enum(reduction))
    r = reduction_enum(reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    return _kinked_loss(x, t, r, float(beta), SmoothL1LossBackward0, "smooth_l1_cpu")


@register(method=False, home="nn.functional")
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """Quadratic below ``delta``, ``delta``-sloped above (``HuberLossBackward0``).

    >>> import autodiag as torch
    >>> x = torch.tensor([0.5, 3.0], requires_grad=True)
    >>> torch.nn.functional.huber_loss(x, torch.zeros(2), delta=2.0)
    tensor(2.0625, grad_fn=<HuberLossBackward0>)
    """
    _size_warning(input, target)
    x, t = _broadcast_pair(input, target)
    if weight is not None:
        if tuple(weight._data.shape) != tuple(input._data.shape):
            raise ValueError("Weights and input must have the same size.")
        if delta <= 0:
            raise RuntimeError("huber_loss does not support non-positive values for delta.")
        loss = _kinked_loss(x, t, 0, float(delta), HuberLossBackward0, "huber_cpu")
        return _weighted(loss, weight, input, reduction, False)
    r = reduction_enum(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    return _kinked_loss(x, t, r, float(delta), HuberLossBackward0, "huber_cpu")


# ---------------------------------------------------------------------------------------------
# binary_cross_entropy
# ---------------------------------------------------------------------------------------------

_BCE_EPS = 1e-12  # PyTorch's EPSILON in binary_cross_entropy_backward


def _clamp_min(xp, a, lo):
    return np.maximum(a, lo) if xp.arrays else a.clamp_min(lo)


class BinaryCrossEntropyBackward0(Node):
    """Input: ``grad * (x - t) / max(x * (1 - x), 1e-12) * w``; target:
    ``grad * (max(log(1 - x), -100) - max(log(x), -100)) * w`` (over numel for 'mean')."""

    __slots__ = ("reduction",)
    _saved_names = ("self", "target", "weight")

    def backward(self, xp, g):
        needs_self, needs_target = self.needs_grad
        x, t, w = self.saved_self(xp), self.saved_target(xp), self.saved_weight(xp)
        n = x.size if xp.arrays else x.numel()
        if self.reduction == 1 and n:
            g = g / n
        gx = gt = None
        if needs_self:
            gx = g * (x - t) / _clamp_min(xp, (1 - x) * x, _BCE_EPS)
            if w is not None:
                gx = gx * w
        if needs_target:
            with np.errstate(divide="ignore"):
                gt = g * (_clamp_min(xp, xp.log(1 - x), -100) - _clamp_min(xp, xp.log(x), -100))
            if w is not None:
                gt = gt * w
        return (gx, gt)

    def _saved_extra(self):
        return {"reduction": self.reduction}


@register(method=False, home="nn.functional")
def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"
):
    """Binary cross-entropy of probabilities (``BinaryCrossEntropyBackward0``); each log is
    clamped to -100, as PyTorch does, so 0 and 1 give finite losses.

    >>> import autodiag as torch
    >>> p = torch.tensor([0.9, 0.2], requires_grad=True)
    >>> torch.nn.functional.binary_cross_entropy(p, torch.tensor([1.0, 0.0]))
    tensor(0.1643, grad_fn=<BinaryCrossEntropyBackward0>)
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    if tuple(target._data.shape) != tuple(input._data.shape):
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}) is deprecated. Please ensure they have the same size."
        )
    if weight is not None:
        weight = weight if isinstance(weight, Tensor) else as_tensor_operand(weight)
        try:
            shape = np.broadcast_shapes(target._data.shape, weight._data.shape)
        except ValueError:
            raise RuntimeError(
                f"shape mismatch: objects cannot be broadcast to a single shape.  Mismatch is "
                f"between arg 0 with shape {_size(target._data.shape)} and arg 1 with shape "
                f"{_size(weight._data.shape)}."
            ) from None
        weight = weight.expand(*shape)
        if weight.requires_grad and _state.record:
            raise RuntimeError(
                "The function 'binary_cross_entropy' is not differentiable with respect to "
                "argument 'weight'. This input cannot have requires_grad True."
            )
    xd, td = input._data, target._data
    _float_kernel(input, "binary_cross_entropy")
    for t in (target, weight):
        if t is not None and t._data.dtype != xd.dtype:
            raise RuntimeError(
                f"Found dtype {t.dtype.scalar_name} but expected {input.dtype.scalar_name}"
            )
    if xd.size and not ((xd >= 0) & (xd <= 1)).all():
        raise RuntimeError("all elements of input should be between 0 and 1")
    with np.errstate(divide="ignore"):
        loss = (td - 1) * np.maximum(np.log1p(-xd), -100) - td * np.maximum(np.log(xd), -100)
    if weight is not None:
        loss = loss * weight._data
    out = _reduce(np.asarray(loss, dtype=xd.dtype), r)
    if _state.record and (input.requires_grad or target.requires_grad):
        node = BinaryCrossEntropyBackward0((edge(input), edge(target)))
        node.reduction = r
        node._saved = (save(input), save(target), None if weight is None else save(weight))
        return _record(node, out)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# kl_div (and the xlogy it is made of)
# ---------------------------------------------------------------------------------------------


def _xlogy_array(x, y):
    """``x * log(y)``, 0 where x == 0 unless y is NaN (PyTorch's xlogy)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(x * np.log(y))
    return np.where((x == 0) & ~np.isnan(y), 0, out).astype(out.dtype, copy=False)


class XlogyBackward0(FlatNode):
    """self: ``grad * xlogy(self != 0, other)``; other: ``grad * self / other``."""

    __slots__ = ()
    _arity = 2
    _saved_names = ("self", "other")

    def backward(self, xp, g):
        needs_self, needs_other = self.needs_grad
        x, y = self.saved_self(xp), self.saved_other(xp)
        gx = gy = None
        if needs_self:
            if xp.arrays:
                gx = g * _xlogy_array((x != 0).astype(y.dtype), y)
            else:
                gx = g * _xlogy((x != 0).to(y.dtype), y)
        if needs_other:
            gy = g * x / y
        return (gx, gy)


# not public (torch.xlogy's scalar overloads are not built): kl_div's xlogy(target, target)
_xlogy = binary_op("xlogy", _xlogy_array, XlogyBackward0, _ALWAYS, _ALWAYS)


@register(method=False, home="nn.functional")
def kl_div(
    input,
    target,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
):
    """KL divergence of ``target`` from ``exp(input)`` (``input`` holds log-probabilities),
    PyTorch's composite: ``xlogy(target, target) - target * input`` (``exp(target) * (target -
    input)`` with ``log_target``); 'batchmean' divides the sum by the batch size.

    >>> import autodiag as torch
    >>> logp = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_()
    >>> torch.nn.functional.kl_div(logp, torch.tensor([[0.25, 0.75]]), reduction="batchmean")
    tensor(0.1308, grad_fn=<DivBackward0>)
    """
    if size_average is not None or reduce is not None:
        r = reduction_enum(legacy_reduction(size_average, reduce))
    else:
        if reduction == "mean":
            _warnings.warn(
                "reduction: 'mean' divides the total loss by both the batch size and the "
                "support size.'batchmean' divides only by the batch size, and aligns with the KL "
                "div math definition.'mean' will be changed to behave the same as 'batchmean' in "
                "the next major release.",
                UserWarning,
            )
        r = reduction_enum("sum" if reduction == "batchmean" else reduction)
    for t in (input, target):
        if t._data.dtype.kind in "biu":
            raise RuntimeError("kl_div: Integral inputs not supported.")
    if log_target:
        out = exp(target) * (target - input)
    else:
        out = _xlogy(target, target) - target * input
    reduced = _apply_reduction(out, r)
    if reduction == "batchmean" and input.dim() != 0:
        reduced = reduced / input.size()[0]
    return reduced


# ---------------------------------------------------------------------------------------------
# cosine_embedding_loss and margin_ranking_loss (ATen composites)
# ---------------------------------------------------------------------------------------------

_COS_EPS = 1e-12  # ATen's EPSILON in cosine_embedding_loss


@register(method=False, home="nn.functional")
def cosine_embedding_loss(
    input1,
    input2,
    target,
    margin: float = 0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """``1 - cos(x1, x2)`` where target is 1, ``max(0, cos - margin)`` where it is -1.

    >>> import autodiag as torch
    >>> a = torch.tensor([[1.0, 0.0]], requires_grad=True)
    >>> torch.nn.functional.cosine_embedding_loss(a, torch.tensor([[1.0, 1.0]]), torch.tensor([1]))
    tensor(0.2929, grad_fn=<MeanBackward0>)
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    td = target.dim()
    if td not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    want = 2 if td == 1 else 1
    if input1.dim() != want or input2.dim() != want:
        raise RuntimeError(
            f"{td}D target tensor expects {want}D input tensors, but found inputs with sizes "
            f"{_size(input1.shape)} and {_size(input2.shape)}."
        )
    prod_sum = (input1 * input2).sum(td)
    mag_square1 = add_scalar((input1 * input1).sum(td), _COS_EPS)
    mag_square2 = add_scalar((input2 * input2).sum(td), _COS_EPS)
    denom = (mag_square1 * mag_square2).sqrt_()
    cos = prod_sum / denom
    zeros = zeros_like(cos)
    pos = sub(wrap(np.asarray(1, dtype=cos._data.dtype)), cos)
    neg = sub_scalar(cos, margin).clamp_min_(0)
    output_pos = where(target == 1, pos, zeros)
    output_neg = where(target == -1, neg, zeros)
    return _apply_reduction(output_pos + output_neg, r)


@register(method=False, home="nn.functional")
def margin_ranking_loss(
    input1,
    input2,
    target,
    margin: float = 0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
):
    """``max(0, -target * (input1 - input2) + margin)``, as PyTorch's composite.

    >>> import autodiag as torch
    >>> a = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> b, y = torch.tensor([2.0, 1.0]), torch.tensor([1.0, 1.0])
    >>> torch.nn.functional.margin_ranking_loss(a, b, y)
    tensor(0.5000, grad_fn=<MeanBackward0>)
    """
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    r = reduction_enum(reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(
            f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {input1.size()}, input2: {input2.size()}, target: {target.size()} "
        )
    unclamped = add_scalar(-target * (input1 - input2), margin)
    return _apply_reduction(unclamped.clamp_min_(0), r)
