"""Load typer's rich help renderer without the two rich modules autodiag's help never uses.

NOTE [Light help]
``typer.rich_utils`` imports ``rich.markdown`` (markdown-it) and ``rich.traceback`` (pygments,
through ``rich.syntax``) at its top, for help written in Markdown and for pretty tracebacks.
autodiag's help is rich markup (``rich_markup_mode="rich"``) and its tracebacks are off, so
neither module is used to print help, yet together they were about a quarter of ``autodiag
--help``'s start-up. ``load_rich_utils`` imports ``typer.rich_utils`` while ``rich.markdown`` and
``rich.traceback`` are stand-ins whose ``Markdown`` and ``Traceback`` import the real class the
first time they are called or read, then takes the stand-ins out of ``sys.modules`` again: a
later ``import rich.markdown`` (a script the CLI runs, typer on a usage error) loads the real
module, and the stand-ins never reach anyone but typer. When either module is already loaded,
typer is imported as usual.
"""

from __future__ import annotations

import importlib
import sys
import types

_DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Deferred(type):
    """The class of a stand-in for ``<module>.<name>``: calling it or reading an attribute of
    it (``Traceback.from_exception``) imports the real class and hands over to it."""

    def _real(cls):
        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args, **kwargs):
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls._real(), name)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls._real())


def load_rich_utils() -> None:
    """Import ``typer.rich_utils`` without markdown-it and pygments (NOTE [Light help])."""
    if "typer.rich_utils" in sys.modules or any(m in sys.modules for m in _DEFERRED):
        return
    planted = {}
    for module, name in _DEFERRED.items():
        stand_in = types.ModuleType(module, f"Stands in for {module} (autodiag NOTE [Light help]).")
        setattr(stand_in, name, _Deferred(name, (), {"_module": module}))
        planted[module] = sys.modules[module] = stand_in
    try:
        import typer.rich_utils  # noqa: F401
    finally:
        for module, stand_in in planted.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]
