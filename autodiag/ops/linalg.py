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
        nf = self._next
        # a's gradient needs b and vice versa: save only what a needed gradient uses
        self._saved = (save(a) if nf[1] is not None else None,
                       save(b) if nf[0] is not None else None)
        return result(out, self)


class MmBackward0(_Product):
    __slots__ = ()

    def backward(self, xp, g):
        nf = self._next
        ga = xp.matmul(g, xp.mT(self.saved(xp, 1))) if nf[0] is not None else None
        gb = xp.matmul(xp.mT(self.saved(xp, 0)), g) if nf[1] is not None else None
        return (ga, gb)


class BmmBackward0(MmBackward0):
    __slots__ = ()


def _product(cls, a, b, out):
    if _state.record and (a.requires_grad or b.requires_grad):
        node = cls((edge(a), edge(b)))
        return node._record(a, b, out)
    return result(out, None)


@register()
def mm(input, mat2):
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a._data.shape[1] != b._data.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a._data.shape[0]}x"
                           f"{a._data.shape[1]} and {b._data.shape[0]}x{b._data.shape[1]})")
    _dtype_check(a, b, "m1 and m2")
    return _product(MmBackward0, a, b, a._data @ b._data)


@register()
def bmm(input, mat2):
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
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
        nf = self._next
        if xp.arrays:
            ga = np.multiply.outer(g, self.saved(xp, 1)) if nf[0] is not None else None
        else:
            ga = g.unsqueeze(1) * self.saved(xp, 1) if nf[0] is not None else None
        gb = xp.matmul(xp.mT(self.saved(xp, 0)), g) if nf[1] is not None else None
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
        nf = self._next
        return (g * self.saved(xp, 1) if nf[0] is not None else None,
                g * self.saved(xp, 0) if nf[1] is not None else None)


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




@register()
def outer(input, vec2):
    a, b = as_tensor_operand(input), as_tensor_operand(vec2)
    return a.reshape(-1, 1) * b




def _should_fold(a: Tensor, b: Tensor) -> bool:
    """PyTorch's ``should_fold``: fold the batch dims of the larger operand into mm/mv rows."""
    a_larger = a.ndim >= b.ndim
    t1 = a._data if a_larger else np.swapaxes(b._data, -1, -2)
    dim_t2 = b.ndim if a_larger else a.ndim
    if not (t1.ndim >= 3 and dim_t2 <= 2):
        return False
    if (b if a_larger else a).requires_grad:
        return True  # a smaller gradient for the 2-D operand (PyTorch's choice)
    if a.ndim == 2:
        return False
    if t1.size == 0:
        return True
    # foldable without a copy only when the batch dims are contiguous among themselves
    st, sh = t1.strides, t1.shape
    return all(st[i] == st[i + 1] * sh[i + 1] for i in range(t1.ndim - 2))


def _unsafe_view(t: Tensor, shape) -> Tensor:
    from autodiag.ops.shape import UnsafeViewBackward0, _shape_op

    return _shape_op(t, t._data.reshape(shape), UnsafeViewBackward0, is_view=False)


@register()
def matmul(input, other):
    """Matrix product with PyTorch's dispatch (``_matmul_impl``): dot, mv, mm, folding into mm/mv,
    or batched bmm with broadcasting. The recorded graph is PyTorch's, node for node."""
    from autodiag.ops.shape import SqueezeBackward4, squeeze

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
        return squeeze(mm(a.unsqueeze(0), b), 0, _cls=SqueezeBackward4)  # squeeze_(0)
    if da == 2 and db == 2:
        return mm(a, b)
    if _should_fold(a, b):
        transpose = db > da
        t1 = b.mT if transpose else a
        t2 = (a.t() if da == 2 else a) if transpose else b
        shape1 = t1._data.shape
        out_shape = shape1[:-1]
        folded = t1.reshape(int(np.prod(out_shape)), shape1[-1])
        if t2.ndim == 2:
            out = _unsafe_view(mm(folded, t2), out_shape + (t2._data.shape[1],))
            return out.mT.contiguous() if transpose else out
        return _unsafe_view(mv(folded, t2), out_shape)
    n = a._data.shape[-2] if da > 1 else 1
    m1 = a._data.shape[-1]
    batch1 = a._data.shape[:max(da - 2, 0)]
    m2 = b._data.shape[-2] if db > 1 else b._data.shape[0]
    p = b._data.shape[-1] if db > 1 else 1
    batch2 = b._data.shape[:max(db - 2, 0)]
    if da == 3 and db == 3 and batch1[0] != batch2[0]:
        if batch1[0] == 1 and a.requires_grad:
            return matmul(a.squeeze(0), b)
        if batch2[0] == 1 and b.requires_grad:
            return matmul(a, b.squeeze(0))
    if m1 != m2:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{int(np.prod(np.broadcast_shapes(batch1, batch2)))}, {m1}] but got: "
                           f"[{int(np.prod(np.broadcast_shapes(batch1, batch2)))}, {m2}].")
    batch = tuple(np.broadcast_shapes(batch1, batch2))
    nb = int(np.prod(batch))
    ae = a.expand(batch + (n, m1)).reshape(nb, n, m1)
    if db == 1:
        be = b.expand(batch + (m2,)).reshape(nb, m2).unsqueeze(2)
    else:
        be = b.expand(batch + (m2, p)).reshape(nb, m2, p)
    out_shape = batch + ((n,) if da > 1 else ()) + ((p,) if db > 1 else ())
    prod = bmm(ae, be)
    return _unsafe_view(prod.squeeze(-1) if db == 1 else prod, out_shape)


@register(method=False)
def einsum(*args):
    raise NotImplementedError("autodiag: einsum is not supported; use matmul/mul/sum")
