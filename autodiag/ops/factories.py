"""Tensor factories: tensor, as_tensor, from_numpy, zeros/ones/full/empty, eye, arange,
linspace, random tensors and ``*_like``.

Random tensors draw from PyTorch's CPU stream (ops/rng.py): after ``manual_seed(s)``,
``rand``/``randn``/``randint``/``randperm``/... give torch's numbers, bit for bit.
"""

from __future__ import annotations

import collections.abc
import math
import numbers

import numpy as np

from autodiag import _device, _warnings, dtypes
from autodiag.ops import rng, views
from autodiag.ops._avx_mathfun import fma32
from autodiag.ops._core import _state, register, wrap
from autodiag.ops._scalar_convert import checked_scalar
from autodiag.tensor import REQUIRES_GRAD_DTYPE_ERROR, Tensor

# the global stream (torch.default_generator's): manual_seed and set_rng_state put a new Stream
# here rather than change the old one, so code that saved the old one can put it back
_rng = [rng.Stream()]

_MASK64 = (1 << 64) - 1


def seed_value(seed) -> int:
    """A seed as PyTorch takes it: any int in [-2**63, 2**64), negatives wrapping to 64 bits."""
    seed = int(seed)
    if not -(1 << 63) <= seed <= _MASK64:
        raise ValueError("Overflow when unpacking long long")
    return seed & _MASK64


def state_bytes(new_state) -> np.ndarray:
    """The bytes of a ``get_rng_state()`` tensor, checked as PyTorch checks them."""
    if not isinstance(new_state, Tensor) or new_state._data.dtype != np.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")
    raw = np.ascontiguousarray(new_state._data).ravel()
    if raw.size != rng.STATE_BYTES:
        raise RuntimeError(
            f"Expected a CPUGeneratorImplState of size {rng.STATE_BYTES} but found the input "
            f"RNG state size to be {raw.size}"
        )
    return raw


def get_rng_state() -> Tensor:
    """The global stream's state: PyTorch's 5056-byte ``uint8`` layout."""
    return wrap(_rng[0].get_state())


def set_rng_state(new_state) -> None:
    """Restore a state from ``get_rng_state()`` (autodiag's or PyTorch's)."""
    _rng[0] = rng.Stream.from_state(state_bytes(new_state))


def manual_seed(seed) -> rng.Stream:
    """Seed the global stream; returns it."""
    _rng[0] = rng.Stream(seed_value(seed))
    return _rng[0]


def seed() -> int:
    """Seed the global stream from the operating system's entropy; returns the seed."""
    stream = rng.Stream()
    _rng[0] = stream
    return stream.seed


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


COPY_CONSTRUCT_WARNING = (
    "To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
    "sourceTensor.detach().clone().requires_grad_(True), rather than torch.tensor(sourceTensor)."
)


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
        _warnings.warn(COPY_CONSTRUCT_WARNING)  # PyTorch's, at the user's line
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
        if isinstance(fill_value, bool):  # not numpy's bool_: PyTorch gives it the default
            dtype = dtypes.bool
        elif isinstance(fill_value, numbers.Integral):
            dtype = dtypes.int64
        elif isinstance(fill_value, numbers.Complex) and not isinstance(fill_value, numbers.Real):
            raise NotImplementedError("autodiag: complex tensors are not supported")
    value = checked_scalar(fill_value, _dt(dtype), "full")
    return _finish(np.full(_shape((size,)), value), requires_grad)


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
    dt = _dt(dtype)
    if steps < 2 or dt.kind not in "fiu" or dt.itemsize < 4:
        return _finish(np.linspace(start, end, steps).astype(dt), requires_grad)
    return _finish(_torch_linspace(start, end, steps, dt), requires_grad)


# NOTE [linspace's halves]: PyTorch's CPU kernel computes ``start + step * i`` for the first
# half and ``end - step * (steps - 1 - i)`` for the second, in the output's type (double for
# integers, then truncated), with the multiply-add fused by the compiler. numpy's linspace
# (``start + i * step``) differs in the last bit for about a third of the float32 values.


def _torch_linspace(start, end, steps: int, dt: np.dtype) -> np.ndarray:
    i = np.arange(steps)
    first = i < steps // 2
    k = np.where(first, i, steps - 1 - i)
    if dt == np.float32:
        s, e = np.float32(start), np.float32(end)
        step = np.float32(e - s) / np.float32(steps - 1)
        return np.where(
            first, fma32(step, k.astype(np.float32), s), fma32(-step, k.astype(np.float32), e)
        )
    if dt.kind == "f":
        s, e = float(start), float(end)
    else:  # integers: start and end converted first, the steps in double
        s, e = float(dt.type(start)), float(dt.type(end))
    step = (e - s) / (steps - 1)
    out = np.where(first, _fma64(step, k, s), _fma64(-step, k, e))
    return out if dt.kind == "f" else out.astype(dt)


def _fma64(a, b, c) -> np.ndarray:
    """``a * b + c`` in float64 with one rounding (as the compiler's fused multiply-add):
    the product split exactly (Dekker), the sum's error kept (TwoSum), then added once."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    p = a * b
    ah, bh = a * 134217729.0, b * 134217729.0  # Veltkamp split: 2**27 + 1
    ah, bh = ah - (ah - a), bh - (bh - b)
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl  # a * b == p + e exactly
    s = p + c
    bv = s - p
    es = (p - (s - bv)) + (c - bv)  # p + c == s + es exactly
    return s + (es + e)


def _stream(generator) -> rng.Stream:
    """The stream to draw from: the global one, or a ``torch.Generator``'s."""
    if generator is None:
        return _rng[0]
    from autodiag.generator import stream_of

    return stream_of(generator)


def _numel(shape: tuple) -> int:
    return math.prod(shape)


def _float_dtype(dtype, op: str) -> np.dtype:
    dt = _dt(dtype)
    if dt.kind != "f":
        raise NotImplementedError(
            f"\"{op}\" not implemented for '{dtypes.from_numpy_dtype(dt).scalar_name}'"
        )
    return dt


@register(method=False)
def rand(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform numbers in [0, 1), PyTorch's stream.

    >>> import autodiag as torch
    >>> _ = torch.manual_seed(0)
    >>> torch.rand(2)
    tensor([0.4963, 0.7682])
    """
    shape = _shape(size)
    dt = _float_dtype(dtype, "check_uniform_bounds")
    data = rng.uniform(_stream(generator), _numel(shape), dt).reshape(shape)
    return _finish(data, requires_grad)


@register(method=False)
def randn(*size, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers, PyTorch's stream.

    >>> import autodiag as torch
    >>> _ = torch.manual_seed(0)
    >>> torch.randn(2)
    tensor([ 1.5410, -0.2934])
    """
    shape = _shape(size)
    dt = _float_dtype(dtype, "normal_kernel_cpu")
    data = rng.normal(_stream(generator), _numel(shape), dt).reshape(shape)
    return _finish(data, requires_grad)


def _check_range(low: int, high: int) -> None:
    if low >= high:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
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
    """Integers drawn uniformly from [low, high), PyTorch's stream.

    >>> import autodiag as torch
    >>> _ = torch.manual_seed(0)
    >>> torch.randint(10, (4,))
    tensor([4, 9, 3, 0])
    """
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    _check_range(low, high)
    shape = _shape((size,))
    dt = _dt(dtype, np.dtype(np.int64))
    data = rng.random_from_to(_stream(generator), _numel(shape), dt, low, high)
    return _finish(data.reshape(shape), requires_grad)


@register(method=False)
def randint_like(
    input, low=0, high=None, *, generator=None, dtype=None, device=None, requires_grad=False
) -> Tensor:
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    _check_range(low, high)
    dt = _dt(dtype, input._data.dtype)
    out = rng.empty_like(input._data, dt)  # input's layout, drawn in memory order
    rng.fill(out, rng.random_from_to(_stream(generator), out.size, dt, low, high).astype(dt))
    return _finish(out, requires_grad)


@register(method=False)
def randperm(
    n: int, *, generator=None, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    """A random permutation of ``range(n)``, PyTorch's stream.

    >>> import autodiag as torch
    >>> _ = torch.manual_seed(0)
    >>> torch.randperm(5)
    tensor([4, 0, 1, 3, 2])
    """
    n = int(n)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    data = rng.randperm(_stream(generator), n)
    return _finish(data.astype(_dt(dtype, np.dtype(np.int64))), requires_grad)


def _normal_operand(x):
    return x if isinstance(x, Tensor) else None


@register(method=False)
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, out=None) -> Tensor:
    """``normal(mean, std, size)`` with numbers, or with a tensor mean and/or std (one draw
    per element of their broadcast shape), PyTorch's stream and arithmetic."""
    tm, ts = _normal_operand(mean), _normal_operand(std)
    if out is not None:
        raise NotImplementedError("autodiag: normal(out=...) is not supported")
    stream = _stream(generator)
    if tm is None and ts is None:
        if size is None:
            raise TypeError("normal() missing 1 required positional argument: 'size'")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        shape = _shape((size,))
        dt = _float_dtype(dtype, "normal_kernel_cpu")
        return wrap(rng.normal(stream, _numel(shape), dt, mean, std).reshape(shape))
    if _state.record and any(t is not None and t.requires_grad for t in (tm, ts)):
        raise NotImplementedError(
            "autodiag: normal with a mean or std tensor that requires grad is not supported"
        )
    if ts is not None and (ts._data < 0).any():
        raise RuntimeError("normal expects all elements of std >= 0.0")
    dt = (tm if tm is not None else ts)._data.dtype
    if tm is not None and ts is not None:
        dt = np.result_type(tm._data.dtype, ts._data.dtype)
    shape = np.broadcast_shapes(*(t._data.shape for t in (tm, ts) if t is not None))
    n = _numel(shape)
    if ts is None:  # ATen: normal_(0, std), then + mean
        z = rng.normal(stream, n, dt, 0.0, std).reshape(shape)
        return wrap((z + tm._data).astype(dt))
    z = rng.normal(stream, n, dt).reshape(shape)  # normal_(0, 1), then * std + mean
    m = tm._data if tm is not None else np.asarray(mean, dtype=dt)
    return wrap(((z * ts._data).astype(dt) + m).astype(dt))


def _like(maker):
    def like(input, *, dtype=None, device=None, requires_grad: bool = False, **kw):
        dt = dtype if dtype is not None else input.dtype
        extra = {"generator": kw["generator"]} if kw.get("generator") is not None else {}
        return maker(*input._data.shape, dtype=dt, requires_grad=requires_grad, **extra)

    return like


zeros_like = register("zeros_like", method=False)(_like(zeros))
ones_like = register("ones_like", method=False)(_like(ones))
empty_like = register("empty_like", method=False)(_like(empty))


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
    """``Tensor.<name>(...)``: fill the tensor from a stream (NOTE [Draw order] in rng.py)."""

    def method(self, *args, **kwargs):
        from autodiag.ops.inplace import bump_version, check_inplace

        check_inplace(self, name)
        d = self._data
        if views.overlaps(d):  # an expanded tensor: PyTorch's TensorIterator refuses it
            raise RuntimeError(views.OVERLAP_ERROR)
        values = draw(d, *args, **kwargs)
        rng.fill(d, np.asarray(values).astype(d.dtype, copy=False))
        bump_version(self, name)
        return self

    method.__name__ = name
    setattr(Tensor, name, method)


def _uniform(d, a=0.0, b=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise NotImplementedError(
            f'"check_uniform_bounds" not implemented for '
            f"'{dtypes.from_numpy_dtype(d.dtype).scalar_name}'"
        )
    if a > b:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}"
        )
    return rng.uniform(_stream(generator), d.size, d.dtype, a, b)


def _normal(d, mean=0.0, std=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise NotImplementedError(
            f'"normal_kernel_cpu" not implemented for '
            f"'{dtypes.from_numpy_dtype(d.dtype).scalar_name}'"
        )
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    contiguous = d.flags.c_contiguous
    return rng.normal(_stream(generator), d.size, d.dtype, mean, std, contiguous=contiguous)


def _drawn_like(draw, op: str):
    """``rand_like``/``randn_like``: ``at::empty_like(input)`` (a transposed input's layout,
    NOTE [Draw order] in rng.py) filled in memory order, as ``uniform_``/``normal_`` fill it."""

    def like(input, *, dtype=None, device=None, requires_grad: bool = False, generator=None, **kw):
        dt = _float_dtype(dtype if dtype is not None else input.dtype, op)
        out = rng.empty_like(input._data, dt)
        rng.fill(out, np.asarray(draw(out, generator=generator)).astype(dt, copy=False))
        return _finish(out, requires_grad)

    return like


rand_like = register("rand_like", method=False)(_drawn_like(_uniform, "check_uniform_bounds"))
randn_like = register("randn_like", method=False)(_drawn_like(_normal, "normal_kernel_cpu"))


def _random(d, *bounds, generator=None, **kw):
    """``random_()``, ``random_(to)``, ``random_(from, to)`` (``from``/``to`` keywords too)."""
    if "from" in kw or "to" in kw:
        bounds = (kw.pop("from", 0), kw.pop("to", None))
    if kw:
        raise TypeError(f"random_() got an unexpected keyword argument '{next(iter(kw))}'")
    if len(bounds) == 1:
        bounds = (0, bounds[0])
    if not bounds or bounds[1] is None:
        if bounds and bounds[0]:
            raise NotImplementedError("autodiag: random_(from, to=None) is not supported")
        return rng.random_full(_stream(generator), d.size, d.dtype)
    low, high = int(bounds[0]), int(bounds[1])
    _check_range(low, high)
    return rng.random_from_to(_stream(generator), d.size, d.dtype, low, high)


def _exponential(d, lambd=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise RuntimeError(
            "Exponential distribution is a continuous probability distribution. dtype must be "
            f"a floating point but you specified {dtypes.from_numpy_dtype(d.dtype).scalar_name}"
        )
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return rng.exponential(_stream(generator), d.size, lambd)


def _continuous(op: str, d) -> None:
    if d.dtype.kind != "f":
        raise NotImplementedError(
            f"\"{op}\" not implemented for '{dtypes.from_numpy_dtype(d.dtype).scalar_name}'"
        )


def _log_normal(d, mean=1.0, std=2.0, *, generator=None):
    _continuous("log_normal_cpu", d)
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return rng.log_normal(_stream(generator), d.size, mean, std)


# the C++ type names PyTorch's cauchy_ names an integer dtype by
_CPP_NAMES = {"i8": "long int", "i4": "int", "i2": "short int", "i1": "signed char"}
_CPP_NAMES.update({"u1": "unsigned char", "b1": "bool"})


def _cauchy(d, median=0.0, sigma=1.0, *, generator=None):
    if d.dtype.kind != "f":
        raise RuntimeError(
            "Cauchy distribution is a continuous probability distribution. dtype must be a "
            f"floating point but you specified {_CPP_NAMES.get(d.dtype.str[1:], d.dtype.name)}"
        )
    return rng.cauchy(_stream(generator), d.size, median, sigma)


def _geometric(d, p, *, generator=None):
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return rng.geometric(_stream(generator), d.size, p)


_random_inplace("uniform_", _uniform)
_random_inplace("normal_", _normal)
_random_inplace("random_", _random)
_random_inplace("exponential_", _exponential)
_random_inplace("log_normal_", _log_normal)
_random_inplace("cauchy_", _cauchy)
_random_inplace("geometric_", _geometric)
