"""Observing the threads a script starts, on ``--engine torch``.

PyTorch keeps its function modes, saved-tensor hooks and grad mode per thread (verified on torch
2.13: a ``TorchFunctionMode`` and ``saved_tensors_hooks`` entered in one thread see nothing of a
``threading.Thread`` started inside them; anomaly mode, by contrast, is global), and numbers a
thread's graph nodes with a counter of that thread's. So the observer of the thread that runs
the script (``observe.Observer``) cannot see the ops of a worker thread, and would mistake its
nodes' numbers for its own. Each thread the run starts gets an observer of its own instead:

``observing_threads(run)`` sets a profile function for the threads started inside the ``with``
block (``threading.setprofile``: the script's standard library, not torch). At a new thread's
first Python call it removes itself (the thread gets back the profile function it had before)
and enters, in that thread, a ``ThreadObserver``: the same mode and saved-tensor hooks as the
run's observer, reporting to the same tracers, sharing its saved tensors (a write in one thread
to a tensor another thread saved is a hazard too) and its backward call numbers (NOTE [Shared
saves] in observe.py). The global hooks (modules, optimizer steps) are the run's already, and
run in every thread. A thread's mode and hooks are left with the thread (PyTorch frees a
thread's mode stack when it ends); when the run ends, those of threads still running pass every
call through (``closed``), as autodiag's engine stops reporting once its tracers are removed.

Not observed: threads started before the run (a pool the caller of ``autodiag.torch.observe()``
made earlier), threads PyTorch runs in C++ (a CPU backward runs in the thread that called it,
and so do its hooks), and DataLoader worker processes (a forked worker inherits the mode, but
what it sees stays in that process; they load data and build no graph). A script that sets its
own thread profile function while it runs (``threading.setprofile``) gets it in its threads,
after the observer's.
"""

from __future__ import annotations

import contextlib
import sys
import threading

from torch.autograd.graph import saved_tensors_hooks

from autodiag.engines.torch import observe
from autodiag.engines.torch.observe import Observer, _Mode, _Packed


class ThreadObserver(Observer):
    """The observer of one thread the run started (``run``: the observer of the script's
    thread)."""

    def __init__(self, run: Observer):
        super().__init__(run)
        self.closed = False
        self.mode = _ThreadMode(self)

    def enter(self) -> None:
        """Enter the mode and the saved-tensor hooks in the calling thread, for good."""
        if self.sinks:
            saved_tensors_hooks(self.pack, self.unpack).__enter__()
        self.mode.__enter__()

    def pack(self, t):
        if self.closed:
            # the run is over: no analysis listens, but PyTorch's version check stays off while
            # the hooks are installed (NOTE [Two pitfalls] in observe.py): keep redoing it
            return _Packed(t.detach(), t._version, None, -1, None)
        return Observer.pack(self, t)


class _ThreadMode(_Mode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.observer.closed:
            return func(*args, **(kwargs or {}))
        return _Mode.__torch_function__(self, func, types, args, kwargs)


@contextlib.contextmanager
def observing_threads(run: Observer):
    """Observe the threads started inside the ``with`` block, each with a ``ThreadObserver``
    of ``run``'s; yields the list of those observers."""
    observe.register()
    lock = threading.Lock()
    observers: list = []
    closed = [False]
    previous = threading.getprofile()
    # the profile function the script's threads should get: one the script sets while it runs
    # (``threading.setprofile(f)``) takes this place instead of replacing ``started``, so
    # threads it starts afterwards are still observed, then run ``f``
    theirs = [previous]
    real_set, real_get = threading.setprofile, threading.getprofile

    def started(frame, event, arg):
        sys.setprofile(theirs[0])  # once per thread: the script's own profile function, if it
        with lock:  # set one, from the next event on
            if closed[0]:
                return
            obs = ThreadObserver(run)
            observers.append(obs)
        obs.enter()  # left with the thread (modes and hooks are per thread)

    def setprofile(func):
        theirs[0] = func

    def getprofile():
        return theirs[0]

    real_set(started)
    threading.setprofile, threading.getprofile = setprofile, getprofile
    try:
        yield observers
    finally:
        threading.setprofile, threading.getprofile = real_set, real_get
        real_set(previous)
        with lock:
            closed[0] = True
            for obs in observers:
                obs.closed = True
                obs.saves = {}
            del observers[:]
