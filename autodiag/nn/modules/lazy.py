"""Lazy modules (``nn.LazyLinear``) and ``UninitializedParameter``, as PyTorch's: the input
size is read from the first forward's input, the parameters are materialised in place (the
same objects, so an optimizer built before that step holds them), initialised as the plain
module initialises them (the same random draws, in the same order), and the module becomes the
plain module (``LazyLinear`` -> ``Linear``, ``LazyConv2d`` -> ``Conv2d``, ``LazyBatchNorm2d`` ->
``BatchNorm2d``; a batch norm's running statistics are ``UninitializedBuffer``s until then).

Limitation: PyTorch refuses every op on a parameter that is not materialised yet; here
``shape``, ``size()``, ``numel()``, ``dim()`` refuse with PyTorch's messages, and an op reading it
before the first forward sees an empty tensor.
"""

from __future__ import annotations

from autodiag.core.grad_mode import no_grad
from autodiag.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d
from autodiag.nn.modules.conv import Conv1d, Conv2d
from autodiag.nn.modules.linear import Linear
from autodiag.nn.modules.module import Module
from autodiag.nn.parameter import Parameter
from autodiag.tensor import Tensor

__all__ = [
    "UninitializedParameter",
    "UninitializedBuffer",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
]

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


# ---------------------------------------------------------------------------------------------
# Lazy convolutions and batch norms (d2l's LazyConv2d / LazyBatchNorm2d): PyTorch's
# LazyModuleMixin for parameters and buffers alike
# ---------------------------------------------------------------------------------------------


class UninitializedBuffer(Tensor):
    """A buffer whose shape is not known yet (``torch.nn.parameter.UninitializedBuffer``);
    ``materialize(shape)`` gives it storage and turns it into a plain tensor (the same
    object)."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None, persistent=True):
        from autodiag.ops.factories import empty

        t = Tensor._make(empty(0, dtype=dtype)._data)
        t.__class__ = cls
        return t

    def __init__(self, requires_grad: bool = False, device=None, dtype=None, persistent=True):
        pass

    materialize = UninitializedParameter.materialize
    shape = UninitializedParameter.shape
    size = UninitializedParameter.size
    numel = UninitializedParameter.numel
    dim = UninitializedParameter.dim

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"


def _is_lazy(t) -> bool:
    return isinstance(t, (UninitializedParameter, UninitializedBuffer))


class _LazyMixin:
    """PyTorch's LazyModuleMixin: parameters and buffers not materialised yet are saved as
    themselves, take a loaded checkpoint's shapes, and the first forward materialises them
    (``initialize_parameters``) and turns the module into ``cls_to_become``."""

    def _lazy_init(self) -> None:
        self._initialize_hook = self.register_forward_pre_hook(_infer_parameters)

    def has_uninitialized_params(self) -> bool:
        return any(_is_lazy(t) for t in (*self._parameters.values(), *self._buffers.values()))

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                keep = _is_lazy(param) or keep_vars
                destination[prefix + name] = param if keep else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if _is_lazy(buf) or keep_vars else buf.detach()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        items = (*self._parameters.items(), *self._buffers.items())
        with no_grad():
            for name, t in items:
                key = prefix + name
                if _is_lazy(t) and key in state_dict and not _is_lazy(state_dict[key]):
                    t.materialize(state_dict[key].shape)
        skip = {prefix + k for k, v in items if _is_lazy(v) and prefix + k in state_dict}
        if skip:
            state_dict = {k: v for k, v in state_dict.items() if k not in skip}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        missing_keys[:] = [k for k in missing_keys if k not in skip]


class _LazyConvNd(_LazyMixin):
    def _lazy_conv_init(self, out_channels: int, bias: bool, dtype) -> None:
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        self._lazy_init()

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            nd = self._nd
            if input.dim() not in (nd + 1, nd + 2):
                raise RuntimeError(
                    f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                    f"{self.cls_to_become.__name__}, but got input of size: {list(input.shape)}"
                )
            self.in_channels = input.shape[0 if input.dim() == nd + 1 else 1]
            if self.in_channels % self.groups != 0:
                raise ValueError("in_channels must be divisible by groups")
            with no_grad():
                self.weight.materialize(
                    (self.out_channels, self.in_channels // self.groups) + self.kernel_size
                )
                if self.bias is not None:
                    self.bias.materialize((self.out_channels,))
                self.reset_parameters()


def _lazy_conv(name: str, base):
    def __init__(
        self,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        # PyTorch's: the plain module with no channels and no bias, then lazy parameters
        base.__init__(
            self, 0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode,
            dtype=dtype,
        )  # fmt: skip
        self._lazy_conv_init(out_channels, bias, dtype)

    doc = (
        f"``nn.{name}(out_channels, kernel_size, ...)``: a ``{base.__name__}`` whose "
        f"``in_channels`` is read from the first input; it becomes a ``{base.__name__}`` at "
        "that first forward."
    )
    return type(
        name,
        (_LazyConvNd, base),
        {"__init__": __init__, "cls_to_become": base, "__doc__": doc, "__module__": __name__},
    )


LazyConv1d = _lazy_conv("LazyConv1d", Conv1d)
LazyConv2d = _lazy_conv("LazyConv2d", Conv2d)
LazyConv2d.__doc__ += """

    >>> import autodiag as torch
    >>> conv = torch.nn.LazyConv2d(4, 3)
    >>> conv
    LazyConv2d(0, 4, kernel_size=(3, 3), stride=(1, 1))
    >>> conv(torch.ones(2, 3, 5, 5)).shape, conv
    (torch.Size([2, 4, 3, 3]), Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1)))
"""


class _LazyNormBase(_LazyMixin):
    def _lazy_norm_init(self, affine: bool, track_running_stats: bool, dtype) -> None:
        from autodiag.dtypes import int64
        from autodiag.ops.factories import tensor

        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            self.bias = UninitializedParameter(dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dtype)
            self.running_var = UninitializedBuffer(dtype=dtype)
            self.num_batches_tracked = tensor(0, dtype=int64)
        self._lazy_init()

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            self.num_features = input.shape[1]
            with no_grad():
                if self.affine:
                    self.weight.materialize((self.num_features,))
                    self.bias.materialize((self.num_features,))
                if self.track_running_stats:
                    self.running_mean.materialize((self.num_features,))
                    self.running_var.materialize((self.num_features,))
                self.reset_parameters()


def _lazy_norm(name: str, base):
    def __init__(
        self,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        # PyTorch's: the plain module with no features, affine and tracking off, then lazy
        # parameters and buffers
        base.__init__(self, 0, eps, momentum, False, False, dtype=dtype)
        self._lazy_norm_init(affine, track_running_stats, dtype)

    doc = (
        f"``nn.{name}(...)``: a ``{base.__name__}`` whose ``num_features`` is read from the "
        f"first input; it becomes a ``{base.__name__}`` at that first forward."
    )
    return type(
        name,
        (_LazyNormBase, base),
        {"__init__": __init__, "cls_to_become": base, "__doc__": doc, "__module__": __name__},
    )


LazyBatchNorm1d = _lazy_norm("LazyBatchNorm1d", BatchNorm1d)
LazyBatchNorm2d = _lazy_norm("LazyBatchNorm2d", BatchNorm2d)
