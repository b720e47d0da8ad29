"""Ops a script runs in threads that ``--engine torch`` does not watch.

PyTorch keeps its function modes and saved-tensor hooks per thread (verified on torch 2.13: a
``TorchFunctionMode`` entered in one thread sees nothing of a ``threading.Thread`` started
inside it), so ``observe.py`` sees the ops of the thread that runs the script only. A script
whose training runs in a worker thread would otherwise look as if it computed nothing (and get
the advice to ``import autodiag``), and one that computes in both would get a report on part of
its work. Observing those threads as well would need the observer's per-run state (sequence
marks, pending saves, backward calls) kept per thread; until then they are spotted, not
observed:

``spotting()`` sets a profile function for the threads the run starts
(``threading.setprofile``): at a new thread's first Python call it removes itself and enters a
``TorchFunctionMode`` of the thread's own, which notes the first torch call made from the
user's code (a frame outside autodiag, torch, the standard library and installed packages: a
DataLoader's pin-memory thread or a compile worker is not the script's) that takes part in
autograd: an output with a ``grad_fn`` (a graph being built) or a backward (``backward``,
``autograd.grad``); it is a plain pass-through after that. The command then says which thread
did what, where (``Spotted``), and gives no verdict. A thread that only makes or reads tensors
without autograd (loading data, logging ``.item()``, saving a checkpoint) is not noted: the
analyses judge graphs and backward passes, and the values it hands over are still judged where
the watched thread uses them (NaN/Inf entering from outside: NOTE [Values from outside]).
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import threading

import torch
from torch.overrides import TorchFunctionMode

from autodiag.trace import sites

_is_compiling = torch.compiler.is_compiling


def _library_folders() -> tuple:
    paths = sysconfig.get_paths()
    found = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "purelib", "platlib")}
    return tuple(sorted(found))


class Spotted:
    """What was spotted: per thread name, its first autograd op from the user's code, and where."""

    def __init__(self):
        self.lock = threading.Lock()
        self.first: dict = {}  # thread name -> (op name, {"file", "line", "function", "code"})
        self.closed = False  # the run ended: modes left in live threads pass everything on
        self.libraries = _library_folders()

    def note(self, thread: str, op: str, where: dict) -> None:
        with self.lock:
            self.first.setdefault(thread, (op, where))

    def found(self) -> list:
        """``[(thread name, op name, location)]``, in the order the threads were spotted."""
        with self.lock:
            return [(t, op, where) for t, (op, where) in self.first.items()]

    def user_site(self, frame) -> dict | None:
        """The innermost frame of the user's code from ``frame`` outward, formatted; None."""
        libraries = self.libraries
        f = frame
        while f is not None:
            code = f.f_code
            if sites._user(code) and not code.co_filename.startswith(libraries):
                return sites.format_site((code, f.f_lineno))
            f = f.f_back
        return None


class _Spot(TorchFunctionMode):
    """One thread's mode: notes its first op from the user's code that takes part in autograd."""

    def __init__(self, spotted: Spotted):
        super().__init__()
        self.spotted = spotted
        self.done = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.done and not self.spotted.closed and not _is_compiling():
            name = getattr(func, "__name__", "")
            if name in _BACKWARDS or name not in _ACCESSORS and _builds_graph(out):
                where = self.spotted.user_site(sys._getframe(1))
                if where is not None:
                    self.done = True
                    self.spotted.note(threading.current_thread().name, name, where)
        return out


_BACKWARDS = frozenset(("backward", "grad"))  # Tensor.backward, autograd.backward/grad
_ACCESSORS = frozenset(("__get__", "__set__"))  # attribute reads and writes (x.grad, x.data)


def _builds_graph(out) -> bool:
    """Was the op recorded into a graph (an output with a ``grad_fn``; not a leaf's in-place
    initialisation, ``kaiming_uniform_`` of a new layer's weight)?"""
    if isinstance(out, torch.Tensor):
        return out.grad_fn is not None
    if isinstance(out, (tuple, list)):
        return any(isinstance(o, torch.Tensor) and o.grad_fn is not None for o in out)
    return False


@contextlib.contextmanager
def spotting():
    """Spot the torch calls of the threads started inside the ``with`` block."""
    spotted = Spotted()

    previous = threading.getprofile()

    def started(frame, event, arg):
        sys.setprofile(previous)  # once per thread (the mode does the rest): the script's own
        if not spotted.closed:  # profile function, if it set one, from the next event on
            _Spot(spotted).__enter__()  # left with the thread (modes are per thread)

    threading.setprofile(started)
    try:
        yield spotted
    finally:
        threading.setprofile(previous)
        spotted.closed = True
