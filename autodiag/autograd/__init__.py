"""``autodiag.autograd``: backward, grad, custom Functions, grad modes, graph utilities."""

from __future__ import annotations

from autodiag.autograd import anomaly, functional, graph
from autodiag.autograd.anomaly import detect_anomaly, set_detect_anomaly
from autodiag.autograd.engine import backward, grad
from autodiag.autograd.function import Function, FunctionCtx, once_differentiable
from autodiag.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from autodiag.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from autodiag.compat import Variable  # noqa: F401 - torch.autograd.Variable: a tensor

__all__ = [
    "backward",
    "grad",
    "Function",
    "FunctionCtx",
    "once_differentiable",
    "graph",
    "functional",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "detect_anomaly",
    "set_detect_anomaly",
]

anomaly_mode = anomaly  # PyTorch's module name: torch.autograd.anomaly_mode.detect_anomaly
