"""``autodiag.optim``: SGD, Adam, AdamW and the ``Optimizer`` base, as ``torch.optim``.

>>> import autodiag as torch
>>> model = torch.nn.Linear(2, 1)
>>> opt = torch.optim.Adam(model.parameters(), lr=1e-2)
>>> loss = model(torch.ones(4, 2)).pow(2).mean()
>>> opt.zero_grad(); loss.backward(); opt.step()
"""

from autodiag.optim.adam import Adam, AdamW
from autodiag.optim.optimizer import Optimizer
from autodiag.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
