"""Ctrl-C during a run is never lost in a weak-reference callback.

NOTE [Interrupts in callbacks]: Python runs the SIGINT handler in whatever frame is executing
when it checks for signals. Inside a weakref callback (the analyses count dying nodes and
forget dead arrays that way; ``WeakSet``/``WeakKeyDictionary`` clean up the same way) the
``KeyboardInterrupt`` it raises is printed as "Exception ignored" and dropped, and the script
runs on as if the user had never pressed Ctrl-C. While a target runs, ``deferring_sigint``
installs a handler that, in such a frame, delivers the interrupt again a moment later instead
of raising there; anywhere else it raises ``KeyboardInterrupt`` as Python's own handler does.
"""

from __future__ import annotations

import _thread
import _weakrefset
import contextlib
import signal
import threading
import weakref

# code objects of autodiag's own weakref callbacks (``callback`` marks them)
_CALLBACKS: set = set()
_CALLBACK_FILES = frozenset({weakref.__file__, _weakrefset.__file__})
_REDELIVER_AFTER = 0.05  # seconds


def callback(fn):
    """Mark ``fn`` as a weakref callback: an interrupt landing in it is delivered later."""
    _CALLBACKS.add(fn.__code__)
    return fn


def _in_callback(frame) -> bool:
    return frame is not None and (
        frame.f_code in _CALLBACKS or frame.f_code.co_filename in _CALLBACK_FILES
    )


def _on_sigint(signum, frame):
    if _in_callback(frame):
        threading.Timer(_REDELIVER_AFTER, _thread.interrupt_main).start()
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def deferring_sigint():
    """Install the deferring SIGINT handler for the block (main thread only; a handler the
    script installs itself replaces it, as it would Python's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
