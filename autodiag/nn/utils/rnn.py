"""``torch.nn.utils.rnn``: padding and packing variable-length batches, as PyTorch's.

A ``PackedSequence`` holds the time-major ``data`` of a batch sorted by decreasing length,
``batch_sizes`` (how many sequences run at each step) and, for a batch that was not sorted,
the permutation that sorted it. ``RNN``/``LSTM``/``GRU`` take one and return one; each
sequence's final state is taken at its own last step.

>>> import autodiag as torch
>>> from autodiag.nn.utils.rnn import pack_sequence, pad_packed_sequence, pad_sequence
>>> pad_sequence([torch.ones(3), torch.ones(1)], batch_first=True).tolist()
[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
>>> packed = pack_sequence([torch.ones(3, 1), torch.ones(1, 1)])
>>> packed.batch_sizes
tensor([2, 1, 1])
>>> pad_packed_sequence(packed, batch_first=True)[1]
tensor([3, 1])
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable

from autodiag.ops.factories import full
from autodiag.tensor import Tensor

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_sequence",
    "unpack_sequence",
]

PackedSequence_ = namedtuple(
    "PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"]
)


def _bind(optional, fn):
    return None if optional is None else fn(optional)


class PackedSequence(PackedSequence_):
    """A packed batch: ``(data, batch_sizes, sorted_indices, unsorted_indices)``. Made by
    ``pack_padded_sequence``/``pack_sequence``, taken and returned by the recurrent layers."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same packing with ``data`` converted (``batch_sizes`` stays as it is)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self, *args, **kwargs):
        return self.to(*args, **kwargs)

    def double(self):
        from autodiag import dtypes

        return self.to(dtype=dtypes.float64)

    def float(self):
        from autodiag import dtypes

        return self.to(dtype=dtypes.float32)

    def long(self):
        from autodiag import dtypes

        return self.to(dtype=dtypes.int64)

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def invert_permutation(permutation):
    """The inverse of a permutation (``None`` stays ``None``)."""
    if permutation is None:
        return None
    import numpy as np

    from autodiag.ops.factories import tensor

    perm = np.asarray(permutation._data).reshape(-1)
    output = np.empty_like(perm)
    output[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
    return tensor(output)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):
    """Pack a padded batch (``T x B x *``, or ``B x T x *`` with ``batch_first``) whose
    sequences have ``lengths``; ``enforce_sorted=False`` sorts them (and remembers how).

    >>> import autodiag as torch
    >>> x = torch.arange(6.0).view(3, 2)
    >>> torch.nn.utils.rnn.pack_padded_sequence(x, [3, 1]).data
    tensor([0., 1., 2., 4.])
    """
    from autodiag import dtypes
    from autodiag.ops.factories import as_tensor
    from autodiag.ops.packed import _pack_padded_sequence
    from autodiag.ops.selection import sort

    if not isinstance(lengths, Tensor):
        lengths = as_tensor(lengths, dtype=dtypes.int64)
    else:
        lengths = lengths.to(dtype=dtypes.int64)
    if enforce_sorted:
        sorted_indices = None
    else:
        lengths, sorted_indices = sort(lengths, descending=True)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    data, batch_sizes = _pack_padded_sequence(input, lengths, batch_first)
    return PackedSequence(data, batch_sizes, sorted_indices, None)


def pad_packed_sequence(
    sequence, batch_first: bool = False, padding_value: float = 0.0, total_length=None
):
    """The inverse of ``pack_padded_sequence``: ``(padded batch, lengths)``, in the batch's
    original order; ``total_length`` pads to that many steps."""
    from autodiag.ops.packed import _pad_packed_sequence

    max_seq_length = sequence.batch_sizes.size(0)
    if total_length is not None:
        if total_length < max_seq_length:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being "
                f"{max_seq_length}"
            )
        max_seq_length = total_length
    padded_output, lengths = _pad_packed_sequence(
        sequence.data, sequence.batch_sizes, batch_first, padding_value, max_seq_length
    )
    unsorted_indices = sequence.unsorted_indices
    if unsorted_indices is not None:
        batch_dim = 0 if batch_first else 1
        return padded_output.index_select(batch_dim, unsorted_indices), lengths[unsorted_indices]
    return padded_output, lengths


def pack_sequence(sequences, enforce_sorted: bool = True):
    """Pack a list of variable-length sequences (``L_i x *``).

    >>> import autodiag as torch
    >>> p = torch.nn.utils.rnn.pack_sequence([torch.ones(2), torch.ones(3)], enforce_sorted=False)
    >>> p.batch_sizes, p.sorted_indices
    (tensor([2, 2, 1]), tensor([1, 0]))
    """
    from autodiag.ops.factories import as_tensor

    lengths = as_tensor([v.size(0) for v in sequences])
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences) -> list:
    """The list of the sequences a ``PackedSequence`` holds, in their original order."""
    padded_sequences, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded_sequences, lengths, batch_first=True)


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
