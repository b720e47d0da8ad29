"""Tensor factories: tensor, as_tensor, from_numpy, zeros/ones/full/empty, eye, arange,
linspace, random tensors and ``*_like``.

Random numbers come from numpy's generator seeded by ``manual_seed``: reproducible, but not the
same stream as PyTorch's (tests copy values across instead of relying on seeds).
"""

from __future__ import annotations

import collections.abc
import numbers

import numpy as np

from autodiag import _device, dtypes
from autodiag.ops._core import register, wrap
from autodiag.tensor import REQUIRES_GRAD_DTYPE_ERROR, Tensor

_rng = [np.random.default_rng()]


def get_rng_state():
    return _rng[0].bit_generator.state


def set_rng_state(state) -> None:
    _rng[0].bit_generator.state = state


def manual_seed(seed: int):
    """Seed autodiag's random number generator."""
    _rng[0] = np.random.default_rng(int(seed))
    return _rng[0]


seed = manual_seed


def _finish(data: np.ndarray, requires_grad: bool) -> Tensor:
    t = wrap(data)
    if requires_grad:
        if data.dtype.kind not in "fc":
            raise RuntimeError(REQUIRES_GRAD_DTYPE_ERROR)
        t.requires_grad_(True)
    return t


def _infer_np_dtype(data) -> np.dtype:
    """PyTorch's inference: bools -> bool, ints -> int64, any float -> default dtype."""
    flat = data
    kinds = set()
    np_floats: list = []
    stack = [flat]
    while stack:
        x = stack.pop()
        if isinstance(x, Tensor):
            kinds.add(x._data.dtype.kind)
        elif isinstance(x, _SEQUENCES) or _is_sequence(x):
            stack.extend(x)
        elif isinstance(x, np.floating):  # a numpy scalar keeps its precision, as in PyTorch
            np_floats.append(x.dtype)
        elif isinstance(x, (bool, np.bool_)):
            kinds.add("b")
        elif isinstance(x, numbers.Integral):
            kinds.add("i")
        elif isinstance(x, numbers.Real):
            kinds.add("f")
        elif isinstance(x, numbers.Complex):
            raise NotImplementedError("autodiag: complex tensors are not supported")
        else:
            raise TypeError(f"new(): invalid data type '{type(x).__name__}'")
    if np_floats:
        default = [dtypes.get_default_dtype().np] if "f" in kinds else []
        return np.result_type(*np_floats, *default)
    if "f" in kinds:
        return dtypes.get_default_dtype().np
    if "i" in kinds or "u" in kinds:
        return np.dtype(np.int64)
    if "b" in kinds:
        return np.dtype(np.bool_)
    return dtypes.get_default_dtype().np


_SEQUENCES = (list, tuple, range)


def _is_sequence(x) -> bool:
    """Any other sequence PyTorch reads as data (a deque, a user's Sequence); not a string."""
    return isinstance(x, collections.abc.Sequence) and not isinstance(x, (str, bytes))


def _to_nested(x):
    if isinstance(x, Tensor):
        return x._data
    if isinstance(x, _SEQUENCES) or _is_sequence(x):
        return [_to_nested(i) for i in x]
    return x


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, (int, np.integer)):
            raise TypeError(f"expected a sequence of integers, got {type(s).__name__}")
        if s < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {s}: "
                f"[{', '.join(map(str, size))}]"
            )
    return tuple(int(s) for s in size)


@register(method=False)
def tensor(
    data, *, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False
) -> Tensor:
    """A new leaf tensor copying ``data`` (nested lists, numbers, numpy arrays or tensors).

    >>> import autodiag as torch
    >>> torch.tensor([[1, 2], [3, 4]]).dtype
    torch.int64
    """
    if device is not None:
        _device.check(device)
    if isinstance(data, Tensor):
        arr = data._data.copy()
    elif isinstance(data, np.ndarray):
        dtypes.from_numpy_dtype(data.dtype)
        arr = data.copy()
    else:
        npdt = dtypes.to_np(dtype) if dtype is not None else _infer_np_dtype(data)
        arr = np.array(_to_nested(data), dtype=npdt)
    if dtype is not None:
        arr = arr.astype(dtypes.to_np(dtype), copy=False)
    return _finish(arr, requires_grad)


@register(method=False)
def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype is dtype else data.to(dtype)
    if isinstance(data, np.ndarray):
        arr = data if dtype is None else data.astype(dtypes.to_np(dtype), copy=False)
        return wrap(arr)
    return tensor(data, dtype=dtype)


@register(method=False)
def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``ndarray``."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    dtypes.from_numpy_dtype(ndarray.dtype)
    return wrap(ndarray)


def _dt(dtype, default=None) -> np.dtype:
    if dtype is None:
        return default if default is not None else dtypes.get_default_dtype().np
    return dtypes.to_np(dtype)


def _filled(fill, size, dtype, requires_grad):
    return _finish(np.full(_shape(size), fill, dtype=_dt(dtype)), requires_grad)


@register(method=False)
def zeros(*size, dtype=None, device=None, requires_grad: bool = False, out=None) -> Tensor:
    return _filled(0, size, dtype, requires_grad)


@register(method=False)
def ones(*size, dtype=None, device=None, requires_grad: bool = False, out=None) -> Tensor:
    return _filled(1, size, dtype, requires_grad)


@register(method=False)
def empty(*size, dtype=None, device=None, requires_grad: bool = False, **kw) -> Tensor:
    return _filled(0, size, dtype, requires_grad)


@register(method=False)
def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        if isinstance(fill_value, (bool, np.bool_)):
            dtype = dtypes.bool
        elif isinstance(fill_value, numbers.Integral):
            dtype = dtypes.int64
    return _finish(np.full(_shape((size,)), fill_value, dtype=_dt(dtype)), requires_grad)


@register(method=False)
def eye(
    n: int, m: int | None = None, *, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    return _finish(np.eye(n, m, dtype=_dt(dtype)), requires_grad)


@register(method=False)
def arange(
    start, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        dtype = dtypes.int64 if all(isinstance(v, numbers.Integral) for v in vals) else None
    if vals[2] == 0:
        raise RuntimeError("step must be nonzero")
    return _finish(np.arange(*vals, dtype=np.float64).astype(_dt(dtype)), requires_grad)


@register(method=False)
def linspace(
    start, end, steps: int, *, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    return _finish(np.linspace(start, end, steps).astype(_dt(dtype)), requires_grad)


def _stream(generator):
    """The numpy stream to draw from: the global one, or a ``torch.Generator``'s."""
    if generator is None:
        return _rng[0]
    from autodiag.generator import rng_of

    return rng_of(generator)


@register(method=False)
def rand(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _finish(_stream(generator).random(_shape(size)).astype(_dt(dtype)), requires_grad)


@register(method=False)
def randn(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _finish(
        _stream(generator).standard_normal(_shape(size)).astype(_dt(dtype)), requires_grad
    )


@register(method=False)
def randint(
    low,
    high=None,
    size=None,
    *,
    generator=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
) -> Tensor:
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    out = _stream(generator).integers(low, high, size=_shape((size,)))
    return _finish(out.astype(_dt(dtype, np.dtype(np.int64))), requires_grad)


@register(method=False)
def randperm(
    n: int, *, generator=None, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    return _finish(
        _stream(generator).permutation(n).astype(_dt(dtype, np.dtype(np.int64))), requires_grad
    )


@register(method=False)
def normal(mean=0.0, std=1.0, size=None, *, generator=None) -> Tensor:
    return wrap(
        _stream(generator)
        .normal(mean, std, size=_shape((size,)))
        .astype(dtypes.get_default_dtype().np)
    )


def _like(maker):
    def like(input, *, dtype=None, device=None, requires_grad: bool = False, **kw):
        dt = dtype if dtype is not None else input.dtype
        extra = {"generator": kw["generator"]} if kw.get("generator") is not None else {}
        return maker(*input._data.shape, dtype=dt, requires_grad=requires_grad, **extra)

    return like


zeros_like = register("zeros_like", method=False)(_like(zeros))
ones_like = register("ones_like", method=False)(_like(ones))
empty_like = register("empty_like", method=False)(_like(empty))
rand_like = register("rand_like", method=False)(_like(rand))
randn_like = register("randn_like", method=False)(_like(randn))


@register(method=False)
def full_like(input, fill_value, *, dtype=None, device=None, requires_grad: bool = False):
    return full(
        input._data.shape, fill_value, dtype=dtype or input.dtype, requires_grad=requires_grad
    )


def _new_factory(maker):
    def new(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return maker(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    return new


Tensor.new_zeros = _new_factory(zeros)
Tensor.new_ones = _new_factory(ones)
Tensor.new_empty = _new_factory(empty)
Tensor.new_tensor = lambda self, data, dtype=None, requires_grad=False: tensor(
    data, dtype=dtype or self.dtype, requires_grad=requires_grad
)
Tensor.new_full = lambda self, size, fill, dtype=None, requires_grad=False: full(
    size, fill, dtype=dtype or self.dtype, requires_grad=requires_grad
)


def _random_inplace(name, draw):
    def method(self, *args, **kwargs):
        from autodiag.ops.inplace import bump_version, check_inplace

        check_inplace(self, name)
        self._data[...] = draw(self._data.shape, *args, **kwargs)
        bump_version(self, name)
        return self

    setattr(Tensor, name, method)


_random_inplace(
    "uniform_", lambda shape, a=0.0, b=1.0, generator=None: _stream(generator).uniform(a, b, shape)
)
_random_inplace(
    "normal_",
    lambda shape, mean=0.0, std=1.0, generator=None: _stream(generator).normal(mean, std, shape),
)
_random_inplace(
    "bernoulli_", lambda shape, p=0.5, generator=None: _stream(generator).random(shape) < p
)
