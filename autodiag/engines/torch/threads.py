"""NOTE [Deep graphs on PyTorch]
Once Python has touched a PyTorch graph's nodes (even ``y.grad_fn``), freeing a chain of more
than ~45k nodes recurses in C++ deep enough to overflow the default 8 MB thread stack: a segfault
(pytorch/pytorch#109948, #155322; reference/torch_backend.md). So under ``--engine torch`` the
whole command — the script's run, the analysis and the report — runs in a thread with a 1 GB
stack, and every reference to the script's values (its globals, the locals of its failed
frames, the traceback of its error) is dropped inside that thread before it ends
(``Command.drop_values``), so the graph is freed where the stack is large enough.

This module does not import torch.
"""

from __future__ import annotations

import threading

STACK_SIZE = 1 << 30


def in_big_stack(fn, *args):
    """``fn(*args)`` in a new thread with a ``STACK_SIZE`` stack: its result, or its exception
    raised here. A KeyboardInterrupt that reaches this (main) thread while it waits is passed
    on to the worker, which ends the run as Ctrl-C would."""
    box: dict = {}

    def work():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    previous = threading.stack_size(STACK_SIZE)
    try:
        worker = threading.Thread(target=work, name="autodiag-torch", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous)
    while True:
        try:
            worker.join()
            break
        except KeyboardInterrupt:
            _interrupt(worker)
    if "error" in box:
        raise box.pop("error")
    return box.get("value")


def _interrupt(worker: threading.Thread) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(worker.ident), ctypes.py_object(KeyboardInterrupt)
    )


def grow_main_stack(size: int = STACK_SIZE):
    """Let the main thread's stack grow to ``size`` (NOTE [Deep graphs on PyTorch]) where a
    command cannot move the work to another thread: the pytest plugin runs each test in
    pytest's main thread, whose graphs are freed there. On Linux the main thread's stack grows
    on demand up to the soft ``RLIMIT_STACK``, read when it grows, so raising the limit while
    running takes effect. The previous limits, to restore; None when nothing changed (the
    limit is already as high, the hard limit forbids it, or the platform has none)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: a thread's stack is fixed at its start
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft >= size:
        return None
    new = size if hard == resource.RLIM_INFINITY else min(hard, size)
    if new <= soft:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_STACK, (new, hard))
    except (ValueError, OSError):
        return None
    return soft, hard


def restore_main_stack(previous) -> None:
    """Undo ``grow_main_stack`` (its return value)."""
    if previous is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_STACK, previous)
