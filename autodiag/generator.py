"""``torch.Generator``: a seedable random stream of its own, as PyTorch's.

A generator owns a numpy ``PCG64`` stream. Seeded with the same number it gives the same draws,
so ``DataLoader(..., shuffle=True, generator=torch.Generator().manual_seed(0))`` and
``random_split(..., generator=...)`` are reproducible. The draws are not PyTorch's: PyTorch uses
a Mersenne Twister and its own sampling algorithms, so a seeded shuffle is *a* permutation,
repeatable on autodiag, not PyTorch's permutation.

``default_generator`` stands for the global stream that ``torch.manual_seed`` seeds.

NOTE: the tensor factories (``torch.rand``, ``torch.randperm`` ...) accept ``generator=`` but
draw from the global stream; the data utilities (samplers, ``random_split``) honour it.

>>> import autodiag as torch
>>> g = torch.Generator().manual_seed(42)
>>> g.initial_seed()
42
>>> from autodiag.utils.data import RandomSampler
>>> state = g.get_state()
>>> a = list(RandomSampler(range(5), generator=g))
>>> _ = g.set_state(state)
>>> list(RandomSampler(range(5), generator=g)) == a and sorted(a) == [0, 1, 2, 3, 4]
True
"""

from __future__ import annotations

import secrets

import numpy as np

from autodiag import _device
from autodiag.ops import factories

__all__ = ["Generator", "default_generator"]

# PyTorch's initial seed of a fresh ``torch.Generator()`` (``default_rng_seed_val``)
_DEFAULT_SEED = 67280421310721
_MASK = (1 << 64) - 1
# get_state()/set_state() layout: PCG64 state (16 bytes), increment (16), has_uint32 (1),
# uinteger (4), initial seed (8), all little-endian
_STATE_BYTES = 45


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
        self._seed = _DEFAULT_SEED
        self._np = np.random.default_rng(_DEFAULT_SEED)

    # --- seeding ---------------------------------------------------------------------------

    def manual_seed(self, seed) -> Generator:
        """Seed the generator (negative seeds wrap to 64 bits, as in PyTorch); returns it."""
        seed = int(seed) & _MASK
        self._seed = seed
        self._reseed(seed)
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the seed."""
        seed = secrets.randbits(63)
        self.manual_seed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed last set by ``manual_seed`` / ``seed``."""
        return self._seed

    def _reseed(self, seed: int) -> None:
        self._np = np.random.default_rng(seed)

    def _rng(self) -> np.random.Generator:
        return self._np

    # --- state ---------------------------------------------------------------------------

    def get_state(self):
        """The generator's state as a ``uint8`` tensor (autodiag's layout, not PyTorch's)."""
        st = self._rng().bit_generator.state
        if st.get("bit_generator") != "PCG64":
            raise RuntimeError(
                f"Generator.get_state: unsupported bit generator {st.get('bit_generator')!r}"
            )
        raw = (
            st["state"]["state"].to_bytes(16, "little")
            + st["state"]["inc"].to_bytes(16, "little")
            + int(st["has_uint32"]).to_bytes(1, "little")
            + int(st["uinteger"]).to_bytes(4, "little")
            + ((self._seed or 0) & _MASK).to_bytes(8, "little")
        )
        return factories.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())

    def set_state(self, new_state) -> Generator:
        """Restore a state returned by ``get_state``."""
        data = new_state.numpy() if hasattr(new_state, "numpy") else np.asarray(new_state)
        if data.dtype != np.uint8 or data.shape != (_STATE_BYTES,):
            raise RuntimeError(
                f"Expected a torch.ByteTensor of {_STATE_BYTES} bytes from "
                f"Generator.get_state(), got dtype {data.dtype} and shape {tuple(data.shape)}"
            )
        raw = data.tobytes()
        state = {
            "bit_generator": "PCG64",
            "state": {
                "state": int.from_bytes(raw[0:16], "little"),
                "inc": int.from_bytes(raw[16:32], "little"),
            },
            "has_uint32": raw[32],
            "uinteger": int.from_bytes(raw[33:37], "little"),
        }
        self._rng().bit_generator.state = state
        self._seed = int.from_bytes(raw[37:45], "little")
        return self

    # --- draws used by the data utilities --------------------------------------------------

    def _permutation(self, n: int) -> np.ndarray:
        """A random permutation of ``range(n)`` (int64 numpy array)."""
        return self._rng().permutation(int(n)).astype(np.int64)

    def _integers(self, high: int, size: int) -> np.ndarray:
        """``size`` integers drawn uniformly from ``[0, high)``."""
        return self._rng().integers(0, int(high), size=int(size), dtype=np.int64)

    def __repr__(self) -> str:
        return "<torch.Generator object>"


class _DefaultGenerator(Generator):
    """The global stream (the one ``torch.manual_seed`` seeds), seen as a Generator."""

    def __init__(self) -> None:
        self.device = _device.device("cpu")
        self._seed = None
        self._seeded = None  # the numpy generator our manual_seed made

    def _reseed(self, seed: int) -> None:
        self._seeded = factories.manual_seed(seed)

    def _rng(self) -> np.random.Generator:
        return factories._rng[0]

    def initial_seed(self) -> int:
        if self._seed is None or self._seeded is not factories._rng[0]:
            raise RuntimeError(
                "autodiag's default generator does not know the seed of the "
                "global stream unless it was set with "
                "torch.default_generator.manual_seed(...)"
            )
        return self._seed

    def set_state(self, new_state) -> Generator:
        super().set_state(new_state)
        self._seeded = factories._rng[0]
        return self


default_generator = _DefaultGenerator()


def rng_of(generator) -> np.random.Generator:
    """The numpy stream behind ``generator`` (``None``: the global stream)."""
    if generator is None:
        return factories._rng[0]
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return generator._rng()
