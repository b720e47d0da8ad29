"""Quickstart: autodiag's engine is PyTorch's autograd API on numpy.

Shows a graph's node names and edges, gradients, a 4th derivative via create_graph, and the
in-place error that names the line that wrote.

    python samples/quickstart.py
"""

import autodiag as torch

x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
w = torch.tensor(3.0, requires_grad=True)

y = (torch.sigmoid(x * w) ** 2).sum()
print("y =", y)
print("y.grad_fn:", y.grad_fn.name())
print("next_functions:", [(type(n).__name__ if n else None, i)
                          for n, i in y.grad_fn.next_functions])

y.backward()
print("x.grad =", x.grad)
print("w.grad =", w.grad)

# derivatives of any order: d^4/dx^4 sigmoid(x)^2 at x = 0.5
s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
d = torch.sigmoid(s) ** 2
for order in range(1, 5):
    (d,) = torch.autograd.grad(d, s, create_graph=True)
    print(f"d^{order}/dx^{order} sigmoid(x)^2 =", round(d.item(), 6))

# an in-place write to a tensor saved for backward: PyTorch's message, plus where it happened
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = a.exp()
b.add_(1)
try:
    b.sum().backward()
except RuntimeError as e:
    print("RuntimeError:", e)
