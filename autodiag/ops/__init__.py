"""The op families. Importing this package registers every op (``REGISTRY``, ``OPS``) and
attaches the Tensor methods, their in-place twins and the operators."""

from autodiag.ops import (  # noqa: F401
    attention,
    conv,
    conv3d,
    diag,
    factories,
    grid,
    indexing2,
    inplace,
    instance_norm,
    linalg,
    losses,
    nn_ops,
    normalization,
    operators,
    pointwise,
    pointwise2,
    pooling,
    pooling_nd,
    recurrent,
    reduction,
    sampling,
    selection,
    shape,
    shape2,
    sparse_coo,
    stats,
    trig,
    unfold_windows,
)
from autodiag.ops._core import OPS, REGISTRY, torch_namespace

inplace.make_twins()

__all__ = ["OPS", "REGISTRY", "torch_namespace"]
