"""Adam and AdamW (``torch.optim.Adam``/``AdamW``), single-tensor update as PyTorch's
``_single_tensor_adam`` (non-capturable path)."""

from __future__ import annotations

import numpy as np

from autodiag.optim.optimizer import (
    Optimizer,
    ParamWriter,
    _closure_loss,
    _same_layout,
    _scalar_step_dtype,
    _use_grad_for_differentiable,
    _zeros_state,
)
from autodiag.tensor import Tensor


def _lerp_(a: np.ndarray, b: np.ndarray, w: float) -> None:
    """``a.lerp_(b, w)`` with PyTorch's two-branch formula (exact at w = 0 and w = 1)."""
    if abs(w) < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1 - w)


class Adam(Optimizer):
    """Adam (with ``amsgrad``, ``maximize``, L2 ``weight_decay``; decoupled weight decay when
    ``decoupled_weight_decay=True``, which is what AdamW is).

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    >>> opt = torch.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w
    Parameter containing:
    tensor([0.9000, 1.9000], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach=None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused=None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if capturable or differentiable or fused:
            raise NotImplementedError(
                "autodiag: Adam(capturable / differentiable / fused) is not supported"
            )
        betas = tuple(float(b) for b in betas)
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "differentiable": differentiable,
            "fused": fused,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor, amsgrad: bool) -> dict:

        state = self.state[p]
        if not state:
            state["step"] = Tensor._make(np.zeros((), dtype=_scalar_step_dtype()))
            state["exp_avg"] = _zeros_state(p)
            state["exp_avg_sq"] = _zeros_state(p)
            if amsgrad:
                state["max_exp_avg_sq"] = _zeros_state(p)
        return state

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """One Adam update of every parameter that has a gradient; returns ``closure()``'s
        loss."""
        loss = _closure_loss(closure)
        write = ParamWriter()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = float(group["lr"]), group["eps"], group["weight_decay"]
            amsgrad, decoupled = group["amsgrad"], group["decoupled_weight_decay"]
            for p in group["params"]:
                if p._grad is None:
                    continue
                state = self._init_state(p, amsgrad)
                d = p._data
                g = _same_layout(p._grad._data, d)
                if group["maximize"]:
                    g = -g
                step_t = state["step"]
                step_t._data += 1
                if wd != 0:
                    if decoupled:
                        d *= 1 - lr * wd  # param.mul_(1 - lr * weight_decay)
                        write(p, "mul_")
                    else:
                        g = g + wd * d
                m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
                _lerp_(m, g, 1 - beta1)
                v *= beta2
                v += (1 - beta2) * g * g  # addcmul_(grad, grad, value=1 - beta2)
                step = float(step_t._data)
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                step_size = lr / bias_correction1
                bias_correction2_sqrt = bias_correction2**0.5
                if amsgrad:
                    vmax = state["max_exp_avg_sq"]._data
                    np.maximum(vmax, v, out=vmax)
                    denom = np.sqrt(vmax) / bias_correction2_sqrt + eps
                else:
                    denom = np.sqrt(v) / bias_correction2_sqrt + eps
                d += (-step_size * m) / denom  # addcdiv_(exp_avg, denom, value=-step_size)
                write(p, "addcdiv_")
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the update);
    ``weight_decay`` defaults to 1e-2."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach=None,
        capturable: bool = False,
        differentiable: bool = False,
        fused=None,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )
