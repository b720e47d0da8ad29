"""``autodiag.optim``: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, LBFGS, the ``Optimizer``
base and ``lr_scheduler``, as ``torch.optim``.

>>> import autodiag as torch
>>> model = torch.nn.Linear(2, 1)
>>> opt = torch.optim.Adam(model.parameters(), lr=1e-2)
>>> loss = model(torch.ones(4, 2)).pow(2).mean()
>>> opt.zero_grad(); loss.backward(); opt.step()
"""

from autodiag.optim import lr_scheduler
from autodiag.optim.adadelta import Adadelta
from autodiag.optim.adagrad import Adagrad
from autodiag.optim.adam import Adam, AdamW
from autodiag.optim.lbfgs import LBFGS
from autodiag.optim.optimizer import Optimizer
from autodiag.optim.rmsprop import RMSprop
from autodiag.optim.sgd import SGD

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "LBFGS",
    "lr_scheduler",
]
