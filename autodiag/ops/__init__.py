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
    inplace2,
    instance_norm,
    linalg,
    linalg2,
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
    runtime_fns,
    sampling,
    selection,
    shape,
    shape2,
    sparse_coo,
    special2,
    stats,
    stats2,
    trig,
    unfold_windows,
)
from autodiag.ops._core import OPS, REGISTRY, torch_namespace

inplace.make_twins()
inplace2.make_twins_and_functions()  # the in-place forms no registration declares (issue 20)

__all__ = ["OPS", "REGISTRY", "torch_namespace"]
