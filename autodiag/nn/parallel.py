"""``torch.nn.parallel`` as on a CPU-only PyTorch: ``DataParallel`` runs the module it wraps
(there is no device to spread over), ``data_parallel`` cannot determine a device, as PyTorch's.

>>> import autodiag as torch
>>> model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
>>> model(torch.ones(3, 2)).shape
torch.Size([3, 1])
>>> list(model.state_dict())
['module.weight', 'module.bias']
"""

from __future__ import annotations

from autodiag.nn.modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel"]


class DataParallel(Module):
    """``nn.DataParallel(module)``: with no accelerator (PyTorch on CPU) ``device_ids`` is
    empty and ``forward`` calls ``module`` itself; parameters are ``module.<name>``."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        self.module = module
        self.device_ids = []  # PyTorch: no accelerator found, whatever was asked for

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(
    module, inputs, device_ids=None, output_device=None, dim: int = 0, module_kwargs=None
):
    """``nn.parallel.data_parallel``: PyTorch on CPU raises here (no device type to use)."""
    raise RuntimeError("device type could not be determined")


class DistributedDataParallel(Module):
    """Not provided: autodiag has no ``torch.distributed`` process group."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "torch.nn.parallel.DistributedDataParallel is not supported by autodiag "
            "(no torch.distributed process groups)"
        )
