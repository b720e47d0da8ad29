"""Looking at the user's objects without letting them fail the run.

autodiag looks around a script's objects to name things: the variables of its globals and of
its frames (leaf names, graph roots, parameters), the referrers of a leaking tensor, the modules
in ``sys.modules``. Any of those objects may be hostile to a look: a ``__getattr__`` or
``__getattribute__`` that raises (for ``__class__``, so ``isinstance`` raises too), a
``__eq__``/``__hash__``/``__bool__``/``__len__`` that raises, a mock that answers every
attribute. A look must never fail the run: what cannot be looked at is skipped.

The rules, so that every site reads the same:

- ``is_a(obj, cls)`` instead of ``isinstance``: the object's real type only (``type(obj)`` runs
  no user code; ``isinstance`` falls back to ``obj.__class__``, which may lie or raise).
- ``variables(namespace)`` instead of ``namespace.items()``: a snapshot of the named values
  (dunder names left out), read with ``dict``'s own methods.
- ``static_attr(obj, name)`` to ask whether an object has a method, without running its
  ``__getattr__`` or properties (a mock answers every ``getattr``).
- ``look(fn, *args, default=...)`` around anything that must call user code (a module's
  ``named_parameters()``): any exception it raises gives ``default``.

>>> class Hostile:
...     def __getattribute__(self, name):
...         raise RuntimeError(name)
>>> is_a(Hostile(), int), look(lambda: Hostile().x, default="skipped")
(False, 'skipped')
"""

from __future__ import annotations

import types

# What a look swallows: any error of the object's, and a SystemExit it raises (a look must not
# end autodiag). KeyboardInterrupt still interrupts.
LOOK_ERRORS = (Exception, SystemExit)


def is_a(obj, cls) -> bool:
    """``isinstance(obj, cls)`` by the object's real type, without running any of its code."""
    return issubclass(type(obj), cls)


def variables(namespace) -> list[tuple[str, object]]:
    """``(name, value)`` of a namespace (globals, a frame's locals, an instance ``__dict__``),
    names starting with ``__`` left out; empty when it cannot be read."""
    try:
        pairs = list(dict.items(namespace)) if is_a(namespace, dict) else list(namespace.items())
    except LOOK_ERRORS:
        return []
    return [(k, v) for k, v in pairs if type(k) is str and not k.startswith("__")]


def attributes(obj) -> dict:
    """``obj.__dict__`` when it is a plain dict (read past any ``__getattribute__``), else
    ``{}``."""
    try:
        d = object.__getattribute__(obj, "__dict__")
    except LOOK_ERRORS:  # no __dict__ (slots, builtins), or a descriptor that raises
        return {}
    return d if type(d) is dict else {}


def static_attr(obj, name: str, default=None):
    """The attribute ``name`` as ``obj``'s class or instance dict defines it (unbound), found
    without running ``__getattr__``, ``__getattribute__`` or properties; ``default`` if none."""
    import inspect  # not at import time: the engine's import stays light

    try:
        return inspect.getattr_static(obj, name, default)
    except LOOK_ERRORS:  # a metaclass or __mro__ that misbehaves
        return default


def look(fn, *args, default=None):
    """``fn(*args)``, or ``default`` when a user object raises while ``fn`` looks at it."""
    try:
        return fn(*args)
    except LOOK_ERRORS:
        return default


def type_name(obj) -> str:
    """The name of ``obj``'s type, past any ``__getattribute__`` of a user metaclass."""
    name = look(type.__getattribute__, type(obj), "__name__")
    return name if type(name) is str else "object"


def module_file(module) -> str:
    """A module's ``__file__`` as a string ("" when it has none, or is not a real module: a
    script may put any object in ``sys.modules``)."""
    f = look(getattr, module, "__file__", None) if is_a(module, types.ModuleType) else None
    return f if type(f) is str else ""
