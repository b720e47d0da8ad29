"""The one output sink: the report goes to stdout or, atomically, to ``-o FILE``; diagnostics go
to stderr. JSON carries no markup; text is rich (colour off with --no-color, in files, and when
stdout is not a terminal).

A reader that goes away (``autodiag graph x.py | head -1``) is not an error: the rest of the
output is dropped silently and the command still ends with its verdict's exit code."""

from __future__ import annotations

import io
import itertools
import json
import os
import signal
import stat
import sys
import tempfile
import weakref

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
        raise BadInvocation(
            f"{option} {path} is not a regular file",
            "Give a file name; without -o the report goes to stdout (redirect it with > or |).",
        )
    if not os.path.isdir(folder):
        raise BadInvocation(
            f"{option} {path}: the folder {folder} does not exist",
            "Create the folder or choose another path.",
        )
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
            raise BadInvocation(
                f"{option} {path}: {e.strerror}", "Choose a writable path."
            ) from None
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
        self._tmp: str | None = None  # -o's temporary file once the report streams (stream())

    def console(self, width: int | None = None) -> Console:
        if self._buffer is not None:
            return _Console(
                file=self._buffer,
                no_color=True,
                highlight=False,
                width=width or 160,
                color_system=None,
                soft_wrap=True,
            )
        # Piped output has no terminal width; rich's 80 columns would fold tables needlessly.
        tty = sys.stdout.isatty()
        return _Console(
            no_color=not self.color,
            highlight=False,
            soft_wrap=True,
            color_system="auto" if self.color else None,
            width=width or (None if tty else int(os.environ.get("COLUMNS", 160))),
        )

    def write_text(self, text: str) -> None:
        """Plain text (JSON, DOT, Mermaid, SVG): no markup processing at all."""
        if self._buffer is not None:
            self._buffer.write(text)
        else:
            write_stdout(text)

    def write_json(self, data: dict, pretty: bool = True, inline_lists: bool = False) -> None:
        """``pretty=False`` for large documents: json's C encoder only runs without indent.
        ``inline_lists``: indented, but each list of scalars on one line (``dumps_readable``)."""
        if pretty and inline_lists:
            text = dumps_readable(data)
        else:
            text = json.dumps(data, indent=2 if pretty else None, default=_json_default)
        self.write_text(text + "\n")
        self.json_written = True
        self.delivered = self._buffer is None

    def close(self) -> None:
        if self._tmp is not None:
            self._finish_stream()
            return
        if self._buffer is not None:
            with _HoldInterrupt():  # the file is written whole or not at all
                write_atomic(self.output, self._buffer.getvalue())
            self.delivered = self.json_written

    # --- streaming: large reports are written as they are produced --------------------------

    def stream(self):
        """A text file the report is written to piece by piece: stdout (a closed pipe drops
        the rest, as ``write_stdout``), or -o's temporary file beside FILE (given FILE's mode
        and renamed over it by ``close()``, as ``write_atomic`` does; removed if the command
        never gets there). What was written before (console or write_text) is kept, in order;
        both keep writing to the same place afterwards."""
        if self._buffer is None:
            return _STDOUT
        if self._tmp is None:
            real = os.path.realpath(self.output)
            try:
                fd, self._tmp = tempfile.mkstemp(
                    dir=os.path.dirname(real), prefix=".autodiag-", suffix=".tmp"
                )
            except OSError as e:
                raise BadInvocation(
                    f"--output {self.output}: {e.strerror}", "Choose a writable path."
                ) from None
            # a failed or interrupted command leaves no temporary file behind
            self._cleanup = weakref.finalize(self, _remove, self._tmp)
            f = os.fdopen(fd, "w", encoding="utf-8")
            f.write(self._buffer.getvalue())
            self._buffer = f
        return self._buffer

    def _finish_stream(self) -> None:
        real = os.path.realpath(self.output)
        try:
            with _HoldInterrupt():  # the file is renamed into place whole or not at all
                try:
                    mode = stat.S_IMODE(os.stat(real).st_mode)
                except FileNotFoundError:
                    mode = 0o666 & ~_umask()
                os.fchmod(self._buffer.fileno(), mode)
                self._buffer.close()
                os.replace(self._tmp, real)
        except OSError as e:
            raise BadInvocation(
                f"--output {self.output}: {e.strerror}", "Choose a writable path."
            ) from None
        finally:
            self._cleanup()
        self.delivered = self.json_written

    def write_lines(self, lines) -> None:
        """Plain text given line by line (a huge DOT or Mermaid graph): written in chunks as
        it is produced (``stream()``), never held whole."""
        f = self.stream()
        chunk: list = []
        for line in lines:
            chunk.append(line)
            if len(chunk) == LINES_BATCH:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
        f.flush()

    def write_json_stream(self, data: dict, pretty: bool = True) -> None:
        """``write_json`` for documents too large to hold as one string: values wrapped in
        ``Streamed`` (at any depth) are written item by item as they are produced. The text
        is the same as ``write_json`` of the document with each Streamed made a list. An
        interrupt is held back until the document is complete, as ``write_stdout`` does."""
        f = self.stream()
        with _HoldInterrupt():
            _dump_streaming(f.write, data, pretty)
            f.write("\n")
            f.flush()
        self.json_written = True
        self.delivered = self._buffer is None


class _StdoutStream:
    """stdout for streamed reports: a reader that went away drops the rest silently."""

    def write(self, text: str) -> None:
        if "stdout" in READER_GONE:
            return
        try:
            sys.stdout.write(text)
        except BrokenPipeError:
            reader_gone(sys.stdout)

    def flush(self) -> None:
        if "stdout" in READER_GONE:
            return
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            reader_gone(sys.stdout)


_STDOUT = _StdoutStream()


class Streamed:
    """A JSON list whose items come from an iterable, written as they are produced.
    ``compact``: optionally, the same items already encoded as compact JSON text (a faster
    producer for huge lists), used when the document is not indented."""

    __slots__ = ("items", "compact")

    def __init__(self, items, compact=None):
        self.items = items
        self.compact = compact


LINES_BATCH = 4096  # write_lines: lines per write
BATCH = 256  # compact JSON: items encoded per call of json's C encoder (bounds the memory)


def _has_streamed(obj) -> bool:
    if obj.__class__ is Streamed:
        return True
    if isinstance(obj, dict):
        return any(_has_streamed(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_streamed(v) for v in obj)
    return False


def _dump_streaming(write, obj, pretty: bool, level: int = 0) -> None:
    """Write ``obj`` as json.dumps(obj, indent=2 if pretty else None) would, Streamed values
    included. Recursion follows the document's nesting (a few levels), never a graph."""
    pad = "\n" + "  " * level
    inner = pad + "  " if pretty else ""
    if not _has_streamed(obj):
        text = json.dumps(obj, indent=2 if pretty else None, default=_json_default)
        write(text.replace("\n", pad) if pretty and level else text)
        return
    if isinstance(obj, dict):
        write("{")
        for k, (key, value) in enumerate(obj.items()):
            write((("," if k else "") + inner) if pretty else (", " if k else ""))
            write(json.dumps(key) + ": ")
            _dump_streaming(write, value, pretty, level + 1)
        write((pad if obj else "") + "}" if pretty else "}")
        return
    streamed = obj.__class__ is Streamed  # its items are plain (no Streamed inside)
    if streamed and not pretty and obj.compact is not None:
        _write_encoded(write, obj.compact)
        return
    it = iter(obj.items if streamed else obj)
    first = next(it, _END)
    if first is _END:
        write("[]")
        return
    write("[")
    written = 0  # items written so far
    batch: list = []

    def flush() -> None:
        nonlocal written, batch
        if batch:
            write((", " if written else "") + json.dumps(batch, default=_json_default)[1:-1])
            written += len(batch)
            batch = []

    for item in itertools.chain((first,), it):
        if pretty:
            write(("," if written else "") + inner)
            _dump_streaming(write, item, pretty, level + 1)
            written += 1
        elif streamed or not _has_streamed(item):
            batch.append(item)
            if len(batch) == BATCH:
                flush()
        else:
            flush()
            write(", " if written else "")
            _dump_streaming(write, item, pretty, level + 1)
            written += 1
    flush()
    write(pad + "]" if pretty else "]")


_END = object()


def _write_encoded(write, texts) -> None:
    """A compact JSON list of items given as their JSON texts."""
    write("[")
    batch: list = []
    sep = ""
    for text in texts:
        batch.append(text)
        if len(batch) == BATCH:
            write(sep)  # NOTE: not ``sep + ...``: a copy of the batch's text for two bytes
            write(", ".join(batch))
            sep, batch = ", ", []
    if batch:
        write(sep)
        write(", ".join(batch))
    write("]")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def dumps_readable(obj) -> str:
    """``json.dumps(obj, indent=2)``, except that a list of scalars (numbers, strings, booleans,
    nulls) stays on one line: a series of 256 numbers is one line, not 256 (``check``'s
    ``grad_flow``). Recursion follows the document's nesting (a few levels), never a graph.

    >>> print(dumps_readable({"x": [1, 2, 3], "p": [{"name": "w"}]}))
    {
      "x": [1, 2, 3],
      "p": [
        {
          "name": "w"
        }
      ]
    }
    """
    out: list = []
    _readable(obj, 0, out)
    return "".join(out)


def _readable(obj, level: int, out: list) -> None:
    if isinstance(obj, dict):
        items = [(json.dumps(str(k)) + ": ", v) for k, v in obj.items()]
        ends = "{}"
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in obj):
        items = [("", v) for v in obj]
        ends = "[]"
    else:
        out.append(json.dumps(obj, default=_json_default))
        return
    if not items:
        out.append(ends)
        return
    pad = "\n" + "  " * (level + 1)
    out.append(ends[0])
    for k, (key, value) in enumerate(items):
        out.append(("," if k else "") + pad + key)
        _readable(value, level + 1, out)
    out.append("\n" + "  " * level + ends[1])


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def envelope(
    command: str,
    target: str | None,
    findings: list,
    status: str | None = None,
    error=None,
    interrupted: bool = False,
    **extra,
) -> dict:
    """The JSON envelope of every command (DESIGN §4). ``error``: the run's failure (an
    AutodiagError), or None; ``interrupted``: Ctrl-C stopped the run. The status is then, unless
    given, "interrupted" before "findings" before "error" before "ok", as the exit code is."""
    if status is None:
        status = (
            "interrupted"
            if interrupted
            else "findings"
            if findings
            else "error"
            if error is not None
            else "ok"
        )
    out = {
        "autodiag": __version__,
        "command": command,
        "target": target,
        "status": status,
        "findings": [f.to_json() for f in findings],
    }
    out.update(extra)
    if error is not None:
        out["error"] = error_json(error)
    elif interrupted:
        out["error"] = {
            "kind": "interrupted",
            "exit_code": 130,
            "message": "interrupted: the report covers what ran before",
            "hint": "",
            "details": "",
            "traceback": "",
            "location": None,
        }
    return out


def error_json(error) -> dict:
    """The envelope's ``error`` object of an AutodiagError (README, "JSON")."""
    return {
        "kind": error.kind,
        "exit_code": error.exit_code,
        "message": error.message,
        "hint": error.hint,
        # the target's traceback (user frames) when it failed, else e.g. a line with a caret
        "details": error.details if error.exit_code != 3 else "",
        "traceback": error.details if error.exit_code == 3 else "",
        "location": getattr(error, "location", None),
        **(
            {"exit_status": error.exit_status}
            if getattr(error, "exit_status", None) is not None
            else {}
        ),
        **({"thread": error.thread} if getattr(error, "thread", None) is not None else {}),
    }


def stderr_console(color: bool) -> Console:
    return _Console(
        stderr=True,
        no_color=not color,
        highlight=False,
        soft_wrap=True,
        color_system="auto" if color else None,
    )
