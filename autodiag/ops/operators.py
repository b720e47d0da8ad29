"""Python operators on Tensor (``+ - * / ** @``, comparisons, ``& | ~``), mapped to the ops."""

from __future__ import annotations

from autodiag.ops import linalg
from autodiag.ops import pointwise as pw
from autodiag.tensor import Tensor


def _reflected(fn):
    return lambda self, other: fn(other, self)


Tensor.__add__ = pw.add
Tensor.__radd__ = lambda self, other: pw.add(self, other)
Tensor.__sub__ = pw.sub
Tensor.__rsub__ = lambda self, other: pw.rsub(self, other)
Tensor.__mul__ = pw.mul
Tensor.__rmul__ = lambda self, other: pw.mul(self, other)
Tensor.__truediv__ = pw.div
Tensor.__rtruediv__ = _reflected(pw.div)
Tensor.__floordiv__ = pw.floor_divide
Tensor.__rfloordiv__ = _reflected(pw.floor_divide)
Tensor.__mod__ = pw.remainder
Tensor.__pow__ = pw.pow
Tensor.__rpow__ = _reflected(pw.pow)
Tensor.__matmul__ = linalg.matmul
Tensor.__rmatmul__ = _reflected(linalg.matmul)
Tensor.__neg__ = pw.neg
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = pw.abs
Tensor.__eq__ = lambda self, other: Tensor.eq(self, other)
Tensor.__ne__ = lambda self, other: Tensor.ne(self, other)
Tensor.__gt__ = lambda self, other: Tensor.gt(self, other)
Tensor.__ge__ = lambda self, other: Tensor.ge(self, other)
Tensor.__lt__ = lambda self, other: Tensor.lt(self, other)
Tensor.__le__ = lambda self, other: Tensor.le(self, other)
Tensor.__and__ = lambda self, other: pw.bitwise_and(self, other)
Tensor.__or__ = lambda self, other: pw.bitwise_or(self, other)
Tensor.__xor__ = lambda self, other: pw.bitwise_xor(self, other)
Tensor.__rand__ = Tensor.__and__
Tensor.__ror__ = Tensor.__or__


def _invert(self):
    # NOTE: the operator's error is a TypeError, unlike torch.bitwise_not's RuntimeError
    if self._data.dtype.kind == "f":
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return pw.bitwise_not(self)


Tensor.__invert__ = _invert
Tensor.__hash__ = lambda self: id(self)  # defining __eq__ would otherwise remove hashing
