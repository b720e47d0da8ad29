"""3-d convolutions: ``conv3d`` and ``conv_transpose3d``, the same ``convolution`` as the 1-d
and 2-d forms (ops/conv.py works for any number of spatial dims): one ``ConvolutionBackward0``
node, double backward through the recorded ``unfold``/``fold``."""

from __future__ import annotations

from autodiag.ops._core import register
from autodiag.ops.conv import convolution


@register(method=False)
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution over ``(N, C, D, H, W)`` (or unbatched ``(C, D, H, W)``) input: padding
    an int, a triple, ``'same'`` or ``'valid'``; stride, dilation, groups (as
    ``torch.nn.functional.conv3d``).

    >>> import autodiag as torch
    >>> x = torch.ones(1, 1, 3, 3, 3)
    >>> w = torch.ones(2, 1, 2, 2, 2, requires_grad=True)
    >>> y = torch.conv3d(x, w)
    >>> tuple(y.shape), y.grad_fn.name()
    ((1, 2, 2, 2, 2), 'ConvolutionBackward0')
    """
    return convolution(
        input, weight, bias, stride, padding, dilation, False, 0, groups, op="conv3d", nd=3
    )


@register(method=False)
def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """3-D transposed convolution (the input gradient of ``conv3d``; weight
    ``(C_in, C_out / groups, kD, kH, kW)``), one ``ConvolutionBackward0`` node.

    >>> import autodiag as torch
    >>> torch.conv_transpose3d(torch.ones(1, 1, 2, 2, 2), torch.ones(1, 1, 2, 2, 2), stride=2).shape
    torch.Size([1, 1, 4, 4, 4])
    """
    if isinstance(padding, str):
        raise RuntimeError("conv_transpose3d(): argument 'padding' must be tuple of ints, not str")
    return convolution(
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        True,
        output_padding,
        groups,
        op="conv_transpose3d",
        nd=3,
    )
