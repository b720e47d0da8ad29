"""Instance normalization: each (sample, channel) plane normalized by its own statistics.

PyTorch computes it as batch normalization of the input viewed as one sample with N*C
channels (``at::instance_norm``): the weight, bias and running statistics are repeated N
times, ``batch_norm`` runs, and the running statistics are written back as the mean over the
N copies. autodiag does the same, so the graph is PyTorch's (``ViewBackward0`` around
``NativeBatchNormBackward0``, ``RepeatBackward0`` on the affine parameters).
"""

from __future__ import annotations

from autodiag.core.grad_mode import no_grad
from autodiag.ops._core import register
from autodiag.ops.normalization import batch_norm
from autodiag.size import Size


def _repeat(t, b: int):
    return None if t is None else t.repeat(b)


@register(method=False)
def instance_norm(
    input,
    weight,
    bias,
    running_mean,
    running_var,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool = False,
):
    """``torch.instance_norm`` (PyTorch's argument order; ``torch.nn.functional.instance_norm``
    is the usual entry point). ``cudnn_enabled`` is accepted and has no effect."""
    shape = tuple(input.shape)
    if len(shape) < 2:
        raise RuntimeError(
            f"instance_norm: expected an input with a batch and a channel dim, got {len(shape)}-D"
        )
    b, c = shape[0], shape[1]
    reshaped = input.contiguous().view(1, b * c, *shape[2:])
    running_mean_ = _repeat(running_mean, b)
    running_var_ = _repeat(running_var, b)
    out = batch_norm(
        reshaped,
        running_mean_,
        running_var_,
        _repeat(weight, b),
        _repeat(bias, b),
        use_input_stats,
        momentum,
        eps,
    )
    # the N copies' updated statistics, averaged back into the caller's buffers (in training
    # only: PyTorch leaves them, and their version, alone when it normalizes with them)
    if use_input_stats:
        with no_grad():
            if running_mean is not None:
                running_mean.copy_(running_mean_.view(b, c).mean(0))
            if running_var is not None:
                running_var.copy_(running_var_.view(b, c).mean(0))
    return out.view(shape)


def functional_instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """Instance normalization of ``(N, C, *)`` input (as ``torch.nn.functional.instance_norm``):
    each sample's channel normalized over its spatial dims; with ``use_input_stats=False``
    the running statistics normalize instead.

    >>> import autodiag as torch
    >>> x = torch.tensor([[[1.0, 3.0], [2.0, 2.0]]])
    >>> torch.nn.functional.instance_norm(x)
    tensor([[[-1.0000,  1.0000],
             [ 0.0000,  0.0000]]])
    """
    if use_input_stats:
        spatial = 1
        for n in input.shape[2:]:
            spatial *= n
        if spatial == 1:
            raise ValueError(
                "Expected more than 1 spatial element when training, got input size "
                f"{Size(tuple(input.shape))!r}"
            )
    return instance_norm(
        input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, False
    )
