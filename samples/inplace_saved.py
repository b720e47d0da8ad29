"""BUGGY on purpose: an in-place write to a tensor that backward needs.

``sigmoid`` saves its output for the backward pass (d sigmoid = s * (1 - s)); ``s.mul_(2)``
then overwrites it. Backward detects the version change and raises PyTorch's RuntimeError
"one of the variables needed for gradient computation has been modified by an inplace
operation" (autodiag adds where the write happened). The fix: ``s = s * 2``.

    python samples/inplace_saved.py      # exits with the RuntimeError
    autodiag inplace samples/inplace_saved.py
"""

import autodiag as torch

x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
s = torch.sigmoid(x)
s.mul_(2)  # BUG: s was saved by SigmoidBackward0
loss = s.sum()
loss.backward()  # RuntimeError: ... modified by an inplace operation ...
print("not reached")
