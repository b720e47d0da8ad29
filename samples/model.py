"""An MLP whose autograd graph is worth looking at.

Linear -> LayerNorm -> GELU -> Dropout -> Linear -> ReLU -> Linear, then cross-entropy:
the graph has AddmmBackward0 nodes (with TBackward0 for each weight), NativeLayerNormBackward0,
GeluBackward0, a dropout MulBackward0, ReluBackward0, and NllLossBackward0 over
LogSoftmaxBackward0 — the same nodes PyTorch records. Computes the loss, calls backward and
prints the graph walk and the gradient norms.

    python samples/model.py
    autodiag graph samples/model.py
"""

import autodiag as torch
import autodiag.nn as nn
import autodiag.nn.functional as F

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, n_in: int = 8, hidden: int = 16, n_out: int = 3):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = self.drop(self.act(self.norm(self.fc1(x))))
        return self.head(F.relu(self.fc2(h)))


model = MLP()
x = torch.randn(4, 8)
target = torch.tensor([0, 2, 1, 2])
loss = F.cross_entropy(model(x), target)
print(model)
print("loss =", round(loss.item(), 4))


def walk(fn, depth=0, seen=None):
    """Print the grad_fn graph depth first (leaves as AccumulateGrad)."""
    seen = set() if seen is None else seen
    stack = [(fn, depth)]
    while stack:
        node, d = stack.pop()
        print("  " * d + node.name() + (" (seen)" if node in seen else ""))
        if node in seen:
            continue
        seen.add(node)
        stack.extend((n, d + 1) for n, _ in reversed(node.next_functions) if n is not None)


walk(loss.grad_fn)
loss.backward()
for name, p in model.named_parameters():
    print(f"{name:12s} grad norm {p.grad.norm().item():.4f}")
