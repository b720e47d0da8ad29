"""``torch.Generator``: a seedable random stream of its own, PyTorch's.

A generator owns a ``Stream`` (ops/rng.py): PyTorch's CPU Mersenne Twister, seeded as PyTorch
seeds it, with PyTorch's sampling algorithms on top. Seeded with the same number it gives
PyTorch's draws: ``torch.rand(3, generator=torch.Generator().manual_seed(0))``, a
``DataLoader(..., shuffle=True, generator=g)``'s order and ``random_split(..., generator=g)``
are torch's, number for number. ``get_state()`` is PyTorch's 5056-byte layout, so a state
saved by torch restores here and the other way round.

``default_generator`` stands for the global stream that ``torch.manual_seed`` seeds.

>>> import autodiag as torch
>>> g = torch.Generator().manual_seed(42)
>>> g.initial_seed()
42
>>> torch.randperm(6, generator=g)
tensor([0, 3, 2, 4, 1, 5])
>>> state = g.get_state()
>>> a = torch.rand(3, generator=g)
>>> _ = g.set_state(state)
>>> bool((torch.rand(3, generator=g) == a).all())
True
"""

from __future__ import annotations

from autodiag import _device
from autodiag.ops import factories, rng
from autodiag.ops._core import wrap

__all__ = ["Generator", "default_generator"]

# PyTorch's initial seed of a fresh ``torch.Generator()`` (``default_rng_seed_val``)
_DEFAULT_SEED = 67280421310721


class Generator:
    """A random number generator: ``manual_seed``, ``seed``, ``initial_seed``, ``get_state``,
    ``set_state``, ``device`` (CPU only).

    >>> import autodiag as torch
    >>> g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    >>> from autodiag.utils.data import random_split
    >>> split = lambda g: [list(s) for s in random_split(range(4), [2, 2], generator=g)]
    >>> split(g1) == split(g2)
    True
    """

    def __init__(self, device="cpu") -> None:
        dev = _device.device(device)
        if dev.type != "cpu":
            raise RuntimeError(
                f"autodiag computes on the CPU only: Generator(device={device!r})"
                " is not supported; use torch.Generator() (a CPU generator)."
            )
        self.device = dev
        self._own = rng.Stream(_DEFAULT_SEED)

    def _stream(self) -> rng.Stream:
        return self._own

    # --- seeding ---------------------------------------------------------------------------

    def manual_seed(self, seed) -> Generator:
        """Seed the generator (negative seeds wrap to 64 bits, as in PyTorch); returns it."""
        self._stream().manual_seed(factories.seed_value(seed))
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the seed."""
        seed = rng.Stream().seed
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed last set by ``manual_seed`` / ``seed``."""
        return self._stream().seed

    # --- state ---------------------------------------------------------------------------

    def get_state(self):
        """The generator's state: a ``uint8`` tensor in PyTorch's layout (5056 bytes)."""
        return wrap(self._stream().get_state())

    def set_state(self, new_state) -> Generator:
        """Restore a state returned by ``get_state`` (autodiag's or PyTorch's)."""
        self._stream().set_state(factories.state_bytes(new_state))
        return self

    def __repr__(self) -> str:
        return "<torch.Generator object>"


class _DefaultGenerator(Generator):
    """The global stream (the one ``torch.manual_seed`` seeds), seen as a Generator."""

    def __init__(self) -> None:
        self.device = _device.device("cpu")

    def _stream(self) -> rng.Stream:
        return factories._rng[0]

    def manual_seed(self, seed) -> Generator:
        factories.manual_seed(seed)
        return self

    def set_state(self, new_state) -> Generator:
        factories.set_rng_state(new_state)
        return self


default_generator = _DefaultGenerator()


def stream_of(generator) -> rng.Stream:
    """The stream behind ``generator`` (``None``: the global stream)."""
    if generator is None:
        return factories._rng[0]
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a torch.Generator, not {type(generator).__name__}")
    return generator._stream()
