"""autodiag: a PyTorch-faithful autograd engine on numpy, and a gradient debugger around it.

``import autodiag as torch`` runs PyTorch snippets within the supported subset.

>>> import autodiag as torch
>>> x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x ** 2).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""

from __future__ import annotations

import numpy as _np

# NOTE: PyTorch returns inf/nan silently (log(0), 1/0); numpy would warn on every such op.
_np.seterr(all="ignore")

from autodiag import autograd, trace  # noqa: E402
from autodiag._version import __version__  # noqa: E402
from autodiag.autograd.anomaly import (
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_anomaly_enabled,
)
from autodiag.core.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from autodiag.dtypes import (
    bool,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    promote_types,
    set_default_dtype,
    short,
    uint8,
)
from autodiag.ops import torch_namespace as _torch_namespace  # noqa: E402
from autodiag.random import (  # noqa: E402
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)

# Every op registered as PyTorch's ``torch.<name>`` (``register(home="torch")`` in ops/_core.py):
# the registration is the one place that declares an op's public name.
globals().update(_torch_namespace())
from autodiag.size import Size  # noqa: E402
from autodiag.tensor import Tensor  # noqa: E402
from autodiag import accelerator, backends, cuda  # noqa: E402 - all absent: CPU only
from autodiag._device import device  # noqa: E402
from autodiag.compat import (
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
    get_default_device,
    set_default_device,
)
from autodiag.generator import Generator, default_generator  # noqa: E402
from autodiag import amp  # noqa: E402
from autodiag import onnx  # noqa: E402 - importable; export refused
from autodiag.amp import autocast  # noqa: E402

is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731


def numel(input) -> int:
    return input.numel()


def is_floating_point(input) -> bool:
    return input.is_floating_point()


# NOTE [Lazy submodules]: nn, optim, utils, func, distributions and load/save are imported on
# first use (PEP 562 module ``__getattr__``), as numpy does for its heavier submodules:
# ``import autodiag`` pays for the engine and the ops only, and a CLI command that never builds
# a module or an optimizer never imports them. ``import autodiag.nn`` and ``from autodiag
# import nn`` work as before; the names are listed by ``dir(autodiag)``.
_LAZY = {
    "nn": ("autodiag.nn", None),
    "optim": ("autodiag.optim", None),
    "utils": ("autodiag.utils", None),
    "func": ("autodiag.func", None),  # torch.func: transforms over the engine
    "distributions": ("autodiag.distributions", None),
    "load": ("autodiag.serialization", "load"),
    "save": ("autodiag.serialization", "save"),
}


def __getattr__(name: str):
    spec = _LAZY.get(name)
    if spec is None:
        raise AttributeError(f"module 'autodiag' has no attribute '{name}'")
    import importlib

    module = importlib.import_module(spec[0])
    value = module if spec[1] is None else getattr(module, spec[1])
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
