"""Linear algebra on square matrices (issue 20, cover16b): ``det``, ``slogdet``, ``logdet``,
``inverse`` (``linalg.inv``), ``solve`` (``linalg.solve``), ``matrix_power`` and ``cholesky``
(``linalg.cholesky``), batched over leading dims, with PyTorch's node names
(``LinalgDetBackward0``, ``LinalgInvExBackward0`` ...), backward formulas (FunctionsManual.cpp)
and errors. ``autodiag.linalg`` re-exports the ``torch.linalg`` names.

NOTE [LAPACK values]: numpy and PyTorch both call LAPACK (getrf/getrs/potrf), but different
builds (numpy's OpenBLAS, PyTorch's MKL or OpenBLAS) block and order their sums differently:
values agree to a few ulps, not to the bit. The errors PyTorch derives from LAPACK's ``info``
(which diagonal element of U is zero, which leading minor is not positive-definite) are found by
an unblocked factorization of the failing matrix (``_first_zero_pivot``, ``_first_bad_minor``),
run only when numpy reported the failure.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops._core import _state, edge, register, result, save, save_output
from autodiag.tensor import Tensor


class LinAlgError(RuntimeError):
    """PyTorch's ``torch.linalg.LinAlgError`` (a RuntimeError): a LAPACK failure."""


LinAlgError.__name__ = "_LinAlgError"  # as PyTorch's shows in a traceback
LinAlgError.__qualname__ = "_LinAlgError"


def _square(name: str, A, want_float: bool = True) -> np.ndarray:
    if not isinstance(A, Tensor):
        raise TypeError(
            f"{name}(): argument 'A' (position 1) must be Tensor, not {type(A).__name__}"
        )
    d = A._data
    if d.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if d.shape[-1] != d.shape[-2]:
        raise RuntimeError(
            f"{name}: A must be batches of square matrices, but they are "
            f"{d.shape[-2]} by {d.shape[-1]} matrices"
        )
    if want_float and d.dtype.kind != "f":
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got "
            f"{A.dtype.scalar_name}"
        )
    return d


def _first_zero_pivot(m: np.ndarray) -> int:
    """getrf's ``info``: the 1-based index of the first zero diagonal element of U (partial
    pivoting on the largest magnitude, the first on ties, as idamax); 0 when there is none."""
    a = np.array(m, dtype=np.float64)
    n = a.shape[0]
    info = 0
    for k in range(n):
        p = k + int(np.argmax(np.abs(a[k:, k])))
        if a[p, k] != 0:
            if p != k:
                a[[k, p]] = a[[p, k]]
            a[k + 1 :, k] /= a[k, k]
            a[k + 1 :, k + 1 :] -= np.outer(a[k + 1 :, k], a[k, k + 1 :])
        elif info == 0:
            info = k + 1
    return info


def _singular_error(name: str, d: np.ndarray, message) -> LinAlgError:
    flat = d.reshape((-1,) + d.shape[-2:])
    for b, m in enumerate(flat):
        info = _first_zero_pivot(m)
        if info:
            where = f"(Batch element {b}): " if d.ndim > 2 else ""
            return LinAlgError(f"{name}: {where}{message(info)}")
    return LinAlgError(f"{name}: {message(1)}")  # numpy failed where our factorization did not


def _inv_array(name: str, d: np.ndarray) -> np.ndarray:
    try:
        with np.errstate(all="ignore"):
            return np.linalg.inv(d)
    except np.linalg.LinAlgError:
        raise _singular_error(
            name,
            d,
            lambda i: (
                f"The diagonal element {i} is zero, the inversion could not be completed "
                "because the input matrix is singular."
            ),
        ) from None


def _lapack_layout(a: np.ndarray) -> np.ndarray:
    """``a`` laid out as PyTorch's LAPACK results are: each matrix column-major (strides
    ``(n*m, 1, n)``), which later reshapes and products see (view or copy, mm or bmm)."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)


def _mH(xp, a):
    return xp.mT(a)


# ---------------------------------------------------------------------------------------------
# inverse
# ---------------------------------------------------------------------------------------------


class LinalgInvExBackward0(Node):
    __slots__ = ()
    _saved_names = ("inverse",)

    def backward(self, xp, g):
        # -A^{-H} gA A^{-H}
        inv = self.saved_inverse(xp)
        ih = _mH(xp, inv)
        return (-xp.matmul(xp.matmul(ih, g), ih),)


def _inv(name: str, A) -> Tensor:
    d = _square(name, A)
    out = _lapack_layout(_inv_array(name, d).astype(d.dtype, copy=False))
    if _state.record and A.requires_grad:
        node = LinalgInvExBackward0((edge(A),))
        r = result(out, node)
        node._saved = (save_output(r),)
        return r
    return result(out, None)


@register(expr=True)
def inverse(input):
    """The inverse of each square matrix (``linalg.inv``; ``LinalgInvExBackward0``).

    >>> import autodiag as torch
    >>> torch.inverse(torch.tensor([[2.0, 0.0], [0.0, 4.0]]))
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """
    return _inv("linalg.inv", input)


def inv(A, *, out=None):
    """``torch.linalg.inv``."""
    if out is not None:
        raise NotImplementedError("linalg.inv: out= is not supported by autodiag")
    return _inv("linalg.inv", A)


# ---------------------------------------------------------------------------------------------
# solve
# ---------------------------------------------------------------------------------------------


class LinalgSolveExBackward0(Node):
    __slots__ = ("left", "vector")
    _saved_names = ("A", "result")
    _extra_names = ("left",)

    def backward(self, xp, g):
        # linalg_solve_backward (left=True): gB = A^{-H} g, gA = -gB X^H
        A, X = self.saved_A(xp), self.saved_result(xp)
        needs_A, needs_B = self.needs_grad
        if self.vector:
            g2, X2 = _unsq(xp, g), _unsq(xp, X)
        else:
            g2, X2 = g, X
        gB = _solve_xp(xp, _mH(xp, A), g2)
        gA = -xp.matmul(gB, _mH(xp, X2)) if needs_A else None
        if self.vector:
            gB = _sq(xp, gB)
        return (gA, gB if needs_B else None)

    def _saved_extra(self):
        return {"left": True}


def _unsq(xp, a):
    return a[..., None] if xp.arrays else a.unsqueeze(-1)


def _sq(xp, a):
    return a[..., 0] if xp.arrays else a.squeeze(-1)


def _solve_xp(xp, A, B):
    if xp.arrays:
        return _solve_array("linalg.solve", A, B)
    return linalg_solve(A, B)


def _solve_array(name, A, B):
    try:
        with np.errstate(all="ignore"):
            return np.linalg.solve(A, B)
    except np.linalg.LinAlgError:
        raise LinAlgError(
            f"torch.{name}: The solver failed because the input matrix is singular."
        ) from None


def _is_vector_rhs(a: np.ndarray, b: np.ndarray) -> bool:
    # PyTorch: B is a (batch of) vector(s) when B.ndim == 1, or B.ndim == A.ndim - 1 and
    # B.shape == A.shape[:-1]
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])


def linalg_solve(A, B, *, left: bool = True, out=None):
    """The solution X of ``A X = B`` (``torch.linalg.solve``; ``LinalgSolveExBackward0``).

    >>> import autodiag as torch
    >>> A = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    >>> torch.linalg.solve(A, torch.tensor([1.0, 1.0]))
    tensor([0.5000, 0.2500])
    """
    if not left:
        raise NotImplementedError("linalg.solve: left=False is not supported by autodiag")
    if out is not None:
        raise NotImplementedError("linalg.solve: out= is not supported by autodiag")
    a = _square("linalg.solve", A)
    if not isinstance(B, Tensor):
        raise TypeError(f"linalg.solve(): argument 'B' must be Tensor, not {type(B).__name__}")
    b = B._data
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
            f"{A.dtype.scalar_name} and B of type {B.dtype.scalar_name} instead"
        )
    vector = _is_vector_rhs(a, b)
    b2 = b[..., None] if vector else b
    if b2.ndim < 2 or b2.shape[-2] != a.shape[-1]:
        rows = b2.shape[-2] if b2.ndim >= 2 else b2.shape[-1]
        cols = b2.shape[-1] if b2.ndim >= 2 else 1
        raise RuntimeError(
            "linalg.solve: Incompatible shapes of A and B for the equation AX = B "
            f"({a.shape[-2]}x{a.shape[-1]} and {rows}x{cols})"
        )
    batch = np.broadcast_shapes(a.shape[:-2], b2.shape[:-2])
    aa = np.broadcast_to(a, batch + a.shape[-2:])
    bb = np.broadcast_to(b2, batch + b2.shape[-2:])
    out_d = _solve_array("linalg.solve", aa, bb).astype(a.dtype, copy=False)
    out_d = np.ascontiguousarray(out_d[..., 0]) if vector else _lapack_layout(out_d)
    if _state.record and (A.requires_grad or B.requires_grad):
        node = LinalgSolveExBackward0((edge(A), edge(B)))
        node.vector, node.left = vector, True
        r = result(out_d, node)
        node._saved = (save(A), save_output(r))
        node._input_meta = ((a.shape, a.dtype), (b.shape, b.dtype))  # sum broadcast batches
        return r
    return result(out_d, None)


_SOLVE_REMOVED = (
    "This function was deprecated since version 1.9 and is now removed. `torch.solve` is "
    "deprecated in favor of `torch.linalg.solve`. `torch.linalg.solve` has its arguments "
    "reversed and does not return the LU factorization.\n\nTo get the LU factorization see "
    "`torch.lu`, which can be used with `torch.lu_solve` or `torch.lu_unpack`.\nX = "
    "torch.solve(B, A).solution should be replaced with:\nX = torch.linalg.solve(A, B)"
)


@register()
def solve(input, other):
    """Removed from PyTorch (1.9): raises its error, which names ``torch.linalg.solve``."""
    raise RuntimeError(_SOLVE_REMOVED)


# ---------------------------------------------------------------------------------------------
# det, slogdet, logdet
# ---------------------------------------------------------------------------------------------


class LinalgDetBackward0(Node):
    __slots__ = ()
    _saved_names = ("A", "result")

    def backward(self, xp, g):
        A, det = self.saved_A(xp), self.saved_result(xp)
        if xp.arrays:
            # grad * det * A^{-H}. PyTorch solves with A's LU, its zero pivots moved to eps: at
            # an exactly singular A, det is 0 and so is the gradient (not the adjugate)
            gd = (g * det)[..., None, None]
            with np.errstate(all="ignore"):
                try:
                    return (gd * np.swapaxes(np.linalg.inv(A), -1, -2),)
                except np.linalg.LinAlgError:
                    return (gd * np.zeros_like(A),)
        # create_graph: linalg_solve(A^H, diag_embed(grad * det)) as PyTorch's non-singular branch
        n = A.shape[-1]
        from autodiag.ops.factories import eye

        eye_n = eye(n, dtype=A.dtype)
        d = (g * det).unsqueeze(-1).unsqueeze(-1) * eye_n
        if not np.all(np.isfinite(np.linalg.cond(A._data))) or np.any(det._data == 0):
            raise NotImplementedError(
                "linalg.det: double backward at a singular matrix is not supported by autodiag"
            )
        return (linalg_solve(A.mT, d),)


def _det_array(d: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(np.linalg.det(d)).astype(d.dtype, copy=False)


@register(expr=True)
def det(input):
    """The determinant of each square matrix (``LinalgDetBackward0``).

    >>> import autodiag as torch
    >>> torch.det(torch.tensor([[2.0, 1.0], [1.0, 3.0]]))
    tensor(5.)
    """
    return _det("linalg.det", input)


def _det(name, A):
    d = _square(name, A)
    out = _det_array(d)
    if _state.record and A.requires_grad:
        node = LinalgDetBackward0((edge(A),))
        r = result(out, node)
        node._saved = (save(A), save_output(r))
        return r
    return result(out, None)


SlogdetResult = namedtuple("slogdet", ["sign", "logabsdet"])
LinalgSlogdetResult = namedtuple("linalg_slogdet", ["sign", "logabsdet"])


def _return_repr(self) -> str:
    fields = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
    return f"torch.return_types.{type(self).__name__}(\n{fields})"


SlogdetResult.__repr__ = _return_repr
LinalgSlogdetResult.__repr__ = _return_repr


class LinalgSlogdetBackward0(Node):
    __slots__ = ("_num_outputs",)
    _saved_names = ("A",)

    def _apply(self, xp, grads):
        # real input: only logabsdet carries gradient, g * A^{-H}
        g = grads[1]
        A = self.saved_A(xp)
        if g is None:
            return (xp.zeros(tuple(A.shape), A),)
        if xp.arrays:
            with np.errstate(all="ignore"):
                gi = np.swapaxes(_inv_array("linalg.slogdet", A), -1, -2)
            return (g[..., None, None] * gi,)
        from autodiag.ops.factories import eye

        d = g.unsqueeze(-1).unsqueeze(-1) * eye(A.shape[-1], dtype=A.dtype)
        return (linalg_solve(A.mT, d),)


def _slogdet(name, A, cls):
    d = _square(name, A)
    with np.errstate(all="ignore"):
        sign, logabs = np.linalg.slogdet(d)
    sign = np.asarray(sign).astype(d.dtype, copy=False)
    logabs = np.asarray(logabs).astype(d.dtype, copy=False)
    node = None
    if _state.record and A.requires_grad:
        node = LinalgSlogdetBackward0((edge(A),))
        node._num_outputs = 2
        node._saved = (save(A),)
    s, la = result(sign, node), result(logabs, node)
    if node is not None:
        la._output_nr = 1
    return cls(s, la)


@register(expr=True)
def slogdet(input):
    """Sign and log of the absolute value of the determinant (``LinalgSlogdetBackward0``).

    >>> import autodiag as torch
    >>> torch.slogdet(torch.tensor([[-2.0, 0.0], [0.0, 1.0]])).logabsdet
    tensor(0.6931)
    """
    return _slogdet("linalg.slogdet", input, SlogdetResult)


@register(expr=True)
def logdet(input):
    """log(det(input)): NaN for a negative determinant, -inf for a singular matrix.

    >>> import autodiag as torch
    >>> torch.logdet(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
    tensor(0.6931)
    """
    from autodiag.ops.pointwise import where

    sign, logabs = _slogdet("linalg.slogdet", input, SlogdetResult)
    # PyTorch: where(sign == -1, nan, logabsdet) (WhereBackward0 over LinalgSlogdetBackward0)
    return where(sign == -1, float("nan"), logabs)


# ---------------------------------------------------------------------------------------------
# matrix_power
# ---------------------------------------------------------------------------------------------


@register(expr=True)
def matrix_power(input, n: int):
    """``input`` multiplied by itself ``n`` times (the inverse's for n < 0), by PyTorch's binary
    decomposition (its graph of ``MmBackward0``/``UnsafeViewBackward0`` nodes).

    >>> import autodiag as torch
    >>> torch.matrix_power(torch.tensor([[1.0, 1.0], [0.0, 1.0]]), 3)
    tensor([[1., 3.],
            [0., 1.]])
    """
    from autodiag.ops.linalg import matmul

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(
            f"matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}"
        )
    n = int(n)
    _square("linalg.matrix_power", input, want_float=n < 0)
    if n == 0:
        from autodiag.ops.factories import eye

        k = input.shape[-1]
        return input.clone().copy_(eye(k, dtype=input.dtype).expand(input.shape))
    a = input
    if n < 0:
        a = _inv("linalg.inv", input)
        n = -n
    if n == 1:
        return a.clone()
    if n == 2:
        return matmul(a, a)
    if n == 3:
        return matmul(matmul(a, a), a)
    z = res = None
    while n > 0:
        bit = n % 2
        n //= 2
        z = a if z is None else matmul(z, z)
        if bit == 1:
            res = z if res is None else matmul(res, z)
    return res


# ---------------------------------------------------------------------------------------------
# cholesky
# ---------------------------------------------------------------------------------------------


def _first_bad_minor(m: np.ndarray) -> int:
    for k in range(1, m.shape[-1] + 1):
        try:
            np.linalg.cholesky(m[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return m.shape[-1]


class LinalgCholeskyExBackward0(Node):
    __slots__ = ("upper",)
    _saved_names = ("L",)
    _extra_names = ("upper",)

    def backward(self, xp, gL):
        if not xp.arrays:
            raise NotImplementedError(
                f"{self.name()}: double backward through cholesky is not supported by autodiag"
            )
        # cholesky_backward (Iain Murray, arXiv 1602.07527)
        L = self.saved_L(xp)
        if self.upper:
            L, gL = np.swapaxes(L, -1, -2), np.swapaxes(gL, -1, -2)
        gA = np.tril(np.swapaxes(L, -1, -2) @ gL)
        gA = 0.5 * (gA + np.swapaxes(np.tril(gA, -1), -1, -2))
        with np.errstate(all="ignore"):
            gA = np.linalg.solve(np.swapaxes(L, -1, -2), gA)  # L^H X = gA (upper triangular)
            gA = np.swapaxes(
                np.linalg.solve(np.swapaxes(L, -1, -2), np.swapaxes(gA, -1, -2)), -1, -2
            )  # X L = gA
        return (gA.astype(L.dtype, copy=False),)

    def _saved_extra(self):
        return {"upper": self.upper}


class CholeskyBackward0(LinalgCholeskyExBackward0):
    __slots__ = ()
    _saved_names = ("result",)

    def saved_L(self, xp):
        return self.saved_result(xp)


def _cholesky(name, A, upper, cls):
    d = _square(name, A)
    try:
        with np.errstate(all="ignore"):
            L = np.linalg.cholesky(d)
    except np.linalg.LinAlgError:
        flat = d.reshape((-1,) + d.shape[-2:])
        for b, m in enumerate(flat):
            try:
                np.linalg.cholesky(m)
            except np.linalg.LinAlgError:
                where = f"(Batch element {b}): " if d.ndim > 2 else ""
                raise LinAlgError(
                    f"{name}: {where}The factorization could not be completed because the input "
                    f"is not positive-definite (the leading minor of order {_first_bad_minor(m)} "
                    "is not positive-definite)."
                ) from None
        raise
    L = L.astype(d.dtype, copy=False)
    out = _lapack_layout(np.swapaxes(L, -1, -2) if upper else L)
    if _state.record and A.requires_grad:
        node = cls((edge(A),))
        node.upper = upper
        r = result(out, node)
        node._saved = (save_output(r),)
        return r
    return result(out, None)


@register(expr=True)
def cholesky(input, upper: bool = False):
    """The Cholesky factor of each symmetric positive-definite matrix (``CholeskyBackward0``;
    deprecated in PyTorch for ``linalg.cholesky``, with its warning).

    >>> import autodiag as torch
    >>> torch.linalg.cholesky(torch.tensor([[4.0, 2.0], [2.0, 2.0]]))
    tensor([[2., 0.],
            [1., 1.]])
    """
    import warnings

    warnings.warn(
        "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in "
        "a future PyTorch release.",
        UserWarning,
        stacklevel=3,
    )
    return _cholesky("cholesky", input, upper, CholeskyBackward0)


def linalg_cholesky(A, *, upper: bool = False, out=None):
    if out is not None:
        raise NotImplementedError("linalg.cholesky: out= is not supported by autodiag")
    return _cholesky("linalg.cholesky", A, upper, LinalgCholeskyExBackward0)


def linalg_det(A, *, out=None):
    if out is not None:
        raise NotImplementedError("linalg.det: out= is not supported by autodiag")
    return _det("linalg.det", A)


def linalg_slogdet(A, *, out=None):
    if out is not None:
        raise NotImplementedError("linalg.slogdet: out= is not supported by autodiag")
    return _slogdet("linalg.slogdet", A, LinalgSlogdetResult)


def linalg_matrix_power(A, n: int, *, out=None):
    if out is not None:
        raise NotImplementedError("linalg.matrix_power: out= is not supported by autodiag")
    return matrix_power(A, n)
