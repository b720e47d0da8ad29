"""dtypes, default dtype, and PyTorch's type-promotion rules.

PyTorch and numpy promote differently (``int64 tensor * 2.5`` is float32 in PyTorch, float64 in
numpy; a 0-d float64 tensor does not widen a float32 tensor in PyTorch). Every op computes its
result dtype here, never by trusting numpy.
"""

from __future__ import annotations

import numpy as np

# NOTE: PyTorch returns inf/nan silently (log(0), 1/0); numpy would warn on every such op. Set
# here, where the engine first meets numpy (every module that computes imports dtypes), so that
# it holds however the engine is first imported (NOTE [Lazy engine] in autodiag/__init__.py).
np.seterr(all="ignore")

__all__ = [
    "dtype",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "int8",
    "uint8",
    "int16",
    "bool",
    "half",
    "float",
    "double",
    "long",
    "int",
    "short",
    "get_default_dtype",
    "set_default_dtype",
    "result_type",
    "promote_types",
]


class dtype:
    """A tensor element type, e.g. ``autodiag.float32`` (printed ``torch.float32``, as PyTorch)."""

    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "_kind", "scalar_name")

    def __init__(self, name: str, np_dtype, kind: int, scalar_name: str):
        self.name = name
        self.scalar_name = scalar_name  # PyTorch's ScalarType name in messages: "Float", "Long"
        self.np = np.dtype(np_dtype)
        self._kind = kind  # 0 bool, 1 integer, 2 floating: the promotion category
        self.is_floating_point = kind == 2
        self.is_signed = kind != 0 and self.np.kind != "u"
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"  # as PyTorch prints it (messages, print(t.dtype))

    @property
    def legacy_type_name(self) -> str:
        """PyTorch's legacy tensor type name, as ``Tensor.type()`` and messages print it."""
        return f"torch.{self.scalar_name}Tensor"

    def __reduce__(self):
        return self.name


bool = dtype("bool", np.bool_, 0, "Bool")  # noqa: A001 - torch.bool
uint8 = dtype("uint8", np.uint8, 1, "Byte")
int8 = dtype("int8", np.int8, 1, "Char")
int16 = dtype("int16", np.int16, 1, "Short")
int32 = dtype("int32", np.int32, 1, "Int")
int64 = dtype("int64", np.int64, 1, "Long")
float16 = dtype("float16", np.float16, 2, "Half")
float32 = dtype("float32", np.float32, 2, "Float")
float64 = dtype("float64", np.float64, 2, "Double")
half, float, double = float16, float32, float64  # noqa: A001
long, int, short = int64, int32, int16  # noqa: A001

_BY_NP = {d.np: d for d in (bool, uint8, int8, int16, int32, int64, float16, float32, float64)}

_default = [float32]


def torch_name(np_dtype) -> str:
    """``torch.float32``: how PyTorch's messages name the dtype of a numpy dtype."""
    return f"torch.{from_numpy_dtype(np_dtype).name}"


def from_numpy_dtype(np_dtype) -> dtype:
    """The autodiag dtype of a numpy dtype; raises TypeError for unsupported ones (complex, str)."""
    d = _BY_NP.get(np_dtype)
    if d is None:
        d = _BY_NP.get(np.dtype(np_dtype))
        if d is None:
            raise TypeError(
                f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype).name}. The only "
                "supported types are: float64, float32, float16, int64, int32, int16, int8, "
                "uint8, and bool."
            )
    return d


def to_np(d) -> np.dtype:
    """numpy dtype for an autodiag dtype (also accepts numpy dtypes and Python types)."""
    if d.__class__ is dtype:
        return d.np
    if d is builtins_float:
        return _default[0].np
    if d is builtins_int:
        return np.dtype(np.int64)
    if d is builtins_bool:
        return np.dtype(np.bool_)
    return from_numpy_dtype(np.dtype(d)).np


import builtins  # noqa: E402

builtins_float, builtins_int, builtins_bool = builtins.float, builtins.int, builtins.bool


def get_default_dtype() -> dtype:
    """The dtype of tensors created from Python floats (float32 unless changed)."""
    return _default[0]


def set_default_dtype(d: dtype) -> None:
    """Set the floating dtype used for Python floats, as ``torch.set_default_dtype``."""
    if d.__class__ is not dtype or not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _default[0] = d


def promote_types(a: dtype, b: dtype) -> dtype:
    """The smallest dtype both ``a`` and ``b`` convert to, as ``torch.promote_types``."""
    if a is b:
        return a
    if a.is_floating_point != b.is_floating_point:
        # NOTE: a float with an integer is the float (float32 + int64 -> float32), not numpy's
        # wider float that holds every integer (float64)
        return a if a.is_floating_point else b
    return _BY_NP[np.promote_types(a.np, b.np)]


# NOTE: PyTorch's result_type ranks operands in three priority groups: tensors with dimensions,
# zero-dim tensors, and Python scalars ("wrapped numbers"). The highest category (bool < int <
# float) present anywhere wins; within that category the dtype comes from the highest-priority
# group that has it. A Python float that raises the category yields the default dtype.
def result_type(operands) -> dtype:
    """Result dtype for ``operands``: Tensors and Python scalars, by PyTorch's rules."""
    groups: list[list[dtype]] = [[], [], []]  # dimensioned, zero-dim, scalar
    for x in operands:
        d = getattr(x, "dtype", None)
        if d is not None and d.__class__ is dtype:
            groups[0 if x.ndim else 1].append(d)
        elif x.__class__ is builtins_bool or isinstance(x, np.bool_):
            groups[2].append(bool)
        elif isinstance(x, (builtins_int, np.integer)):
            groups[2].append(int64)
        else:
            groups[2].append(_default[0])
    category = max(d._kind for g in groups for d in g)
    for g in groups:
        best = None
        for d in g:
            if d._kind == category:
                best = d if best is None else promote_types(best, d)
        if best is not None:
            return best
    raise AssertionError("unreachable")
