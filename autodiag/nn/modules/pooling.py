"""``MaxPool1d/2d/3d``, ``AvgPool2d/3d``, ``AdaptiveAvgPool2d``, ``AdaptiveMaxPool1d/2d`` over
ops/pooling.py and ops/pooling_nd.py."""

from __future__ import annotations

from autodiag.nn import functional as F
from autodiag.nn.modules.module import Module


class _MaxPoolNd(Module):
    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPoolNd):
    """The maximum over windows of ``(N, C, L)`` input (as ``torch.nn.MaxPool1d``).

    >>> import autodiag as torch
    >>> torch.nn.MaxPool1d(2)(torch.tensor([[1.0, 3.0, 2.0, 0.0]]))
    tensor([[3., 2.]])
    """

    def forward(self, input):
        return F.max_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class MaxPool2d(_MaxPoolNd):
    """The maximum over windows of ``(N, C, H, W)`` input (as ``torch.nn.MaxPool2d``).

    >>> import autodiag as torch
    >>> torch.nn.MaxPool2d(2)
    MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
    """

    def forward(self, input):
        return F.max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class AvgPool2d(Module):
    """The mean over windows of ``(N, C, H, W)`` input (as ``torch.nn.AvgPool2d``).

    >>> import autodiag as torch
    >>> torch.nn.AvgPool2d(2)
    AvgPool2d(kernel_size=2, stride=2, padding=0)
    """

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override=None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """The mean over the windows that tile each plane into ``output_size`` (as
    ``torch.nn.AdaptiveAvgPool2d``; ``None`` keeps that dim's size).

    >>> import autodiag as torch
    >>> tuple(torch.nn.AdaptiveAvgPool2d((1, 1))(torch.ones(2, 3, 5, 4)).shape)
    (2, 3, 1, 1)
    """

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool3d(_MaxPoolNd):
    """The maximum over windows of ``(N, C, D, H, W)`` input (as ``torch.nn.MaxPool3d``).

    >>> import autodiag as torch
    >>> torch.nn.MaxPool3d(2)
    MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
    """

    def forward(self, input):
        return F.max_pool3d(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip


class AvgPool3d(AvgPool2d):
    """The mean over windows of ``(N, C, D, H, W)`` input (as ``torch.nn.AvgPool3d``).

    >>> import autodiag as torch
    >>> torch.nn.AvgPool3d(2)
    AvgPool3d(kernel_size=2, stride=2, padding=0)
    """

    def forward(self, input):
        return F.avg_pool3d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip


class _AdaptiveMaxPoolNd(Module):
    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """The maximum over the windows that tile each row into ``output_size`` (as
    ``torch.nn.AdaptiveMaxPool1d``).

    >>> import autodiag as torch
    >>> torch.nn.AdaptiveMaxPool1d(2)(torch.tensor([[1.0, 3.0, 2.0, 0.0, 5.0]]))
    tensor([[3., 5.]])
    """

    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """The maximum over the windows that tile each plane into ``output_size`` (as
    ``torch.nn.AdaptiveMaxPool2d``; ``None`` keeps that dim's size).

    >>> import autodiag as torch
    >>> tuple(torch.nn.AdaptiveMaxPool2d((2, None))(torch.ones(1, 3, 5, 4)).shape)
    (1, 3, 2, 4)
    """

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)
