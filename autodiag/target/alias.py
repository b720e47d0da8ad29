"""The error for a PyTorch script that steps outside autodiag's engine: which ``torch`` name,
on which line of the user's code, and what to do instead (DESIGN §4, ``--engine``)."""

from __future__ import annotations

import importlib.util

from autodiag.target.errors import NotProvidedByEngine
from autodiag.target.script import user_frames
from autodiag.trace import sites


def _torch_installed() -> bool:
    """Is real PyTorch importable? Asked without importing it (call with the alias off)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or a torch module without a spec
        return False


def not_provided(exc: BaseException, name: str, cli: bool = True) -> NotProvidedByEngine:
    """The error for ``exc``, raised because the script used ``name`` (``torch.nn.Conv2d``).
    ``cli``: the hint may point at CLI options (else it is for ``python -m autodiag.run``)."""
    where, code = "the script", ""
    # the import machinery's frames (<frozen importlib...>) are not the user's
    frames = [f for f in user_frames(exc.__traceback__) if not f.filename.startswith("<frozen")]
    if frames:
        f = frames[-1]
        where = f"{sites.short_path(f.filename)}:{f.lineno}"
        code = (f.line or "").strip()
    if _torch_installed():
        hint = (
            "PyTorch itself is installed: run the script with plain python to use it, or "
            "debug it on PyTorch with --engine torch (every command runs there)."
        )
        if not cli:
            hint = "PyTorch itself is installed: run the script with plain python to use it."
    else:
        hint = (
            "autodiag runs `import torch` scripts that stay inside the subset of PyTorch "
            'it implements (README, "PyTorch scripts"); this name is outside it.'
        )
    return NotProvidedByEngine(
        f"{where} uses `{name}`, which autodiag's engine does not provide",
        hint,
        f"    {code}" if code else "",
    )
