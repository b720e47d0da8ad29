"""The op families. Importing this package registers every op (``REGISTRY``, ``OPS``) and
attaches the Tensor methods, their in-place twins and the operators."""

import autodiag.ops.losses  # noqa: F401 - one more op family
import autodiag.ops.recurrent  # noqa: F401  (recurrent layers: unsafe_split/unsafe_chunk)
from autodiag.ops import factories, inplace, linalg, nn_ops, operators, pointwise, reduction, shape  # noqa: F401
from autodiag.ops._core import OPS, REGISTRY, torch_namespace

inplace.make_twins()

__all__ = ["OPS", "REGISTRY", "torch_namespace"]
