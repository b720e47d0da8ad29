"""BUGGY on purpose: a parameter cut out of the graph by ``.detach()``.

The second layer's weight is used as ``self.w2.detach()``, so no gradient flows to it: after
``backward()`` its ``.grad`` is still None and the optimizer never updates it (the classic "why
is my .grad None?"). The fix: use ``self.w2`` directly.

    python samples/detached_param.py
    autodiag check samples/detached_param.py
"""

import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(4, 8) * 0.5)
        self.w2 = nn.Parameter(torch.randn(8, 1) * 0.5)

    def forward(self, x):
        h = torch.tanh(x @ self.w1)
        return h @ self.w2.detach()  # BUG: w2 no longer receives gradients


model = TwoLayer()
loss = model(torch.randn(16, 4)).pow(2).mean()
loss.backward()
for name, p in model.named_parameters():
    print(f"{name}.grad is None: {p.grad is None}")
