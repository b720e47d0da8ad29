"""Matrix products: mm, bmm, mv, dot, matmul (dispatching as PyTorch does), outer."""

from __future__ import annotations

import numpy as np

from autodiag.autograd.graph import Node
from autodiag.ops._core import _state, as_tensor_operand, edge, register, result, save
from autodiag.tensor import Tensor


def _dtype_check(a: Tensor, b: Tensor, what: str) -> None:
    if a._data.dtype != b._data.dtype:
        raise RuntimeError(f"expected {what} to have the same dtype, but got: "
                           f"{_cname(a)} != {_cname(b)}")


def _cname(t: Tensor) -> str:
    return {"float32": "float", "float64": "double", "int64": "long int", "float16": "c10::Half",
            "int32": "int", "bool": "bool"}.get(t.dtype.name, t.dtype.name)


class _Product(Node):
    __slots__ = ()
    _saved_names = ("self", "mat2")

    def _record(self, a, b, out):
        nf = self.next_functions
        # a's gradient needs b and vice versa: save only what a needed gradient uses
        self._saved = (save(a) if nf[1][0] is not None else None,
                       save(b) if nf[0][0] is not None else None)
        return result(out, self)


class MmBackward0(_Product):
    __slots__ = ()

    def backward(self, xp, g):
        nf = self.next_functions
        ga = xp.matmul(g, xp.mT(self.saved(xp, 1))) if nf[0][0] is not None else None
        gb = xp.matmul(xp.mT(self.saved(xp, 0)), g) if nf[1][0] is not None else None
        return (ga, gb)


class BmmBackward0(MmBackward0):
    __slots__ = ()


def _product(cls, a, b, out):
    if _state[0] and (a.requires_grad or b.requires_grad):
        node = cls((edge(a), edge(b)))
        return node._record(a, b, out)
    return result(out, None)


@register()
def mm(input, mat2):
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 2:
        raise RuntimeError(f"self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError(f"mat2 must be a matrix")
    if a._data.shape[1] != b._data.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a._data.shape[0]}x"
                           f"{a._data.shape[1]} and {b._data.shape[0]}x{b._data.shape[1]})")
    _dtype_check(a, b, "m1 and m2")
    return _product(MmBackward0, a, b, a._data @ b._data)


@register()
def bmm(input, mat2):
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor")
    if b.ndim != 3:
        raise RuntimeError(f"batch2 must be a 3D tensor")
    if a._data.shape[0] != b._data.shape[0] or a._data.shape[2] != b._data.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{a._data.shape[0]}, {a._data.shape[2]}] but got: "
                           f"[{b._data.shape[0]}, {b._data.shape[1]}].")
    _dtype_check(a, b, "batch1 and batch2")
    return _product(BmmBackward0, a, b, np.matmul(a._data, b._data))


class MvBackward0(_Product):
    __slots__ = ()
    _saved_names = ("self", "vec")

    def backward(self, xp, g):
        nf = self.next_functions
        if xp.arrays:
            ga = np.multiply.outer(g, self.saved(xp, 1)) if nf[0][0] is not None else None
        else:
            ga = g.unsqueeze(1) * self.saved(xp, 1) if nf[0][0] is not None else None
        gb = xp.matmul(xp.mT(self.saved(xp, 0)), g) if nf[1][0] is not None else None
        return (ga, gb)


@register()
def mv(input, vec):
    a, b = as_tensor_operand(input), as_tensor_operand(vec)
    if a.ndim != 2 or b.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {a.ndim}, {b.ndim}")
    if a._data.shape[1] != b._data.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({a._data.shape[0]}), mat "
                           f"({a._data.shape[0]}x{a._data.shape[1]}), vec ({b._data.shape[0]})")
    _dtype_check(a, b, "self and vec")
    return _product(MvBackward0, a, b, a._data @ b._data)


class DotBackward0(_Product):
    __slots__ = ()
    _saved_names = ("self", "tensor")

    def backward(self, xp, g):
        nf = self.next_functions
        return (g * self.saved(xp, 1) if nf[0][0] is not None else None,
                g * self.saved(xp, 0) if nf[1][0] is not None else None)


@register()
def dot(input, tensor):
    a, b = as_tensor_operand(input), as_tensor_operand(tensor)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a._data.shape[0] != b._data.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a._data.shape[0]}] and "
                           f"src [{b._data.shape[0]}] to have the same number of elements, but "
                           f"got {a._data.shape[0]} and {b._data.shape[0]} elements respectively")
    _dtype_check(a, b, "both vectors")
    return _product(DotBackward0, a, b, np.asarray(a._data @ b._data))


inner = dot


@register()
def outer(input, vec2):
    a, b = as_tensor_operand(input), as_tensor_operand(vec2)
    return a.reshape(-1, 1) * b


ger = outer


@register()
def matmul(input, other):
    """Matrix product with PyTorch's dispatch: dot, mv, mm, or batched bmm with broadcasting."""
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{da}D and {db}D")
    if da == 1 and db == 1:
        return dot(a, b)
    if da == 2 and db == 1:
        return mv(a, b)
    if da == 1 and db == 2:
        return mm(a.unsqueeze(0), b).squeeze(0)
    if da == 2 and db == 2:
        return mm(a, b)
    if da >= 3 and db <= 2:
        # fold the batch into the rows: one mm, as PyTorch does
        k = a._data.shape[-1]
        rows = a.reshape(-1, k)
        if db == 1:
            return mv(rows, b).reshape(a._data.shape[:-1])
        out = mm(rows, b)
        return out.reshape(a._data.shape[:-1] + (b._data.shape[-1],))
    # batched: broadcast batch dims, flatten them, bmm, restore
    a2 = a.unsqueeze(0) if da == 1 else a
    b2 = b.unsqueeze(-1) if db == 1 else b
    batch = np.broadcast_shapes(a2._data.shape[:-2], b2._data.shape[:-2])
    n, k = a2._data.shape[-2:]
    k2, m = b2._data.shape[-2:]
    if k != k2:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{int(np.prod(batch))}, {k}] but got: [{int(np.prod(batch))}, {k2}].")
    ae = a2.expand(batch + (n, k)).reshape(-1, n, k)
    be = b2.expand(batch + (k, m)).reshape(-1, k, m)
    out = bmm(ae, be).reshape(batch + (n, m))
    if da == 1:
        out = out.squeeze(-2)
    if db == 1:
        out = out.squeeze(-1)
    return out


@register(method=False)
def einsum(*args):
    raise NotImplementedError("autodiag: einsum is not supported; use matmul/mul/sum")
