"""``torch.backends.mha``: the switch for PyTorch's multi-head-attention inference fast path.

autodiag has no separate fast kernel: its attention always runs the ordinary path, which gives
the fast path's values. The switch still matters for one visible effect the fast path has:
``nn.TransformerEncoder`` in eval mode with a ``src_key_padding_mask`` returns zeros at the
padded positions (PyTorch packs the batch into a nested tensor), and does not when the switch
is off.

>>> import autodiag as torch
>>> torch.backends.mha.get_fastpath_enabled()
True
"""

from __future__ import annotations

_enabled = True


def get_fastpath_enabled() -> bool:
    """Whether the fast path is on (default True, as in PyTorch)."""
    return _enabled


def set_fastpath_enabled(value: bool) -> None:
    """Turn the fast path on or off."""
    global _enabled
    _enabled = bool(value)
