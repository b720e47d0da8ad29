"""BUGGY on purpose: a training loop that keeps every loss *with its graph* alive.

``history.append(loss)`` stores the loss tensor, and through its ``grad_fn`` the whole graph of
that step (and the saved activations) stays in memory: memory grows with every step. The fix is
``history.append(loss.item())`` (or ``loss.detach()``).

    python samples/leaky_loop.py
    autodiag leaks samples/leaky_loop.py
"""

import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 10), torch.randn(64, 1)

history = []
for _ in range(30):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward(retain_graph=True)  # and the saved tensors are not even freed
    opt.step()
    history.append(loss)  # BUG: keeps the graph of every step alive

alive = sum(1 for h in history if h.grad_fn is not None)
print(f"history holds {len(history)} losses; {alive} of them still carry a grad_fn graph")
print("last loss:", round(history[-1].item(), 4))
