"""NOTE [Interrupts in callbacks]: a Ctrl-C that lands in a weakref callback is not lost."""

from __future__ import annotations

import signal
import time
import weakref

import pytest

from autodiag._interrupts import callback, deferring_sigint


class _Obj:
    pass


def _interrupt_inside_a_callback(cb_hits: list) -> None:
    def cb(_ref):
        signal.raise_signal(signal.SIGINT)  # handled here, inside the callback
        cb_hits.append(True)

    obj = _Obj()
    ref = weakref.ref(obj, callback(cb))
    del obj  # the callback runs now
    assert ref() is None
    time.sleep(3)  # the interrupt arrives here, or was lost


def test_an_interrupt_in_a_weakref_callback_is_delivered_again():
    hits: list = []
    before = signal.getsignal(signal.SIGINT)
    with deferring_sigint():
        with pytest.raises(KeyboardInterrupt):
            _interrupt_inside_a_callback(hits)
    assert hits == [True]  # the callback itself finished its work
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_anywhere_else_raises_at_once():
    with deferring_sigint():
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            time.sleep(3)
        assert time.monotonic() - t0 < 1
