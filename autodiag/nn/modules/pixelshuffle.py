"""``nn.PixelShuffle`` and ``nn.PixelUnshuffle``: the modules of ``F.pixel_shuffle`` and
``F.pixel_unshuffle`` (ops/shape2.py)."""

from __future__ import annotations

from autodiag.nn.modules.module import Module
from autodiag.ops.shape2 import pixel_shuffle, pixel_unshuffle


class PixelShuffle(Module):
    """``(*, C * r^2, H, W)`` to ``(*, C, H * r, W * r)`` (sub-pixel upsampling).

    >>> import autodiag as torch
    >>> torch.nn.PixelShuffle(2)(torch.ones(1, 8, 3, 3)).shape
    torch.Size([1, 2, 6, 6])
    """

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """The inverse of ``PixelShuffle``: ``(*, C, H * r, W * r)`` to ``(*, C * r^2, H, W)``.

    >>> import autodiag as torch
    >>> torch.nn.PixelUnshuffle(2)(torch.ones(1, 2, 6, 6)).shape
    torch.Size([1, 8, 3, 3])
    """

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
