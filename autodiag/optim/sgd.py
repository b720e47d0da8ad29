"""Stochastic gradient descent (``torch.optim.SGD``), single-tensor update as PyTorch's
``_single_tensor_sgd``."""

from __future__ import annotations

from autodiag.optim.optimizer import (
    Optimizer,
    ParamWriter,
    _closure_loss,
    _same_layout,
    _use_grad_for_differentiable,
)
from autodiag.tensor import Tensor


class SGD(Optimizer):
    """SGD with optional momentum (and Nesterov), dampening, weight decay and ``maximize``.

    For each parameter (``g`` its gradient)::

        g = g + weight_decay * p
        buf = g (first step) | momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov) | buf
        p = p - lr * g

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0]))
    >>> opt = torch.optim.SGD([w], lr=0.5, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad(); (w * 2).sum().backward(); opt.step()
    >>> w
    Parameter containing:
    tensor([-1.9000], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach=None,
        differentiable: bool = False,
        fused=None,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable or fused:
            raise NotImplementedError(
                "autodiag: SGD(differentiable=True / fused=True) is not supported"
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
            "foreach": foreach,
            "differentiable": differentiable,
            "fused": fused,
        }
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = _closure_loss(closure)
        write = ParamWriter()
        for group in self.param_groups:
            lr = float(group["lr"])
            wd, momentum = group["weight_decay"], group["momentum"]
            dampening, nesterov = group["dampening"], group["nesterov"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                d = p._data
                g = _same_layout(p._grad._data, d)
                if group["maximize"]:
                    g = -g
                if wd != 0:
                    g = g + wd * d
                if momentum != 0:
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = Tensor._make(g.copy(order="C"))
                    else:
                        b = buf._data
                        b *= momentum
                        b += g if dampening == 0 else (1 - dampening) * g
                    g = g + momentum * buf._data if nesterov else buf._data
                d -= lr * g  # param.add_(grad, alpha=-lr)
                write(p)
        return loss
