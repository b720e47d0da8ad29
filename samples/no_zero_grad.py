"""BUGGY on purpose: a training loop that forgets ``optimizer.zero_grad()``.

Gradients accumulate across steps (``.grad += new gradient``), so every update uses the sum of
all past gradients: the effective step grows and training oscillates instead of converging. The
fix: call ``opt.zero_grad()`` at the start of each step.

    python samples/no_zero_grad.py
    autodiag check samples/no_zero_grad.py
"""

import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.03)
x = torch.randn(32, 3)
y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3

for step in range(1, 31):
    # BUG: opt.zero_grad() is missing
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step:2d}  loss {loss.item():.4f}  weight.grad norm "
              f"{model.weight.grad.norm().item():.3f}")
