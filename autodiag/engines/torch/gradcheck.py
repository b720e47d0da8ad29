"""``gradcheck --engine torch``: the script's ``torch.autograd.Function`` subclasses, checked
by PyTorch's own ``torch.autograd.gradcheck``/``gradgradcheck``, and a stand-in for each on
autodiag's engine so that autodiag's diagnosis (``autograd/_gradcheck_diagnosis.py``) can
probe it.

The engine-neutral interface is the stand-in: ``standin(cls)`` is an autodiag
``autograd.Function`` of the same name whose forward runs ``cls.apply`` on PyTorch (inputs
converted from numpy) and whose backward asks PyTorch for the vector-Jacobian product of that
very call (``torch.autograd.grad``), so the user's backward is what runs. Everything the
analysis does to an autodiag Function (generate inputs, compare Jacobians, diagnose, trace
the line backward returned at) works on it unchanged; only the verdict comes from PyTorch.
The stand-in is differentiable once: second-order checks get PyTorch's verdict and message
without autodiag's diagnosis.
"""

from __future__ import annotations

import functools
import importlib
import inspect

import numpy as np
import torch

import autodiag
from autodiag.autograd.function import Function
from autodiag.inspect import array
from autodiag.tensor import Tensor

GradcheckError = importlib.import_module("torch.autograd.gradcheck").GradcheckError


def is_script_function(value) -> bool:
    """A ``torch.autograd.Function`` subclass defined by the script itself."""
    return (
        isinstance(value, type)
        and issubclass(value, torch.autograd.Function)
        and value is not torch.autograd.Function
        and value.__module__ == "__main__"
    )


def _uses_setup_context(cls: type) -> bool:
    return cls.setup_context is not torch.autograd.Function.setup_context


def to_torch(x):
    """An autodiag tensor as a PyTorch tensor (same values, dtype, requires_grad); anything
    else as it is."""
    if isinstance(x, Tensor):
        return torch.from_numpy(np.array(array(x))).requires_grad_(x.requires_grad)
    return x


def to_autodiag(x):
    """A PyTorch tensor as an autodiag tensor (same values, dtype, requires_grad)."""
    if isinstance(x, torch.Tensor):
        data = x.detach().cpu().numpy().copy()
        return autodiag.tensor(data, requires_grad=x.requires_grad and x.is_floating_point())
    return x


def standin(cls: type) -> type:
    """An autodiag Function standing for the PyTorch Function ``cls`` (see the module doc)."""

    def forward(ctx, *args):
        targs = [to_torch(a) for a in args]
        with torch.enable_grad():
            out = cls.apply(*targs)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.torch_inputs = [
            (k, a) for k, a in enumerate(targs) if isinstance(a, torch.Tensor) and a.requires_grad
        ]
        ctx.torch_outputs = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        ctx.nargs = len(args)
        converted = tuple(
            Tensor._make(o.detach().numpy().copy()) if isinstance(o, torch.Tensor) else o
            for o in outs
        )
        return converted if isinstance(out, tuple) else converted[0]

    def backward(ctx, *grads):
        pairs = [
            (o, torch.from_numpy(np.array(array(g))) if g is not None else torch.zeros_like(o))
            for o, g in zip(ctx.torch_outputs, grads)
        ]
        result = [None] * ctx.nargs
        if ctx.torch_inputs and pairs:
            got = torch.autograd.grad(
                [o for o, _ in pairs],
                [a for _, a in ctx.torch_inputs],
                [g for _, g in pairs],
                retain_graph=True,  # autodiag's checks ask for one row at a time
                allow_unused=True,
            )
            for (k, _), g in zip(ctx.torch_inputs, got):
                result[k] = None if g is None else Tensor._make(g.detach().numpy().copy())
        return tuple(result)

    # the user's signature (for generated inputs) and code (for the lines reported)
    params = list(inspect.signature(cls.forward).parameters.values())
    if _uses_setup_context(cls):
        params.insert(0, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    forward.__signature__ = inspect.Signature(params)
    forward.__wrapped__ = cls.forward
    backward = functools.wraps(cls.backward)(backward)
    body = {
        "forward": staticmethod(forward),
        "backward": staticmethod(backward),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "torch_function": cls,
    }
    sampler = getattr(cls, "sample_inputs", None)
    if sampler is not None:

        @functools.wraps(sampler)
        def sample_inputs():
            return [
                tuple(to_autodiag(x) for x in (s if isinstance(s, (tuple, list)) else (s,)))
                for s in sampler()
            ]

        body["sample_inputs"] = staticmethod(sample_inputs)
    return type(cls.__name__, (Function,), body)


def check(api: str, cls: type, inputs: tuple, kwargs: dict, seed: int) -> None:
    """PyTorch's ``api`` ("gradcheck" or "gradgradcheck") on ``cls.apply`` at ``inputs``
    (autodiag tensors, converted); raises what PyTorch raises."""
    func = getattr(torch.autograd, api)
    targs = tuple(to_torch(x) for x in inputs)
    torch.manual_seed(seed)  # gradgradcheck's random grad_outputs
    func(cls.apply, targs, raise_exception=True, **kwargs)
