"""The user's files: where the CLI may write its reports (-o, --junit-xml) and where it must not
(DESIGN §6: autodiag never modifies the user's files).

Refused, whatever the options: the target script, the modules it imports from its folder (known
before the run from its import statements), every module the run imported (the ``__file__`` of
each module that appeared while it ran) and every file it opened with ``open()``.
Files are compared by identity (device and inode), so a symbolic or hard link to one of them is
refused too. Refused unless ``--force``: writing over any other existing Python file.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os

from autodiag.target.errors import BadInvocation

PYTHON_SUFFIXES = (".py", ".pyw")

# --- the files a run opens ----------------------------------------------------------------------

# NOTE: not an audit hook ("open" events would see imports too): a hook cannot be removed, and
# with one installed every audited event of the process (several per traced op: id(),
# sys._getframe, ...) pays a Python call. Imports are known from the modules the run added
# (``Run.imported``); reads through ``open()`` (builtins.open, io.open: pathlib and numpy's
# loaders use them) are recorded by a wrapper installed for the run only.


@contextlib.contextmanager
def recording_opens():
    """``with recording_opens() as opened:`` — the paths given to ``open()`` meanwhile (files
    read or written) are appended to ``opened``."""
    import builtins
    import io

    real = builtins.open
    opened: list = []

    @functools.wraps(real)
    def recording_open(file, *args, **kwargs):
        f = real(file, *args, **kwargs)
        if isinstance(file, (str, bytes, os.PathLike)):  # absolute now: the run may chdir
            opened.append(os.path.abspath(os.fsdecode(file)))
        return f

    saved = builtins.open, io.open
    builtins.open = io.open = recording_open
    try:
        yield opened
    finally:
        builtins.open, io.open = saved


# --- what must not be written over --------------------------------------------------------------


class Protected:
    """The user's files of one run: ``add`` them as they become known, ``refuse`` an output
    path that is one of them."""

    def __init__(self) -> None:
        self._ids: dict = {}  # (st_dev, st_ino) -> why the file is protected
        self._paths: dict = {}  # realpath -> why

    def add(self, path, why: str) -> None:
        try:
            path = os.fsdecode(path)
            st = os.stat(path)
        except (OSError, ValueError, TypeError):
            return
        self._ids.setdefault((st.st_dev, st.st_ino), why)
        self._paths.setdefault(os.path.realpath(path), why)

    def add_script(self, path: str) -> None:
        """The target script and the modules it imports from its folder."""
        self.add(path, "the target script")
        for module in static_imports(path):
            self.add(module, "a module the target script imports")

    def add_run(self, imported, opened) -> None:
        """The module files a run imported and the paths it opened."""
        for f in imported:
            self.add(f, "a module the run imported")
        for p in opened:
            self.add(p, "a file the run opened")

    def why(self, path: str) -> str | None:
        """Why ``path`` must not be written, or None."""
        try:
            st = os.stat(path)
        except OSError:
            return self._paths.get(os.path.realpath(path))
        return self._ids.get((st.st_dev, st.st_ino)) or self._paths.get(os.path.realpath(path))

    def refuse(self, path: str | None, option: str, force: bool) -> None:
        """Raise BadInvocation when writing ``path`` would replace a file of the user's."""
        if path is None:
            return
        why = self.why(path)
        if why is not None:
            raise BadInvocation(
                f"{option} {path} is {why}: autodiag never writes over the user's files",
                "Choose another file for the report (--force does not apply to the files a "
                "run uses).",
            )
        real = os.path.realpath(path)  # a link is written through: what it points at counts
        if not force and os.path.isfile(real) and real.lower().endswith(PYTHON_SUFFIXES):
            raise BadInvocation(
                f"{option} {path} is an existing Python file: autodiag does not "
                f"write a report over source code",
                "Choose another file for the report, or add --force to replace it.",
            )


def refuse_same_file(outputs: list[tuple[str, str | None]]) -> None:
    """Two reports asked to go to the same file would overwrite each other."""
    seen: dict = {}
    for option, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise BadInvocation(
                f"{seen[key]} and {option} name the same file ({path})",
                "Give each report its own file.",
            )
        seen[key] = option


def static_imports(path: str) -> list[str]:
    """The files in the script's folder that its import statements name (modules, packages'
    ``__init__.py`` and, for ``from a import b``, a submodule ``a/b.py``); those that exist."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    folder = os.path.dirname(os.path.abspath(path))
    dotted: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            dotted.append(node.module)
            dotted += [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
    files = []
    for name in dotted:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            base = os.path.join(folder, *parts[:i])
            for candidate in (base + ".py", os.path.join(base, "__init__.py")):
                if os.path.isfile(candidate):
                    files.append(candidate)
    return files
