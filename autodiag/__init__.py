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

import sys as _sys
import threading as _threading
import types as _types

from autodiag._version import __version__

# NOTE [Lazy engine]: the package's names (the engine, the ops, dtypes ...) are bound on the
# first attribute access that needs one (PEP 562 module ``__getattr__``), not when the package
# is imported: the ``autodiag`` command imports ``autodiag.cli``, hence this package, and
# ``autodiag --help`` never needs the engine. A user sees no difference: ``autodiag.tensor``,
# ``from autodiag import *``, ``dir(autodiag)``, ``import autodiag as torch`` and the CLI's
# ``torch`` alias all bind the whole namespace first, the names it binds are what the eager
# ``__init__`` bound, and a module that imports ``autodiag.tensor`` directly meets the same
# classes (one module object per name, as ever). ``tests/test_startup.py`` keeps it so. Two
# things differ: numpy's error state is set when the engine loads (dtypes.py), not by ``import
# autodiag`` alone; and ``autodiag.<submodule>`` imports that submodule on access (``autodiag.cli``
# used to need its own import first).


def _engine() -> dict:
    """The engine's public names, as ``import autodiag`` has always given them."""
    import numpy as _np  # its error state is set where the engine meets it (dtypes.py)

    from autodiag import accelerator, amp, autograd, backends, cuda, onnx, trace
    from autodiag._device import device
    from autodiag.amp import autocast
    from autodiag.autograd.anomaly import (
        is_anomaly_check_nan_enabled,
        is_anomaly_enabled,
        set_anomaly_enabled,
    )
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
    from autodiag.generator import Generator, default_generator
    from autodiag.ops import torch_namespace as _torch_namespace
    from autodiag.ops.sparse_coo import layout, sparse_coo, strided
    from autodiag.random import get_rng_state, initial_seed, manual_seed, seed, set_rng_state
    from autodiag.size import Size
    from autodiag.tensor import Tensor

    is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731

    # Every op registered as PyTorch's ``torch.<name>`` (``register(home="torch")`` in
    # ops/_core.py): the registration is the one place that declares an op's public name.
    return {**_torch_namespace(), **locals()}


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

# Engine names that are also the names of submodules: importing the submodule must not rebind
# the package's name to the module (the import system binds every submodule on its package).
# ``tests/test_startup.py`` checks that this lists every such name.
_NAMES_OVER_SUBMODULES = frozenset({"tensor"})

_state = {"engine": "unloaded"}  # -> "loading" -> "loaded"
# another thread waits for the names (as it would wait for an import in progress); the loading
# thread re-entering (a module the engine imports asks for a name) finds them not bound yet
_loading = _threading.RLock()


def _load_engine() -> None:
    if _state["engine"] == "loaded":
        return
    with _loading:
        if _state["engine"] != "unloaded":
            return
        _state["engine"] = "loading"
        try:
            globals().update(_engine())
        except BaseException:
            _state["engine"] = "unloaded"
            raise
        _state["engine"] = "loaded"


def __getattr__(name: str):
    spec = _LAZY.get(name)
    if spec is not None:
        import importlib

        module = importlib.import_module(spec[0])
        value = module if spec[1] is None else getattr(module, spec[1])
        globals()[name] = value
        return value
    if name.startswith("__") and name != "__all__":
        # protocol probes (__wrapped__, __path__ ...), which the engine does not answer;
        # ``from autodiag import *`` asks for ``__all__`` (there is none) before reading the
        # module's names, so that one binds them
        raise AttributeError(f"module 'autodiag' has no attribute '{name}'")
    if name not in _NAMES_OVER_SUBMODULES and name != "torch" and _is_submodule(name):
        # ``from autodiag import dtypes`` in a module the engine imports, and
        # ``autodiag.autograd.grad``: the submodule alone, as the import system would load it
        # (binding the engine's names from here would re-enter a half-imported module). Not
        # ``autodiag.torch``, the observer API for real PyTorch: it exists after ``import
        # autodiag.torch`` only (in PyTorch ``torch.torch`` is torch itself, which a script
        # written for ``import autodiag as torch`` must not take it for)
        import importlib

        return importlib.import_module(f"autodiag.{name}")
    _load_engine()
    if name in globals():
        return globals()[name]
    raise AttributeError(f"module 'autodiag' has no attribute '{name}'")


def _is_submodule(name: str) -> bool:
    import importlib.util

    return name.isidentifier() and importlib.util.find_spec(f"autodiag.{name}") is not None


def __dir__() -> list:
    _load_engine()
    return sorted(set(globals()) | set(_LAZY))


class _Package(_types.ModuleType):
    """The ``autodiag`` module: keeps ``autodiag.tensor`` the function whichever module is
    imported first (NOTE [Lazy engine])."""

    def __setattr__(self, name: str, value) -> None:
        if name in _NAMES_OVER_SUBMODULES and isinstance(value, _types.ModuleType):
            return  # the submodule stays reachable as sys.modules["autodiag.<name>"]
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
