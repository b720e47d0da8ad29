"""``torch.nn.functional``: the functional forms of the layers (re-exports of the ops, with
PyTorch's signatures where they differ).

>>> import autodiag as torch
>>> import autodiag.nn.functional as F
>>> F.relu(torch.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""

from __future__ import annotations

from autodiag import _warnings
from autodiag.ops.attention import (  # noqa: F401
    elu,
    normalize,
    one_hot,
    pad,
    scaled_dot_product_attention,
    silu,
)
from autodiag.ops.conv import (  # noqa: F401
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    fold,
    unfold,
)
from autodiag.ops.conv3d import conv3d, conv_transpose3d  # noqa: F401
from autodiag.ops.grid import affine_grid, grid_sample  # noqa: F401
from autodiag.ops.instance_norm import functional_instance_norm as instance_norm  # noqa: F401
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
from autodiag.ops.normalization import batch_norm, dropout1d, dropout2d  # noqa: F401
from autodiag.ops.normalization import functional_group_norm as group_norm  # noqa: F401
from autodiag.ops.pointwise import gelu, sigmoid, softplus, tanh  # noqa: F401
from autodiag.ops.pointwise import leaky_relu as _leaky_relu
from autodiag.ops.pointwise import relu as _relu
from autodiag.ops.pooling import (  # noqa: F401
    adaptive_avg_pool2d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from autodiag.ops.pooling_nd import adaptive_max_pool1d as _adaptive_max_pool1d
from autodiag.ops.pooling_nd import adaptive_max_pool2d, avg_pool3d, max_pool3d  # noqa: F401
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
    _warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to "
        f"include dim=X as an argument.",
        UserWarning,
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


def adaptive_max_pool1d(input, output_size, return_indices: bool = False):
    """The maximum over ``output_size`` windows that tile each ``(N, C, L)`` row; the indices
    too with ``return_indices`` (``torch.adaptive_max_pool1d`` always returns both)."""
    out, indices = _adaptive_max_pool1d(input, output_size)
    return (out, indices) if return_indices else out


# cover16a: sub-pixel shuffles (ops/shape2.py)
from autodiag.ops.shape2 import pixel_shuffle, pixel_unshuffle  # noqa: E402, F401
