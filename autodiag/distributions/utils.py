"""Helpers shared by the distributions, as in ``torch.distributions.utils``."""

from __future__ import annotations

import numbers

import numpy as np

from autodiag.core import grad_mode
from autodiag.tensor import Tensor

__all__ = [
    "broadcast_all",
    "lazy_property",
    "logits_to_probs",
    "probs_to_logits",
    "clamp_probs",
    "standard_normal",
]


def broadcast_all(*values) -> tuple:
    """Tensors (numbers become tensors of the first tensor's dtype, else the default dtype)
    broadcast to one shape. A tensor that already has that shape is returned as itself, as
    PyTorch's ``broadcast_tensors`` does, so its graph gains no expand node."""
    from autodiag import dtypes
    from autodiag.ops.factories import tensor

    if not all(isinstance(v, (Tensor, numbers.Number)) for v in values):
        raise ValueError(
            "Input arguments must all be instances of Number, torch.Tensor or objects "
            "implementing __torch_function__."
        )
    dtype = next((v.dtype for v in values if isinstance(v, Tensor)), dtypes.get_default_dtype())
    tensors = [v if isinstance(v, Tensor) else tensor(v, dtype=dtype) for v in values]
    shape = tuple(np.broadcast_shapes(*(tuple(t.shape) for t in tensors)))
    return tuple(t if tuple(t.shape) == shape else t.expand(shape) for t in tensors)


class lazy_property:  # noqa: N801 - PyTorch's name
    """A property computed on first use (in grad mode) and then stored on the instance; a value
    given in ``__init__`` takes its place."""

    def __init__(self, wrapped) -> None:
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with grad_mode.enable_grad():
            value = self.wrapped(instance)
        instance.__dict__[self.wrapped.__name__] = value
        return value


def clamp_probs(probs: Tensor) -> Tensor:
    eps = float(np.finfo(probs.dtype.np).eps)
    return probs.clamp(min=eps, max=1 - eps)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    from autodiag.nn import functional as F

    if is_binary:
        return logits.sigmoid()
    return F.softmax(logits, dim=-1)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    ps = clamp_probs(probs)
    if is_binary:
        return ps.log() - (-ps).log1p()
    return ps.log()


def random_stream():
    """The engine's global random stream (``torch.manual_seed`` seeds it; vmap guards it)."""
    from autodiag.ops import factories

    return factories._rng[0]


def standard_normal(shape, dtype) -> Tensor:
    from autodiag.ops.factories import randn

    return randn(*shape, dtype=dtype)
