"""Adadelta (``torch.optim.Adadelta``), single-tensor update as PyTorch's
``_single_tensor_adadelta``."""

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
    _zeros_state,
)
from autodiag.tensor import Tensor


class Adadelta(Optimizer):
    """Adadelta: steps scaled by the ratio of running RMS of updates and of gradients.

    For each parameter (``g`` its gradient)::

        v = rho * v + (1 - rho) * g * g
        delta = sqrt(u + eps) / sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0]))
    >>> opt = torch.optim.Adadelta([w], lr=1.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> round(w.item(), 6)
    0.996838
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        foreach=None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_hyper("epsilon value", eps)
        _check_hyper("weight_decay value", weight_decay)
        _not_supported("Adadelta", capturable=capturable, differentiable=differentiable)
        defaults = {
            "lr": lr,
            "rho": rho,
            "eps": eps,
            "weight_decay": weight_decay,
            "maximize": maximize,
            "capturable": capturable,
            "foreach": foreach,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One Adadelta update of every parameter that has a gradient; returns ``closure()``'s
        loss."""
        loss = _closure_loss(closure)
        write = ParamWriter()
        for group in self.param_groups:
            lr, rho, eps, wd = float(group["lr"]), group["rho"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = Tensor._make(np.zeros((), dtype=_scalar_step_dtype()))
                    state["square_avg"] = _zeros_state(p)
                    state["acc_delta"] = _zeros_state(p)
                d = p._data
                g = _same_layout(p._grad._data, d)
                state["step"]._data += 1
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * d
                v, u = state["square_avg"]._data, state["acc_delta"]._data
                v *= rho
                v += (1 - rho) * g * g
                std = np.sqrt(v + eps)
                delta = np.sqrt(u + eps)
                delta /= std
                delta *= g
                u *= rho
                u += (1 - rho) * delta * delta
                d -= lr * delta  # param.add_(delta, alpha=-lr)
                write(p, "add_")
        return loss
