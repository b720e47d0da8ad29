"""``torch.func``: composable function transforms over autodiag's engine.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian``, ``vmap``,
``functional_call`` and ``stack_module_state``, with PyTorch's signatures, results and errors.
They are built on the engine's reverse mode: ``jvp``/``jacfwd`` by the double-vjp trick / row
by row, ``vmap`` as a loop over the batch (see ``autodiag/func/_vmap.py``). Transforms compose:
``vmap(grad(f))`` gives per-sample gradients.

>>> import autodiag as torch
>>> from autodiag.func import grad, vmap
>>> vmap(grad(lambda x: (x ** 2).sum()))(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
tensor([[2., 4.],
        [6., 8.]])
"""

from __future__ import annotations

from autodiag.func._autodiff import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from autodiag.func._functional_call import functional_call, stack_module_state
from autodiag.func._vmap import vmap

__all__ = [
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "vmap",
    "functional_call",
    "stack_module_state",
]
