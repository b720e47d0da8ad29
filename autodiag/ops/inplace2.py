"""The in-place forms PyTorch has that the registrations did not declare (issue 20): Tensor
twins such as ``cumsum_``, ``erf_``, ``eq_``, ``logical_and_``, ``floor_divide_``, and the
function forms ``torch.exp_(x)``, ``torch.relu_(x)``, ``torch.zero_(x)`` ...

Each twin is ops/inplace.py's mechanism (the out-of-place op recorded, its result written
into the tensor, the version bumped, the node made the tensor's ``grad_fn``), so PyTorch's
node names, version counters and leaf/view errors come with it. Two families need more:

- comparisons (``eq_`` ... ``less_equal_``) write 0/1 in the tensor's dtype and PyTorch records
  ``EqBackward0`` (a number) / ``EqBackward1`` (a tensor) there, whose gradients are zero: the
  old history must not keep passing gradient through (NOTE [Comparison twins]);
- ``floor_divide_`` records PyTorch's ``NotImplemented`` node naming ``aten::floor_divide_``.
"""

from __future__ import annotations

import numpy as np

from autodiag.core.graph import Node
from autodiag.ops import inplace as _inplace
from autodiag.ops._core import OPS, TORCH_FUNCTIONS, _state, edge, result
from autodiag.tensor import Tensor

# Tensor twins of registered ops (the out-of-place op is the registered one of the same name);
# those with a required argument are here rather than ``register(inplace=True)``, whose
# test calls each twin without one
_TWINS = (
    "renorm",
    "fmod",
    "copysign",
    "heaviside",
    "ldexp",
    "nextafter",
    "gcd",
    "lcm",
    "mvlgamma",
    "cumsum",
    "cumprod",
    "erf",
    "log1p",
    "rsqrt",
    "tan",
    "trunc",
    "negative",
    "remainder",
    "true_divide",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
)


# NOTE [Comparison twins]: ``a.eq_(b)`` on a tensor whose history requires grad is recorded by
# PyTorch as ``EqBackward0``/``EqBackward1`` (the aliases as their canonical op: ``greater_`` is
# ``GtBackward1``), edges to the tensor's old history (and to ``b`` when it is a tensor), zero
# gradients. Keeping the old ``grad_fn`` (what a plain write would do) would pass gradient
# through a 0/1 mask: silently wrong.
_COMPARISONS = {
    "eq": "Eq",
    "ne": "Ne",
    "gt": "Gt",
    "ge": "Ge",
    "lt": "Lt",
    "le": "Le",
    "greater": "Gt",
    "greater_equal": "Ge",
    "less": "Lt",
    "less_equal": "Le",
    "not_equal": "Ne",
}


class _ZeroGradients(Node):
    __slots__ = ()

    def backward(self, xp, g):
        return tuple(xp.zeros_like(g) if n else None for n in self.needs_grad)


_COMPARE_NODES = {
    (canon, k): type(f"{canon}Backward{k}", (_ZeroGradients,), {"__slots__": ()})
    for canon in set(_COMPARISONS.values())
    for k in (0, 1)
}


def _comparison_twin(name: str, canon: str):
    op = getattr(OPS[name].op, "__wrapped__", OPS[name].op)

    def compute(t, other):
        r = op(t, other)
        tensor_other = isinstance(other, Tensor)
        needs = t.requires_grad or (tensor_other and other.requires_grad)
        if not (_state.record and needs):
            return r
        edges = (edge(t), edge(other)) if tensor_other else (edge(t),)
        node = _COMPARE_NODES[(canon, 1 if tensor_other else 0)](edges)
        if r._data.dtype != t._data.dtype:  # the zero gradient in each input's dtype
            node._input_meta = tuple(
                (x._data.shape, x._data.dtype) if isinstance(x, Tensor) else None
                for x in ((t, other) if tensor_other else (t,))
            )
        return result(r._data, node)

    compute.__name__ = name
    return compute


def _floor_divide(t, other):
    r = OPS["floor_divide"].op.__wrapped__(t, other)
    if r.grad_fn is not None:
        r.grad_fn.op = "floor_divide_"  # PyTorch: "derivative for aten::floor_divide_ ..."
    return r


_floor_divide.__name__ = "floor_divide"


# C++ names of the dtypes, as PyTorch's "Bad in-place call" message spells them
_CPP_NAMES = {
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
}


def _same_dtype_twin(name: str):
    """``cumsum``/``cumprod`` with ``dtype=``: in place, PyTorch requires the tensor's dtype
    (``x.cumsum_(0, dtype=torch.float64)`` on float32 raises; it computed in float32)."""
    op = getattr(OPS[name].op, "__wrapped__", OPS[name].op)

    def compute(t, *args, dtype=None, **kwargs):
        if dtype is not None:
            want = np.dtype(getattr(dtype, "np", dtype))
            have = t._data.dtype
            if want != have:
                raise RuntimeError(
                    f"Bad in-place call: input tensor dtype {_CPP_NAMES.get(have.name, have.name)}"
                    f" and output tensor dtype {_CPP_NAMES.get(want.name, want.name)} should match"
                )
        return op(t, *args, dtype=dtype, **kwargs)

    compute.__name__ = name
    return compute


def make_twins_and_functions() -> None:
    """The twins above, then ``autodiag.<name>_`` for PyTorch's function forms; run once every
    op is registered (after ``inplace.make_twins``)."""
    for name in _TWINS:
        if name in ("cumsum", "cumprod"):
            _inplace._method(name + "_", _same_dtype_twin(name))
            continue
        _inplace._method(name + "_", OPS[name].op)
    for name, canon in _COMPARISONS.items():
        _inplace._method(name + "_", _comparison_twin(name, canon))
    _inplace._method("floor_divide_", _floor_divide)
    TORCH_FUNCTIONS.update(function_forms())


# ---------------------------------------------------------------------------------------------
# torch.<name>_ : the function forms of Tensor in-place methods
# ---------------------------------------------------------------------------------------------

# PyTorch 2.13's ``torch.<name>_`` functions whose Tensor method autodiag has. (``dropout_``
# and kin, ``index_put_``, ``as_strided_``, ``resize_as_`` ... are not among them: absent.)
FUNCTION_FORMS = (
    "abs_ acos_ acosh_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_ asin_ asinh_ atan_"
    " atanh_ ceil_ clamp_ clamp_max_ clamp_min_ clip_ cos_ cosh_ deg2rad_ detach_ erf_ erfc_"
    " exp2_ exp_ expm1_ fill_ fix_ floor_ frac_ gcd_ i0_ lcm_ ldexp_ log10_ log1p_ log2_ log_"
    " logit_ nan_to_num_ neg_ negative_ rad2deg_ reciprocal_ relu_ round_ rsqrt_ sigmoid_ sin_"
    " sinc_ sinh_ sqrt_ square_ tan_ tanh_ trunc_ xlogy_ zero_ celu_ selu_ rrelu_ threshold_"
    " addmv_"
).split()


def _function_form(name: str):
    def fn(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{name}(): argument 'input' (position 1) must be Tensor, not "
                f"{type(input).__name__}"
            )
        return getattr(input, name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.{name}(input, ...)``: ``input.{name}(...)``, in place."
    return fn


def function_forms() -> dict:
    """name -> function for ``autodiag.<name>_`` (read once every op is registered)."""
    from autodiag.ops.special2 import FUNCTION_ONLY  # torch.selu_ ...: no Tensor twin

    out = dict(FUNCTION_ONLY)
    for n in FUNCTION_FORMS:
        if n not in out and hasattr(Tensor, n):
            out[n] = _function_form(n)
    return out
