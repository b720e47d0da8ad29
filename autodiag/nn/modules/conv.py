"""``Conv1d``, ``Conv2d``, ``ConvTranspose1d``, ``ConvTranspose2d``: PyTorch's ``_ConvNd``
(parameters, checks, initialisation, repr) over ``F.conv*`` (ops/conv.py)."""

from __future__ import annotations

import math

from autodiag.nn import functional as F
from autodiag.nn import init
from autodiag.nn.modules.module import Module
from autodiag.nn.parameter import Parameter

_PADDING_STRINGS = {"same", "valid"}
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


def _tuple(v, n: int) -> tuple:
    if isinstance(v, (tuple, list)):
        return tuple(v) if len(v) != 1 else tuple(v) * n
    return (v,) * n


class _ConvNd(Module):
    """What every convolution module shares (PyTorch's ``_ConvNd``)."""

    _nd = 2
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
        *,
        output_padding=0,
    ) -> None:
        from autodiag.ops.factories import empty

        super().__init__()
        nd = self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        stride = _tuple(stride, nd)
        if isinstance(padding, str):
            if padding not in _PADDING_STRINGS:
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}"
                )
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {_PADDING_MODES}, but got "
                f"padding_mode='{padding_mode}'"
            )
        if padding_mode != "zeros":
            raise NotImplementedError(
                f"autodiag: {type(self).__name__}(padding_mode={padding_mode!r}) is not "
                f"supported (no reflect/replicate/circular padding); use padding_mode='zeros'"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _tuple(kernel_size, nd)
        self.stride = stride
        self.padding = padding if isinstance(padding, str) else _tuple(padding, nd)
        self.dilation = _tuple(dilation, nd)
        self.transposed = self._transposed
        self.output_padding = _tuple(output_padding, nd)
        self.groups = groups
        self.padding_mode = padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(empty(shape, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def forward(self, input):
        return self._conv(
            input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def reset_parameters(self) -> None:
        # PyTorch's: kaiming_uniform_ with a = sqrt(5), the bias U(-1/sqrt(fan_in), ...)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}"
            f", stride={self.stride}"
        )
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over ``(N, C_in, L)`` input (as ``torch.nn.Conv1d``).

    >>> import autodiag as torch
    >>> torch.nn.Conv1d(2, 4, 3)
    Conv1d(2, 4, kernel_size=(3,), stride=(1,))
    """

    _nd = 1
    _conv = staticmethod(F.conv1d)


class Conv2d(_ConvNd):
    """2-D convolution over ``(N, C_in, H, W)`` input (as ``torch.nn.Conv2d``): stride,
    padding (int, pair, ``'same'``, ``'valid'``), dilation, groups; ``padding_mode='zeros'``.

    >>> import autodiag as torch
    >>> conv = torch.nn.Conv2d(1, 4, 3, padding=1)
    >>> conv, tuple(conv(torch.ones(2, 1, 5, 5)).shape)
    (Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)), (2, 4, 5, 5))
    """

    _nd = 2
    _conv = staticmethod(F.conv2d)


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        if padding_mode != "zeros" and padding_mode in _PADDING_MODES:
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode, dtype=dtype, output_padding=output_padding,
        )  # fmt: skip

    def forward(self, input, output_size=None):
        op = self._output_padding(input, output_size)
        return self._conv(
            input, self.weight, self.bias, self.stride, self.padding, op, self.groups,
            self.dilation,
        )  # fmt: skip

    def _output_padding(self, input, output_size) -> tuple:
        """``output_padding`` that makes the output ``output_size`` (PyTorch's rule)."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        size = list(output_size)
        if len(size) == nd + 2 or len(size) == nd + 1 and input.dim() == nd + 1:
            size = size[-nd:]
        if len(size) != nd:
            raise ValueError(
                f"ConvTranspose{nd}D: for {input.dim()}D input, output_size must have {nd} or "
                f"{nd + 2} elements (got {len(output_size)})"
            )
        spatial = input.shape[-nd:]
        result = []
        for d in range(nd):
            low = (
                (spatial[d] - 1) * self.stride[d]
                - 2 * self.padding[d]
                + self.dilation[d] * (self.kernel_size[d] - 1)
                + 1
            )
            high = low + self.stride[d] - 1
            if not low <= size[d] <= high:
                raise ValueError(
                    f"requested an output size of {size}, but valid sizes range from "
                    f"{[low]} to {[high]} (for an input of {list(spatial)})"
                )
            result.append(size[d] - low)
        return tuple(result)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution (as ``torch.nn.ConvTranspose1d``).

    >>> import autodiag as torch
    >>> torch.nn.ConvTranspose1d(2, 4, 3, stride=2)
    ConvTranspose1d(2, 4, kernel_size=(3,), stride=(2,))
    """

    _nd = 1
    _conv = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution, weight ``(C_in, C_out / groups, kH, kW)`` (as
    ``torch.nn.ConvTranspose2d``); ``forward(input, output_size=None)``.

    >>> import autodiag as torch
    >>> up = torch.nn.ConvTranspose2d(4, 2, 2, stride=2)
    >>> tuple(up(torch.ones(1, 4, 3, 3)).shape)
    (1, 2, 6, 6)
    """

    _nd = 2
    _conv = staticmethod(F.conv_transpose2d)


class Conv3d(_ConvNd):
    """3-D convolution over ``(N, C_in, D, H, W)`` input (as ``torch.nn.Conv3d``).

    >>> import autodiag as torch
    >>> torch.nn.Conv3d(2, 3, 2)
    Conv3d(2, 3, kernel_size=(2, 2, 2), stride=(1, 1, 1))
    """

    _nd = 3
    _conv = staticmethod(F.conv3d)


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution, weight ``(C_in, C_out / groups, kD, kH, kW)`` (as
    ``torch.nn.ConvTranspose3d``).

    >>> import autodiag as torch
    >>> torch.nn.ConvTranspose3d(2, 3, 2)
    ConvTranspose3d(2, 3, kernel_size=(2, 2, 2), stride=(1, 1, 1))
    """

    _nd = 3
    _conv = staticmethod(F.conv_transpose3d)
