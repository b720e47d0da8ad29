"""A Python number written into a tensor of a given dtype, converted as PyTorch converts it.

NOTE [Checked scalar conversion]: ``fill_``, ``full``/``new_full``, ``masked_fill`` and
``x[i] = number`` take a Python number as a ``c10::Scalar`` and convert it to the tensor's type
with ``c10::checked_convert``, which raises ``RuntimeError: value cannot be converted to type
<C++ type> without overflow`` where numpy's cast would wrap, saturate or drop something
silently (``np.full((), nan, int32)`` is INT_MIN, ``np.full((), 1e6, float16)`` inf, a complex
number loses its imaginary part). PyTorch's rule (c10/util/TypeCast.h, ``overflows``), measured
against torch 2.13:

- bool: any number (non-zero is True).
- integers: an int within the type's range; a float truncated toward zero when it lies within
  [lowest, max] compared as doubles (so NaN, ±inf and 127.5 into int8 raise; 2.0**63 passes the
  comparison into int64, whose max rounds to 2**63, and the C++ cast gives INT64_MIN); an
  unsigned type also takes a negative int down to -max and wraps it (``uint8.fill_(-1)`` is 255,
  -256 raises, and a negative float raises).
- floating types: ±inf and NaN as they are; other values beyond the type's max raise
  (``float16.fill_(1e6)``, ``float32.fill_(1e39)``), compared before rounding.
- complex numbers: into a real type only with a zero imaginary part, then as the real part.
- Python ints beyond 64 bits: ``OverflowError`` as PyTorch's argument parser gives it (an int in
  [2**63, 2**64) is read as unsigned and then overflows every type but the floating ones).

``x[i] = number`` differs (THPVariable_setitem's valueToTensor): an int outside int64 raises
``ValueError: Overflow when unpacking long long``, and float16 takes any real number through a
double without the check (``h[0] = 1e6`` is inf); a complex number is checked as a double.
"""

from __future__ import annotations

import numbers

import numpy as np

# the C++ type names in PyTorch's message
_CPP_NAMES = {
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.float16): "c10::Half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}
_FLOAT_MAX = {
    np.dtype(np.float16): float(np.finfo(np.float16).max),
    np.dtype(np.float32): float(np.finfo(np.float32).max),
    np.dtype(np.float64): float(np.finfo(np.float64).max),
}
# (lowest int accepted, lowest, max): an unsigned type takes negative ints down to -max
_INT_RANGE = {
    dt: (
        -int(np.iinfo(dt).max) if dt.kind == "u" else int(np.iinfo(dt).min),
        int(np.iinfo(dt).min),
        int(np.iinfo(dt).max),
    )
    for dt in map(np.dtype, (np.uint8, np.int8, np.int16, np.int32, np.int64))
}
_HALF = np.dtype(np.float16)
_INT64_MIN = -(2**63)
_UINT64_END = 2**64


def _overflow(name: str) -> RuntimeError:
    return RuntimeError(f"value cannot be converted to type {name} without overflow")


def _python_number(value, op: str):
    """The Python bool / int / float / complex a number stands for (numpy scalars too)."""
    if isinstance(value, np.generic):
        if isinstance(value, (np.bool_, np.number)):
            return value.item()
    elif isinstance(value, numbers.Number):
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
        return complex(value)
    raise TypeError(f"{op}(): expected a number as the value, got {type(value).__name__}")


def _check_int_width(value: int, setitem: bool) -> None:
    """PyTorch's argument parser: 64 bits at most (unsigned too, except for setitem)."""
    if setitem:
        if not _INT64_MIN <= value < 2**63:
            raise ValueError("Overflow when unpacking long long")
    elif value < _INT64_MIN:
        raise OverflowError("can't convert negative int to unsigned")
    elif value >= _UINT64_END:
        raise OverflowError("int too big to convert")


def checked_scalar(value, dt: np.dtype, op: str, setitem: bool = False) -> np.ndarray:
    """``value`` as a 0-d array of ``dt``, or PyTorch's error (NOTE [Checked scalar
    conversion]); ``setitem``: the rule of ``x[i] = value``."""
    cls = type(value)
    if cls is not float and cls is not int and cls is not bool:
        if cls is np.uint64 and value >= 2**63 and not setitem:
            # PyTorch's argument parser reads a numpy integer as an int64 (setitem's parser
            # raises its "Overflow when unpacking long long", as for a Python int)
            raise TypeError("an integer is required")
        value = _python_number(value, op)
        cls = type(value)
    if cls is int:
        _check_int_width(value, setitem)
    kind = dt.kind
    if kind == "b":
        return np.asarray(bool(value))
    if cls is complex:
        if value.imag != 0:
            raise _overflow("double" if setitem and dt is _HALF else _CPP_NAMES[dt])
        value = value.real
        cls = float
    if kind == "f":
        if setitem and dt is _HALF:
            return np.asarray(float(value), dtype=dt)  # via a double, unchecked
        fmax = _FLOAT_MAX[dt]
        if cls is float:
            if fmax < abs(value) < float("inf"):
                raise _overflow(_CPP_NAMES[dt])
        elif abs(value) > fmax:  # an int
            raise _overflow(_CPP_NAMES[dt])
        elif abs(value) > 2**53:  # the C++ cast of an int64 rounds once: not through a double
            src = np.uint64 if value >= 2**63 else np.int64
            return np.asarray(value, dtype=src).astype(dt)
        return np.asarray(value, dtype=dt)
    lo_int, lo, hi = _INT_RANGE[dt]
    if cls is float:
        if not float(lo) <= value <= float(hi):  # NaN too; compared as C++ does, in doubles
            raise _overflow(_CPP_NAMES[dt])
        if value >= 2.0**63:  # int64's max rounds up to 2**63: the C++ cast of 2**63
            return np.asarray(_INT64_MIN, dtype=dt)
        value = int(value)  # toward zero
    elif not lo_int <= value <= hi:
        raise _overflow(_CPP_NAMES[dt])
    if value < lo:  # an unsigned type wraps a negative int
        value += hi + 1
    return np.asarray(value, dtype=dt)
