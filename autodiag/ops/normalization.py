"""Batch and group normalization: ``batch_norm`` (``NativeBatchNormBackward0``) and
``group_norm`` (``NativeGroupNormBackward0``).

Both normalize ``x`` over a set of axes, ``xhat = (x - mean) * rstd``, then scale and shift
per channel. First-order backward reads the statistics saved by the forward op
(``result1``/``result2``, PyTorch's names); under ``create_graph=True`` they are recomputed
from the saved input with recorded ops, so that the gradient is itself differentiable.

NOTE [Running statistics]: batch_norm's ``running_mean``/``running_var`` are buffers the
forward op updates in place, as PyTorch's kernel does: without a version bump and without an
in-place event (they are not a user's write into a saved tensor). In evaluation mode they are
what the output is computed from, saved and version-checked like any input.
"""

from __future__ import annotations

import math

import numpy as np

from autodiag import _warnings
from autodiag.core.graph import Node
from autodiag.ops._core import (
    FusedBackwardLink,
    _state,
    edge,
    fused_gradients,
    register,
    result,
    save,
    wrap,
)
from autodiag.size import Size
from autodiag.tensor import Tensor


def _dims(shape) -> str:
    return f"[{', '.join(map(str, shape))}]"


def _normalized_input_grad(xp, gy, xhat, rstd, axes):
    """``rstd * (gy - mean(gy) - xhat * mean(gy * xhat))`` over ``axes``: the input gradient
    of a normalization whose statistics depend on the input."""
    if xp.arrays:
        m1 = gy.mean(axis=axes, keepdims=True)
        m2 = (gy * xhat).mean(axis=axes, keepdims=True)
    else:
        m1 = gy.mean(axes, keepdim=True)
        m2 = (gy * xhat).mean(axes, keepdim=True)
    return rstd * (gy - m1 - xhat * m2)


def _sum(xp, a, axes):
    return a.sum(axis=axes) if xp.arrays else a.sum(axes)


# ---------------------------------------------------------------------------------------------
# batch_norm
# ---------------------------------------------------------------------------------------------


class NativeBatchNormBackward0(Node):
    """Gradients of ``(x - mean) * rstd * weight + bias`` per channel (dim 1): with the batch's
    statistics in training, with the running ones in evaluation (then a per-channel affine
    map of the input)."""

    __slots__ = ("training", "eps", "axes")
    _saved_names = ("input", "weight", "running_mean", "running_var", "result1", "result2")

    def backward(self, xp, g):
        needs_input, needs_weight, needs_bias = self.needs_grad
        x, w = self.saved_input(xp), self.saved_weight(xp)
        axes = self.axes
        nd = len(_shape(x))
        per_channel = (1, -1) + (1,) * (nd - 2)
        if self.training:
            if xp.arrays:
                mean = self.saved_result1(xp).reshape(per_channel)
                rstd = self.saved_result2(xp).reshape(per_channel)
                xhat = (x - mean) * rstd
            else:
                mean = x.mean(axes, keepdim=True)
                xc = x - mean
                rstd = ((xc * xc).mean(axes, keepdim=True) + self.eps).rsqrt()
                xhat = xc * rstd
        else:
            rm, rv = self.saved_running_mean(xp), self.saved_running_var(xp)
            mean = rm.reshape(per_channel)
            rstd = (rv.reshape(per_channel) + self.eps) ** -0.5
            xhat = (x - mean) * rstd
        gx = gw = gb = None
        if needs_input:
            gy = g * w.reshape(per_channel) if w is not None else g
            if self.training:
                gx = _normalized_input_grad(xp, gy, xhat, rstd, axes)
            else:
                gx = gy * rstd
        if needs_weight:
            gw = _sum(xp, g * xhat, axes)
        if needs_bias:
            gb = _sum(xp, g, axes)
        if xp.arrays:
            return (gx, gw, gb)
        return fused_gradients((gx, gw, gb), (g, x, w), NativeBatchNormBackwardBackward0)

    def _saved_extra(self):
        return {"training": self.training, "eps": self.eps}


class NativeBatchNormBackwardBackward0(FusedBackwardLink):
    """PyTorch's node for batch_norm's gradients under create_graph (NOTE [Fused backward
    ops] in ops/_core.py); here only for the gradients no recorded op produced."""

    __slots__ = ()


def _shape(a) -> tuple:
    return a.shape if isinstance(a, np.ndarray) else a._data.shape


def _check_channel_vector(name: str, t, c: int) -> None:
    if t is not None and t._data.size != c:
        raise RuntimeError(f"{name} should contain {c} elements not {t._data.size}")


def _check_parameter_dtypes(input, params) -> None:
    """PyTorch's CPU batch_norm dtype rule: parameters of another dtype than the input's
    first defined one (weight, bias, running_mean, running_var) are its "mixed type" path,
    float32 parameters of a float16/bfloat16 input only; otherwise each must be the input's."""
    dt = input._data.dtype
    given = [p for p in params if p is not None]
    if given and given[0]._data.dtype != dt:
        if any(p._data.dtype != np.float32 for p in given):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
        if dt != np.float16:
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")
        return
    for p in given:
        if p._data.dtype != dt:
            raise RuntimeError(
                f"expected scalar type {input.dtype.scalar_name} but found {p.dtype.scalar_name}"
            )


@register(method=False, home="nn.functional")
def batch_norm(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Batch normalization over every dim but the channels (dim 1), one
    ``NativeBatchNormBackward0`` node (as ``torch.nn.functional.batch_norm``). In training the
    batch's statistics are used and the running ones updated in place
    (``running = (1 - momentum) * running + momentum * batch``, the variance unbiased); in
    evaluation the running statistics are used.

    >>> import autodiag as torch
    >>> x = torch.tensor([[1.0, 2.0], [3.0, 6.0]], requires_grad=True)
    >>> rm, rv = torch.zeros(2), torch.ones(2)
    >>> torch.nn.functional.batch_norm(x, rm, rv, training=True)
    tensor([[-1.0000, -1.0000],
            [ 1.0000,  1.0000]], grad_fn=<NativeBatchNormBackward0>)
    >>> rm
    tensor([0.2000, 0.4000])
    """
    xd = input._data
    if xd.ndim < 2:
        raise ValueError(f"Expected 2D or higher input (got {xd.ndim}D input)")
    c = xd.shape[1]
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    if training:
        count = xd.size // c if c else 0
        if count <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size "
                f"{Size(xd.shape)!r}"
            )
    elif running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    _check_parameter_dtypes(input, (weight, bias, running_mean, running_var))
    _check_channel_vector("running_mean", running_mean, c)
    _check_channel_vector("running_var", running_var, c)
    _check_channel_vector("weight", weight, c)
    _check_channel_vector("bias", bias, c)
    axes = (0,) + tuple(range(2, xd.ndim))
    per_channel = (1, c) + (1,) * (xd.ndim - 2)
    if training:
        mean = xd.mean(axis=axes)
        xc = xd - mean.reshape(per_channel)
        var = (xc * xc).mean(axis=axes)
        rstd = (1 / np.sqrt(var + eps)).astype(xd.dtype, copy=False)
        out = xc * rstd.reshape(per_channel)
        if running_mean is not None:
            # NOTE [Running statistics]: written in place, no version bump (PyTorch's kernel)
            m = momentum
            rm, rv = running_mean._data, running_var._data
            rm[...] = (1 - m) * rm + m * mean
            rv[...] = (1 - m) * rv + m * var * (count / (count - 1))
        saved_stats = (wrap(mean.astype(xd.dtype, copy=False)), wrap(rstd))
    else:
        mean, var = running_mean._data, running_var._data
        rstd = (1 / np.sqrt(var + eps)).astype(xd.dtype, copy=False)
        out = (xd - mean.reshape(per_channel)) * rstd.reshape(per_channel)
        empty = wrap(np.zeros(0, dtype=xd.dtype))
        saved_stats = (empty, empty)
    if weight is not None:
        out *= weight._data.reshape(per_channel)
    if bias is not None:
        out += bias._data.reshape(per_channel)
    out = np.asarray(out, dtype=xd.dtype)
    needs = (
        input.requires_grad
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    if _state.record and needs:
        node = NativeBatchNormBackward0(
            (
                edge(input),
                None if weight is None else edge(weight),
                None if bias is None else edge(bias),
            )
        )
        node.training, node.eps, node.axes = bool(training), eps, axes
        node._saved = (
            save(input),
            None if weight is None else save(weight),
            None if running_mean is None else save(running_mean),
            None if running_var is None else save(running_var),
        ) + saved_stats
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# group_norm
# ---------------------------------------------------------------------------------------------


class NativeGroupNormBackward0(Node):
    """Gradients of group normalization: each group of channels of each sample normalized as
    layer_norm normalizes, then a per-channel scale and shift."""

    __slots__ = ("group", "eps", "n", "c", "hxw")
    _saved_names = ("input", "weight", "result1", "result2")

    def backward(self, xp, g):
        needs_input, needs_weight, needs_bias = self.needs_grad
        x, w = self.saved_input(xp), self.saved_weight(xp)
        shape = _shape(x)
        n, G = self.n, self.group
        per_channel = (1, self.c) + (1,) * (len(shape) - 2)
        xg = x.reshape(n, G, -1)
        if xp.arrays:
            mean = self.saved_result1(xp)[..., None]
            rstd = self.saved_result2(xp)[..., None]
            xhat = (xg - mean) * rstd
        else:
            mean = xg.mean((2,), keepdim=True)
            xc = xg - mean
            rstd = ((xc * xc).mean((2,), keepdim=True) + self.eps).rsqrt()
            xhat = xc * rstd
        gx = gw = gb = None
        if needs_input:
            gy = g * w.reshape(per_channel) if w is not None else g
            gx = _normalized_input_grad(xp, gy.reshape(n, G, -1), xhat, rstd, (2,))
            gx = gx.reshape(shape)
        axes = (0,) + tuple(range(2, len(shape)))
        if needs_weight:
            gw = _sum(xp, g * xhat.reshape(shape), axes)
        if needs_bias:
            gb = _sum(xp, g, axes)
        if xp.arrays:
            return (gx, gw, gb)
        return fused_gradients((gx, gw, gb), (g, x, w), NativeGroupNormBackwardBackward0)

    def _saved_extra(self):
        return {"N": self.n, "C": self.c, "HxW": self.hxw, "group": self.group, "eps": self.eps}


def functional_group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.group_norm``: ``group_norm`` after the functional's own check
    that each group normalizes more than one value (PyTorch's ``_verify_batch_size``, a
    ``ValueError``; ``torch.group_norm`` itself accepts one value: its output is 0).

    >>> import autodiag as torch
    >>> torch.nn.functional.group_norm(torch.tensor([[1.0, 3.0]]), 1)
    tensor([[-1.0000,  1.0000]])
    """
    if isinstance(input, Tensor) and input._data.ndim >= 2 and int(num_groups) > 0:
        shape = input._data.shape
        size = [shape[0] * shape[1] // int(num_groups), int(num_groups)] + list(shape[2:])
        if math.prod([size[0]] + size[2:]) == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {size}"
            )
    return group_norm(input, num_groups, weight, bias, eps)


class NativeGroupNormBackwardBackward0(FusedBackwardLink):
    """(NOTE [Fused backward ops] in ops/_core.py)"""

    __slots__ = ()


@register(method=False)
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Group normalization: the channels (dim 1) of each sample split into ``num_groups``
    groups, each normalized to mean 0 and variance 1, then scaled and shifted per channel; one
    ``NativeGroupNormBackward0`` node (as ``torch.nn.functional.group_norm``).

    >>> import autodiag as torch
    >>> x = torch.tensor([[1.0, 3.0, 2.0, 6.0]], requires_grad=True)
    >>> y = torch.nn.functional.group_norm(x, 2)
    >>> [round(v, 4) for v in y[0].tolist()], y.grad_fn.name()
    ([-1.0, 1.0, -1.0, 1.0], 'NativeGroupNormBackward0')
    """
    xd = input._data
    if xd.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {xd.ndim}"
        )
    n, c = xd.shape[:2]
    G = int(num_groups)
    if G <= 0 or c % G:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {_dims(xd.shape)} and num_groups={num_groups}"
        )
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (p._data.ndim != 1 or p._data.size != c):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in "
                f"input, but got {name} of shape {_dims(p._data.shape)} and input of shape "
                f"{_dims(xd.shape)}"
            )
    per_channel = (1, c) + (1,) * (xd.ndim - 2)
    xg = xd.reshape(n, G, -1)
    mean = xg.mean(axis=2, keepdims=True)
    xc = xg - mean
    var = (xc * xc).mean(axis=2, keepdims=True)
    rstd = (1 / np.sqrt(var + eps)).astype(xd.dtype, copy=False)
    out = (xc * rstd).reshape(xd.shape)
    if weight is not None:
        out = out * weight._data.reshape(per_channel)
    if bias is not None:
        out = out + bias._data.reshape(per_channel)
    out = np.asarray(out, dtype=xd.dtype)
    needs = (
        input.requires_grad
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    if _state.record and needs:
        node = NativeGroupNormBackward0(
            (
                edge(input),
                None if weight is None else edge(weight),
                None if bias is None else edge(bias),
            )
        )
        node.group, node.eps, node.n, node.c = G, eps, n, c
        node.hxw = int(np.prod(xd.shape[2:]))
        node._saved = (
            save(input),
            None if weight is None else save(weight),
            wrap(np.ascontiguousarray(mean[..., 0].astype(xd.dtype, copy=False))),
            wrap(np.ascontiguousarray(rstd[..., 0])),
        )
        return result(out, node)
    return result(out, None)


# ---------------------------------------------------------------------------------------------
# channel dropout (dropout1d/2d): whole feature maps zeroed
# ---------------------------------------------------------------------------------------------


def _feature_dropout(input, p: float, training: bool, inplace: bool, op: str, dims: int):
    """``input * noise`` with one draw per channel (``noise`` of shape ``(N, C, 1, ...)``),
    recorded as PyTorch's ``feature_dropout`` records it (``MulBackward0``)."""

    from autodiag.ops import rng
    from autodiag.ops.factories import _rng

    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    d = input._data
    if d.ndim not in (dims + 1, dims + 2):
        if op == "dropout1d":
            raise RuntimeError(
                f"dropout1d: Expected 2D or 3D input, but received a {d.ndim}D input. Note "
                f"that dropout1d exists to provide channel-wise dropout on inputs with 1 "
                f"spatial dimension, a channel dimension, and an optional batch dimension "
                f"(i.e. 2D or 3D inputs)."
            )
        _warnings.warn(
            f"dropout2d: Received a {d.ndim}-D input to dropout2d, which is deprecated and will "
            f"result in an error in a future release. To retain the behavior and silence this "
            f"warning, please use dropout instead. Note that dropout2d exists to provide "
            f"channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, "
            f"and an optional batch dimension (i.e. 3D or 4D inputs)."
        )
    if p == 0 or not training or d.size == 0:
        return input
    if op == "dropout1d" and d.ndim == 2:
        shape = (d.shape[0], 1)  # unbatched (C, L)
    else:
        shape = d.shape[:2] + (1,) * (d.ndim - 2)
    if p == 1:
        noise = np.zeros(shape, dtype=d.dtype)
    else:
        # PyTorch: the (N, C, 1, ...) noise is bernoulli_(1 - p) then div_(1 - p)
        noise = rng.bernoulli_scalar(_rng[0], int(np.prod(shape)), 1 - p).reshape(shape)
        noise = noise.astype(d.dtype)
        noise /= 1 - p
    noise_t = wrap(noise)
    return input.mul_(noise_t) if inplace else input * noise_t


@register(method=False, home="nn.functional")
def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (feature maps) of ``(N, C, H, W)`` input with probability ``p``,
    scaling the rest by ``1 / (1 - p)`` (as ``torch.nn.functional.dropout2d``); the noise
    comes from autodiag's generator.

    >>> import autodiag as torch
    >>> x = torch.ones(1, 2, 2, 2)
    >>> torch.nn.functional.dropout2d(x, 0.5, training=False) is x
    True
    """
    return _feature_dropout(input, p, training, inplace, "dropout2d", 2)


@register(method=False, home="nn.functional")
def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of ``(N, C, L)`` (or ``(C, L)``) input with probability ``p``
    (as ``torch.nn.functional.dropout1d``).

    >>> import autodiag as torch
    >>> torch.nn.functional.dropout1d(torch.ones(2, 3), 0.0).shape
    torch.Size([2, 3])
    """
    return _feature_dropout(input, p, training, inplace, "dropout1d", 1)
