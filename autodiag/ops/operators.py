"""Python operators on Tensor (``+ - * / ** @``, comparisons, ``& | ~``), mapped to the ops.

Each operator reports itself to tracers under the op's name (``a + b`` is "add", ``2 - x`` is
"rsub"), through a fixed-arity wrapper: operators are the hottest calls in user code.
"""

from __future__ import annotations

from autodiag.ops import linalg
from autodiag.ops import pointwise as pw
from autodiag.tensor import Tensor
from autodiag.trace.events import traced, traced_binary


def _raw(op):
    return op.__wrapped__


def _flip(fn):
    return lambda self, other: fn(other, self)


def _operator(name: str, fn):
    return traced_binary(name, fn)


Tensor.__add__ = pw._add  # checks TRACERS itself (pointwise.binary_op)
Tensor.__radd__ = pw._add  # a + b == b + a, also for the node's edges
Tensor.__sub__ = _operator("sub", _raw(pw.sub))
Tensor.__rsub__ = _operator("rsub", _raw(pw.rsub))
Tensor.__mul__ = pw._mul
Tensor.__rmul__ = pw._mul
Tensor.__truediv__ = pw._div  # self is a tensor: div's own checks are not needed
Tensor.__rtruediv__ = _operator("div", _flip(_raw(pw.div)))
Tensor.__floordiv__ = _operator("floor_divide", _raw(pw.floor_divide))
Tensor.__rfloordiv__ = _operator("floor_divide", _flip(_raw(pw.floor_divide)))
Tensor.__mod__ = _operator("remainder", _raw(pw.remainder))
Tensor.__pow__ = _operator("pow", _raw(pw.pow))
Tensor.__rpow__ = _operator("pow", _flip(_raw(pw.pow)))
Tensor.__matmul__ = _operator("matmul", _raw(linalg.matmul))
Tensor.__rmatmul__ = _operator("matmul", _flip(_raw(linalg.matmul)))
Tensor.__neg__ = pw.neg
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = pw.abs
Tensor.__eq__ = _operator("eq", lambda self, other: Tensor.eq.__wrapped__(self, other))
Tensor.__ne__ = _operator("ne", lambda self, other: Tensor.ne.__wrapped__(self, other))
Tensor.__gt__ = _operator("gt", lambda self, other: Tensor.gt.__wrapped__(self, other))
Tensor.__ge__ = _operator("ge", lambda self, other: Tensor.ge.__wrapped__(self, other))
Tensor.__lt__ = _operator("lt", lambda self, other: Tensor.lt.__wrapped__(self, other))
Tensor.__le__ = _operator("le", lambda self, other: Tensor.le.__wrapped__(self, other))
Tensor.__and__ = _operator("bitwise_and", _raw(pw.bitwise_and))
Tensor.__or__ = _operator("bitwise_or", _raw(pw.bitwise_or))
Tensor.__xor__ = _operator("bitwise_xor", _raw(pw.bitwise_xor))
Tensor.__rand__ = Tensor.__and__
Tensor.__ror__ = Tensor.__or__


def _invert(self):
    # NOTE: the operator's error is a TypeError, unlike torch.bitwise_not's RuntimeError
    if self._data.dtype.kind == "f":
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return pw.bitwise_not.__wrapped__(self)


Tensor.__invert__ = traced("bitwise_not", _invert)
Tensor.__hash__ = lambda self: id(self)  # defining __eq__ would otherwise remove hashing
