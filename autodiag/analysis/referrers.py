"""Who keeps an object alive: the chain of references from a root the user recognises (a
module-level variable, a local variable of a running function) down to the object.

``find_holder(obj)`` walks *referrers* breadth-first from ``obj`` until it meets a root, then
describes the way back down as a Python access path (``history[3]``, ``trainer.losses[0]``,
``stats['step 4']``) with phrases where no expression exists ("closure variable `t` of
`make_hook.<locals>.hook`").

>>> import autodiag as torch
>>> from autodiag.analysis.referrers import find_holder
>>> kept = {"a": [torch.ones(1)]}
>>> holder, chain = find_holder(kept["a"][0])
>>> holder.text()
"kept['a'][0]"

NOTE: ``gc.get_referrers`` scans every object the cyclic GC tracks (milliseconds on a typical
heap). The search is bounded (``max_expansions``) and runs only when a leak verdict needs its
holder, never per op. A running frame is not a GC referrer of its locals, so the live user frames
are checked directly (``live_user_frames``).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import gc
import re
import sys
import types

from autodiag._look import attributes, is_a, look, module_file, type_name
from autodiag.trace.sites import _PKG_DIR, live_user_frames


@dataclasses.dataclass
class Holder:
    """A root and the path from it to the held object (plain data: no references kept)."""

    kind: str  # "global", "local" or "unknown"
    name: str  # the root variable ("" when unknown)
    function: str | None  # the function whose local it is
    file: str | None  # where the root variable is first assigned (or the function defined)
    line: int | None
    path: str  # e.g. "history[3]"; for "unknown", the types outermost first
    container: str  # what directly holds the object: "list", "dict", "attribute", ...

    def text(self) -> str:
        return self.path

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def find_holder(obj, ignore: tuple = (), max_expansions: int = 80) -> tuple[Holder, list]:
    """The holder of ``obj`` and the chain of objects from the root's value down to ``obj``.

    ``ignore``: containers of the caller's that refer to ``obj`` and must not count as holders.
    The chain holds strong references: drop it as soon as it has been read.
    """
    frames = [
        (f, f.f_locals, f.f_code.co_name == "<module>")
        for f in live_user_frames(2, other_threads=True)
    ]
    ignored = {id(x) for x in ignore}
    objs: dict = {id(obj): obj}  # id -> object, for every object met
    down: dict = {}  # id(referrer) -> id(the object it refers to), towards ``obj``
    queue = [id(obj)]
    ignored.update((id(objs), id(down), id(queue), id(frames), id(ignore)))
    ignored.update(id(fl) for _, fl, _ in frames)
    expansions = 0
    try:
        for oid in queue:  # grows while iterating: breadth first
            x = objs[oid]
            root = _frame_root(x, frames)
            if root is not None:
                return _finish(root, oid, objs, down)
            if expansions >= max_expansions:
                break
            expansions += 1
            for r in gc.get_referrers(x):
                rid = id(r)
                if rid in ignored or rid in objs or _internal(r):
                    continue
                kind = type(r)
                mod = _module_of(r) if issubclass(kind, dict) else None
                if mod is not None:  # a module's globals: a root
                    key = _key_of(r, x)
                    if key is not None:
                        root = ("global", key, None, module_file(mod) or None, None)
                        return _finish(root, oid, objs, down)
                    continue
                if kind is types.FrameType:  # a suspended frame (a generator's): its locals
                    if not r.f_code.co_filename.startswith(_PKG_DIR):
                        root = _frame_root(x, [(r, r.f_locals, False)])
                        if root is not None:
                            return _finish(root, oid, objs, down)
                    continue
                objs[rid] = r
                down[rid] = oid
                queue.append(rid)
        return _unknown(queue[-1], objs, down)
    finally:
        del frames


# --- roots ------------------------------------------------------------------------------------


def _frame_root(x, frames) -> tuple | None:
    for f, local_vars, is_module in frames:
        for k, v in local_vars.items():
            if v is x and not k.startswith("__"):
                if is_module:
                    return ("global", k, None, f.f_code.co_filename, None)
                return (
                    "local",
                    k,
                    f.f_code.co_qualname if hasattr(f.f_code, "co_qualname") else f.f_code.co_name,
                    f.f_code.co_filename,
                    f.f_code.co_firstlineno,
                )
    return None


def _module_of(d: dict):
    """The module whose globals ``d`` is, or None (read with dict's own methods: ``d`` may be
    a user's dict subclass, and ``sys.modules`` may hold any object)."""
    name = dict.get(d, "__name__")
    mod = sys.modules.get(name) if type(name) is str else None
    return mod if mod is not None and attributes(mod) is d else None


def _internal(r) -> bool:
    """Referrers that are autodiag's own bookkeeping (a backward call's task, the engine's
    frames), never the user's holder."""
    # the class's own attribute, past any __getattribute__ of a user metaclass
    mod = look(type.__getattribute__, type(r), "__module__")
    return type(mod) is str and mod.startswith(("autodiag.autograd.engine", "autodiag.analysis"))


def _key_of(d, x):
    pairs = list(dict.items(d)) if is_a(d, dict) else look(lambda: list(d.items()), default=())
    for k, v in pairs:
        if v is x:
            return k
    return None


# --- the path back down -------------------------------------------------------------------


def _chain(start: int, objs: dict, down: dict) -> list:
    chain = [objs[start]]
    i = start
    while i in down:
        i = down[i]
        chain.append(objs[i])
    return chain


def _finish(root: tuple, start: int, objs: dict, down: dict) -> tuple[Holder, list]:
    kind, name, function, file, fn_line = root
    chain = _chain(start, objs, down)
    path, container = _describe(name, chain)
    line = _assignment_line(file, name, function, fn_line) if file else None
    attr = re.search(r"\.([A-Za-z_]\w*)$", path)
    if container == "attribute" and attr and file:  # where the attribute is set, if found
        line = _attribute_line(file, attr.group(1)) or line
    fn = _closure_function(chain)
    if fn is not None:  # what to fix is the function that captures, not the root variable
        file, line = fn.__code__.co_filename, fn.__code__.co_firstlineno
        function = fn.__qualname__
    return Holder(kind, name, function, file, line, path, container), chain


def _closure_function(chain: list):
    """The innermost function on the chain whose closure holds the rest, or None."""
    for i in range(len(chain) - 2, -1, -1):
        p = chain[i]
        if type(p) is types.FunctionType and chain[i + 1] is p.__closure__:
            return p
    return None


def _unknown(start: int, objs: dict, down: dict) -> tuple[Holder, list]:
    chain = _chain(start, objs, down)
    path = " → ".join(type_name(o) for o in chain)
    return Holder("unknown", "", None, None, None, path, container_kind(chain)), chain


def _describe(name: str, chain: list) -> tuple[str, str]:
    """The access path from the variable ``name`` (whose value is ``chain[0]``) down to
    ``chain[-1]``, and what directly holds the last object."""
    text = name
    i = 0
    while i < len(chain) - 1:
        p, c = chain[i], chain[i + 1]
        if type(p) is types.FunctionType and c is p.__closure__ and i + 3 < len(chain):
            # function -> its closure tuple -> a cell -> the captured object
            cell = chain[i + 2] if i + 2 < len(chain) else None
            k = next((j for j, x in enumerate(c) if x is cell), None)
            var = p.__code__.co_freevars[k] if k is not None else "?"
            text += f" → closure variable `{var}` of {p.__qualname__}()"
            i += 3
            continue
        # a user container may run code when looked at (a list subclass's __iter__)
        text += look(_step, p, c, default=f" → {type_name(c)}")
        i += 1
    return _tidy(text), container_kind(chain)


# Internals a user never types, rewritten to the expression they would: ``m.__dict__['w']`` is
# ``m.w``; nn.Module keeps parameters, buffers and submodules in dicts that ``m.name`` reads.
_TIDY = (
    (re.compile(r"\.__dict__\['([A-Za-z_]\w*)'\]"), r".\1"),
    (re.compile(r"\._modules\['(\d+)'\]"), r"[\1]"),
    (re.compile(r"\._(?:parameters|buffers|modules)\['([A-Za-z_]\w*)'\]"), r".\1"),
    (re.compile(r"\._hooks\[\d+\]"), " → hook"),
    # a node's NodeExtras (NOTE [Node layout]) is read through the node's own attributes
    (re.compile(r"\._x\.metadata\b"), ".metadata"),
    (re.compile(r"\._x\.(hooks|input_meta|trace)\b"), r"._\1"),
    # a FlatNode's edges and saved values (NOTE [Flat nodes]), as other nodes' tuples read
    (re.compile(r"\._e([01])\b"), r".next[\1]"),
    (re.compile(r"\._s([01])\b"), r"._saved[\1]"),
)


def _tidy(path: str) -> str:
    for pattern, repl in _TIDY:
        path = pattern.sub(repl, path)
    return path


def _step(p, c) -> str:
    """How ``p`` refers to ``c``, as a piece of a Python expression."""
    kind = type(p)
    if issubclass(kind, (list, tuple, collections.deque)):
        k = next((j for j, x in enumerate(p) if x is c), None)
        return f"[{k}]"
    if issubclass(kind, (dict, types.MappingProxyType)):
        k = _key_of(p, c)
        if kind is types.MappingProxyType and type(k) is str:
            return f".{k}"  # a class attribute: Cfg.hist
        return f"[{_safe_repr(k)}]"
    if kind is types.CellType:
        return ""
    if kind is types.MethodType:
        return ".__self__" if p.__self__ is c else ".__func__"
    try:
        d = object.__getattribute__(p, "__dict__")
    except Exception:  # noqa: BLE001 - no __dict__, or a proxy that refuses to give it
        d = None
    if d is c:
        return ".__dict__"
    if type(d) is dict:
        k = _key_of(d, c)
        if type(k) is str:
            return f".{k}"
    for klass in kind.__mro__:
        for slot in look(getattr, klass, "__slots__", (), default=()):
            try:
                held = object.__getattribute__(p, slot)
            except Exception:  # noqa: BLE001 - an unset slot, or one that raises
                continue
            if held is c:
                return f".{slot.lstrip('_') if slot == '_next' else slot}"
    return f" → {type_name(c)}"


def _safe_repr(k) -> str:
    try:
        text = repr(k)
    except Exception:  # noqa: BLE001 - a key whose __repr__ raises
        return f"<{type(k).__name__} key>"
    return text if len(text) <= 60 else text[:57] + "..."


def container_kind(chain: list) -> str:
    """What directly holds ``chain[-1]``: list, dict, tuple, set, deque, closure, attribute or
    variable."""
    if len(chain) < 2:
        return "variable"
    kind = type(chain[-2])
    for base, name in (
        (list, "list"),
        (dict, "dict"),
        (tuple, "tuple"),
        ((set, frozenset), "set"),
        (collections.deque, "deque"),
        (types.CellType, "closure"),
    ):
        if issubclass(kind, base):
            return name
    return "attribute"


def _assignment_line(file: str, name: str, function: str | None, fn_line: int | None):
    """The line of the first assignment to ``name`` (at module level, or in the function
    defined at ``fn_line``); the function's line when none is found."""
    tree = _parse(file)
    if tree is None:
        return fn_line
    scope = tree
    if function is not None and fn_line is not None:
        scope = (
            next(
                (
                    n
                    for n in ast.walk(tree)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.lineno <= fn_line <= (n.end_lineno or 0)
                    and n.name == function.rsplit(".", 1)[-1]
                ),
                None,
            )
            or tree
        )
    best = None
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue  # another scope
        targets = []
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign)):
            targets = [n.target]
        elif isinstance(n, (ast.For, ast.With)):
            targets = (
                [n.target]
                if isinstance(n, ast.For)
                else [i.optional_vars for i in n.items if i.optional_vars is not None]
            )
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and sub.id == name:
                    if best is None or n.lineno < best:
                        best = n.lineno
        todo.extend(ast.iter_child_nodes(n))
    return best if best is not None else fn_line


def _attribute_line(file: str, attr: str) -> int | None:
    """The first line of ``file`` that assigns ``<something>.attr``."""
    tree = _parse(file)
    if tree is None:
        return None
    lines = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and any(
            isinstance(t, ast.Attribute) and t.attr == attr
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
    ]
    return min(lines) if lines else None


_trees: dict = {}


def _parse(file: str):
    if file not in _trees:
        try:
            with open(file, encoding="utf-8") as fh:
                _trees[file] = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            _trees[file] = None
    return _trees[file]
