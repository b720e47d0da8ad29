"""``import torch`` resolved to autodiag, for the duration of a run.

While :func:`torch_alias` is active, ``import torch``, ``import torch.nn as nn``, ``from torch
import nn, optim``, ``torch.utils.data`` ... give autodiag's modules, so a PyTorch script inside
the supported subset runs unchanged on autodiag's engine. It is an import hook (a
``sys.meta_path`` finder) installed on entry and removed on exit, with ``sys.modules`` put back
as it was for every ``torch*`` name: a real ``torch`` the caller imported before is restored, and
a later real ``import torch`` in the same process is unaffected.

What the script gets are stand-in modules named ``torch``, ``torch.nn``, ... that forward every
attribute to the autodiag module they stand for (classes and functions are autodiag's own, so
``isinstance`` and ``type(y.grad_fn).__name__`` behave). A name autodiag lacks raises
:class:`NotProvided` (an ``AttributeError``: ``hasattr`` and ``getattr(m, name, default)`` keep
working), ``from torch.nn import ChannelShuffle`` an ``ImportError``, ``import torch.fft``
:class:`ModuleNotProvided` (a ``ModuleNotFoundError``). :func:`missing_name` recognises all
three when they escape the script, so a runner can say precisely which name is missing.

>>> from autodiag.torch_alias import torch_alias
>>> with torch_alias():
...     import torch
...     x = torch.tensor([1.0, 2.0], requires_grad=True)
...     print(type((x * x).sum().grad_fn).__name__, hasattr(torch.nn, "ChannelShuffle"))
SumBackward0 False
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import types

from autodiag._look import attributes, is_a

__all__ = ["torch_alias", "NotProvided", "ModuleNotProvided", "missing_name", "TORCH_MODULES"]

# The torch modules the alias provides, and the autodiag module each stands for. A module of
# autodiag that is not listed here (autodiag.trace, autodiag.cli, ...) is not part of the alias:
# ``torch.trace`` is a function in PyTorch, not autodiag's tracing API.
TORCH_MODULES = {
    "torch": "autodiag",
    "torch.accelerator": "autodiag.accelerator",
    "torch.backends": "autodiag.backends",
    "torch.backends.cudnn": "autodiag.backends.cudnn",
    "torch.backends.mps": "autodiag.backends.mps",
    "torch.cuda": "autodiag.cuda",
    "torch.serialization": "autodiag.serialization",
    "torch.autograd": "autodiag.autograd",
    "torch.autograd.function": "autodiag.autograd.function",
    "torch.autograd.functional": "autodiag.autograd.functional",
    "torch.autograd.grad_mode": "autodiag.autograd.grad_mode",
    "torch.autograd.graph": "autodiag.autograd.graph",
    "torch.nn": "autodiag.nn",
    "torch.nn.functional": "autodiag.nn.functional",
    "torch.nn.init": "autodiag.nn.init",
    "torch.nn.modules": "autodiag.nn.modules",
    "torch.nn.parameter": "autodiag.nn.parameter",
    "torch.nn.utils": "autodiag.nn.utils",
    "torch.nn.utils.rnn": "autodiag.nn.utils.rnn",
    "torch.optim": "autodiag.optim",
    "torch.optim.optimizer": "autodiag.optim.optimizer",
    "torch.utils": "autodiag.utils",
    "torch.utils.checkpoint": "autodiag.utils.checkpoint",
    "torch.utils.data": "autodiag.utils.data",
    "torch.utils.data.dataset": "autodiag.utils.data.dataset",
    "torch.utils.data.sampler": "autodiag.utils.data.sampler",
    "torch.utils.data.dataloader": "autodiag.utils.data.dataloader",
    "torch.optim.lr_scheduler": "autodiag.optim.lr_scheduler",
    "torch.nn.utils.clip_grad": "autodiag.nn.utils.clip_grad",
    "torch.nn.utils.convert_parameters": "autodiag.nn.utils.convert_parameters",
    "torch.func": "autodiag.func",
    "torch.distributions": "autodiag.distributions",
    "torch.distributions.bernoulli": "autodiag.distributions.bernoulli",
    "torch.distributions.categorical": "autodiag.distributions.categorical",
    "torch.distributions.constraints": "autodiag.distributions.constraints",
    "torch.distributions.distribution": "autodiag.distributions.distribution",
    "torch.distributions.kl": "autodiag.distributions.kl",
    "torch.distributions.normal": "autodiag.distributions.normal",
    "torch.distributions.uniform": "autodiag.distributions.uniform",
    "torch.distributions.utils": "autodiag.distributions.utils",
    "torch.amp": "autodiag.amp",
    "torch.cuda.amp": "autodiag.cuda_amp",
    "torch.backends.mha": "autodiag.backends.mha",
    "torch.onnx": "autodiag.onnx",
    "torch.nn.modules.transformer": "autodiag.nn.modules.transformer",
    "torch.nn.parallel": "autodiag.nn.parallel",
    "torch.hub": "autodiag.hub",
    "torch.sparse": "autodiag.sparse",
    "torch.linalg": "autodiag.linalg",
}
_AUTODIAG_MODULES = {v: k for k, v in TORCH_MODULES.items()}

# PyTorch functions whose names autodiag's package gives to a module of its own: ``torch.trace``
# is the op (``Tensor.trace``), ``autodiag.trace`` the tracing API.
SHADOWED_OPS = ("trace",)

# Packages built on PyTorch's internals: under the alias they would import autodiag as their
# torch and fail somewhere inside; refusing them at the import names the real cause.
_TORCH_PACKAGES = ("torchvision", "torchaudio", "torchtext", "torchdata")


def _aliased(name: str) -> bool:
    """Is ``name`` a module the alias answers for (provided or refused)?"""
    top = name.partition(".")[0]
    return top == "torch" or top in _TORCH_PACKAGES


class NotProvided(AttributeError):
    """``torch.<name>`` that autodiag's engine does not provide. An AttributeError, so that
    ``hasattr(torch, "compile")`` is simply False."""

    def __init__(self, qualname: str):
        super().__init__(
            f"autodiag's engine does not provide `{qualname}` (`import torch` "
            "is aliased to autodiag)"
        )
        self.qualname = qualname


class ModuleNotProvided(ModuleNotFoundError):
    """``import torch.<sub>`` for a module autodiag's engine does not provide."""

    def __init__(self, qualname: str):
        super().__init__(
            f"autodiag's engine does not provide the module `{qualname}` "
            "(`import torch` is aliased to autodiag)",
            name=qualname,
        )
        self.qualname = qualname


class _TorchModule(types.ModuleType):
    """A stand-in ``torch.*`` module: attributes come from the autodiag module it stands for.

    Only names missing from the stand-in's own dict reach ``__getattr__``; modules, classes
    and functions are cached there on first use, so a script's ``torch.tensor`` costs one
    dict lookup after the first."""

    def __getattr__(self, name: str):
        d = self.__dict__
        target = d.get("_autodiag_target")
        if target is None:  # during construction
            raise AttributeError(name)
        try:
            value = getattr(target, name)
        except AttributeError:
            if name.startswith("__") and name.endswith("__"):
                # protocol probes (__wrapped__, __path__ ...): a plain miss, as for any module
                raise AttributeError(
                    f"module {self.__name__!r} has no attribute {name!r}"
                ) from None
            raise NotProvided(f"{self.__name__}.{name}") from None
        if isinstance(value, types.ModuleType):
            torch_name = _AUTODIAG_MODULES.get(value.__name__)
            if torch_name is not None:
                value = _stand_in(torch_name)
            elif self.__name__ == "torch" and name in SHADOWED_OPS:
                from autodiag.ops import REGISTRY

                value = REGISTRY[name]
            else:  # an autodiag-only module (autodiag.trace, ...)
                raise NotProvided(f"{self.__name__}.{name}")
        if isinstance(
            value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)
        ):
            d[name] = value
        return value

    def __repr__(self) -> str:
        target = self.__dict__.get("_autodiag_target")
        return f"<module {self.__name__!r} (alias of {getattr(target, '__name__', '?')})>"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self.__dict__["_autodiag_target"])))


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``torch`` and ``torch.*`` (and the packages built on torch) while installed."""

    def find_spec(self, fullname, path=None, target=None):
        if not _aliased(fullname):
            return None
        if fullname not in TORCH_MODULES:
            raise ModuleNotProvided(fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return _new_stand_in(spec.name, spec)

    def exec_module(self, module) -> None:
        pass  # the autodiag module it stands for is already imported


def _new_stand_in(name: str, spec=None) -> _TorchModule:
    module = _TorchModule(name)
    target = importlib.import_module(TORCH_MODULES[name])
    d = module.__dict__
    d["__doc__"] = target.__doc__
    d["__spec__"] = spec or importlib.machinery.ModuleSpec(name, _FINDER, is_package=True)
    d["__loader__"] = _FINDER
    d["__path__"] = []  # a package: ``import torch.nn`` needs its parent's __path__
    d["_autodiag_target"] = target
    return module


def _stand_in(name: str) -> _TorchModule:
    """The one stand-in module for ``name`` (registered in sys.modules while the alias is on,
    so that ``import torch.nn`` and ``torch.nn`` give the same object)."""
    module = sys.modules.get(name)
    if isinstance(module, _TorchModule):
        return module
    module = _new_stand_in(name)
    if _FINDER in sys.meta_path:
        sys.modules[name] = module
    return module


_FINDER = _Finder()


class torch_alias:  # noqa: N801 - used like a function: ``with torch_alias():``
    """Context manager: ``import torch`` gives autodiag while it is active (not reentrant)."""

    def __init__(self) -> None:
        self.finder = _FINDER
        self.saved: dict = {}
        self.before: set = set()

    def __enter__(self) -> torch_alias:
        # a real torch imported by the caller stays out of the script's way, and comes back
        self.saved = {n: m for n, m in sys.modules.items() if _aliased(n)}
        for name in self.saved:
            del sys.modules[name]
        self.before = set(sys.modules)
        sys.meta_path.insert(0, self.finder)
        importlib.invalidate_caches()
        return self

    def __exit__(self, *exc) -> bool:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        # sys.modules may hold any object a script put there: looked at by type only
        stand_ins = [m for n, m in list(sys.modules.items()) if is_a(m, _TorchModule)]
        for name in [n for n in sys.modules if _aliased(n)]:
            del sys.modules[name]
        # modules the run imported that hold a stand-in (a helper module's ``import torch``)
        # would hand it to a later real import of the same module: forget them too
        ids = {id(m) for m in stand_ins}
        for name in set(sys.modules) - self.before:
            holds = any(id(v) in ids for v in attributes(sys.modules.get(name)).values())
            if holds:
                del sys.modules[name]
        sys.modules.update(self.saved)
        return False


_CANNOT_IMPORT = re.compile(r"cannot import name '([^']+)' from '([^']+)'")


def missing_name(exc: BaseException) -> str | None:
    """The ``torch.*`` name autodiag lacks that ``exc`` (escaping a script run under the
    alias) is about, or None when ``exc`` is about something else."""
    from autodiag.ops.sparse_coo import SparseNotSupported

    if isinstance(exc, (NotProvided, ModuleNotProvided, SparseNotSupported)):
        return exc.qualname
    if isinstance(exc, ImportError) and not isinstance(exc, ModuleNotFoundError):
        m = _CANNOT_IMPORT.match(str(exc))
        if m and _aliased(m.group(2)):
            return f"{m.group(2)}.{m.group(1)}"
    if isinstance(exc, AttributeError) and _tensor_method(exc):
        return f"Tensor.{exc.name}"
    return None


def _tensor_method(exc: AttributeError) -> bool:
    """Whether ``exc`` is the script's own read of a ``torch.Tensor`` attribute that autodiag's
    Tensor lacks (``x.acos()``): raised by Python's attribute lookup on one of autodiag's
    tensors (or on their class), in a frame outside autodiag (a read in autodiag's own code is
    autodiag's bug), for a name PyTorch's Tensor has (a typo stays the script's error)."""
    from autodiag._pytorch_names import TENSOR
    from autodiag.tensor import Tensor
    from autodiag.trace import sites

    obj = getattr(exc, "obj", None)
    # read on a tensor (``x.acos()``) or on the class itself (``torch.Tensor.acos(x)``,
    # ``nn.Parameter.to_sparse``)
    on_tensor = isinstance(obj, Tensor) or (isinstance(obj, type) and issubclass(obj, Tensor))
    if getattr(exc, "name", None) not in TENSOR or not on_tensor:
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return sites._user(tb.tb_frame.f_code)
