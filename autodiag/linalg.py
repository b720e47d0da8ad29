"""``torch.linalg``: the linear-algebra functions autodiag has (ops/linalg2.py), under PyTorch's
names. A name PyTorch has and autodiag does not is an AttributeError naming it, never a guess.

>>> import autodiag as torch
>>> torch.linalg.det(torch.tensor([[2.0, 1.0], [1.0, 3.0]]))
tensor(5.)
"""

from __future__ import annotations

from autodiag.ops import linalg2 as _l
from autodiag.trace.events import traced as _traced

LinAlgError = _l.LinAlgError

det = _traced("linalg_det", _l.linalg_det)
slogdet = _traced("linalg_slogdet", _l.linalg_slogdet)
inv = _traced("linalg_inv", _l.inv)
solve = _traced("linalg_solve", _l.linalg_solve)
cholesky = _traced("linalg_cholesky", _l.linalg_cholesky)
matrix_power = _traced("linalg_matrix_power", _l.linalg_matrix_power)


def _vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None, out=None):  # noqa: A002
    from autodiag.ops.reduction import vector_norm as _vn

    if out is not None:
        raise NotImplementedError("linalg.vector_norm: out= is not supported by autodiag")
    if dtype is not None and dtype != getattr(x, "dtype", None):
        raise NotImplementedError("linalg.vector_norm: dtype= is not supported by autodiag")
    return _vn(x, ord, dim, keepdim)


def _norm(A, ord=None, dim=None, keepdim: bool = False, *, out=None, dtype=None):  # noqa: A002
    """``torch.linalg.norm``: vector norms, and the Frobenius and 1/inf matrix norms (the
    singular-value norms, 'nuc' and +-2, raise NotImplementedError)."""
    from autodiag.ops.reduction import vector_norm as _vn

    if out is not None or dtype is not None:
        raise NotImplementedError("linalg.norm: out= and dtype= are not supported by autodiag")
    if isinstance(dim, int):
        dim = (dim,)
    nd = A.dim()
    if ord is None:
        if dim is None or len(dim) == 1 or len(dim) == 2:
            return _vn(A, 2, dim, keepdim)  # the 2-norm of the flattened input, or Frobenius
    matrix = (dim is not None and len(dim) == 2) or (dim is None and nd == 2)
    if not matrix:
        if dim is None and nd != 1:
            raise RuntimeError(
                f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                f"Got {nd}D."
            )
        return _vn(A, ord, dim, keepdim)
    d0, d1 = dim if dim is not None else (-2, -1)
    if ord == "fro":
        return _vn(A, 2, (d0, d1), keepdim)
    if ord in (1, -1, float("inf"), float("-inf")):
        # PyTorch's matrix_norm: amax/amin over one dim of the 1-norms along the other
        d0, d1 = d0 % nd, d1 % nd
        rows, cols = (d0, d1) if ord in (1, -1) else (d1, d0)
        if not keepdim and rows < cols:
            cols -= 1
        s = _vn(A, 1, (rows,), keepdim)
        return s.amax(cols, keepdim=keepdim) if ord > 0 else s.amin(cols, keepdim=keepdim)
    raise NotImplementedError(
        f"linalg.norm: ord={ord!r} on matrices (a norm of singular values) is not supported by "
        "autodiag"
    )


vector_norm = _traced("linalg_vector_norm", _vector_norm)
norm = _traced("linalg_norm", _norm)

for _f, _n in (
    (vector_norm, "vector_norm"),
    (norm, "norm"),
    (det, "det"),
    (slogdet, "slogdet"),
    (inv, "inv"),
    (solve, "solve"),
    (cholesky, "cholesky"),
    (matrix_power, "matrix_power"),
):
    _f.__name__ = _f.__qualname__ = _n
    _f.__module__ = __name__

__all__ = [
    "LinAlgError",
    "cholesky",
    "det",
    "inv",
    "matrix_power",
    "norm",
    "slogdet",
    "solve",
    "vector_norm",
]
