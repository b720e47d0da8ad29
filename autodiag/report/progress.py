"""The progress line of a long run: on a terminal, a transient status line on stderr with the
elapsed time, backward calls and optimizer steps so far (from the engine's counters,
``trace.events.REPORTED``); erased before the script writes and when the run ends.

Nothing is shown when stderr is not a terminal, with ``--quiet``, or for the first second."""

from __future__ import annotations

import shutil
import sys
import threading
import time

from autodiag.trace import events

DELAY = 1.0  # seconds before the line first appears: short runs never show it
PERIOD = 0.25  # seconds between redraws


class _Erasing:
    """The target's stderr while the line is up: each write erases the line first (under the
    same lock as the redraw), so the script's output never lands in the middle of it."""

    def __init__(self, progress: Progress, stream):
        self._progress = progress
        self._stream = stream

    def write(self, text: str) -> int:
        with self._progress.lock:
            self._progress.erase()
            return self._stream.write(text)

    def __getattr__(self, name):  # flush, fileno, isatty, encoding, ... of the real stream
        return getattr(self._stream, name)


class Progress:
    """``with Progress(label, enabled):`` around a target's run."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self.lock = threading.Lock()
        self.shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        self._stream = sys.stderr
        self._start = time.monotonic()
        self._base = list(events.REPORTED)
        sys.stderr = _Erasing(self, self._stream)
        self._thread = threading.Thread(target=self._loop, name="autodiag-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if isinstance(sys.stderr, _Erasing) and sys.stderr._progress is self:
            sys.stderr = self._stream
        if getattr(self._stream, "closed", False):  # the script closed it; the runner has put
            self._stream = sys.stderr  # a working one back (target.script._Streams)
        with self.lock:
            self.erase()

    def text(self, elapsed: float) -> str:
        calls, steps = (events.REPORTED[i] - self._base[i] for i in (1, 2))
        parts = [
            f"running {self.label}",
            f"{elapsed:.0f} s",
            f"{calls} backward call{'s' if calls != 1 else ''}",
        ]
        if steps:
            parts.append(f"{steps} optimizer step{'s' if steps != 1 else ''}")
        return "autodiag: " + " · ".join(parts)

    def erase(self) -> None:
        """Clear the line if it is up (call with ``lock`` held)."""
        if self.shown and self._put("\r\x1b[2K"):
            self.shown = False

    def _put(self, text: str) -> bool:
        """Write ``text`` to the terminal; False when the script has closed it (os.close(2),
        sys.stdout.close() under the run): the line is then no longer drawn."""
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._stop.set()
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(PERIOD):
            elapsed = time.monotonic() - self._start
            if elapsed < DELAY:
                continue
            # NOTE: never wider than the terminal: a wrapped line cannot be erased with \r
            width = shutil.get_terminal_size((80, 24)).columns - 1
            line = self.text(elapsed)[:width]
            with self.lock:
                if self._put(f"\r\x1b[2K\x1b[2m{line}\x1b[0m"):
                    self.shown = True
