"""A minimal COO sparse tensor: what graph programs (pytorch/examples gcn) do with one, and a
clear refusal of everything else.

Supported (as PyTorch 2.13 does it): ``Tensor.to_sparse()``, ``torch.sparse_coo_tensor``,
``layout``/``is_sparse``, ``indices() values() _indices() _values() coalesce() is_coalesced()
_nnz() to_dense() to_sparse() to(cpu/dtype)``, the dtype casts (``float()``, ``double()``…),
the sparse x dense product (``torch.mm``,
``torch.spmm``, ``torch.sparse.mm``, ``torch.matmul``, ``@``) and dense x sparse (``@``,
``mm``, ``matmul``), and ``dense + sparse``. Gradients reach the dense operand only (PyTorch's
``MmBackward0``/``SparseAddmmBackward0``, with ``None`` in ``next_functions`` for the sparse
one); a sparse tensor never requires grad here.

NOTE [Sparse refusals]: a ``SparseCOO`` is a ``Tensor`` (``isinstance`` holds, and Python
tries its reflected operators first, so ``dense @ sparse`` and ``dense + sparse`` reach it)
whose ``_data`` is a property: any op of the engine that reads it, i.e. any op not listed
above, raises NotImplementedError naming the op, where numpy would have computed on a dense
copy and returned a dense result PyTorch never gives. Readers outside the engine (the
inspection seam, the reports) get the dense values.
"""

from __future__ import annotations

import sys

import numpy as np

from autodiag import _device, dtypes
from autodiag.core.graph import Node
from autodiag.ops._core import OPS, TENSOR, _state, edge, register, result, save, wrap
from autodiag.ops.shape import CASTS
from autodiag.size import Size, wrap_dim
from autodiag.tensor import Tensor, _new
from autodiag.trace.events import traced

# ---------------------------------------------------------------------------------------------
# Layouts
# ---------------------------------------------------------------------------------------------


class layout:  # noqa: N801 - PyTorch's name
    """A tensor's memory layout (``torch.strided``, ``torch.sparse_coo``)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __reduce__(self):
        return self.name  # pickled as the module global of that name


strided = layout("strided")
sparse_coo = layout("sparse_coo")

Tensor.layout = property(lambda self: strided, doc="The memory layout: ``torch.strided``.")
Tensor.is_sparse = False

# ---------------------------------------------------------------------------------------------
# The sparse tensor
# ---------------------------------------------------------------------------------------------

# engine modules: an op there reading a sparse tensor's ``_data`` is refused (NOTE [Sparse
# refusals]); anything else reading it (inspection, reports, printing) gets the dense values
_ENGINE = (
    "autodiag.ops",
    "autodiag.tensor",
    "autodiag.nn",
    "autodiag.optim",
    "autodiag.autograd",
    "autodiag.func",
    "autodiag.core",
    "autodiag.utils",
    "autodiag.distributions",
    "autodiag.serialization",
)

SUPPORTED = (
    "to_dense, indices/values, coalesce, to(dtype)/float()/double()..., "
    "mm/spmm/sparse.mm/matmul/@ with a dense matrix, dense + sparse"
)


def _op_codes() -> dict:
    """code object -> public name, for the registered ops and the Tensor operators that are
    ops (``__mul__`` is ``mul``), keeping only code objects no two ops share (the tracing
    wrapper's is everyone's)."""
    import inspect as _inspect

    seen: dict = {}
    fns = [(name, info.op) for name, info in OPS.items()]
    fns += [
        (f.__autodiag_op__, f)
        for f in vars(Tensor).values()
        if isinstance(getattr(f, "__autodiag_op__", None), str)
    ]
    for name, fn in fns:
        for f in {fn, _inspect.unwrap(fn)}:
            code = getattr(f, "__code__", None)
            if code is not None:
                seen.setdefault(id(code), set()).add(name)  # copies compare equal
    codes = {code: names.pop() for code, names in seen.items() if len(names) == 1}
    for _, fn in fns:  # an op that names itself (the hot ops) is that op, aliases or not
        f = _inspect.unwrap(fn)
        if isinstance(getattr(f, "__autodiag_op__", None), str):
            codes[id(f.__code__)] = f.__autodiag_op__
    return codes


def _refused_op(frame) -> str:
    """The op the user called that read a sparse tensor's data: the outermost registered op
    among the engine's frames, else the outermost engine function's name."""
    codes = _op_codes()
    f, op, outer = frame, None, None
    while f is not None and f.f_globals.get("__name__", "").startswith("autodiag"):
        op = codes.get(id(f.f_code), op)
        outer = f.f_code.co_name
        if op is None and f.f_code is _TRACED_CODE:
            op = f.f_locals.get("name")  # the tracing wrapper's op name
        f = f.f_back
    if op is not None:
        return op
    return f"Tensor.{outer}" if outer else "this op"


_TRACED_CODE = traced("_", lambda: None).__code__  # every ``traced`` wrapper runs this code


class SparseNotSupported(NotImplementedError):
    """An op on a sparse COO tensor that autodiag does not support: outside the engine's
    subset, so a script run stops with exit 2 naming it (``torch_alias.missing_name``)."""

    def __init__(self, op: str):
        super().__init__(
            f"{op}: autodiag does not support sparse COO tensors here (it supports on them: "
            f"{SUPPORTED}); call .to_dense() first"
        )
        self.qualname = f"{op} on a sparse COO tensor"


def sparse_refusal(op: str) -> SparseNotSupported:
    return SparseNotSupported(op)


def _dense_data(self):
    frame = sys._getframe(1)
    module = frame.f_globals.get("__name__", "")
    if module.startswith(_ENGINE):
        raise sparse_refusal(_refused_op(frame))
    return _to_dense_array(self)


class SparseCOO(Tensor):
    """A 2-D (or n-D) COO sparse tensor: int64 ``indices`` (ndim x nnz) and ``values``."""

    __slots__ = ("_sp_indices", "_sp_values", "_sp_size", "_sp_coalesced")
    is_sparse = True
    _data = property(_dense_data)

    @property
    def layout(self):
        return sparse_coo

    # --- what it is ----------------------------------------------------------------------

    @property
    def shape(self):
        return Size(self._sp_size)

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self._sp_size[wrap_dim(dim, len(self._sp_size))]

    @property
    def dtype(self) -> dtypes.dtype:
        return dtypes.from_numpy_dtype(self._sp_values.dtype)

    @property
    def ndim(self) -> int:
        return len(self._sp_size)

    def dim(self) -> int:
        return len(self._sp_size)

    def numel(self) -> int:
        return int(np.prod(self._sp_size, dtype=np.int64))

    def is_floating_point(self) -> bool:
        return self._sp_values.dtype.kind == "f"

    def _nnz(self) -> int:
        return int(self._sp_values.shape[0])

    def is_coalesced(self) -> bool:
        return self._sp_coalesced

    # --- its parts -----------------------------------------------------------------------

    def _indices(self) -> Tensor:
        return wrap(self._sp_indices)

    def _values(self) -> Tensor:
        return wrap(self._sp_values)

    def indices(self) -> Tensor:
        if not self._sp_coalesced:
            raise RuntimeError(
                "Cannot get indices on an uncoalesced tensor, please call .coalesce() first"
            )
        return wrap(self._sp_indices)

    def values(self) -> Tensor:
        if not self._sp_coalesced:
            raise RuntimeError(
                "Cannot get values on an uncoalesced tensor, please call .coalesce() first"
            )
        return wrap(self._sp_values)

    def coalesce(self) -> SparseCOO:
        """Duplicate indices summed, indices sorted (row-major)."""
        if self._sp_coalesced:
            return self
        idx, vals, size = self._sp_indices, self._sp_values, self._sp_size
        if vals.shape[0] == 0:
            return _sparse(idx, vals, size, True)
        lin = np.ravel_multi_index(tuple(idx), size)
        uniq, inverse = np.unique(lin, return_inverse=True)
        summed = np.zeros((uniq.size,) + vals.shape[1:], dtype=vals.dtype)
        np.add.at(summed, inverse, vals)
        return _sparse(np.stack(np.unravel_index(uniq, size)).astype(np.int64), summed, size, True)

    def to_dense(self, dtype=None) -> Tensor:
        out = _to_dense_array(self)
        return wrap(out if dtype is None else out.astype(dtypes.to_np(dtype)))

    def to_sparse(self, sparse_dim=None) -> SparseCOO:
        return self

    def to(self, *args, **kwargs) -> SparseCOO:
        """``to("cpu")``, ``to(device)``, ``to(dtype)``: the only device is the CPU."""
        target = list(args) + [kwargs.pop(k) for k in ("device", "dtype") if k in kwargs]
        if kwargs:
            raise sparse_refusal(f"Tensor.to({', '.join(kwargs)}=...)")
        out = self
        for a in target:
            if isinstance(a, dtypes.dtype):
                out = _sparse(
                    out._sp_indices, out._sp_values.astype(a.np), out._sp_size, out._sp_coalesced
                )
            elif _device.device(a).type != "cpu":
                raise RuntimeError(f"autodiag runs on the CPU only, not {a}")
        return out

    def cpu(self) -> SparseCOO:
        return self

    def detach(self) -> SparseCOO:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> SparseCOO:
        if requires_grad:
            raise sparse_refusal("Tensor.requires_grad_")
        return self

    def t(self) -> SparseCOO:
        if len(self._sp_size) != 2:
            raise sparse_refusal("Tensor.t (of a sparse tensor that is not 2-D)")
        return _transposed(self)

    # --- products and sums with dense tensors -------------------------------------------------

    # ``s @ d`` and ``d @ s`` are Tensor's (traced) operators: ``matmul`` sends a sparse
    # operand to ``matmul_sparse``

    def __add__(self, other):
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")

    def __radd__(self, other):
        if not isinstance(other, Tensor) or isinstance(other, SparseCOO):
            raise sparse_refusal("add")
        if tuple(other.shape) != self._sp_size:
            raise RuntimeError(
                f"add: expected 'self' and 'other' to have same size, but self has size "
                f"{list(other.shape)} while other has size {list(self._sp_size)} (FYI: dense-"
                "sparse addition does not currently support broadcasting)"
            )
        return other + wrap(_to_dense_array(self))

    def __repr__(self) -> str:
        ind = repr(wrap(self._sp_indices)).replace("\n", "\n" + " " * 15)
        val = repr(wrap(self._sp_values)).replace("\n", "\n" + " " * 14)
        dt = ""
        if val.endswith(f", dtype={self.dtype})"):  # PyTorch puts it in the trailer
            val, dt = val[: -len(f", dtype={self.dtype})")] + ")", f"dtype={self.dtype}, "
        size = tuple(self._sp_size)
        return (
            f"tensor(indices={ind},\n       values={val},\n       size={size}, "
            f"nnz={self._nnz()}, {dt}layout=torch.sparse_coo)"
        )

    __str__ = __repr__

    def __len__(self) -> int:
        return self._sp_size[0]

    def __bool__(self):
        raise sparse_refusal("Tensor.__bool__")

    def __reduce_ex__(self, protocol):
        raise sparse_refusal("pickling (torch.save)")


def _sparse_caster(dt):
    def cast(self, memory_format=None) -> SparseCOO:
        return self.to(dt)  # a sparse tensor of the values cast

    return cast


for _n, _dt in CASTS:  # ``float()``, ``double()``, ...: Tensor's dtype casts, as ``to(dtype)``
    setattr(SparseCOO, _n, _sparse_caster(_dt))


def _sparse(indices: np.ndarray, values: np.ndarray, size: tuple, coalesced: bool) -> SparseCOO:
    s = _new(SparseCOO)
    s.grad_fn, s.requires_grad, s._vc = None, False, None
    s._sp_indices, s._sp_values = indices, values
    s._sp_size, s._sp_coalesced = tuple(int(n) for n in size), coalesced
    return s


def _to_dense_array(s: SparseCOO) -> np.ndarray:
    out = np.zeros(s._sp_size + s._sp_values.shape[1:], dtype=s._sp_values.dtype)
    if s._sp_values.shape[0]:
        np.add.at(out, tuple(s._sp_indices), s._sp_values)
    return out


def _transposed(s: SparseCOO) -> SparseCOO:
    t = _sparse(s._sp_indices[::-1].copy(), s._sp_values, s._sp_size[::-1], False)
    return t.coalesce() if s._sp_coalesced else t


# ---------------------------------------------------------------------------------------------
# Making one
# ---------------------------------------------------------------------------------------------


@register(home="Tensor")
def to_sparse(input, sparse_dim=None, *, layout=None):
    """The non-zero elements of ``input`` as a coalesced COO sparse tensor.

    >>> import autodiag as torch
    >>> torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse().values()
    tensor([2., 3.])
    """
    if isinstance(input, SparseCOO):
        return input
    if layout not in (None, sparse_coo) or sparse_dim not in (None, input.ndim):
        raise sparse_refusal("Tensor.to_sparse (other than a full COO layout)")
    if input.requires_grad and _state.record:
        raise NotImplementedError(
            "to_sparse: autodiag's sparse tensors carry no gradient, and this tensor requires "
            "grad; call .detach().to_sparse() if no gradient should flow through it"
        )
    d = input._data
    if d.ndim == 0:
        raise RuntimeError("sparse_dim must be in [0, 0], but got 1")  # a 0-d tensor
    nz = np.nonzero(d)  # row-major order: a coalesced tensor
    return _sparse(np.stack(nz).astype(np.int64).reshape(d.ndim, -1), d[nz].copy(), d.shape, True)


@register(method=False)
def sparse_coo_tensor(
    indices,
    values,
    size=None,
    *,
    dtype=None,
    device=None,
    pin_memory=False,
    requires_grad=False,
    check_invariants=None,
    is_coalesced=None,
):
    """A COO sparse tensor from ``indices`` (ndim x nnz) and ``values`` (nnz).

    >>> import autodiag as torch
    >>> torch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2)).to_dense()
    tensor([[0., 2.],
            [3., 0.]])
    """
    from autodiag.ops.factories import tensor

    if requires_grad:
        raise sparse_refusal("sparse_coo_tensor(requires_grad=True)")
    if device is not None and _device.device(device).type != "cpu":
        raise RuntimeError(f"autodiag runs on the CPU only, not {device}")
    idx = indices._data if isinstance(indices, Tensor) else np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(
            f"indices must be an int64 tensor (got {dtypes.from_numpy_dtype(idx.dtype)})"
        )
    vals_t = values if isinstance(values, Tensor) else tensor(values)
    if vals_t.requires_grad:
        raise NotImplementedError(
            "sparse_coo_tensor: autodiag's sparse tensors carry no gradient, and these values "
            "require grad; pass values.detach()"
        )
    vals = vals_t._data
    if dtype is not None:
        vals = vals.astype(dtypes.to_np(dtype))
    idx = idx.astype(np.int64).reshape(idx.shape[0] if idx.ndim else 0, -1)
    if idx.ndim != 2 or vals.ndim < 1 or idx.shape[1] != vals.shape[0]:
        raise RuntimeError(
            f"indices and values must have the same number of elements: indices {tuple(idx.shape)}"
            f", values {tuple(vals.shape)}"
        )
    if vals.ndim != 1:
        raise sparse_refusal("sparse_coo_tensor (hybrid: values with more than one dim)")
    if size is None:
        size = tuple(int(m) + 1 for m in idx.max(axis=1)) if idx.shape[1] else (0,) * len(idx)
    size = tuple(int(n) for n in size)
    if len(size) != idx.shape[0]:
        raise RuntimeError(
            f"number of dimensions must be sparse_dim ({idx.shape[0]}) + dense_dim (0), but got "
            f"{len(size)}"
        )
    if idx.shape[1]:
        for dim, (lo, hi) in enumerate(zip(idx.min(axis=1), idx.max(axis=1))):
            if lo < 0 or hi >= size[dim]:
                raise RuntimeError(
                    f"size is inconsistent with indices: for dim {dim}, size is {size[dim]} but "
                    f"found index {hi if hi >= size[dim] else lo}"
                )
    return _sparse(idx, vals.copy(), size, bool(is_coalesced) or idx.shape[1] <= 1)


# ---------------------------------------------------------------------------------------------
# Products with a dense matrix
# ---------------------------------------------------------------------------------------------


def _sparse_dense_array(s: SparseCOO, d: np.ndarray) -> np.ndarray:
    """``s @ d`` for a 2-D sparse ``s`` and a dense matrix ``d``."""
    out = np.zeros((s._sp_size[0], d.shape[1]), dtype=np.result_type(s._sp_values, d))
    if s._sp_values.shape[0]:
        rows, cols = s._sp_indices
        np.add.at(out, rows, s._sp_values[:, None] * d[cols])
    return out


class _SparseProduct(Node):
    """A product with a sparse operand: its gradient reaches the dense operand only. The sparse
    operand is saved as PyTorch saves it (``_saved_self``/``_saved_mat2``/``_saved_mat1``, listed
    with the graph's saved tensors, freed by a backward without retain_graph)."""

    __slots__ = ()

    def _keep_sizes(self, a, b) -> None:
        """The operands' sizes and strides, as PyTorch keeps them (a sparse one has none)."""
        sizes = {}
        for name, t in zip(self._saved_names, (a, b)):
            if name != "mat1":  # PyTorch's SparseAddmmBackward0 keeps none of the sparse one
                sizes[f"{name}_sym_sizes"] = tuple(t.shape)
                sizes[f"{name}_sym_strides"] = () if isinstance(t, SparseCOO) else t.stride()
        self._sizes = sizes


class MmBackward0(_SparseProduct):
    """``sparse @ dense`` or ``dense @ sparse``: the gradient of the dense operand only."""

    __slots__ = ("sparse_first", "_sizes")
    _saved_names = ("self", "mat2")
    _extra_names = ("self_sym_sizes", "self_sym_strides", "mat2_sym_sizes", "mat2_sym_strides")

    def _saved_extra(self):
        return self._sizes

    def backward(self, xp, g):
        # the sparse operand itself (TENSOR: never its dense values), version-checked
        s = self.saved_self(TENSOR) if self.sparse_first else self.saved_mat2(TENSOR)
        if self.sparse_first:  # out = S @ D: dD = S^T @ g
            return (None, _mm(_transposed(s), g, xp))
        return (_mm(g, _transposed(s), xp), None)  # out = W @ S: dW = g @ S^T


class SparseAddmmBackward0(_SparseProduct):
    """``torch.sparse.mm``: PyTorch's addmm of zeros, the sparse and the dense matrix."""

    __slots__ = ("_sizes",)
    _saved_names = ("mat1", "mat2")
    _extra_names = ("alpha", "beta", "mat2_sym_sizes", "mat2_sym_strides")

    def _saved_extra(self):
        return {"alpha": 1, "beta": 0, **self._sizes}

    def backward(self, xp, g):
        return (None, None, _mm(_transposed(self.saved_mat1(TENSOR)), g, xp))


def _mm(a, b, xp):
    """A backward's product with a sparse operand: arrays, or recorded (create_graph)."""
    if xp.arrays:
        if isinstance(a, SparseCOO):
            return _sparse_dense_array(a, b)
        return _sparse_dense_array(_transposed(b), a.T).T
    return matmul_sparse(a, b)


def _check_2d(a, b, name: str) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise sparse_refusal(f"{name} (a sparse operand that is not a matrix, or a non-matrix)")
    if a.shape[1] != b.shape[0]:
        if isinstance(a, SparseCOO):  # PyTorch's sparse kernel is an addmm
            raise RuntimeError(
                f"addmm: Argument #3 (dense): Expected dim 0 size {a.shape[1]}, got {b.shape[0]}"
            )
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
            f"{b.shape[0]}x{b.shape[1]})"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected mat1 and mat2 to have the same dtype, but got: {a.dtype} != {b.dtype}"
        )


def matmul_sparse(a, b, cls=MmBackward0):
    """``a @ b`` where one operand is a SparseCOO and the other a dense matrix."""
    sa, sb = isinstance(a, SparseCOO), isinstance(b, SparseCOO)
    if sa and sb:
        raise sparse_refusal("mm (sparse x sparse)")
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"mm(): argument must be Tensor, not {type(b if sa else a).__name__}")
    _check_2d(a, b, "mm")
    dense = b if sa else a
    if sa:
        out = _sparse_dense_array(a, dense._data)
    else:
        out = _sparse_dense_array(_transposed(b), dense._data.T).T.copy()
    if _state.record and dense.requires_grad:
        if cls is SparseAddmmBackward0:
            node = cls((None, None, edge(dense)))
        else:
            node = cls((None, edge(dense)) if sa else (edge(dense), None))
            node.sparse_first = sa
        # the dense operand's gradient needs the sparse one: saved as PyTorch saves it (a
        # dense operand is never saved here: the sparse one needs no gradient)
        node._saved = (save(a), None) if sa else (None, save(b))
        node._keep_sizes(a, b)
        return result(out, node)
    return result(out, None)


@register(method=False)
def spmm(input, mat2):
    """``sparse @ dense`` (PyTorch's older name of ``mm`` for a sparse first operand).

    >>> import autodiag as torch
    >>> s = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    >>> torch.spmm(s, torch.ones(2, 1))
    tensor([[2.],
            [3.]])
    """
    if not isinstance(input, SparseCOO) and not isinstance(mat2, SparseCOO):
        from autodiag.ops.linalg import mm

        return mm(input, mat2)
    return matmul_sparse(input, mat2)


def sparse_mm(sparse, dense):
    """``torch.sparse.mm``: the product of a sparse and a dense matrix (SparseAddmmBackward0)."""
    if not isinstance(sparse, SparseCOO):
        raise sparse_refusal("torch.sparse.mm (a dense first operand)")
    return matmul_sparse(sparse, dense, SparseAddmmBackward0)


sparse_mm = traced("sparse.mm", sparse_mm)  # reported to tracers, as every public op
