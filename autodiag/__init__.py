"""autodiag: a PyTorch-faithful autograd engine on numpy, and a gradient debugger around it.

``import autodiag as torch`` runs PyTorch snippets within the supported subset.

>>> import autodiag as torch
>>> x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x ** 2).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""

from __future__ import annotations

import numpy as _np

# NOTE: PyTorch returns inf/nan silently (log(0), 1/0); numpy would warn on every such op.
_np.seterr(all="ignore")

from autodiag import autograd, trace  # noqa: E402
from autodiag._version import __version__  # noqa: E402
from autodiag.autograd.anomaly import (is_anomaly_check_nan_enabled,  # noqa: E402
                                       is_anomaly_enabled, set_anomaly_enabled)
from autodiag.autograd.grad_mode import (enable_grad, inference_mode,  # noqa: E402
                                         is_grad_enabled, is_inference_mode_enabled, no_grad,
                                         set_grad_enabled)
from autodiag.dtypes import (bool, double, dtype, float, float16, float32,  # noqa: E402, A004
                             float64, get_default_dtype, half, int, int8, int16, int32, int64,
                             long, promote_types, set_default_dtype, short, uint8)
from autodiag.ops import REGISTRY as _REGISTRY  # noqa: E402
from autodiag.ops.factories import (arange, as_tensor, empty, empty_like, eye,  # noqa: E402
                                    from_numpy, full, full_like, linspace, manual_seed, normal,
                                    ones, ones_like, rand, rand_like, randint, randn, randn_like,
                                    randperm, seed, tensor, zeros, zeros_like)
from autodiag.ops.linalg import bmm, dot, einsum, matmul, mm, mv, outer  # noqa: E402
from autodiag.ops.pointwise import (abs, add, allclose, ceil, clamp, clamp_max,  # noqa: E402, A004
                                    clamp_min, clip, cos, div, divide, eq, equal, erf, exp, floor,
                                    floor_divide, ge, gt, isclose, isfinite, isinf, isnan, le,
                                    log, log1p, logical_and, logical_not, logical_or,
                                    logical_xor, lt, maximum, minimum, mul, multiply, ne, neg,
                                    negative, pow, reciprocal, relu, remainder, round, rsqrt,
                                    rsub, sigmoid, sign, sin, sqrt, sub, subtract, tan, tanh,
                                    trunc, true_divide, where)
from autodiag.ops.reduction import (amax, amin, argmax, argmin, logsumexp, log_softmax,  # noqa
                                    max, mean, min, norm, prod, softmax, std, sum, var)
from autodiag.ops.reduction import all_ as all, any_ as any  # noqa: E402 - torch.all/any
from autodiag.ops.reduction import cumprod, cumsum  # noqa: E402
from autodiag.ops.shape import flip  # noqa: E402
from autodiag.ops.shape import (broadcast_to, cat, chunk, clone, concat,  # noqa: E402
                                concatenate, diagonal, expand_as, flatten, gather, index_select,
                                masked_fill, moveaxis, movedim, narrow, permute, repeat,
                                reshape, select, split, squeeze, stack, swapaxes, t, transpose,
                                unbind, unflatten, unsqueeze)
from autodiag.size import Size  # noqa: E402
from autodiag.tensor import Tensor  # noqa: E402
from autodiag.ops.nn_ops import addmm  # noqa: E402
from autodiag import nn, optim, utils  # noqa: E402  (after the ops: they build on them)
from autodiag import accelerator, backends, cuda  # noqa: E402 - all absent: CPU only
from autodiag._device import device  # noqa: E402
from autodiag.compat import (BoolTensor, ByteTensor, CharTensor, DoubleTensor,  # noqa: E402
                             FloatTensor, HalfTensor, IntTensor, LongTensor, ShortTensor,
                             get_default_device, set_default_device)
from autodiag.serialization import load, save  # noqa: E402
from autodiag.generator import Generator, default_generator  # noqa: E402

is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731


def numel(input) -> int:
    return input.numel()


def is_floating_point(input) -> bool:
    return input.is_floating_point()


def get_rng_state():
    from autodiag.ops.factories import _rng

    return _rng[0].bit_generator.state


def set_rng_state(state) -> None:
    from autodiag.ops.factories import _rng

    _rng[0].bit_generator.state = state

