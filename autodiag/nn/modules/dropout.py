"""``Dropout``."""

from __future__ import annotations

from autodiag.nn import functional as F
from autodiag.nn.modules.module import Module


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode (scaling the rest by 1/(1-p));
    the identity in eval mode. The mask comes from autodiag's generator (``manual_seed``).

    >>> import autodiag as torch
    >>> d = torch.nn.Dropout(0.5).eval()
    >>> x = torch.ones(3)
    >>> d(x) is x
    True
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zeroes whole channels of ``(N, C, H, W)`` input with probability ``p`` in training
    mode (as ``torch.nn.Dropout2d``); the identity in eval mode.

    >>> import autodiag as torch
    >>> torch.nn.Dropout2d(0.3)
    Dropout2d(p=0.3, inplace=False)
    """

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout1d(Dropout):
    """Zeroes whole channels of ``(N, C, L)`` input with probability ``p`` in training mode
    (as ``torch.nn.Dropout1d``).

    >>> import autodiag as torch
    >>> torch.nn.Dropout1d(0.3)
    Dropout1d(p=0.3, inplace=False)
    """

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)
