"""Cheap capture of "where in the user's code": frames outside the autodiag package.

A site is stored as ``(code object, line number)`` and a stack as a tuple of sites, formatted only
when reported: capturing costs a short frame walk and no string work. Frames inside autodiag are
skipped; the walk stops at a frame whose code is in ``STOP_CODES`` (the target runner registers
its own, so the CLI's frames never appear in a user's stack).
"""

from __future__ import annotations

import linecache
import os
import sys
import threading

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
MAX_FRAMES = 64

# NOTE: frames are classified through a cache keyed by id(code), never by the code object:
# hashing a code object hashes its bytecode and constants on every call (microseconds), which
# made stack capture the largest cost of tracing. ``_codes`` keeps every cached code object
# alive, so an id cannot be reused while cached.
_AUTODIAG, _USER, _STOP = 0, 1, 2
_kind: dict = {}  # id(code) -> kind
_codes: dict = {}  # id(code) -> code


class _StopCodes(set):
    """Code objects at which a stack walk stops (exclusive); adding one resets the cache."""

    def add(self, code) -> None:
        super().add(code)
        _kind.clear()
        last_user[0] = None

    def discard(self, code) -> None:
        super().discard(code)
        _kind.clear()
        last_user[0] = None


STOP_CODES: set = _StopCodes()


# Folders whose frames are not the user's either: autodiag's own, and the libraries of an engine
# autodiag observes (``hide_library``: under ``--engine torch``, torch's Python code).
_HIDDEN: list = [_PKG_DIR]


def hide_library(folder: str) -> None:
    """Treat frames of code under ``folder`` as autodiag's (never the user's line)."""
    folder = os.path.abspath(folder) + os.sep
    if folder not in _HIDDEN:
        _HIDDEN.append(folder)
        _kind.clear()
        _interned.clear()
        last_user[0] = None


# Code objects that are autodiag's though their file is the user's (by id: they are kept alive
# by whoever hides them): engines/torch/observe.py's calls made from the user's line.
_HIDDEN_CODES: set = set()


def hide_code(code) -> None:
    """Treat frames running ``code`` as autodiag's (the caller keeps ``code`` alive)."""
    _HIDDEN_CODES.add(id(code))
    _kind[id(code)] = _AUTODIAG
    _codes[id(code)] = code


def unhide_codes(codes) -> None:
    """Forget code objects ``hide_code`` hid, whose run is over: without this, each run in one
    process (a test session, a notebook) would keep its call sites' code objects for good."""
    for code in codes:
        i = id(code)
        _HIDDEN_CODES.discard(i)
        _kind.pop(i, None)
        _codes.pop(i, None)
    _interned.clear()  # keyed by code ids too: an id is reusable once its code is gone
    last_user[0] = None


def _classify(code) -> int:
    if code in STOP_CODES:
        k = _STOP
    elif id(code) in _HIDDEN_CODES or code.co_filename.startswith(tuple(_HIDDEN)):
        k = _AUTODIAG
    else:
        k = _USER
    _kind[id(code)] = k
    _codes[id(code)] = code
    return k


def _kind_of(code) -> int:
    k = _kind.get(id(code))
    return k if k is not None else _classify(code)


def _user(code) -> bool:
    return _kind_of(code) == _USER


def _user_frame(f):
    """``f`` or the first frame outward from it that runs the user's code; None past a stop
    code or the outermost frame."""
    while f is not None:
        k = _kind_of(f.f_code)
        if k:
            return f if k == _USER else None
        f = f.f_back
    return None


def user_code_site(skip: int = 1):
    """``(code, instruction offset)`` of the innermost user frame from ``skip`` frames up, or
    None (NOTE [Freed graphs]: the line is decoded only when reported)."""
    f = _user_frame(sys._getframe(skip))
    return (f.f_code, f.f_lasti) if f is not None else None


def user_site(skip: int = 1):
    """(code, lineno) of the innermost frame outside the autodiag package, or None."""
    f = _user_frame(sys._getframe(skip))
    return (f.f_code, f.f_lineno) if f is not None else None


# The code object of the user's frame that ``note_saver`` found last: the hot ops compare their
# caller's code with it (one identity test) before walking the stack.
last_user: list = [None]


def note_saver(node, skip: int = 2) -> None:
    """Remember on ``node`` the user's line that recorded it (NOTE [Saving sites] in
    core/graph.py): the innermost frame outside autodiag from ``skip`` frames up."""
    f = _user_frame(sys._getframe(skip))
    if f is not None:
        node._src_code = last_user[0] = f.f_code
        node._src_lasti = f.f_lasti


def saver_site(node):
    """``(code, line)`` that ``note_saver`` remembered for ``node``, or None."""
    code = getattr(node, "_src_code", None)
    return code_site(code, node._src_lasti) if code is not None else None


def code_site(code, lasti: int):
    """``(code, line)`` of the instruction at offset ``lasti`` in ``code`` (None for no code):
    sites are remembered as offsets, decoded to lines only when reported."""
    if code is None:
        return None
    line = code.co_firstlineno
    for start, end, ln in code.co_lines():
        if start <= lasti < end and ln is not None:
            line = ln
            break
    return (code, line)


def live_user_frames(skip: int = 1, other_threads: bool = False) -> list:
    """The frame objects of the user's code on the current call stack, innermost first (for
    analyses that must read live locals, such as the leak detector's holder search); with
    ``other_threads``, then those of every other thread's stack (a list local to the script's
    ``main()`` that a worker thread fills is held from the main thread's frame)."""
    out = _user_frames_from(sys._getframe(skip), [])
    if other_threads:
        others = sys._current_frames()
        # this thread's entry is this very frame: kept in a local, it would make a cycle that
        # keeps the callers' frames (and the graphs their locals hold) alive until a collection
        del others[threading.get_ident()]
        try:
            for top in others.values():
                _user_frames_from(top, out)
        finally:
            del others
    return out


def _user_frames_from(f, out: list) -> list:
    """Append to ``out`` the user's frames from ``f`` outwards, up to a stop code."""
    while f is not None:
        k = _kind_of(f.f_code)
        if k == _STOP:
            break
        if k == _USER:
            out.append(f)
        f = f.f_back
    return out


# NOTE [Shared stacks]: ops in a loop capture the same stack at every iteration. Stacks are
# interned by (id(code), f_lasti, ...) of their frames, so a loop body's ops share a few Stack
# objects instead of allocating two per op (fewer objects for the cyclic GC to scan as well).
# The key uses the instruction offset, not the line: ``f_lineno`` decodes the line table on
# every read, which cost more than the rest of the walk; lines are read only for a new stack.
# Entries hold their code objects, so the ids stay valid; the table is cleared past a bound.
_interned: dict = {}
MAX_INTERNED = 100_000


def capture_stack(skip: int = 1) -> Stack:
    """The user's frames of the current call stack (innermost last), unformatted."""
    # NOTE: this walk runs for every traced op: _kind_of is inlined, kinds are tested as
    # numbers (_AUTODIAG is 0, the frames skipped most), and the dict reads are bound once
    top = f = _getframe(skip)
    key = ()
    while f is not None:
        code = f.f_code
        k = _kind_get(id(code))
        if k is None:
            k = _classify(code)
        if k:
            if k == _STOP:
                break
            key += (id(code), f.f_lasti)  # a user frame
            if len(key) >= _MAX_KEY:
                break
        f = f.f_back
    st = _interned_get(key)
    if st is None:
        st = _new_stack(key, top)
    return st


_getframe = sys._getframe
_kind_get = _kind.get  # (the tables are cleared, never replaced)
_interned_get = _interned.get
_MAX_KEY = 2 * MAX_FRAMES


def _new_stack(key: tuple, f) -> Stack:
    """The Stack of the frames from ``f`` outwards that ``key`` describes (user frames)."""
    sites = []
    while f is not None and len(sites) < len(key) // 2:
        if _user(f.f_code):
            sites.append((f.f_code, f.f_lineno))
        f = f.f_back
    st = Stack(tuple(reversed(sites)))
    if len(_interned) >= MAX_INTERNED:
        _interned.clear()
    _interned[key] = st
    return st


class Stack:
    """A captured stack of user frames, innermost last; formatted only on demand.

    >>> from autodiag.trace.sites import capture_stack
    >>> capture_stack().frames()[-1]["function"]
    '<module>'
    """

    __slots__ = ("sites",)

    # A node's ``_x`` holds its Stack when that is its only extra, and is read as a NodeExtras
    # (NOTE [Stack for extras] in core/graph.py): these fields are None, ``trace`` is the Stack.
    hooks = input_meta = metadata = None

    def __init__(self, sites: tuple):
        self.sites = sites

    @property
    def trace(self) -> Stack:
        return self

    @property
    def site(self):
        """The innermost user frame as ``(code, line)``, or None."""
        return self.sites[-1] if self.sites else None

    def location(self) -> dict | None:
        """The innermost user frame as ``{'file', 'line', 'function', 'code'}``, or None."""
        return format_site(self.site)

    def frames(self) -> list[dict]:
        return [format_site(s) for s in self.sites]

    def __len__(self) -> int:
        return len(self.sites)

    def __repr__(self) -> str:
        return f"Stack({', '.join(site_text(s) for s in self.sites)})"


def format_site(site) -> dict | None:
    """{'file', 'line', 'function', 'code'} for a captured site."""
    if site is None:
        return None
    code, line = site
    src = linecache.getline(code.co_filename, line).strip()
    return {"file": code.co_filename, "line": line, "function": code.co_name, "code": src}


def short_path(path: str) -> str:
    """``path`` relative to the working directory when that is shorter."""
    if path.startswith("<"):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return rel if len(rel) < len(path) else path


def site_text(site) -> str:
    s = format_site(site)
    if s is None:
        return "<unknown location>"
    text = f"{short_path(s['file'])}:{s['line']}"
    if s["code"]:
        text += f" ({s['code']})"
    return text
