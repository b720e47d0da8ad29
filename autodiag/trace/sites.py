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

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Code objects at which a stack walk stops (exclusive).
STOP_CODES: set = set()
# code object -> True when it belongs to user code (cached: one string test per code object)
_is_user: dict = {}
MAX_FRAMES = 64


def _user(code) -> bool:
    u = _is_user.get(code)
    if u is None:
        u = _is_user[code] = not code.co_filename.startswith(_PKG_DIR)
    return u


def user_site(skip: int = 1):
    """(code, lineno) of the innermost frame outside the autodiag package, or None."""
    f = sys._getframe(skip)
    while f is not None:
        code = f.f_code
        if code in STOP_CODES:
            return None
        if _user(code):
            return (code, f.f_lineno)
        f = f.f_back
    return None


def capture_stack(skip: int = 1) -> Stack:
    """The user's frames of the current call stack (innermost last), unformatted."""
    f = sys._getframe(skip)
    sites = []
    while f is not None:
        code = f.f_code
        if code in STOP_CODES:
            break
        if _user(code):
            sites.append((code, f.f_lineno))
            if len(sites) >= MAX_FRAMES:
                break
        f = f.f_back
    sites.reverse()
    return Stack(tuple(sites))


class Stack:
    """A captured stack of user frames, innermost last; formatted only on demand.

    >>> from autodiag.trace.sites import capture_stack
    >>> capture_stack().frames()[-1]["function"]
    '<module>'
    """

    __slots__ = ("sites",)

    def __init__(self, sites: tuple):
        self.sites = sites

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
