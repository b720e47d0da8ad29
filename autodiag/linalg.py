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

for _f, _n in (
    (det, "det"),
    (slogdet, "slogdet"),
    (inv, "inv"),
    (solve, "solve"),
    (cholesky, "cholesky"),
    (matrix_power, "matrix_power"),
):
    _f.__name__ = _f.__qualname__ = _n
    _f.__module__ = __name__

__all__ = ["LinAlgError", "cholesky", "det", "inv", "matrix_power", "slogdet", "solve"]
