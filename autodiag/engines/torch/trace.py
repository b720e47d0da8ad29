"""``trace --engine torch``: the backward pass of a PyTorch script node by node, recorded by
``analysis/backward_trace.py``'s ``BackwardTrace`` from the events ``observe.py`` and
``hooks.py`` give (ops from the function mode, each node's gradients from its post hook), so
rows, text and JSON are those of autodiag's engine.

One difference in how values are kept: a PyTorch node wrapper cannot be weak-referenced, so the
forward value of a node whose value is not a single float is kept in the node's ``metadata``,
which lives and dies with the C++ node (as its creation line does: ``seam.SITE``).
"""

from __future__ import annotations

from autodiag.analysis import backward_trace
from autodiag.analysis.backward_trace import BackwardTrace, _ForwardValues
from autodiag.engines.torch import observe

VALUE = "autodiag.value"  # node.metadata key: the summary of the node's forward value


class _InMetadata:
    """The node -> summary table of ``_ForwardValues.others``, kept in each node's metadata."""

    def __setitem__(self, node, summary) -> None:
        node.metadata[VALUE] = summary

    def get(self, node, default=None):
        md = node.metadata
        return md.get(VALUE, default) if md else default


class _TorchForwardValues(_ForwardValues):
    def __init__(self, codec):
        super().__init__(codec)
        self.others = _InMetadata()


class TorchBackwardTrace(BackwardTrace):
    """``BackwardTrace`` over PyTorch's graphs."""

    Values = _TorchForwardValues

    def __init__(self, call: int | None = None, limit: int | None = None):
        observe.register()
        backward_trace.bind_seam()  # the accessors that answer for PyTorch's nodes too
        super().__init__(call, limit)
