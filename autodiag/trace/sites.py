"""Cheap capture of "where in the user's code": the first frame outside autodiag.

A site is stored as ``(code object, line number)`` and formatted only when reported, so
capturing one costs a short frame walk and no string work.
"""

from __future__ import annotations

import linecache
import os
import sys

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_site(skip: int = 1):
    """(code, lineno) of the innermost frame outside the autodiag package, or None."""
    f = sys._getframe(skip)
    while f is not None:
        code = f.f_code
        if not code.co_filename.startswith(_PKG_DIR):
            return (code, f.f_lineno)
        f = f.f_back
    return None
def format_site(site) -> dict | None:
    """{'file', 'line', 'function', 'code'} for a captured site."""
    if site is None:
        return None
    code, line = site
    src = linecache.getline(code.co_filename, line).strip()
    return {"file": code.co_filename, "line": line, "function": code.co_name, "code": src}


def site_text(site) -> str:
    s = format_site(site)
    if s is None:
        return "<unknown location>"
    text = f"{os.path.relpath(s['file']) if not s['file'].startswith('<') else s['file']}:" \
           f"{s['line']}"
    if s["code"]:
        text += f" ({s['code']})"
    return text
