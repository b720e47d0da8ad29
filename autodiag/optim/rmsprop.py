"""RMSprop (``torch.optim.RMSprop``), single-tensor update as PyTorch's
``_single_tensor_rmsprop``."""

from __future__ import annotations

import numpy as np

from autodiag.optim.adam import _lerp_
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


class RMSprop(Optimizer):
    """RMSprop, optionally ``centered`` and with ``momentum``.

    For each parameter (``g`` its gradient)::

        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - mean_g ** 2) + eps  (centered; mean_g = lerp(mean_g, g, 1 - alpha))
              sqrt(v) + eps                (otherwise)
        buf = momentum * buf + g / avg; p -= lr * buf   (momentum > 0)
        p -= lr * g / avg                               (otherwise)

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    >>> opt = torch.optim.RMSprop([w], lr=0.01)
    >>> (w * w).sum().backward(); opt.step()
    >>> w
    Parameter containing:
    tensor([ 0.9000, -0.9000], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach=None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_lr(lr)
        _check_hyper("epsilon value", eps)
        _check_hyper("momentum value", momentum)
        _check_hyper("weight_decay value", weight_decay)
        _check_hyper("alpha value", alpha)
        _not_supported("RMSprop", capturable=capturable, differentiable=differentiable)
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "alpha": alpha,
            "eps": eps,
            "centered": centered,
            "weight_decay": weight_decay,
            "capturable": capturable,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor, group: dict) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = Tensor._make(np.zeros((), dtype=_scalar_step_dtype()))
            state["square_avg"] = _zeros_state(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = _zeros_state(p)
            if group["centered"]:
                state["grad_avg"] = _zeros_state(p)
        return state

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One RMSprop update of every parameter that has a gradient; returns ``closure()``'s
        loss."""
        loss = _closure_loss(closure)
        write = ParamWriter()
        for group in self.param_groups:
            lr, alpha, eps = float(group["lr"]), group["alpha"], group["eps"]
            wd, momentum = group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self._init_state(p, group)
                d = p._data
                g = _same_layout(p._grad._data, d)
                if group["maximize"]:
                    g = -g
                state["step"]._data += 1
                if wd != 0:
                    g = g + wd * d
                v = state["square_avg"]._data
                v *= alpha
                v += (1 - alpha) * g * g  # addcmul_(grad, grad, value=1 - alpha)
                if group["centered"]:
                    m = state["grad_avg"]._data
                    _lerp_(m, g, 1 - alpha)
                    avg = np.sqrt(v - m * m)
                else:
                    avg = np.sqrt(v)
                avg += eps
                if momentum > 0:
                    buf = state["momentum_buffer"]._data
                    buf *= momentum
                    buf += g / avg  # addcdiv_(grad, avg)
                    d -= lr * buf  # param.add_(buf, alpha=-lr)
                else:
                    d -= lr * g / avg  # param.addcdiv_(grad, avg, value=-lr)
                write(p, "add_" if momentum > 0 else "addcdiv_")
        return loss
