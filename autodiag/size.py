"""``Size``: the tuple subclass returned by ``Tensor.shape``; dims wrapped as PyTorch wraps them."""

from __future__ import annotations

import numpy as np


class Size(tuple):
    """A tensor's shape, e.g. ``autodiag.Size([2, 3])``; compares equal to plain tuples."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(s) for s in self)}])"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return Size(r) if isinstance(item, slice) else r


def normalize_dims(dim, ndim: int) -> tuple:
    """``dim`` (None, int, or sequence) as a sorted tuple of non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    n = max(ndim, 1)
    out = []
    for d in dim:
        if not -n <= d < n:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})"
            )
        if d % n in out:
            raise RuntimeError(f"dim {d % n} appears multiple times in the list of dims")
        out.append(d % n)
    # a 0-d tensor accepts dim 0/-1 but has no axis to reduce: numpy wants no axes
    return tuple(sorted(set(out))) if ndim else ()


def wrap_dim(d: int, ndim: int) -> int:
    """``d`` as a non-negative dim (0 for 0-d tensors, which accept 0 and -1)."""
    dims = normalize_dims(d, ndim)
    return dims[0] if dims else 0
