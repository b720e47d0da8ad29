"""``torch.device``: autodiag computes on the CPU only; other devices can be named (scripts
build ``torch.device("cuda" if torch.cuda.is_available() else "cpu")``) but never used.

>>> import autodiag as torch
>>> torch.device("cuda" if torch.cuda.is_available() else "cpu")
device(type='cpu')
>>> torch.ones(2).device == torch.device("cpu")
True
"""

from __future__ import annotations

_TYPES = (
    "cpu",
    "cuda",
    "ipu",
    "xpu",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "ve",
    "fpga",
    "maia",
    "xla",
    "lazy",
    "vulkan",
    "mps",
    "meta",
    "hpu",
    "mtia",
    "privateuseone",
)

# PyTorch's message on a CPU-only build (an AssertionError there too), and what to do
NO_CUDA = (
    "Torch not compiled with CUDA enabled: autodiag computes on the CPU only. Keep "
    "tensors on the CPU (drop .cuda(), use torch.device('cpu'))."
)


class device:  # noqa: N801 - PyTorch's name
    """A device name: ``device("cpu")``, ``device("cuda", 0)``, ``device("cuda:1")``."""

    __slots__ = ("type", "index")

    def __init__(self, type, index: int | None = None):  # noqa: A002 - PyTorch's name
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        if isinstance(type, int):  # device(0): a CUDA ordinal
            type, index = "cuda", type
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid argument: {type!r}")
        name, _, idx = type.partition(":")
        if name not in _TYPES:
            raise RuntimeError(
                f"Expected one of {', '.join(_TYPES)} device type at start of device string: {type}"
            )
        if idx:
            if index is not None or not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(idx)
        self.type = name
        self.index = index

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


CPU = device("cpu")


def check(dev) -> None:
    """Refuse any device but the CPU (``dev``: a device, a string, an int, or None)."""
    if dev is None:
        return
    d = dev if isinstance(dev, device) else device(dev)
    if d.type != "cpu":
        if d.type == "cuda":
            raise AssertionError(NO_CUDA)
        raise RuntimeError(f"autodiag computes on the CPU only: device '{d}' is not available")
