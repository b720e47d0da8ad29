"""``Size``: the tuple subclass returned by ``Tensor.shape``."""

from __future__ import annotations


class Size(tuple):
    """A tensor's shape, e.g. ``autodiag.Size([2, 3])``; compares equal to plain tuples."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(s) for s in self)}])"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return Size(r) if isinstance(item, slice) else r
