"""``--engine torch``: run an unmodified script on real PyTorch and observe it through PyTorch's
public extension points only (``reference/torch_backend.md``): a ``TorchFunctionMode`` for ops,
their creation lines and in-place writes, ``saved_tensors_hooks`` for saved tensors, and the
graph's own ``next_functions``/``metadata``/``name()``. No torch internals are patched.

Importing this package does not import torch: ``available()`` asks whether it is installed, and
the modules below (``seam``, ``observe``) import it when the engine is used.

What is covered: ``COMMANDS``, every command since ``gradcheck`` landed. A command outside it
would refuse ``--engine torch`` with exit 2 (``cli/_common.make_target``; tested with a
shortened ``COMMANDS``).
"""

from __future__ import annotations

import importlib.util

# The commands that run on real PyTorch so far (issue 21 lands one command at a time).
COMMANDS = ("graph", "inplace", "anomaly", "leaks", "check", "trace", "gradcheck")
# The detectors of ``autodiag check`` (analysis/check.DETECTORS, by name) that run on PyTorch;
# check names the others in its report.
CHECK_DETECTORS = ("health", "inplace", "leaks", "anomaly")
INSTALL_HINT = 'Install it with: pip install "autodiag[torch]" (PyTorch 2.13).'


def ready_list() -> str:
    """``COMMANDS`` as a message lists them: "graph, inplace, check and trace"."""
    *first, last = COMMANDS
    return f"{', '.join(first)} and {last}" if first else last


def available() -> bool:
    """Is real PyTorch importable? Asked without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or a torch module without a spec
        return False
