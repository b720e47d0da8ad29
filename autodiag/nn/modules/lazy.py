"""Lazy modules (``nn.LazyLinear``) and ``UninitializedParameter``, as PyTorch's: the input
size is read from the first forward's input, the parameters are materialised in place (the
same objects, so an optimizer built before that step holds them), initialised as the plain
module initialises them (the same random draws, in the same order), and the module becomes the
plain module (``LazyLinear`` -> ``Linear``).

Limitation: PyTorch refuses every op on a parameter that is not materialised yet; here
``shape``, ``size()``, ``numel()``, ``dim()`` refuse with PyTorch's messages, and an op reading it
before the first forward sees an empty tensor.
"""

from __future__ import annotations

from autodiag.core.grad_mode import no_grad
from autodiag.nn.modules.linear import Linear
from autodiag.nn.modules.module import Module
from autodiag.nn.parameter import Parameter

__all__ = ["UninitializedParameter", "LazyLinear"]

_SHAPE_ERROR = (
    "Can't access the shape of an uninitialized parameter or buffer. This error usually "
    "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
    "initialized one. Call `forward` to initialize the parameters before accessing their "
    "attributes."
)


def _refused(method: str) -> ValueError:
    return ValueError(
        f"Attempted to use an uninitialized parameter in {method}. This error happens when "
        "you are using a `LazyModule` or explicitly manipulating "
        "`torch.nn.parameter.UninitializedParameter` objects. When using LazyModules Call "
        "`forward` with a dummy batch to initialize the parameters before calling torch "
        "functions"
    )


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet; ``materialize(shape)`` gives it storage and
    turns it into a plain ``Parameter`` (the same object)."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        from autodiag.ops.factories import empty

        return Parameter.__new__(cls, empty(0, dtype=dtype), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None):
        pass

    def materialize(self, shape, device=None, dtype=None) -> None:
        from autodiag.ops.factories import empty

        self.data = empty(shape, dtype=dtype if dtype is not None else self.dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(_SHAPE_ERROR)

    def size(self, dim=None):
        raise RuntimeError(_SHAPE_ERROR)

    def numel(self):
        raise _refused("<method 'numel' of 'torch._C.TensorBase' objects>")

    def dim(self):
        raise _refused("<method 'dim' of 'torch._C.TensorBase' objects>")

    def __repr__(self) -> str:
        return "<UninitializedParameter>"

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, dtype=self.dtype)
        return memo[id(self)]


class LazyLinear(Linear):
    """``nn.LazyLinear(out_features)``: a ``Linear`` whose ``in_features`` is the last dim of
    the first input; it becomes a ``Linear`` at that first forward.

    >>> import autodiag as torch
    >>> fc = torch.nn.LazyLinear(2)
    >>> fc
    LazyLinear(in_features=0, out_features=2, bias=True)
    >>> fc(torch.ones(4, 3)).shape, fc
    (torch.Size([4, 2]), Linear(in_features=3, out_features=2, bias=True))
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        Module.__init__(self)
        self.in_features = 0
        self.out_features = out_features
        self.weight = UninitializedParameter(dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self._initialize_hook = self.register_forward_pre_hook(_infer_parameters)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def has_uninitialized_params(self) -> bool:
        return any(
            isinstance(p, UninitializedParameter) for p in (self.weight, self.bias) if p is not None
        )

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        # PyTorch's: a parameter not materialised yet is saved as itself (not an empty tensor,
        # which a lazy module loading it would take for a real shape)
        for name, param in self._parameters.items():
            if param is not None:
                lazy = isinstance(param, UninitializedParameter)
                destination[prefix + name] = param if lazy or keep_vars else param.detach()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # PyTorch's _lazy_load_hook: a parameter not materialised yet takes the shape of the one
        # loaded into it (a checkpoint loaded before the first forward); the class stays lazy
        # until that forward, as PyTorch's does
        with no_grad():
            for name, param in self._parameters.items():
                key = prefix + name
                if isinstance(param, UninitializedParameter) and key in state_dict:
                    loaded = state_dict[key]
                    if not isinstance(loaded, UninitializedParameter):
                        param.materialize(loaded.shape)
        # both lazy: nothing to copy, the key is neither missing nor unexpected (PyTorch)
        skip = {
            prefix + k
            for k, v in self._parameters.items()
            if isinstance(v, UninitializedParameter) and prefix + k in state_dict
        }
        if skip:
            state_dict = {k: v for k, v in state_dict.items() if k not in skip}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        missing_keys[:] = [k for k in missing_keys if k not in skip]

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()
        if self.in_features == 0:  # materialised by load_state_dict: its in_features, checked
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(
                    f"The in_features inferred from input: {input.shape[-1]} "
                    f"is not equal to in_features from self.weight: "
                    f"{self.weight.shape[-1]}"
                )
            self.in_features = input.shape[-1]


def _infer_parameters(module, args) -> None:
    """The forward pre-hook: materialise from the first input, then become the plain module."""
    module.initialize_parameters(*args)
    if module.has_uninitialized_params():
        raise RuntimeError(f"module {module._get_name()} has not been fully initialized")
    module._initialize_hook.remove()
    del module._initialize_hook
    module.__class__ = module.cls_to_become
