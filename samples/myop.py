"""Custom differentiable operations with ``torch.autograd.Function``.

* ``Cubic``: x**3, with its derivative 3x**2 written by hand;
* ``StraightThroughRound``: rounds in the forward pass, passes the gradient straight through;
* ``Clamp``: a clamp with non-tensor arguments (the bounds get no gradient: ``None``).

Each is run, backpropagated, and its gradient compared with central finite differences.

    python samples/myop.py
    autodiag gradcheck samples/myop.py   # Cubic and Clamp pass; the estimator is skipped
"""

import autodiag as torch


class Cubic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x ** 2


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad  # pretend round() were the identity

    @staticmethod
    def sample_inputs():
        # A straight-through estimator is deliberately not round()'s derivative (which is 0
        # almost everywhere): there is nothing for gradcheck to confirm, so it offers no inputs.
        return []


class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo: float, hi: float):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi  # non-tensor state on ctx
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        inside = (x >= ctx.lo) & (x <= ctx.hi)
        return grad * inside, None, None  # no gradient for the bounds

    @staticmethod
    def sample_inputs():
        """Inputs for ``autodiag gradcheck``: float64, away from the kinks at the bounds."""
        x = torch.tensor([-1.7, -0.3, 0.2, 0.45, 1.6], dtype=torch.float64, requires_grad=True)
        return [(x, -0.5, 0.5)]


def finite_difference(f, x, eps=1e-6):
    """d sum(f(x)) / dx by central differences (float64)."""
    grads = []
    flat = x.detach().reshape(-1)
    for i in range(flat.numel()):
        plus, minus = flat.clone(), flat.clone()
        plus[i] = plus[i] + eps
        minus[i] = minus[i] - eps
        hi = f(plus.reshape(x.shape)).sum().item()
        lo = f(minus.reshape(x.shape)).sum().item()
        grads.append((hi - lo) / (2 * eps))
    return torch.tensor(grads, dtype=torch.float64).reshape(x.shape)


x = torch.tensor([-1.5, -0.3, 0.4, 2.0], dtype=torch.float64, requires_grad=True)

y = Cubic.apply(x)
y.sum().backward()
print("Cubic:", y.grad_fn.name(), "grad", x.grad.tolist())
print("  matches finite differences:",
      torch.allclose(x.grad, finite_difference(lambda t: t ** 3, x), atol=1e-6))

x.grad = None
y = StraightThroughRound.apply(x * 2)
y.sum().backward()
print("StraightThroughRound:", y.tolist(), "grad", x.grad.tolist())

x.grad = None
y = Clamp.apply(x, -1.0, 1.0)
(y * y).sum().backward()
print("Clamp:", y.tolist(), "grad", x.grad.tolist())
print("  matches finite differences:",
      torch.allclose(x.grad, finite_difference(lambda t: t.clamp(-1.0, 1.0) ** 2, x),
                     atol=1e-6))
