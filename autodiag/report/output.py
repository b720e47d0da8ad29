"""The one output sink: the report goes to stdout or, atomically, to ``-o FILE``; diagnostics go
to stderr. JSON carries no markup; text is rich (colour off with --no-color, in files, and when
stdout is not a terminal)."""

from __future__ import annotations

import io
import json
import os
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
        if self._buffer is not None:
            write_atomic(self.output, self._buffer.getvalue())


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
