"""The op families. Importing this package registers every op (``REGISTRY``) and attaches the
Tensor methods and operators."""

from autodiag.ops import factories, inplace, linalg, nn_ops, operators, pointwise, reduction, shape  # noqa: F401
from autodiag.ops._core import REGISTRY

__all__ = ["REGISTRY"]
