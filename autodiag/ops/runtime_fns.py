"""``torch.<name>`` functions that are not ops (issue 20, cover16b): thread settings,
``set_flush_denormal``, and the predicates ``is_nonzero``, ``is_same_size``, ``is_signed``,
``result_type``, ``can_cast``; ``set_printoptions`` (printing.py).

NOTE [Thread settings]: autodiag computes with numpy, whose BLAS picks its own thread count (from
its environment, at import): ``set_num_threads`` and ``set_num_interop_threads`` validate their
argument as PyTorch does and record it for ``get_*``, which a program reads back; they change
no result (thread counts never change autodiag's numbers). ``set_flush_denormal(True)`` returns
False, as PyTorch does on a CPU without the feature: numpy keeps subnormals, so saying True
would be a lie; ``set_flush_denormal(False)`` returns True (that is the state).
"""

from __future__ import annotations

import os

from autodiag import dtypes
from autodiag.ops._core import TORCH_FUNCTIONS
from autodiag.printing import set_printoptions
from autodiag.tensor import Tensor


def _default_threads() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_threads = {"intra": _default_threads(), "inter": _default_threads(), "inter_set": False}


def _positive_int(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise RuntimeError(f"{name} expects an int, but got {type(n).__name__}")
    if n <= 0:
        raise RuntimeError(f"{name} expects a positive integer")
    return n


def set_num_threads(int) -> None:  # noqa: A002 - PyTorch's parameter name
    """Record the intra-op thread count (NOTE [Thread settings])."""
    _threads["intra"] = _positive_int("set_num_threads", int)


def get_num_threads() -> int:
    """The intra-op thread count last set (default: the CPUs this process may use)."""
    return _threads["intra"]


def set_num_interop_threads(int) -> None:  # noqa: A002
    """Record the inter-op thread count; once only, as in PyTorch (NOTE [Thread settings])."""
    n = _positive_int("set_num_interop_threads", int)
    if _threads["inter_set"]:
        raise RuntimeError(
            "Error: cannot set number of interop threads after parallel work has started or "
            "set_num_interop_threads called"
        )
    _threads["inter"], _threads["inter_set"] = n, True


def get_num_interop_threads() -> int:
    return _threads["inter"]


def set_flush_denormal(mode: bool) -> bool:
    """Whether the requested denormal mode holds: numpy keeps subnormals, so only ``False``."""
    return not mode


def _tensor(name: str, x, pos: int, arg: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}"
        )
    return x


def is_nonzero(input) -> bool:
    """``bool(input)`` for a one-element tensor; PyTorch's errors otherwise.

    >>> import autodiag as torch
    >>> torch.is_nonzero(torch.tensor([0.5]))
    True
    """
    x = _tensor("is_nonzero", input, 1, "input")
    n = x._data.size
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(x._data.reshape(()) != 0)


def is_same_size(input, other) -> bool:
    a = _tensor("is_same_size", input, 1, "input")
    b = _tensor("is_same_size", other, 2, "other")
    return a._data.shape == b._data.shape


def is_signed(input) -> bool:
    return _tensor("is_signed", input, 1, "input").dtype.is_signed


def result_type(tensor, other) -> dtypes.dtype:
    """The dtype an arithmetic op on ``tensor`` and ``other`` gives (PyTorch's rules).

    >>> import autodiag as torch
    >>> torch.result_type(torch.tensor([1, 2], dtype=torch.int32), 2.5)
    torch.float32
    """
    return dtypes.result_type((tensor, other))


def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rules allow ``from_`` -> ``to`` (never to a lower category:
    float to int, int to bool).

    >>> import autodiag as torch
    >>> torch.can_cast(torch.float64, torch.int64)
    False
    """
    for i, d in enumerate((from_, to)):
        if not isinstance(d, dtypes.dtype):
            arg = ("from_", "to")[i]
            raise TypeError(
                f"can_cast(): argument '{arg}' (position {i + 1}) must be torch.dtype, not "
                f"{type(d).__name__}"
            )
    return from_._kind <= to._kind


for _fn in (
    set_num_threads,
    get_num_threads,
    set_num_interop_threads,
    get_num_interop_threads,
    set_flush_denormal,
    is_nonzero,
    is_same_size,
    is_signed,
    result_type,
    can_cast,
    set_printoptions,
):
    TORCH_FUNCTIONS[_fn.__name__] = _fn
Tensor.is_nonzero = is_nonzero
Tensor.is_same_size = is_same_size
Tensor.is_signed = is_signed
