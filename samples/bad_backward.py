"""BUGGY on purpose: a custom Function whose backward is wrong.

``Cube.forward`` computes x**3 but ``backward`` returns ``2 * x * grad`` instead of
``3 * x**2 * grad``. Nothing fails: the script runs and prints a plausible but wrong gradient.
Only a gradient check (finite differences) reveals it.

    python samples/bad_backward.py
    autodiag gradcheck samples/bad_backward.py    # reports the mismatch
"""

import autodiag as torch


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad  # BUG: the derivative of x**3 is 3 * x**2


x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
y = Cube.apply(x).sum()
y.backward()
print("y =", y.item())
print("x.grad =", x.grad.tolist(), "(correct: [3.0, 12.0, 27.0])")
