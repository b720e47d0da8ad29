"""BUGGY on purpose: custom Functions whose backward is wrong.

``Cube.forward`` computes x**3 but ``backward`` returns ``2 * x * grad`` instead of
``3 * x**2 * grad`` (the wrong formula). ``Square.backward`` forgets the factor 2 of
``2 * x * grad`` (a gradient off by a constant factor). Nothing fails: the script runs and prints
plausible but wrong gradients. Only a gradient check (finite differences) reveals them.

    python samples/bad_backward.py
    autodiag gradcheck samples/bad_backward.py    # both fail; Square is "off by a factor of 0.5"
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


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x * grad  # BUG: forgot the factor 2


x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
y = Cube.apply(x).sum()
y.backward()
print("y =", y.item())
print("x.grad =", x.grad.tolist(), "(correct: [3.0, 12.0, 27.0])")

x.grad = None
Square.apply(x).sum().backward()
print("x.grad =", x.grad.tolist(), "(correct: [2.0, 4.0, 6.0])")
