"""autodiag's observers on real PyTorch code, from Python: what ``autodiag check --engine torch``
runs on a script, around any block of a program (a training loop, a notebook cell, a test).

    import autodiag.torch

    with autodiag.torch.observe(anomaly=True) as seen:
        train()                 # unmodified PyTorch code
    seen.print()                # the report `autodiag anomaly --engine torch` prints
    seen.findings               # the same Finding objects; seen.to_json(): its JSON envelope

``observe()`` with no argument runs every detector ``check --engine torch`` runs (anomaly,
inplace, leaks, health); naming some with ``=True`` runs only those; ``graph=True`` also
captures the graph of the block's last ``backward()``. Everything is installed on entry and
removed on exit, even when the block raises (the exception propagates).

The name: PyTorch's ``torch.torch`` is the ``torch`` module itself, which a program written
for ``import autodiag as torch`` has no use for; this package is not imported by ``import
autodiag`` (nor is PyTorch), and ``import torch`` aliased to autodiag (an ``autodiag`` command
on its default engine) refuses ``torch.torch``.
"""

from __future__ import annotations

from autodiag.torch._observe import Observation, observe

__all__ = ["observe", "Observation"]


def __getattr__(name: str):
    raise AttributeError(
        f"module 'autodiag.torch' has no attribute {name!r}: autodiag.torch is autodiag's "
        f"observer API for real PyTorch code (autodiag.torch.observe); PyTorch's own names are "
        f"in `torch` (or `autodiag` on autodiag's engine)"
    )
