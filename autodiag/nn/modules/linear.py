"""``Linear``, ``Identity`` and ``Flatten``."""

from __future__ import annotations

import math

from autodiag.nn import functional as F
from autodiag.nn import init
from autodiag.nn.modules.module import Module
from autodiag.nn.parameter import Parameter


class Identity(Module):
    """Returns its input unchanged (accepts and ignores any constructor arguments)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``, initialised as PyTorch initialises it (kaiming_uniform_ with
    a = sqrt(5) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias).

    >>> import autodiag as torch
    >>> fc = torch.nn.Linear(3, 2)
    >>> fc, tuple(fc.weight.shape), fc(torch.ones(4, 3)).grad_fn.name()
    (Linear(in_features=3, out_features=2, bias=True), (2, 3), 'AddmmBackward0')
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        from autodiag.ops.factories import empty

        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Flatten(Module):
    """Flattens dims ``start_dim`` .. ``end_dim`` into one."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expands dim ``dim`` into ``unflattened_size`` (as ``torch.nn.Unflatten``).

    >>> import autodiag as torch
    >>> tuple(torch.nn.Unflatten(1, (2, 3))(torch.ones(4, 6)).shape)
    (4, 2, 3)
    """

    def __init__(self, dim: int, unflattened_size) -> None:
        super().__init__()
        if isinstance(dim, int):
            if not isinstance(unflattened_size, (tuple, list)) or not all(
                isinstance(s, int) for s in unflattened_size
            ):
                raise TypeError(
                    "unflattened_size must be tuple of ints, but found type "
                    f"{type(unflattened_size).__name__}"
                )
        else:
            raise TypeError("invalid argument type for dim parameter")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
