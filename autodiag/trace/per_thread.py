"""Per-thread state of a tracer: a script's threads report to the same tracers, and what is in
progress in one thread (its backward calls) is not in progress in another."""

from __future__ import annotations

import threading


class PerThread(threading.local):
    """``tasks``: this thread's backward calls in progress, innermost last."""

    def __init__(self):
        self.tasks: list = []
