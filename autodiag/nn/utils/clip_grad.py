"""Gradient clipping (``torch.nn.utils.clip_grad``), as PyTorch computes it.

``foreach`` is accepted and ignored: PyTorch's foreach kernels give the same values as its
per-tensor path, which is the one written here.

The gradients are scaled or clamped in place with autodiag's in-place ops under ``no_grad``, so
their version counters move as PyTorch's do.
"""

from __future__ import annotations

import functools
import types

from autodiag import _warnings
from autodiag.core import grad_mode
from autodiag.ops.factories import tensor
from autodiag.ops.reduction import vector_norm
from autodiag.ops.shape import stack
from autodiag.tensor import Tensor

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_"]


def _no_grad(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with grad_mode.no_grad():
            return fn(*args, **kwargs)

    return wrapper


@_no_grad
def _get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None) -> Tensor:
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return tensor(0.0)
    # PyTorch groups the tensors by dtype (first-seen order) before taking their norms
    groups: dict = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    norms = [vector_norm(g, norm_type) for ts in groups.values() for g in ts]
    total_norm = vector_norm(stack(norms), norm_type)
    if error_if_nonfinite and bool(total_norm.isnan() | total_norm.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            f"non-finite, so it cannot be clipped. To disable this error and scale the "
            f"gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    return total_norm


@_no_grad
def _clip_grads_with_norm_(parameters, max_norm, total_norm: Tensor, foreach=None) -> None:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    max_norm = float(max_norm)
    if len(grads) == 0:
        return
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = clip_coef.clamp(max=1.0)
    for g in grads:
        g.mul_(
            clip_coef_clamped.to(g.dtype)
            if g.dtype != clip_coef_clamped.dtype
            else clip_coef_clamped
        )


@_no_grad
def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:
    """Scale the gradients of ``parameters`` so that their joint ``norm_type``-norm is at most
    ``max_norm`` (in place); returns the norm before clipping.

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    >>> (w * w / 2).sum().backward()
    >>> torch.nn.utils.clip_grad_norm_([w], 1.0), w.grad
    (tensor(5.), tensor([0.6000, 0.8000]))
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and len(parameters) == 0:
            _warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.")
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = _get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    _clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:
    """Deprecated spelling of :func:`clip_grad_norm_` (PyTorch's FutureWarning)."""
    _warnings.warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`torch.nn.utils.clip_grad_norm_`.",
        FutureWarning,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


@_no_grad
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]`` in place.

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0, -3.0]))
    >>> (w * w).sum().backward()
    >>> torch.nn.utils.clip_grad_value_([w], 1.5); w.grad
    tensor([ 1.5000, -1.5000])
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    clip_value = float(clip_value)
    grads = [p.grad for p in parameters if p.grad is not None]
    for g in grads:
        # PyTorch's path for plain gradient tensors: two in-place passes (two version bumps)
        g.clamp_min_(-clip_value)
        g.clamp_max_(clip_value)
