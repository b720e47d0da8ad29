"""The one output sink: the report goes to stdout or, atomically, to ``-o FILE``; diagnostics go
to stderr. JSON carries no markup; text is rich (colour off with --no-color, in files, and when
stdout is not a terminal)."""

from __future__ import annotations

import io
import itertools
import json
import os
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
    if not os.path.isdir(folder):
        raise BadInvocation(f"{option} {path}: the folder {folder} does not exist",
                            "Create the folder or choose another path.")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise BadInvocation(f"{option} {path} is not writable", "Choose a writable path.")


def write_atomic(path: str, text: str, option: str = "--output") -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".autodiag-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise BadInvocation(f"{option} {path}: {e.strerror}", "Choose a writable path.") from None


class Sink:
    """Where a command's report goes."""

    def __init__(self, output: str | None, color: bool):
        self.output = output
        self.color = color
        self._buffer = io.StringIO() if output else None
        self._tmp: str | None = None  # -o's temporary file once the report streams (stream())

    def console(self, width: int | None = None) -> Console:
        if self._buffer is not None:
            return Console(file=self._buffer, no_color=True, highlight=False, width=width or 160,
                           color_system=None, soft_wrap=True)
        import sys

        # Piped output has no terminal width; rich's 80 columns would fold tables needlessly.
        tty = sys.stdout.isatty()
        return Console(no_color=not self.color, highlight=False, soft_wrap=True,
                       color_system="auto" if self.color else None,
                       width=width or (None if tty else int(os.environ.get("COLUMNS", 160))))

    def write_text(self, text: str) -> None:
        """Plain text (JSON, DOT, Mermaid, SVG): no markup processing at all."""
        if self._buffer is not None:
            self._buffer.write(text)
        else:
            import sys

            sys.stdout.write(text)
            sys.stdout.flush()

    def write_json(self, data: dict, pretty: bool = True) -> None:
        """``pretty=False`` for large documents: json's C encoder only runs without indent."""
        self.write_text(json.dumps(data, indent=2 if pretty else None,
                                   default=_json_default) + "\n")

    def close(self) -> None:
        if self._tmp is not None:
            self._finish_stream()
            return
        if self._buffer is not None:
            write_atomic(self.output, self._buffer.getvalue())

    # --- streaming: large reports are written as they are produced --------------------------

    def stream(self):
        """A text file the report is written to piece by piece: stdout, or -o's temporary file
        beside FILE (renamed over it by ``close()``, removed if the command never gets there).
        What was written before (console or write_text) is kept, in order; both keep writing
        to the same place afterwards."""
        if self._buffer is None:
            import sys

            return sys.stdout
        if self._tmp is None:
            folder = os.path.dirname(os.path.abspath(self.output))
            try:
                fd, self._tmp = tempfile.mkstemp(dir=folder, prefix=".autodiag-", suffix=".tmp")
            except OSError as e:
                raise BadInvocation(f"--output {self.output}: {e.strerror}",
                                    "Choose a writable path.") from None
            f = os.fdopen(fd, "w", encoding="utf-8")
            f.write(self._buffer.getvalue())
            self._buffer = f
            # a failed or interrupted command leaves no temporary file behind
            self._cleanup = weakref.finalize(self, _remove, self._tmp)
        return self._buffer

    def _finish_stream(self) -> None:
        try:
            self._buffer.close()
            os.replace(self._tmp, self.output)
        except OSError as e:
            raise BadInvocation(f"--output {self.output}: {e.strerror}",
                                "Choose a writable path.") from None
        finally:
            self._cleanup()

    def write_json_stream(self, data: dict, pretty: bool = True) -> None:
        """``write_json`` for documents too large to hold as one string: values wrapped in
        ``Streamed`` (at any depth) are written item by item as they are produced. The text
        is the same as ``write_json`` of the document with each Streamed made a list."""
        f = self.stream()
        _dump_streaming(f.write, data, pretty)
        f.write("\n")
        f.flush()


class Streamed:
    """A JSON list whose items come from an iterable, written as they are produced.
    ``compact``: optionally, the same items already encoded as compact JSON text (a faster
    producer for huge lists), used when the document is not indented."""

    __slots__ = ("items", "compact")

    def __init__(self, items, compact=None):
        self.items = items
        self.compact = compact


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
            write(sep + ", ".join(batch))
            sep, batch = ", ", []
    write((sep if batch else "") + ", ".join(batch) + "]")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def envelope(command: str, target: str, findings: list, status: str | None = None,
             error=None, **extra) -> dict:
    """The JSON envelope of every command (DESIGN §4). ``error``: the run's TargetFailed, or
    None; the status is then, unless given, "findings" before "error" before "ok"."""
    if status is None:
        status = "findings" if findings else "error" if error is not None else "ok"
    out = {"autodiag": __version__, "command": command, "target": target, "status": status,
           "findings": [f.to_json() for f in findings]}
    out.update(extra)
    if error is not None:
        out["error"] = {"message": error.message, "hint": error.hint, "traceback": error.details}
    return out


def stderr_console(color: bool) -> Console:
    return Console(stderr=True, no_color=not color, highlight=False, soft_wrap=True,
                   color_system="auto" if color else None)
