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
