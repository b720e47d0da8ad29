"""``autodiag.nn``: modules, parameters, functional ops and initialisers, as ``torch.nn``.

>>> import autodiag as torch
>>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
>>> model(torch.ones(4, 2)).shape
torch.Size([4, 1])
"""

from autodiag.nn import functional, init, modules, utils
from autodiag.nn.modules import *  # noqa: F403 - the layers; modules.__all__ lists them once
from autodiag.nn.parameter import Buffer, Parameter

__all__ = ["functional", "init", "utils", "Parameter", "Buffer", *modules.__all__]

# torch.nn.parallel (DataParallel is torch.nn.DataParallel too)
from autodiag.nn import parallel  # noqa: E402
from autodiag.nn.parallel import DataParallel  # noqa: E402

__all__ += ["parallel", "DataParallel"]

# torch.nn.UninitializedParameter (torch.nn.parameter.UninitializedParameter too): lazy modules
from autodiag.nn.modules.lazy import UninitializedBuffer, UninitializedParameter  # noqa: E402

__all__ += ["UninitializedParameter", "UninitializedBuffer"]
