"""Names old and device-aware PyTorch scripts use, with PyTorch's behaviour on a CPU-only
machine: ``set_default_device``/``get_default_device``, ``autograd.Variable`` and the legacy
tensor types ``FloatTensor``, ``LongTensor``, ...

>>> import autodiag as torch
>>> x = torch.FloatTensor([1, 2])
>>> x.dtype, isinstance(x, torch.FloatTensor), isinstance(x, torch.LongTensor)
(torch.float32, True, False)
>>> v = torch.autograd.Variable(torch.ones(2), requires_grad=True)
>>> v.requires_grad, v.is_leaf
(True, True)
"""

from __future__ import annotations

from autodiag import _device, dtypes
from autodiag.size import Size
from autodiag.tensor import Tensor


def set_default_device(device) -> None:
    """Only the CPU exists: ``set_default_device("cpu")`` (or None) is accepted, any other
    device refused at once (PyTorch would fail at the next tensor)."""
    _device.check(device)


def get_default_device() -> _device.device:
    return _device.CPU


def Variable(data, requires_grad: bool = False, volatile: bool = False):  # noqa: N802
    """``torch.autograd.Variable(t)``: since PyTorch 0.4 just a tensor; a new leaf sharing
    ``t``'s data, with ``requires_grad`` as given."""
    if not isinstance(data, Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
    out = data.detach()
    if requires_grad:
        out.requires_grad_(True)
    return out


class _TensorTypeMeta(type):
    """``isinstance(x, torch.FloatTensor)``: a CPU tensor of that dtype."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'autodiag.{cls.__name__}'>"


def _tensor_type(name: str, dt: dtypes.dtype):
    def __new__(cls, *args, device=None):  # noqa: N807
        """``FloatTensor(data)`` copies data (a sequence or a tensor) with this dtype;
        ``FloatTensor(2, 3)`` or ``FloatTensor(torch.Size)`` is uninitialised (zeros here)."""
        from autodiag.ops.factories import empty, tensor

        _device.check(device)
        if len(args) == 1 and not isinstance(args[0], (int, Size)):
            data = args[0]
            if isinstance(data, Tensor):  # an alias of a tensor of this very dtype
                if data.dtype != dt:
                    raise TypeError(
                        f"expected {dt.scalar_name} tensor (got {data.dtype.scalar_name} tensor)"
                    )
                return data.detach()
            return tensor(data, dtype=dt)
        return empty(*(args or (0,)), dtype=dt)  # FloatTensor(): an empty 1-D tensor

    return _TensorTypeMeta(
        name,
        (),
        {
            "__new__": __new__,
            "dtype": dt,
            "__doc__": f"Legacy constructor of {dt.scalar_name} tensors.",
        },
    )


FloatTensor = _tensor_type("FloatTensor", dtypes.float32)
DoubleTensor = _tensor_type("DoubleTensor", dtypes.float64)
HalfTensor = _tensor_type("HalfTensor", dtypes.float16)
LongTensor = _tensor_type("LongTensor", dtypes.int64)
IntTensor = _tensor_type("IntTensor", dtypes.int32)
ShortTensor = _tensor_type("ShortTensor", dtypes.int16)
ByteTensor = _tensor_type("ByteTensor", dtypes.uint8)
CharTensor = _tensor_type("CharTensor", dtypes.int8)
BoolTensor = _tensor_type("BoolTensor", dtypes.bool)
