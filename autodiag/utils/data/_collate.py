"""``default_collate`` and ``default_convert``: a list of samples -> a batch, as PyTorch's.

Tensors are stacked; Python ints become int64 tensors (bools: bool), floats float64 tensors;
numpy arrays and scalars become tensors of their dtype; strings and bytes are kept (the
batch's list, or the tuple of a field); mappings, namedtuples and sequences are collated field
by field (a tuple of fields gives a list, as in PyTorch).

>>> from autodiag.utils.data import default_collate
>>> default_collate([(0, 1.5, "a"), (2, 3.5, "b")])
[tensor([0, 2]), tensor([1.5000, 3.5000], dtype=torch.float64), ('a', 'b')]
"""

from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from autodiag import dtypes
from autodiag.ops import factories, shape
from autodiag.tensor import Tensor

__all__ = ["default_collate", "default_convert", "collate", "default_collate_fn_map"]

np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def default_convert(data):
    """Numpy arrays (inside sequences and mappings too) -> tensors; the rest unchanged. The
    ``collate_fn`` of a ``DataLoader`` with ``batch_size=None``."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if elem_type.__name__ == "ndarray" and np_str_obj_array_pattern.search(data.dtype.str):
            return data
        return factories.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # a list, as PyTorch (compatibility)
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collate ``batch`` (a list of samples) with per-type functions from ``collate_fn_map``
    (exact type first, then the first ``isinstance`` match), recursing into containers."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(
                    {
                        key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                        for key in elem
                    }
                )
                return clone
            return elem_type(
                {
                    key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                    for key in elem
                }
            )
        except TypeError:
            return {
                key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem
            }
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(
            *(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch))
        )
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))  # tuples: strings inside stay a tuple, as in PyTorch
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type(
                [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
            )
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return shape.stack(batch, 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([factories.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    # NOTE: through np.array, which keeps the scalars' dtype (int32 stays int32, as PyTorch's
    # as_tensor of numpy scalars does)
    return factories.as_tensor(np.array(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    # NOTE: float64, not the default dtype: PyTorch keeps Python floats' precision here
    return factories.tensor(batch, dtype=dtypes.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return factories.tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map: dict = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """A list of samples -> one batch (the ``collate_fn`` of a batching ``DataLoader``).

    >>> import autodiag as torch
    >>> default_collate([{"x": torch.tensor([1.0, 2.0]), "y": 0},
    ...                  {"x": torch.tensor([3.0, 4.0]), "y": 1}])
    {'x': tensor([[1., 2.],
            [3., 4.]]), 'y': tensor([0, 1])}
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)
