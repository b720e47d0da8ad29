"""Grad mode and inference mode are per thread, as in PyTorch (NOTE [Grad mode is per thread]).

Anomaly mode and the default dtype are process-wide in PyTorch, and stay so here.
"""

from __future__ import annotations

import sys
import threading

import pytest

import autodiag as ad

torch = pytest.importorskip("torch")


def _in_thread(fn):
    """Run ``fn`` in a new thread; return its result (or raise its exception)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _modes(lib):
    return lib.is_grad_enabled(), lib.is_inference_mode_enabled()


@pytest.mark.parametrize("ctx", ["no_grad", "inference_mode", "set_grad_enabled"])
def test_new_thread_starts_in_grad_mode(ctx):
    got = {}
    for name, lib in (("torch", torch), ("autodiag", ad)):
        mode = {
            "no_grad": lib.no_grad,
            "inference_mode": lib.inference_mode,
            "set_grad_enabled": lambda lib=lib: lib.set_grad_enabled(False),
        }[ctx]
        with mode():
            inner = _in_thread(lambda lib=lib: _modes(lib))
            outer = _modes(lib)
        got[name] = (inner, outer)
    assert got["autodiag"] == got["torch"] == (((True, False), got["torch"][1]))


def test_mode_set_in_a_thread_stays_there():
    def leave_it_off(lib):
        lib.set_grad_enabled(False)  # never restored: the thread's own business
        return lib.is_grad_enabled()

    for lib in (torch, ad):
        assert _in_thread(lambda lib=lib: leave_it_off(lib)) is False
        assert lib.is_grad_enabled() is True


def test_a_thread_records_inside_another_threads_no_grad():
    x = ad.tensor([1.0, 2.0], requires_grad=True)
    with ad.no_grad():
        y = _in_thread(lambda: x * 3)
        z = x * 3
    assert y.requires_grad and type(y.grad_fn).__name__ == "MulBackward0"
    assert not z.requires_grad


def test_anomaly_mode_and_default_dtype_are_process_wide_as_in_torch():
    for lib in (torch, ad):
        old = lib.get_default_dtype()
        try:
            lib.set_default_dtype(lib.float64)
            with lib.autograd.set_detect_anomaly(True):
                seen = _in_thread(
                    lambda lib=lib: (lib.is_anomaly_enabled(), lib.get_default_dtype())
                )
        finally:
            lib.set_default_dtype(old)
        assert seen == (True, lib.float64)


def test_stress_no_grad_in_one_thread_backward_in_another():
    """One thread flips no_grad as fast as it can while another runs forward and backward.

    With a process-wide mode, about 40% of the iterations raised "does not require grad" and
    some returned a wrong gradient silently; per thread, none may."""
    stop = threading.Event()
    errors: list = []
    wrong: list = []

    def flipper():
        while not stop.is_set():
            with ad.no_grad():
                pass
            with ad.inference_mode():
                pass
            with ad.set_grad_enabled(False):
                pass

    def worker():
        x = ad.tensor([1.0, -2.0, 3.0], dtype=ad.float64, requires_grad=True)
        expected = [2.0, -4.0, 6.0]
        for _ in range(400):
            try:
                x.grad = None
                ((x * x).sum() + 0.0).backward()
                if x.grad.tolist() != expected:
                    wrong.append(x.grad.tolist())
            except RuntimeError as e:
                errors.append(str(e))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up at once
    try:
        t1 = threading.Thread(target=flipper)
        t2 = threading.Thread(target=worker)
        t1.start()
        t2.start()
        t2.join()
        stop.set()
        t1.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == [] and wrong == []
    assert ad.is_grad_enabled() and not ad.is_inference_mode_enabled()
