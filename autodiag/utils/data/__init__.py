"""``autodiag.utils.data``: datasets, samplers and ``DataLoader``, as ``torch.utils.data``.

Behaviour, defaults and error messages follow PyTorch. Two differences, both deliberate:
random order (``shuffle=True``, ``random_split``, random samplers) comes from autodiag's own
generator, so it is reproducible under ``torch.manual_seed`` or a ``torch.Generator`` but is not
PyTorch's permutation; and no worker process is ever started (see ``DataLoader``).

>>> import autodiag as torch
>>> from autodiag.utils.data import DataLoader, TensorDataset
>>> ds = TensorDataset(torch.arange(10.0).reshape(5, 2), torch.arange(5))
>>> loader = DataLoader(ds, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0))
>>> sorted(int(i) for _, y in loader for i in y)
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

from autodiag.utils.data._collate import default_collate, default_convert
from autodiag.utils.data.dataloader import DataLoader, get_worker_info
from autodiag.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from autodiag.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]
