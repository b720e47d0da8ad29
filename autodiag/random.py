"""``torch.random``: the global stream's seed and state, and ``fork_rng``.

The global stream is PyTorch's CPU generator (ops/rng.py): ``manual_seed(0)`` then
``rand``/``randn``/``nn.Linear(...)`` give torch's numbers. ``get_rng_state()`` is PyTorch's
5056-byte layout: a state saved under torch restores here, and the other way round.

>>> import autodiag as torch
>>> _ = torch.manual_seed(0)
>>> state = torch.get_rng_state()
>>> a = torch.randn(3)
>>> torch.set_rng_state(state)
>>> bool((torch.randn(3) == a).all())
True
"""

from __future__ import annotations

import contextlib

from autodiag.generator import Generator, default_generator
from autodiag.ops import factories

__all__ = ["fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed", "set_rng_state"]


def manual_seed(seed) -> Generator:
    """Seed the global stream (any int in [-2**63, 2**64)); returns ``default_generator``.

    >>> import autodiag as torch
    >>> torch.manual_seed(3).initial_seed()
    3
    """
    factories.manual_seed(seed)
    return default_generator


def seed() -> int:
    """Seed the global stream from the operating system's entropy; returns the seed."""
    return factories.seed()


def initial_seed() -> int:
    """The global stream's seed (``manual_seed``'s, or the one drawn at start-up)."""
    return default_generator.initial_seed()


def get_rng_state():
    """The global stream's state, a ``uint8`` tensor of 5056 bytes (PyTorch's layout)."""
    return factories.get_rng_state()


def set_rng_state(new_state) -> None:
    """Restore the global stream from ``get_rng_state()``."""
    factories.set_rng_state(new_state)


@contextlib.contextmanager
def fork_rng(
    devices=None,
    enabled: bool = True,
    _caller="fork_rng",
    _devices_kw="devices",
    device_type="cuda",
):
    """Draws inside the block leave the global stream as it was before the block.

    >>> import autodiag as torch
    >>> _ = torch.manual_seed(0)
    >>> with torch.random.fork_rng():
    ...     _ = torch.rand(5)
    >>> torch.rand(1)
    tensor([0.4963])
    """
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
