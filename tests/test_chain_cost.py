"""Per-node costs of the detectors on long chains (issue 22: every command on a 1,000,000-op
chain within 2x the plain run): what each node adds must stay small and constant."""

from __future__ import annotations

import autodiag as torch
from autodiag.analysis.leaks import LeakFinder
from autodiag.trace import tracing


def test_leak_finder_shares_one_callback_per_step():
    # a weakref per recorded node is the finder's census; its callback must not be a new bound
    # method per node (64 bytes each: 64 MB on a million-op chain)
    finder = LeakFinder()
    x = torch.ones(1, requires_grad=True)
    with tracing(finder):
        y = x
        for i in range(50):
            y = y * 1.5 if i % 2 else y + 1.0
        step = finder._steps[-1]
        callbacks = {id(r.__callback__) for r in step.refs}
        assert len(step.refs) == 50 and step.alive == 50
        assert len(callbacks) == 1
        del y
    assert step.alive == 0  # the shared callback still counts every death
