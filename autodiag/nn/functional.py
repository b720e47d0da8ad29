"""``torch.nn.functional``: the functional forms of the layers (re-exports of the ops, with
PyTorch's signatures where they differ).

>>> import autodiag as torch
>>> import autodiag.nn.functional as F
>>> F.relu(torch.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""

from __future__ import annotations

import warnings

from autodiag.ops.losses import (  # noqa: F401
    binary_cross_entropy,
    cosine_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    smooth_l1_loss,
)
from autodiag.ops.nn_ops import (  # noqa: F401
    binary_cross_entropy_with_logits,
    cross_entropy,
    dropout,
    embedding,
    layer_norm,
    leaky_relu_,
    linear,
    mse_loss,
    nll_loss,
)
from autodiag.ops.pointwise import gelu, sigmoid, softplus, tanh  # noqa: F401
from autodiag.ops.pointwise import leaky_relu as _leaky_relu
from autodiag.ops.pointwise import relu as _relu
from autodiag.ops.reduction import log_softmax as _log_softmax
from autodiag.ops.reduction import softmax as _softmax


def relu(input, inplace: bool = False):
    """max(input, 0); ``inplace`` writes into ``input`` (``relu_``)."""
    return input.relu_() if inplace else _relu(input)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    if inplace:
        return leaky_relu_(input, negative_slope)
    return _leaky_relu(input, negative_slope)


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to "
        f"include dim=X as an argument.",
        UserWarning,
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _softmax_dim("softmax", input.dim())
    return _softmax(input, dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim())
    return _log_softmax(input, dim, dtype=dtype)
