"""Tracing with several threads on autodiag's engine: each thread's outermost ops are reported,
whatever another thread is doing (the nesting count of ``trace/events.py`` is per thread: a
shared one hid a thread's ops while another thread was inside an op, and its unsynchronised
updates could leave it non-zero, hiding every later op)."""

from __future__ import annotations

import sys
import threading

import autodiag
from autodiag.trace import Tracer, events, tracing


class _PerThread(Tracer):
    def __init__(self):
        self.ops: dict = {}

    def on_op(self, op, node, inputs, outputs, stack):
        name = threading.current_thread().name
        self.ops[name] = self.ops.get(name, 0) + 1


def _work(n: int) -> None:
    x = autodiag.ones(4, requires_grad=True)
    for _ in range(n):
        x = (x * 1.0001).sin().exp().log()  # 4 ops a round


def test_every_thread_reports_all_its_ops():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        seen = _PerThread()
        with tracing(seen):
            threads = [threading.Thread(target=_work, args=(5000,), name=f"w{i}") for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(old)
    # 20,000 ops and the ones() each
    assert seen.ops == {"w0": 20001, "w1": 20001}
    assert events._depth.n == 0


def test_a_custom_function_in_another_thread_is_one_op():
    class Double(autodiag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    seen = _PerThread()
    with tracing(seen):
        t = threading.Thread(target=lambda: Double.apply(autodiag.ones(2)), name="w")
        t.start()
        t.join()
    assert seen.ops == {"w": 2}  # ones() and Double: not the multiply inside its forward
