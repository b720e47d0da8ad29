"""``anomaly`` with two threads: a NaN/Inf made by a forward op in one thread while another
thread is inside backward is a forward origin (the backward calls in progress are per thread,
trace/per_thread.py); both engines."""

from __future__ import annotations

import threading

import pytest

import autodiag
from autodiag.analysis.anomaly import AnomalyFinder
from autodiag.trace import tracing


def _while_another_thread_is_in_backward(lib, make_inf):
    """Run ``make_inf()`` in this thread while a worker's backward waits in a hook."""
    entered, release = threading.Event(), threading.Event()

    def hook(g):
        entered.set()
        release.wait(10)
        return g

    def worker():
        w = lib.ones(3, requires_grad=True)
        y = w * 2
        y.register_hook(hook)
        y.sum().backward()

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert entered.wait(10)
        return make_inf()
    finally:
        release.set()
        t.join()


def test_autodiag_engine():
    finder = AnomalyFinder(keep_going=True)
    with tracing(finder):
        _while_another_thread_is_in_backward(
            autodiag, lambda: autodiag.log(autodiag.zeros(2, requires_grad=True))
        )
    kinds = [f.kind for f in finder.findings()]
    assert kinds == ["inf_forward"], kinds


def test_torch_engine():
    torch = pytest.importorskip("torch")
    import autodiag.torch

    with autodiag.torch.observe(anomaly=True) as seen:
        _while_another_thread_is_in_backward(
            torch, lambda: torch.log(torch.zeros(2, requires_grad=True))
        )
    kinds = [f.kind for f in seen.findings]
    assert kinds == ["inf_forward"], kinds
