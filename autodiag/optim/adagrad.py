"""Adagrad (``torch.optim.Adagrad``), single-tensor update as PyTorch's
``_single_tensor_adagrad``."""

from __future__ import annotations

import numpy as np

from autodiag.optim.optimizer import (
    Optimizer,
    ParamWriter,
    _check_hyper,
    _check_lr,
    _closure_loss,
    _not_supported,
    _same_layout,
    _scalar_step_dtype,
    _use_grad_for_differentiable,
)
from autodiag.tensor import Tensor


class Adagrad(Optimizer):
    """Adagrad: each parameter's step is scaled by the root of its summed squared gradients.

    For each parameter (``g`` its gradient, ``k`` the step number)::

        clr = lr / (1 + (k - 1) * lr_decay)
        sum = sum + g * g
        p = p - clr * g / (sqrt(sum) + eps)

    As PyTorch's, the state (``step``, ``sum``) of the parameters given to the constructor is
    created by the constructor, so ``state_dict()`` has it before the first step.

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    >>> opt = torch.optim.Adagrad([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w
    Parameter containing:
    tensor([ 0.9000, -1.9000], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach=None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused=None,
    ) -> None:
        _check_lr(lr)
        _check_hyper("lr_decay value", lr_decay)
        _check_hyper("weight_decay value", weight_decay)
        _check_hyper("initial_accumulator_value value", initial_accumulator_value)
        _check_hyper("epsilon value", eps)
        _not_supported("Adagrad", differentiable=differentiable, fused=fused)
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
            "fused": fused,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._new_state(p, initial_accumulator_value)

    def _new_state(self, p: Tensor, initial: float) -> dict:
        state = self.state[p]
        state["step"] = Tensor._make(np.zeros((), dtype=_scalar_step_dtype()))
        state["sum"] = Tensor._make(np.full_like(p._data, initial, order="C"))
        return state

    def share_memory(self) -> None:
        """A no-op: autodiag tensors live in one process."""

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One Adagrad update of every parameter that has a gradient; returns ``closure()``'s
        loss."""
        loss = _closure_loss(closure)
        write = ParamWriter()
        for group in self.param_groups:
            lr, eps = float(group["lr"]), group["eps"]
            wd, lr_decay = group["weight_decay"], group["lr_decay"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self.state[p]
                if not state:
                    # a parameter added later (add_param_group): PyTorch reads the
                    # constructor's initial_accumulator_value, not the group's
                    state = self._new_state(p, self.defaults["initial_accumulator_value"])
                d = p._data
                g = _same_layout(p._grad._data, d)
                step_t = state["step"]
                step_t._data += 1
                step = float(step_t._data)
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * d
                clr = lr / (1 + (step - 1) * lr_decay)
                s = state["sum"]._data
                s += g * g  # addcmul_(grad, grad, value=1)
                std = np.sqrt(s)
                std += eps
                d -= clr * g / std  # param.addcdiv_(grad, std, value=-clr)
                write(p, "addcdiv_")
        return loss
