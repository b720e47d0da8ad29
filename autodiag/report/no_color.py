"""The ``NO_COLOR`` rule (https://no-color.org), one for the CLI and ``autodiag.torch.observe()``:
colour is off when ``NO_COLOR`` is set to a non-empty value; an empty one is ignored."""

from __future__ import annotations

import os


def forbidden() -> bool:
    """Does the environment forbid colour (``NO_COLOR`` set and not empty)?"""
    return bool(os.environ.get("NO_COLOR"))
