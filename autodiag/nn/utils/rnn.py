"""``torch.nn.utils.rnn``: ``pad_sequence``; packed sequences are not supported.

``pack_padded_sequence``, ``pack_sequence`` and ``pad_packed_sequence`` raise
``NotImplementedError`` naming themselves (the recurrent layers take padded batches only), so a
script that packs stops at the line that packs instead of computing something else.

>>> import autodiag as torch
>>> from autodiag.nn.utils.rnn import pad_sequence
>>> pad_sequence([torch.ones(3), torch.ones(1)], batch_first=True).tolist()
[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Iterable

from autodiag.ops.factories import full
from autodiag.tensor import Tensor

__all__ = [
    "PackedSequence",
    "pad_sequence",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pack_sequence",
    "unpad_sequence",
]


def _unsupported(name: str):
    return NotImplementedError(
        f"torch.nn.utils.rnn.{name}: packed sequences are not supported by autodiag; pass the "
        "padded batch (pad_sequence) to the recurrent layer and mask the padding in the loss"
    )


class PackedSequence:
    """Stands for PyTorch's ``PackedSequence`` (``isinstance`` checks work); making one raises
    ``NotImplementedError``: autodiag's recurrent layers take padded batches only."""

    def __new__(cls, *args, **kwargs):
        raise _unsupported("PackedSequence")


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Not supported: raises ``NotImplementedError``."""
    raise _unsupported("pack_padded_sequence")


def pad_packed_sequence(
    sequence, batch_first=False, padding_value=0.0, total_length=None, padding_side="right"
):
    """Not supported: raises ``NotImplementedError``."""
    raise _unsupported("pad_packed_sequence")


def pack_sequence(sequences, enforce_sorted=True):
    """Not supported: raises ``NotImplementedError``."""
    raise _unsupported("pack_sequence")


def pad_sequence(
    sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack variable-length sequences (``L_i x *``) into ``T x B x *`` (``B x T x *`` with
    ``batch_first``), filling with ``padding_value`` on the right (or the left). Recorded as
    PyTorch records it: slice copies into a filled tensor (``CopySlices``).

    >>> import autodiag as torch
    >>> a = torch.ones(2, 1, requires_grad=True)
    >>> p = torch.nn.utils.rnn.pad_sequence([a, torch.ones(3, 1)], padding_value=-1.0)
    >>> tuple(p.shape), p.grad_fn.name(), p[:, 0, 0].tolist()
    ((3, 2, 1), 'torch::autograd::CopySlices', [1.0, 1.0, -1.0])
    """
    if not isinstance(sequences, Iterable):
        raise RuntimeError(
            "pad_sequence: Expected iterable for input sequences, but got arg of type: "
            f"{type(sequences)}"
        )
    sequences = tuple(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(
            f"Expected padding_side to be one of left or right, but got {padding_side}."
        )
    first = sequences[0]
    max_len = max(s.size(0) for s in sequences)
    trailing = tuple(first.shape[1:])
    n = len(sequences)
    dims = (n, max_len, *trailing) if batch_first else (max_len, n, *trailing)
    out = full(dims, padding_value, dtype=first.dtype)
    for i, seq in enumerate(sequences):
        length = seq.size(0)
        start = max_len - length if padding_side == "left" else 0
        if batch_first:
            out.select(0, i).narrow(0, start, length).copy_(seq)
        else:
            out.narrow(0, start, length).select(1, i).copy_(seq)
    return out


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list:
    """The inverse of ``pad_sequence``: the list of the sequences, each cut to its length."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[: int(length)] for seq, length in zip(padded_sequences, lengths)]
