"""BUGGY on purpose: NaN from ``log`` of zero in the forward pass.

An entropy term ``-(p * log p).sum()`` where some probability is exactly zero: ``log(0)`` is
-inf, ``0 * -inf`` is nan, and the loss becomes nan (and so do the gradients). The fix is to
clamp (``p.clamp_min(1e-12).log()``) or use ``torch.special.xlogy``-style masking.

    python samples/nan_log.py
    autodiag anomaly samples/nan_log.py
"""

import autodiag as torch

logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]], requires_grad=True)
mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # masks one class out
p = torch.softmax(logits, dim=1) * mask
p = p / p.sum(dim=1, keepdim=True)
entropy = -(p * torch.log(p)).sum()  # log(0) = -inf, 0 * -inf = nan
print("entropy:", entropy)
entropy.backward()
print("logits.grad has nan:", torch.isnan(logits.grad).sum().item() > 0)
