"""``--engine torch``: run an unmodified script on real PyTorch and observe it through PyTorch's
public extension points only (``reference/torch_backend.md``): a ``TorchFunctionMode`` for ops,
their creation lines and in-place writes, ``saved_tensors_hooks`` for saved tensors, and the
graph's own ``next_functions``/``metadata``/``name()``. No torch internals are patched.

Importing this package does not import torch: ``available()`` asks whether it is installed, and
the modules below (``seam``, ``observe``) import it when the engine is used.

What this increment covers: ``graph``, ``inplace``, ``anomaly`` and ``leaks``. The other
commands refuse ``--engine torch`` with exit 2 (``cli/_common.make_target``).
"""

from __future__ import annotations

import importlib.util

# The commands that run on real PyTorch so far (issue 21 lands one command at a time).
COMMANDS = ("graph", "inplace", "anomaly", "leaks")
INSTALL_HINT = 'Install it with: pip install "autodiag[torch]" (PyTorch 2.13).'


def available() -> bool:
    """Is real PyTorch importable? Asked without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or a torch module without a spec
        return False
