"""``DataLoader``, as ``torch.utils.data.dataloader``: batches from a dataset.

It composes a sampler (``SequentialSampler``, or ``RandomSampler`` with ``shuffle=True``), a
``BatchSampler`` (``batch_size``, ``drop_last``) and a ``collate_fn`` (``default_collate``;
``default_convert`` with ``batch_size=None``), and checks its arguments with PyTorch's messages.

Workers: autodiag never starts processes. With ``num_workers > 0`` a map-style dataset is loaded
in this process, which gives the batches PyTorch's workers give (same indices, same order);
an ``IterableDataset`` is refused there, because PyTorch runs one copy of its iterator per worker
(each sample once per worker unless the dataset shards itself), which a single process cannot
reproduce. ``worker_init_fn`` is refused for the same reason. ``pin_memory`` warns and is ignored
(no accelerator), as in PyTorch on a CPU-only machine.

>>> import autodiag as torch
>>> from autodiag.utils.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(torch.arange(5), torch.arange(5) * 2), batch_size=2)
>>> len(loader), [y.tolist() for _, y in loader]
(3, [[0, 2], [4, 6], [8]])
"""

from __future__ import annotations

import math

from autodiag import _warnings
from autodiag.utils.data._collate import default_collate, default_convert
from autodiag.utils.data.dataset import IterableDataset
from autodiag.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    _random_int64,
)

__all__ = ["DataLoader", "get_worker_info", "default_collate", "default_convert"]


def get_worker_info():
    """``None``: autodiag loads data in the calling process, never in a worker."""
    return None


class _InfiniteConstantSampler:
    """The sampler of an IterableDataset: ``None`` forever (the dataset decides)."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterate over ``dataset`` in batches (see the module docstring for workers)."""

    _initialized = False

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor "
                "to None."
            )
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if multiprocessing_context is not None and num_workers == 0:
            raise ValueError(
                "multiprocessing_context can only be used with multi-process "
                "loading (num_workers > 0), but got num_workers=0"
            )
        if worker_init_fn is not None and num_workers > 0:
            raise NotImplementedError(
                "DataLoader(worker_init_fn=...): autodiag loads data in this process and starts "
                "no workers, so worker_init_fn would never run as it does in PyTorch; "
                "drop worker_init_fn (and num_workers) to run on autodiag's engine."
            )
        if pin_memory:
            _warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used."
            )

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            self._iterable = True
            if num_workers > 0:
                raise NotImplementedError(
                    f"DataLoader(num_workers={num_workers}) with an IterableDataset: PyTorch "
                    "runs a copy of the dataset's iterator in every worker (each sample once "
                    "per worker unless the dataset shards itself with get_worker_info()), and "
                    "autodiag starts no workers, so it would load different data; use "
                    "num_workers=0."
                )
            if shuffle not in (False, None):
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle "
                    f"option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler "
                    f"option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got batch_sampler={batch_sampler}"
                )
        else:
            self._iterable = False
            shuffle = bool(shuffle)

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually "
                "exclusive with drop_last"
            )

        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._initialized = True

    def __setattr__(self, attr, val) -> None:
        if self._initialized and attr in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{attr} attribute should not be set after {type(self).__name__} is initialized"
            )
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        # PyTorch's iterator draws a base seed for its workers as it starts (an int64
        # random_() from the loader's generator): a seeded shuffle comes after that draw
        _random_int64(self.generator)
        collate_fn = self.collate_fn
        if self._iterable:
            return self._iter_iterable(collate_fn)
        return self._iter_map(collate_fn)

    def _iter_map(self, collate_fn):
        dataset = self.dataset
        if not self._auto_collation:
            for index in self.sampler:
                yield collate_fn(dataset[index])
            return
        getitems = getattr(dataset, "__getitems__", None)
        for indices in self.batch_sampler:
            if callable(getitems):
                data = getitems(indices)
            else:
                data = [dataset[i] for i in indices]
            yield collate_fn(data)

    def _iter_iterable(self, collate_fn):
        it = iter(self.dataset)
        if not self._auto_collation:
            for sample in it:
                yield collate_fn(sample)
            return
        while True:
            batch = []
            for sample in it:
                batch.append(sample)
                if len(batch) == self.batch_size:
                    break
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield collate_fn(batch)
            if len(batch) < self.batch_size:
                return

    def __len__(self) -> int:
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                length = (
                    length // self.batch_size
                    if self.drop_last
                    else math.ceil(length / self.batch_size)
                )
            return length
        return len(self._index_sampler)
