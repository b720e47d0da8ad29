"""Warnings that point at the user's line.

PyTorch's warnings from its C++ kernels (``TORCH_WARN``) point at the Python line that called
the op. autodiag's ops are Python, several frames deep (the op, its tracing wrapper, a module's
``forward``), so a fixed ``stacklevel`` points inside autodiag as soon as the call path changes.
``warn`` walks out of autodiag's own frames instead.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as w:
...     warnings.simplefilter("always")
...     warn("look here")
>>> w[0].filename == __file__ or not w[0].filename.startswith(_PACKAGE)
True
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


# the keys ``warn_once`` has warned under, this process (PyTorch's TORCH_WARN_ONCE)
WARNED: set = set()


def warn_once(key: str, message: str, category: type[Warning] = UserWarning) -> None:
    """``warn``, the first time only in this process for ``key`` (PyTorch's TORCH_WARN_ONCE:
    whatever the call site, and whatever Python's warning filters would repeat)."""
    if key in WARNED:
        return
    WARNED.add(key)
    warn(message, category)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` at the first frame outside autodiag (the user's call)."""
    level, frame = 2, sys._getframe(1)  # stacklevel 2: the caller of warn
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
