"""Matrix products: mm, bmm, mv, dot, matmul (dispatching as PyTorch does), outer."""

from __future__ import annotations

import builtins

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import (
    _state,
    as_tensor_operand,
    check_broadcast,
    edge,
    register,
    result,
    save,
    set_broadcast_meta,
)
from autodiag.ops._products import matmul_array
from autodiag.ops.sparse_coo import SparseCOO, matmul_sparse
from autodiag.tensor import Tensor


def _dtype_check(a: Tensor, b: Tensor, what: str) -> None:
    if a._data.dtype != b._data.dtype:
        raise RuntimeError(
            f"expected {what} to have the same dtype, but got: {_cname(a)} != {_cname(b)}"
        )


def _cname(t: Tensor) -> str:
    return {
        "float32": "float",
        "float64": "double",
        "int64": "long int",
        "float16": "c10::Half",
        "int32": "int",
        "bool": "bool",
    }.get(t.dtype.name, t.dtype.name)


class _Product(Node):
    __slots__ = ()
    _saved_names = ("self", "mat2")

    def _record(self, a, b, out):
        needs_a, needs_b = self.needs_grad
        # a's gradient needs b and vice versa: save only what a needed gradient uses
        self._saved = (save(a) if needs_b else None, save(b) if needs_a else None)
        return result(out, self)


def _column_major(d: np.ndarray) -> bool:
    """PyTorch's test in mm_mat1_backward / mm_mat2_backward: a matrix laid out column by column
    (strides (1, rows)), e.g. the transposed view ``w.T``."""
    return d.ndim == 2 and d.strides[0] == d.itemsize and d.strides[1] == d.shape[0] * d.itemsize


class MmBackward0(_Product):
    __slots__ = ("column_major",)

    def _record(self, a, b, out):
        self.column_major = (_column_major(a._data), _column_major(b._data))
        return _Product._record(self, a, b, out)

    def backward(self, xp, g):
        needs_self, needs_mat2 = self.needs_grad
        self_cm, mat2_cm = self.column_major
        ga = gb = None
        # NOTE: as PyTorch's mm_mat1_backward / mm_mat2_backward, an input in column-major
        # layout gets its gradient computed transposed, (g^T @ self)^T, so that it comes out in
        # that layout: after ``w.T``'s backward the leaf's gradient is C-ordered like the leaf
        # and AccumulateGrad takes it without a transposing copy (``x @ w.T`` in every MLP).
        if needs_self:
            m2 = self.saved_mat2(xp)
            ga = matmul_array(m2, g.T).T if self_cm and xp.arrays else xp.matmul(g, xp.mT(m2))
        if needs_mat2:
            m1 = self.saved_self(xp)
            gb = matmul_array(g.T, m1).T if mat2_cm and xp.arrays else xp.matmul(xp.mT(m1), g)
        return (ga, gb)


class BmmBackward0(MmBackward0):
    __slots__ = ()

    def _record(self, a, b, out):
        self.column_major = (False, False)  # batched: PyTorch's bmm backward has no such test
        return _Product._record(self, a, b, out)


def _product(cls, a, b, out):
    if _state.record and (a.requires_grad or b.requires_grad):
        node = cls((edge(a), edge(b)))
        return node._record(a, b, out)
    return result(out, None)


@register(expr=True)
def mm(input, mat2):
    if isinstance(input, SparseCOO) or isinstance(mat2, SparseCOO):
        return matmul_sparse(input, mat2)  # ops/sparse_coo.py
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a._data.shape[1] != b._data.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a._data.shape[0]}x"
            f"{a._data.shape[1]} and {b._data.shape[0]}x{b._data.shape[1]})"
        )
    _dtype_check(a, b, "m1 and m2")
    return _product(MmBackward0, a, b, matmul_array(a._data, b._data))


@register()
def bmm(input, mat2):
    a, b = as_tensor_operand(input), as_tensor_operand(mat2)
    if a.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if a._data.shape[0] != b._data.shape[0] or a._data.shape[2] != b._data.shape[1]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{a._data.shape[0]}, {a._data.shape[2]}] but got: "
            f"[{b._data.shape[0]}, {b._data.shape[1]}]."
        )
    if a._data.size == 0 or b._data.size == 0:
        # NOTE: PyTorch's bmm returns the zeros of an empty product in mat2's dtype, with no
        # dtype check (its kernel never runs); the gradients keep their inputs' dtypes
        out = np.zeros(a._data.shape[:2] + b._data.shape[2:], dtype=b._data.dtype)
        r = _product(BmmBackward0, a, b, out)
        if r.grad_fn is not None:
            set_broadcast_meta(r.grad_fn, out, a, b)
        return r
    if a._data.dtype != b._data.dtype:
        raise RuntimeError(
            f"expected scalar type {a.dtype.scalar_name} but found {b.dtype.scalar_name}"
        )
    return _product(BmmBackward0, a, b, matmul_array(a._data, b._data))


class MvBackward0(_Product):
    __slots__ = ()
    _saved_names = ("self", "vec")

    def backward(self, xp, g):
        needs_self, needs_vec = self.needs_grad
        if xp.arrays:
            ga = np.multiply.outer(g, self.saved_vec(xp)) if needs_self else None
        else:
            ga = g.unsqueeze(1) * self.saved_vec(xp) if needs_self else None
        gb = xp.matmul(xp.mT(self.saved_self(xp)), g) if needs_vec else None
        return (ga, gb)


@register()
def mv(input, vec):
    a, b = as_tensor_operand(input), as_tensor_operand(vec)
    if a.ndim != 2 or b.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {a.ndim}, {b.ndim}")
    if a._data.shape[1] != b._data.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({a._data.shape[0]}), mat "
            f"({a._data.shape[0]}x{a._data.shape[1]}), vec ({b._data.shape[0]})"
        )
    _dtype_check(a, b, "self and vec")
    return _product(MvBackward0, a, b, matmul_array(a._data, b._data))


class DotBackward0(_Product):
    __slots__ = ()
    _saved_names = ("self", "tensor")

    def backward(self, xp, g):
        needs_self, needs_tensor = self.needs_grad
        return (
            g * self.saved_tensor(xp) if needs_self else None,
            g * self.saved_self(xp) if needs_tensor else None,
        )


@register(expr=True)
def dot(input, tensor):
    a, b = as_tensor_operand(input), as_tensor_operand(tensor)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a._data.shape[0] != b._data.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a._data.shape[0]}] and "
            f"src [{b._data.shape[0]}] to have the same number of elements, but "
            f"got {a._data.shape[0]} and {b._data.shape[0]} elements respectively"
        )
    _dtype_check(a, b, "both vectors")
    return _product(DotBackward0, a, b, matmul_array(a._data, b._data))


@register(expr=True)
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


@register(expr=True)
def matmul(input, other):
    """Matrix product with PyTorch's dispatch (``_matmul_impl``): dot, mv, mm, folding into mm/mv,
    or batched bmm with broadcasting. The recorded graph is PyTorch's, node for node."""
    from autodiag.ops.shape import SqueezeBackward4, _shape_op

    if isinstance(input, SparseCOO) or isinstance(other, SparseCOO):
        return matmul_sparse(input, other)  # ops/sparse_coo.py
    a, b = as_tensor_operand(input), as_tensor_operand(other)
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D"
        )
    if da == 1 and db == 1:
        return dot(a, b)
    if da == 2 and db == 1:
        return mv(a, b)
    if da == 1 and db == 2:
        # PyTorch squeezes in place (squeeze_(0)): the result is no view of the mm
        r = mm(a.unsqueeze(0), b)
        return _shape_op(r, r._data.reshape(r._data.shape[1:]), SqueezeBackward4, is_view=False)
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
    batch1 = a._data.shape[: max(da - 2, 0)]
    m2 = b._data.shape[-2] if db > 1 else b._data.shape[0]
    p = b._data.shape[-1] if db > 1 else 1
    batch2 = b._data.shape[: max(db - 2, 0)]
    if da == 3 and db == 3 and batch1[0] != batch2[0]:
        if batch1[0] == 1 and a.requires_grad:
            return matmul(a.squeeze(0), b)
        if batch2[0] == 1 and b.requires_grad:
            return matmul(a, b.squeeze(0))
    check_broadcast(batch1, batch2)  # PyTorch's message for batch dims that do not broadcast
    if m1 != m2:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{int(np.prod(np.broadcast_shapes(batch1, batch2)))}, {m1}] but got: "
            f"[{int(np.prod(np.broadcast_shapes(batch1, batch2)))}, {m2}]."
        )
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


# ---------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------
#
# NOTE [einsum as PyTorch computes it]
# PyTorch's einsum (ATen's Linear.cpp) records no node of its own: it is a composition of
# diagonal/movedim (repeated labels), unsqueeze + permute (aligning every operand to "output
# dims, then contracted dims"), sum (dims only one operand has), and a left-to-right pairwise
# contraction, ``sumproduct_pair``: mul when nothing is summed, else permute + reshape + bmm +
# view + permute. The same steps here record the same nodes in the same order (ViewBackward0,
# PermuteBackward0, BmmBackward0, ...), and backward and double backward come from those ops.
# (PyTorch follows an opt_einsum path for 3+ operands only when opt_einsum is installed;
# without it, as here, it contracts left to right.)

_ELLIPSIS = 52  # labels are 0..51: A-Z, then a-z


def _label(c: str) -> int:
    return ord(c) - ord("A") if c.isupper() else ord(c) - ord("a") + 26


def _letter(s: int) -> str:
    return chr(ord("A") + s) if s < 26 else chr(ord("a") + s - 26)


def _einsum_args(args) -> tuple[str, list]:
    """(equation, operands) from ``einsum(eq, *ops)``, ``einsum(eq, [ops])`` or the sublist
    form ``einsum(op1, [0, 1], op2, [1, 2], [0, 2])``."""
    if len(args) < 2:
        raise ValueError(
            "einsum(): must specify the equation string and at least one operand, "
            "or at least one operand and its subscripts list"
        )
    if isinstance(args[0], Tensor):

        def sub(n):
            if n is Ellipsis:
                return "..."
            if 0 <= n < 52:
                return _letter(n)
            raise ValueError(
                "einsum(): subscript in subscript list is not within the valid range [0, 52)"
            )

        eq = ",".join("".join(sub(n) for n in lst) for lst in args[1::2])
        if len(args) % 2 == 1:
            return eq + "->" + "".join(sub(n) for n in args[-1]), list(args[:-1:2])
        return eq, list(args[::2])
    eq, ops = args[0], list(args[1:])
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = list(ops[0])  # the old interface: the operands as one list
    return eq, ops


def _parse_operands(lhs: str, num_ops: int) -> list[list[int]]:
    labels: list[list[int]] = [[] for _ in range(num_ops)]
    cur, ell_seen, i = 0, False, 0
    while i < len(lhs):
        c = lhs[i]
        if c == " ":
            pass
        elif c == ".":
            if ell_seen:
                raise RuntimeError(
                    f"einsum(): found '.' for operand {cur} for which an ellipsis was already found"
                )
            if lhs[i : i + 3] != "...":
                raise RuntimeError(
                    f"einsum(): found '.' for operand {cur} that is not part of any ellipsis"
                )
            labels[cur].append(_ELLIPSIS)
            ell_seen = True
            i += 2
        elif c == ",":
            cur += 1
            if cur >= num_ops:
                raise RuntimeError(
                    "einsum(): fewer operands were provided than specified in the equation"
                )
            ell_seen = False
        elif c.isascii() and c.isalpha():
            labels[cur].append(_label(c))
        else:
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {i} in the equation "
                f"string, subscripts must be in [a-zA-Z]"
            )
        i += 1
    if cur != num_ops - 1:
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    return labels


def _sumproduct_pair(left: Tensor, right: Tensor, sum_dims: list, keepdim: bool) -> Tensor:
    """``(left * right).sum(sum_dims)`` through bmm, as PyTorch's ``sumproduct_pair`` (operands
    aligned: same number of dims, sizes equal or 1)."""
    from autodiag.ops.pointwise import mul

    if not sum_dims:
        return mul(left, right)
    dim = left.ndim
    summed = set(sum_dims)
    lro, lo, ro = [], [], []
    lro_size = lo_size = ro_size = sum_size = 1
    for i in range(dim):
        sl, sr = left.shape[i] != 1, right.shape[i] != 1
        if i in summed:
            if sl and sr:
                if left.shape[i] != right.shape[i]:
                    raise RuntimeError("non-broadcast dimensions must match")
                sum_size *= left.shape[i]
            elif sl:
                left = left.sum(i, True)
            elif sr:
                right = right.sum(i, True)
        elif sl and sr:
            if left.shape[i] != right.shape[i]:
                raise RuntimeError("non-broadcast dimensions must match")
            lro.append(i)
            lro_size *= left.shape[i]
        elif sl:
            lo.append(i)
            lo_size *= left.shape[i]
        else:
            ro.append(i)
            ro_size *= right.shape[i]
    # PyTorch swaps the operands when all of right's output dims come before left's: bmm then
    # writes the result in its final memory order
    if lo and ro and ro[-1] < lo[0]:
        left, right, lo, ro, lo_size, ro_size = right, left, ro, lo, ro_size, lo_size
    out_size = (
        [left.shape[d] for d in lro]
        + [left.shape[d] for d in lo]
        + [1] * len(sum_dims)
        + [right.shape[d] for d in ro]
    )
    lperm = lro + lo + list(sum_dims) + ro
    rperm = lro + list(sum_dims) + ro + lo
    operm = [-1] * len(out_size)
    for i, d in enumerate(lro + lo + list(sum_dims) + ro):
        operm[d] = i
    left = left.permute(lperm).reshape(lro_size, lo_size, sum_size)
    right = right.permute(rperm).reshape(lro_size, sum_size, ro_size)
    out = bmm(left, right).view(out_size).permute(operm)
    if not keepdim:
        out = out.view([s for i, s in enumerate(out.shape) if i not in summed])
    return out


@register(method=False)
def einsum(*args):
    """Einstein summation over the operands' labelled dims, as ``torch.einsum``: explicit
    (``ij,jk->ik``) or implicit (``ij,jk``) output, ``...`` for broadcast dims, repeated labels
    for diagonals, any number of operands (NOTE [einsum as PyTorch computes it]).

    >>> import autodiag as torch
    >>> a = torch.tensor([[1., 2.], [3., 4.]])
    >>> torch.einsum("ij->j", a)
    tensor([4., 6.])
    >>> torch.einsum("ii", a)
    tensor(5.)
    >>> torch.einsum("ij,j->i", a, torch.tensor([1., 1.]))
    tensor([3., 7.])
    """
    equation, operands = _einsum_args(args)
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    operands = [as_tensor_operand(o) for o in operands]
    num_ops = len(operands)
    lhs, arrow, rhs = equation.partition("->")
    op_labels = _parse_operands(lhs, num_ops)

    label_count = [0] * 52
    ell_num_dim = 0  # the most dims any ellipsis covers
    for i, (op, labels) in enumerate(zip(operands, op_labels)):
        nlabels = len(labels) - (_ELLIPSIS in labels)
        for s in labels:
            if s != _ELLIPSIS:
                label_count[s] += 1
        if _ELLIPSIS in labels:
            ell_num_dim = builtins.max(ell_num_dim, op.ndim - nlabels)
            if nlabels > op.ndim:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation "
                    f"({nlabels}) is more than the number of dimensions "
                    f"({op.ndim}) for operand {i}"
                )
        elif nlabels != op.ndim:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({nlabels}) "
                f"does not match the number of dimensions ({op.ndim}) for "
                f"operand {i} and no ellipsis was given"
            )

    # Each label's position in the aligned shape: output dims first, then contracted dims.
    perm_index_of = [-1] * 52
    perm_index = ell_index = 0
    ell_in_output = False
    if not arrow:
        # implicit output: the ellipsis dims, then the labels seen once, in alphabetical order
        perm_index, ell_in_output = ell_num_dim, True
        for s in range(52):
            if label_count[s] == 1:
                perm_index_of[s] = perm_index
                perm_index += 1
    else:
        i = 0
        while i < len(rhs):
            c = rhs[i]
            if c == ".":
                if ell_in_output:
                    raise RuntimeError(
                        "einsum(): found '.' for output but an ellipsis (...) was already found"
                    )
                if rhs[i : i + 3] != "...":
                    raise RuntimeError(
                        "einsum(): found '.' for output that is not part of any ellipsis (...)"
                    )
                ell_index, ell_in_output = perm_index, True
                perm_index += ell_num_dim
                i += 2
            elif c != " ":
                if not (c.isascii() and c.isalpha()):
                    raise RuntimeError(
                        f"einsum(): invalid subscript given at index "
                        f"{len(lhs) + 2 + i} in the equation string, subscripts "
                        f"must be in [a-zA-Z]"
                    )
                s = _label(c)
                if label_count[s] == 0 or perm_index_of[s] != -1:
                    why = (
                        "appears more than once in the output"
                        if perm_index_of[s] != -1
                        else "does not appear in the equation for any input operand"
                    )
                    raise RuntimeError(f"einsum(): output subscript {c} {why}")
                perm_index_of[s] = perm_index
                perm_index += 1
            i += 1
    out_num_dim = perm_index
    if not ell_in_output:
        ell_index = perm_index
        perm_index += ell_num_dim
    for s in range(52):
        if label_count[s] and perm_index_of[s] == -1:
            perm_index_of[s] = perm_index
            perm_index += 1

    # Align every operand: diagonals for repeated labels, size checks, unsqueeze, permute.
    label_size = [1] * 52
    ell_sizes = [1] * ell_num_dim
    dim_counts = [0] * perm_index  # operands with a size != 1 in each aligned dim
    ops = []
    for i, op in enumerate(operands):
        labels = op_labels[i]
        permutation = [-1] * perm_index
        dim = 0
        for s in labels:
            if s == _ELLIPSIS:
                covered = operands[i].ndim - (len(labels) - 1)
                for j in range(ell_num_dim - covered, ell_num_dim):
                    size = op.shape[dim]
                    if size != 1:
                        if ell_sizes[j] not in (1, size):
                            raise RuntimeError(
                                f"einsum(): dimension {dim} covered by ellipsis in operand {i}"
                                f"has size {size} which does not broadcast with previously seen "
                                f"ellipsis with size {ell_sizes[j]} for the respective dimension"
                            )
                        ell_sizes[j] = size
                        dim_counts[ell_index + j] += 1
                    permutation[ell_index + j] = dim
                    dim += 1
            elif permutation[perm_index_of[s]] == -1:
                size = op.shape[dim]
                if size != 1:
                    if label_size[s] not in (1, size):
                        raise RuntimeError(
                            f"einsum(): subscript {_letter(s)} has size {size} "
                            f"for operand {i} which does not broadcast with "
                            f"previously seen size {label_size[s]}"
                        )
                    label_size[s] = size
                    dim_counts[perm_index_of[s]] += 1
                permutation[perm_index_of[s]] = dim
                dim += 1
            else:
                prev = permutation[perm_index_of[s]]
                if op.shape[dim] != op.shape[prev]:
                    raise RuntimeError(
                        f"einsum(): subscript {_letter(s)} is repeated for "
                        f"operand {i} but the sizes don't match, "
                        f"{op.shape[dim]} != {op.shape[prev]}"
                    )
                op = op.diagonal(0, prev, dim).movedim(-1, prev)
        for k, val in enumerate(permutation):
            if val == -1:
                op = op.unsqueeze(dim)
                permutation[k] = dim
                dim += 1
        ops.append(op.permute(permutation))

    # Contract left to right; a dim is summed as soon as no other operand still has it.
    while len(ops) > 1:
        a, b = ops[0], ops[1]
        del ops[:2]
        sum_dims, a_sum, b_sum = [], [], []
        for d in range(out_num_dim, perm_index):
            sa, sb = a.shape[d] != 1, b.shape[d] != 1
            if sa and sb:
                if a.shape[d] != b.shape[d]:
                    raise RuntimeError("non-broadcast dimensions must match")
                dim_counts[d] -= 1
                if dim_counts[d] == 1:
                    sum_dims.append(d)
                    dim_counts[d] = 0
            elif dim_counts[d] == 1:
                if sa:
                    a_sum.append(d)
                    dim_counts[d] = 0
                elif sb:
                    b_sum.append(d)
                    dim_counts[d] = 0
        if a_sum:
            a = a.sum(a_sum, True)
        if b_sum:
            b = b.sum(b_sum, True)
        ops.insert(0, _sumproduct_pair(a, b, sum_dims, True))

    result_ = ops[0]
    if perm_index > out_num_dim:
        if num_ops > 1:
            # contracted dims are size 1 by now
            return result_.view(list(result_.shape[:out_num_dim]))
        return result_.sum(list(range(out_num_dim, perm_index)))
    return result_
