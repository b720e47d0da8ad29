"""Which operand PyTorch's CPU ``maximum``/``minimum`` returns on a tie (the sign of a zero).

NOTE [maximum ties]: PyTorch's scalar code returns its first operand when the two are equal
(``maximum(-0.0, 0.0)`` is ``-0.0``), its vectorised code (AVX2 ``max_ps``/``min_ps``) the
second. ``cpu_kernel_vec``'s loop runs two vectors a step (64 bytes: 16 float32 or 8 float64
elements) over the innermost loop of the TensorIterator, then the scalar code over the rest of
that loop. The innermost loop is the output's trailing dims coalesced as long as each operand
either runs along all of them or is broadcast along all of them (measured on torch 2.13:
``maximum(full((17,), -0.), zeros(()))`` is 16 zeros then one ``-0.``; a (3, 17) by (3, 1)
maximum has an inner loop of 17 per row). Not emulated: operands whose memory is not
C-contiguous (PyTorch reorders or takes its strided loop), and tensors of 32768+ elements split
among several threads (each chunk has its own tail): there, the scalar path's choice is kept.
"""

from __future__ import annotations

import functools
import math

import numpy as np

_STEP_BYTES = 64
_THREADED = 32768  # at::internal::GRAIN_SIZE: from here the loop is split among threads


def vector_body(out_shape: tuple, *operands: np.ndarray) -> np.ndarray | None:
    """A mask broadcastable to ``out_shape``: the elements PyTorch's vectorised loop over
    ``operands`` computes (None when it computes none, or when the layout is one this module
    does not model)."""
    if not all(x.flags.c_contiguous for x in operands):
        return None
    return _body(out_shape, tuple(x.shape for x in operands), operands[0].dtype.itemsize)


@functools.lru_cache(maxsize=256)
def _body(out_shape: tuple, shapes: tuple, itemsize: int) -> np.ndarray | None:
    step = _STEP_BYTES // itemsize
    n = len(out_shape)
    dims = [d for d in range(n) if out_shape[d] != 1]
    if not dims:
        return None

    def runs(shape: tuple, d: int) -> bool:
        k = d - (n - len(shape))
        return k >= 0 and shape[k] != 1

    pattern = tuple(runs(shape, dims[-1]) for shape in shapes)
    first = dims[-1]
    for d in reversed(dims[:-1]):
        if tuple(runs(shape, d) for shape in shapes) != pattern:
            break
        first = d
    inner = out_shape[first:]
    size = math.prod(inner)
    body = size - size % step
    if body == 0:
        return None
    mask = (np.arange(size) < body).reshape(inner)
    mask.flags.writeable = False  # shared by the calls with these shapes
    return mask


def tie_takes_second(
    out: np.ndarray, a: np.ndarray, b: np.ndarray, loop: tuple | None = None
) -> np.ndarray:
    """``out`` (the first operand on ties) with PyTorch's vectorised body's choice: the second
    operand where the two are equal. Only a zero's sign can change. ``loop``: the kernel's
    operands when they are not ``a`` and ``b`` (clamp's self, min and max)."""
    dt = out.dtype
    if dt == np.float16 and np.count_nonzero(out) != out.size:
        # numpy's float16 maximum/minimum return the second operand on ties (its float32 and
        # float64 ones the first): the first here, PyTorch's scalar code's choice
        np.copyto(out, a, where=a == b)
    if dt.kind != "f" or not _STEP_BYTES // dt.itemsize <= out.size < _THREADED:
        return out
    if np.count_nonzero(out) == out.size:  # no zero, no sign to choose (the common case)
        return out
    mask = vector_body(out.shape, *(loop or (a, b)))
    if mask is None:
        return out
    tie = a == b  # equal: the same value, but for a zero's sign
    tie &= mask
    np.copyto(out, b, where=tie)  # out is the op's fresh result
    return out
