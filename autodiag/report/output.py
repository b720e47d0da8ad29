"""The one output sink: the report goes to stdout or, atomically, to ``-o FILE``; diagnostics go
to stderr. JSON carries no markup; text is rich (colour off with --no-color, in files, and when
stdout is not a terminal).

A reader that goes away (``autodiag graph x.py | head -1``) is not an error: the rest of the
output is dropped silently and the command still ends with its verdict's exit code."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import sys
import tempfile

from rich.console import Console

from autodiag._version import __version__
from autodiag.target.errors import BadInvocation


def check_writable(path: str | None, option: str = "--output") -> None:
    """Fail before running the target when ``-o FILE`` (or another ``option``'s file, such as
    ``--junit-xml``) cannot be written."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise BadInvocation(f"{option} {path} is a directory", "Give a file name.")
    if os.path.exists(path) and not os.path.isfile(path):
        # a device, a pipe, a socket: an atomic write would replace it with a plain file
        raise BadInvocation(f"{option} {path} is not a regular file",
                            "Give a file name; without -o the report goes to stdout (redirect "
                            "it with > or |).")
    if not os.path.isdir(folder):
        raise BadInvocation(f"{option} {path}: the folder {folder} does not exist",
                            "Create the folder or choose another path.")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise BadInvocation(f"{option} {path} is not writable", "Choose a writable path.")


def write_atomic(path: str, text: str, option: str = "--output") -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    The file gets the mode an ordinary write would give it: an existing file keeps its mode, a
    new one is created 0666 less the umask (``mkstemp``'s 0600 is for the temporary name only).
    A symbolic link is written through, not replaced. An interrupt leaves ``path`` as it was."""
    real = os.path.realpath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real), prefix=".autodiag-", suffix=".tmp")
    try:
        try:
            mode = stat.S_IMODE(os.stat(real).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, real)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise BadInvocation(f"{option} {path}: {e.strerror}",
                                "Choose a writable path.") from None
        raise


def _umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # NOTE: the only portable way to read it is to set it
    os.umask(mask)
    return mask


# --- a reader that went away ------------------------------------------------------------------

# Set when a write found its reader gone: the stream now writes to the null device.
READER_GONE: set = set()  # "stdout", "stderr"


def reader_gone(stream) -> None:
    """The reader of ``stream`` (stdout or stderr) closed the pipe: point the stream's file
    descriptor at the null device, so that every later write (and the interpreter's flush at
    exit) succeeds silently instead of raising BrokenPipeError again."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    READER_GONE.add("stderr" if fd == 2 else "stdout")


class _Console(Console):
    """rich's Console, but a closed pipe is not an error (rich exits 1 on one)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to render for a reader that is gone
        reader_gone(self.file)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout, whole: an interrupt (Ctrl-C) arriving meanwhile is held until
    the write is done, so that a JSON document is never cut in half (``pending_interrupt``
    tells whether one came). A closed pipe drops the text."""
    with _HoldInterrupt():
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            reader_gone(sys.stdout)


_held: list = []  # interrupts held back by _HoldInterrupt


def pending_interrupt() -> bool:
    """Did an interrupt arrive while output was being written (and was held back)? Asking
    forgets it."""
    came = bool(_held)
    _held.clear()
    return came


class _HoldInterrupt:
    """Hold SIGINT back for the duration of a write (main thread only)."""

    def __enter__(self):
        self.prev = None
        try:
            self.prev = signal.signal(signal.SIGINT, lambda *a: _held.append(True))
        except ValueError:  # not the main thread: nothing to hold
            pass
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            signal.signal(signal.SIGINT, self.prev)
        return False


class Sink:
    """Where a command's report goes."""

    def __init__(self, output: str | None, color: bool):
        self.output = output
        self.color = color
        self._buffer = io.StringIO() if output else None
        self.json_written = False  # a JSON document went (or, with -o, will go) out
        self.delivered = False  # ... and reached its destination (stdout, or -o's file)

    def console(self, width: int | None = None) -> Console:
        if self._buffer is not None:
            return _Console(file=self._buffer, no_color=True, highlight=False,
                            width=width or 160, color_system=None, soft_wrap=True)
        # Piped output has no terminal width; rich's 80 columns would fold tables needlessly.
        tty = sys.stdout.isatty()
        return _Console(no_color=not self.color, highlight=False, soft_wrap=True,
                        color_system="auto" if self.color else None,
                        width=width or (None if tty else int(os.environ.get("COLUMNS", 160))))

    def write_text(self, text: str) -> None:
        """Plain text (JSON, DOT, Mermaid, SVG): no markup processing at all."""
        if self._buffer is not None:
            self._buffer.write(text)
        else:
            write_stdout(text)

    def write_json(self, data: dict, pretty: bool = True) -> None:
        """``pretty=False`` for large documents: json's C encoder only runs without indent."""
        self.write_text(json.dumps(data, indent=2 if pretty else None,
                                   default=_json_default) + "\n")
        self.json_written = True
        self.delivered = self._buffer is None

    def close(self) -> None:
        if self._buffer is not None:
            with _HoldInterrupt():  # the file is written whole or not at all
                write_atomic(self.output, self._buffer.getvalue())
            self.delivered = self.json_written


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def envelope(command: str, target: str | None, findings: list, status: str | None = None,
             error=None, interrupted: bool = False, **extra) -> dict:
    """The JSON envelope of every command (DESIGN §4). ``error``: the run's failure (an
    AutodiagError), or None; ``interrupted``: Ctrl-C stopped the run. The status is then, unless
    given, "interrupted" before "findings" before "error" before "ok", as the exit code is."""
    if status is None:
        status = "interrupted" if interrupted else "findings" if findings else \
            "error" if error is not None else "ok"
    out = {"autodiag": __version__, "command": command, "target": target, "status": status,
           "findings": [f.to_json() for f in findings]}
    out.update(extra)
    if error is not None:
        out["error"] = error_json(error)
    elif interrupted:
        out["error"] = {"kind": "interrupted", "exit_code": 130,
                        "message": "interrupted: the report covers what ran before",
                        "hint": "", "details": "", "traceback": "", "location": None}
    return out


def error_json(error) -> dict:
    """The envelope's ``error`` object of an AutodiagError (README, "JSON")."""
    return {"kind": error.kind, "exit_code": error.exit_code, "message": error.message,
            "hint": error.hint,
            # the target's traceback (user frames) when it failed, else e.g. a line with a caret
            "details": error.details if error.exit_code != 3 else "",
            "traceback": error.details if error.exit_code == 3 else "",
            "location": getattr(error, "location", None),
            **({"exit_status": error.exit_status}
               if getattr(error, "exit_status", None) is not None else {})}


def stderr_console(color: bool) -> Console:
    return _Console(stderr=True, no_color=not color, highlight=False, soft_wrap=True,
                    color_system="auto" if color else None)
