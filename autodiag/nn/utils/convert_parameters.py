"""``parameters_to_vector`` / ``vector_to_parameters`` (``torch.nn.utils.convert_parameters``)."""

from __future__ import annotations

from autodiag.ops.shape import cat
from autodiag.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters) -> Tensor:
    """All ``parameters`` flattened into one vector (``cat`` of their views: differentiable).

    >>> import autodiag as torch
    >>> torch.nn.utils.parameters_to_vector([torch.ones(2, 2), torch.zeros(1)])
    tensor([1., 1., 1., 1., 0.])
    """
    return cat([p.view(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Give each of ``parameters``, in turn, the next slice of ``vec`` as its ``.data``.

    >>> import autodiag as torch
    >>> p = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
    >>> torch.nn.utils.vector_to_parameters(torch.tensor([1.0, 2.0, 3.0]), p)
    >>> p[0].data, p[1].data
    (tensor([1., 2.]), tensor([3.]))
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    pointer = 0
    for param in parameters:
        num_param = param.numel()
        param.data = vec[pointer : pointer + num_param].view_as(param).data
        pointer += num_param


def _typename(obj) -> str:
    """``torch.typename``: the module-qualified class name of a non-tensor."""
    module = type(obj).__module__
    qualname = type(obj).__qualname__
    return qualname if module in ("builtins", "__builtin__", None) else f"{module}.{qualname}"
