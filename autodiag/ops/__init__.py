"""The op families. Importing this package registers every op (``REGISTRY``) and attaches the
Tensor methods and operators."""

from autodiag.ops import (  # noqa: F401
    factories,
    inplace,
    linalg,
    nn_ops,
    operators,
    pointwise,
    reduction,
    shape,
)
from autodiag.ops._core import REGISTRY

__all__ = ["REGISTRY"]
