"""Datasets, as ``torch.utils.data.dataset``: ``Dataset``, ``IterableDataset``,
``TensorDataset``, ``StackDataset``, ``ConcatDataset``, ``ChainDataset``, ``Subset`` and
``random_split``, with PyTorch's behaviour and error messages.

>>> import autodiag as torch
>>> from autodiag.utils.data import TensorDataset, random_split
>>> ds = TensorDataset(torch.arange(6), torch.arange(6) * 10)
>>> ds[2]
(tensor(2), tensor(20))
>>> [len(s) for s in random_split(ds, [0.5, 0.5], generator=torch.Generator().manual_seed(0))]
[3, 3]
"""

from __future__ import annotations

import bisect
import collections.abc
import itertools
import math

from autodiag import _warnings
from autodiag.generator import default_generator
from autodiag.ops.factories import randperm

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "StackDataset",
    "ConcatDataset",
    "ChainDataset",
    "Subset",
    "random_split",
]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and usually ``__len__``);
    ``a + b`` is ``ConcatDataset([a, b])``."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])

    # no default __len__, as in PyTorch: len() of a dataset without one is a TypeError

    def __class_getitem__(cls, item):  # ``Dataset[int]`` in type hints, as PyTorch's Generic
        return cls


class IterableDataset(Dataset, collections.abc.Iterable):
    """An iterable-style dataset: subclasses define ``__iter__`` (abstract, as in PyTorch);
    ``a + b`` chains them."""

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are tuples of the tensors indexed along their first dimension.

    >>> import autodiag as torch
    >>> TensorDataset(torch.zeros(3, 2), torch.zeros(2))
    Traceback (most recent call last):
    ...
    AssertionError: Size mismatch between tensors
    """

    def __init__(self, *tensors) -> None:
        if any(tensors[0].size(0) != tensor.size(0) for tensor in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Datasets side by side: ``StackDataset(a, b)[i] == (a[i], b[i])``,
    ``StackDataset(x=a, y=b)[i] == {"x": a[i], "y": b[i]}``."""

    def __init__(self, *args, **kwargs) -> None:
        if args:
            if kwargs:
                raise ValueError(
                    "Supported either ``tuple``- (via ``args``) or"
                    "``dict``- (via ``kwargs``) like input/output, but both types are given."
                )
            parts = list(args)
            self.datasets = args
        elif kwargs:
            parts = list(kwargs.values())
            self.datasets = kwargs
        else:
            raise ValueError("At least one dataset should be passed")
        self._length = len(parts[0])
        if any(self._length != len(d) for d in parts):
            raise ValueError("Size mismatch between datasets")

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """Map-style datasets one after the other (``cumulative_sizes`` as in PyTorch)."""

    @staticmethod
    def cumsum(sequence):
        r, s = [], 0
        for e in sequence:
            s += len(e)
            r.append(s)
        return r

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        # NOTE: an index past the end falls off the last dataset: IndexError from it, as in
        # PyTorch (bisect gives len(datasets) -> list index out of range)
        return self.datasets[dataset_idx][sample_idx]


class ChainDataset(IterableDataset):
    """Iterable datasets one after the other."""

    def __init__(self, datasets) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, generator=default_generator) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random ``Subset``s of the given lengths, or of
    fractions summing to 1 (``floor(frac * len)`` each, the remainder handed out one by one
    from the first split on, as PyTorch does).

    The split is a random permutation drawn from ``generator`` (default: the global stream
    ``torch.manual_seed`` seeds): reproducible under a seed, but not PyTorch's permutation.
    """
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths: list[int] = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(math.floor(len(dataset) * frac))
        remainder = len(dataset) - sum(subset_lengths)
        for i in range(remainder):  # round-robin, as PyTorch
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                _warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset."
                )
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    for i, length in enumerate(lengths):
        if length < 0 or length != int(length):
            # PyTorch fails inside randperm / slicing here; say what is wrong instead
            raise ValueError(
                f"random_split: length at index {i} must be a non-negative "
                f"integer (or all lengths fractions summing to 1), got {length!r}"
            )
    lengths = [int(n) for n in lengths]
    indices = randperm(sum(lengths), generator=generator).tolist()
    return [
        Subset(dataset, indices[offset - length : offset])
        for offset, length in zip(itertools.accumulate(lengths), lengths)
    ]
