"""BUGGY on purpose: a tensor computed once, before the loop, is backpropagated through at
every step.

``features`` is computed from the weights ``w`` outside the training loop, and every step's loss
uses it, so every ``loss.backward()`` runs back through the graph that made it. The first
backward frees that graph's saved tensors (as PyTorch does unless ``retain_graph=True``); the
second raises PyTorch's "Trying to backward through the graph a second time" RuntimeError, to
which autodiag adds the node, the earlier call that freed it, and the tensor the second call
reached it through (``features``). The fix: compute ``features`` inside the loop.

    python samples/reused_graph.py      # exits with the RuntimeError
    autodiag check samples/reused_graph.py
"""

import autodiag as torch


def main():
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    w = torch.randn(4, 3, requires_grad=True)
    features = torch.tanh(x @ w)  # BUG: computed once, before the loop
    head = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([w, head], lr=0.1)
    for step in range(3):
        opt.zero_grad()
        loss = ((features * head).sum(dim=1) - 1.0).pow(2).mean()
        loss.backward()  # fails at step 1
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
