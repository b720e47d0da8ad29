"""Python operators on Tensor (``+ - * / ** @``, comparisons, ``& | ~``), mapped to the ops.

Each operator reports itself to tracers under the op's name (``a + b`` is "add", ``2 - x`` is
"rsub"), through a fixed-arity wrapper: operators are the hottest calls in user code.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from autodiag.ops import linalg
from autodiag.ops import pointwise as pw
from autodiag.tensor import Tensor
from autodiag.trace.events import traced, traced_binary


def _raw(op):
    return op.__wrapped__


def _flip(fn):
    return lambda self, other: fn(other, self)


Tensor.__add__ = pw._add  # checks TRACERS itself (pointwise.binary_op)
Tensor.__radd__ = pw._add  # a + b == b + a, also for the node's edges
Tensor.__sub__ = traced_binary("sub", _raw(pw.sub))
Tensor.__rsub__ = traced_binary("rsub", _raw(pw.rsub))
Tensor.__mul__ = pw._mul
Tensor.__rmul__ = pw._mul
Tensor.__truediv__ = pw._div  # self is a tensor: div's own checks are not needed
Tensor.__rtruediv__ = traced_binary("div", _flip(_raw(pw.div)))
Tensor.__floordiv__ = traced_binary("floor_divide", _raw(pw.floor_divide))
Tensor.__rfloordiv__ = traced_binary("floor_divide", _flip(_raw(pw.floor_divide)))
Tensor.__mod__ = traced_binary("remainder", _raw(pw.remainder))
Tensor.__pow__ = traced_binary("pow", _raw(pw.pow))
Tensor.__rpow__ = traced_binary("pow", _flip(_raw(pw.pow)))
Tensor.__matmul__ = traced_binary("matmul", _raw(linalg.matmul))
Tensor.__rmatmul__ = traced_binary("matmul", _flip(_raw(linalg.matmul)))
Tensor.__neg__ = pw.neg
Tensor.__pos__ = lambda self: self
Tensor.__abs__ = pw.abs
# NOTE: a comparison with something that is not a tensor or a number (None, a list, a string)
# is not elementwise in PyTorch: the operator returns NotImplemented, so that ``t != None`` is
# True, ``t == [1, 2]`` False and ``t < None`` a TypeError, as Python's own fallback decides.
# ``assert probs != None`` (nanoGPT forks) relies on it. A numpy array is compared elementwise
# by ``==`` only (PyTorch 2.13: ``t != array`` is True, ``t < array`` a TypeError).
_COMPARABLE = (Tensor, numbers.Number, np.generic)


def _comparison(name: str):
    op = getattr(Tensor, name).__wrapped__
    traced_op = traced_binary(name, lambda self, other: op(self, other))
    comparable = (*_COMPARABLE, np.ndarray) if name == "eq" else _COMPARABLE

    def compare(self, other):
        if not isinstance(other, comparable):
            return NotImplemented  # nothing ran: nothing to report to tracers
        return traced_op(self, other)

    return functools.update_wrapper(compare, traced_op)


Tensor.__eq__ = _comparison("eq")
Tensor.__ne__ = _comparison("ne")
Tensor.__gt__ = _comparison("gt")
Tensor.__ge__ = _comparison("ge")
Tensor.__lt__ = _comparison("lt")
Tensor.__le__ = _comparison("le")
Tensor.__and__ = traced_binary("bitwise_and", _raw(pw.bitwise_and))
Tensor.__or__ = traced_binary("bitwise_or", _raw(pw.bitwise_or))
Tensor.__xor__ = traced_binary("bitwise_xor", _raw(pw.bitwise_xor))
Tensor.__rand__ = Tensor.__and__
Tensor.__ror__ = Tensor.__or__


def _invert(self):
    # NOTE: the operator's error is a TypeError, unlike torch.bitwise_not's RuntimeError
    if self._data.dtype.kind == "f":
        raise TypeError(
            "~ (operator.invert) is only implemented on integer and Boolean-type tensors"
        )
    return pw.bitwise_not.__wrapped__(self)


Tensor.__invert__ = traced("bitwise_not", _invert)
