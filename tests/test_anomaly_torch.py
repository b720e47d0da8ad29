"""Library anomaly mode (``autograd.detect_anomaly`` / ``set_detect_anomaly``) against PyTorch.

Each snippet runs under autodiag and torch (``m`` is the module); the tests compare exception
types and messages, the warnings (category, text, where they point) and node metadata. Torch's
warnings raised from C++ end with " (Triggered internally at ...)", which is cut before comparing.
"""

from __future__ import annotations

import re
import sys
import warnings

import pytest

import autodiag as ad
from autodiag.trace import active


def run(fn, m):
    """(exception or None, [(category, message, filename)]) of fn(m), warnings all recorded."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            fn(m)
            exc = None
        except Exception as e:  # noqa: BLE001 - we compare whatever both raise
            exc = e
    msgs = [
        (
            x.category,
            re.sub(r" \(Triggered internally at .*\)$", "", str(x.message), flags=re.S),
            x.filename,
        )
        for x in w
    ]
    return exc, msgs


def both(fn, torch):
    ea, wa = run(fn, ad)
    et, wt = run(fn, torch)
    assert type(ea) is type(et), f"autodiag: {ea!r}; torch: {et!r}"
    assert str(ea) == str(et) or ea is None
    return (ea, wa), (et, wt)


def anomaly_warnings(ws):
    return [m for c, m, _ in ws if m.startswith(("Error detected", "\n\nPrevious"))]


def last_frames(text: str, n: int) -> list[str]:
    """The innermost ``n`` frames of a 'Traceback of forward call' text (user frames only:
    torch's own frames, listed by its full-stack capture, are dropped)."""
    frames = re.findall(r'  File "[^"]+", line \d+, in [^\n]+\n(?:    [^\n]*\n)?', text)
    frames = [f for f in frames if "site-packages/torch" not in f]
    return frames[-n:]


def _line() -> int:
    return sys._getframe(1).f_lineno


# --- the two switches -------------------------------------------------------------------------


def test_detect_anomaly_warns_and_switches(torch):
    def fn(m):
        assert not m.is_anomaly_enabled()
        with m.autograd.detect_anomaly():
            assert m.is_anomaly_enabled() and m.is_anomaly_check_nan_enabled()
        assert not m.is_anomaly_enabled()
        with m.autograd.detect_anomaly(check_nan=False):
            assert not m.is_anomaly_check_nan_enabled()
        assert m.is_anomaly_check_nan_enabled()

    (_, wa), (_, wt) = both(fn, torch)
    assert [(c, m) for c, m, _ in wa] == [(c, m) for c, m, _ in wt]
    assert len(wa) == 2 and wa[0][0] is UserWarning
    assert wa[0][1] == (
        "Anomaly Detection has been enabled. This mode will increase the runtime "
        "and should only be enabled for debugging."
    )
    assert wa[0][2] == wt[0][2] == __file__  # stacklevel 2: the caller


def test_set_detect_anomaly_function_and_context_manager(torch):
    def fn(m):
        m.autograd.set_detect_anomaly(True)
        assert m.is_anomaly_enabled()
        with m.autograd.set_detect_anomaly(False):
            assert not m.is_anomaly_enabled()
        assert m.is_anomaly_enabled()
        with m.autograd.set_detect_anomaly(True, check_nan=False):
            assert not m.is_anomaly_check_nan_enabled()
        m.autograd.set_detect_anomaly(False)
        assert not m.is_anomaly_enabled() and m.is_anomaly_check_nan_enabled()

    (_, wa), (_, wt) = both(fn, torch)
    assert wa == wt == []


def test_detect_anomaly_as_a_decorator():
    # autodiag only: torch's detect_anomaly instance is not callable
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):

        @ad.autograd.detect_anomaly(check_inf=True)
        def f():
            return ad.is_anomaly_enabled(), ad.autograd.anomaly.is_anomaly_check_inf_enabled()

    assert not ad.is_anomaly_enabled()
    assert f() == (True, True)
    assert not ad.is_anomaly_enabled()


def test_the_internal_tracer_is_not_listed():
    with ad.autograd.set_detect_anomaly(True):
        assert active() == ()
    assert active() == ()


# --- the NaN check in backward ----------------------------------------------------------------


def _sqrt_at_zero(m):
    x = m.tensor([0.0, 1.0], requires_grad=True)
    with m.autograd.detect_anomaly():
        y = x.sqrt() * 0  # d sqrt at 0 is inf; inf * 0 = nan
        y.sum().backward()


def test_nan_in_backward_raises_and_warns_with_the_forward_stack(torch):
    (ea, wa), (et, wt) = both(_sqrt_at_zero, torch)
    assert str(ea) == "Function 'SqrtBackward0' returned nan values in its 0th output."
    [a], [t] = anomaly_warnings(wa), anomaly_warnings(wt)
    head = "Error detected in SqrtBackward0. Traceback of forward call that caused the error:\n"
    assert a.startswith(head) and t.startswith(head)
    assert last_frames(a, 2) == last_frames(t, 2)
    assert "y = x.sqrt() * 0" in last_frames(a, 1)[0]
    # the warning points at the user's backward() call (torch's at its own graph.py)
    [where] = [f for c, m, f in wa if m.startswith("Error detected")]
    assert where == __file__


def test_nested_user_functions_are_in_the_forward_stack(torch):
    def inner(m, x):
        return x.log() * 0  # log(0) = -inf, its backward 1/0 = inf, times 0: nan

    def fn(m):
        x = m.tensor([0.0], requires_grad=True)
        with m.autograd.detect_anomaly():
            inner(m, x).sum().backward()

    (ea, wa), (et, wt) = both(fn, torch)
    assert "LogBackward0" in str(ea)
    [a], [t] = anomaly_warnings(wa), anomaly_warnings(wt)
    assert last_frames(a, 2) == last_frames(t, 2)
    assert "inner(m, x).sum().backward()" in last_frames(a, 2)[0]


def test_check_nan_false_and_inf_are_not_errors_by_default(torch):
    def fn(m):
        x = m.tensor([0.0], requires_grad=True)
        with m.autograd.detect_anomaly(check_nan=False):
            (x.sqrt() * 0).sum().backward()
        nan = x.grad.clone()
        x.grad = None
        with m.autograd.detect_anomaly():
            x.sqrt().sum().backward()  # inf gradient: PyTorch checks NaN only
        return nan, x.grad

    (ea, _), _ = both(fn, torch)
    assert ea is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, t = fn(ad), fn(torch)
    assert str(a[0]) == str(t[0]) == "tensor([nan])"
    assert str(a[1]) == str(t[1]) == "tensor([inf])"


def test_check_inf_is_an_autodiag_option():
    x = ad.tensor([0.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Error detected in SqrtBackward0"):
        with pytest.raises(
            RuntimeError,
            match=r"^Function 'SqrtBackward0' returned inf values "
            r"in its 0th output\.$",
        ):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                mode = ad.autograd.detect_anomaly(check_inf=True)
            with mode:
                x.sqrt().sum().backward()
    # check_nan=False, check_inf=True: NaN passes, Inf does not
    with ad.autograd.set_detect_anomaly(True, check_nan=False, check_inf=True):
        x.grad = None
        (x.sqrt() * 0).sum().backward()
        assert str(x.grad) == "tensor([nan])"
        with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="returned inf"):
            (x.exp() * 1e39).sum().backward()  # float32: 1e39 is inf


def test_custom_function_outputs_are_all_checked(torch):
    def fn(m, b_grad=True):
        class F(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g, g * float("nan")

        a = m.ones(2, requires_grad=True)
        b = m.ones(2, requires_grad=b_grad)
        with m.autograd.detect_anomaly():
            F.apply(a, b).sum().backward()

    (ea, wa), (et, wt) = both(fn, torch)
    assert str(ea) == "Function 'FBackward' returned nan values in its 1th output."
    # the gradient of an input that needs none is checked too for custom Functions
    (ea, _), _ = both(lambda m: fn(m, b_grad=False), torch)
    assert "1th output" in str(ea)
    [a], [t] = anomaly_warnings(wa), anomaly_warnings(wt)
    assert "F.apply(a, b).sum().backward()" in last_frames(a, 1)[0]
    assert last_frames(a, 1)[0] in t


def test_a_nan_seed_is_reported_by_the_first_node(torch):
    def fn(m):
        x = m.ones(2, requires_grad=True)
        with m.autograd.detect_anomaly():
            (x * 2).backward(m.tensor([float("nan"), 1.0]))

    (ea, _), _ = both(fn, torch)
    assert str(ea) == "Function 'MulBackward0' returned nan values in its 0th output."


def test_autograd_grad_and_create_graph(torch):
    def fn(m):
        x = m.tensor([0.0], requires_grad=True)
        with m.autograd.detect_anomaly():
            m.autograd.grad((x.sqrt() * 0).sum(), x, create_graph=True)

    (ea, _), _ = both(fn, torch)
    assert "SqrtBackward0" in str(ea)


def test_no_forward_information_outside_anomaly_mode(torch):
    def fn(m):
        x = m.tensor([0.0], requires_grad=True)
        y = (x.sqrt() * 0).sum()
        with m.autograd.set_detect_anomaly(True):
            y.backward()

    (ea, wa), (et, wt) = both(fn, torch)
    assert (
        anomaly_warnings(wa)
        == anomaly_warnings(wt)
        == [
            "Error detected in SqrtBackward0. No forward pass information available. Enable detect "
            "anomaly during forward pass for more information."
        ]
    )


def test_other_backward_errors_also_report_the_forward_stack(torch):
    def fn(m):
        class Boom(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a.clone()

            @staticmethod
            def backward(ctx, g):
                raise ValueError("Some error in backward")

        a = m.ones(2, requires_grad=True)
        with m.autograd.detect_anomaly():
            Boom.apply(a).sum().backward()

    (ea, wa), (et, wt) = both(fn, torch)
    assert isinstance(ea, ValueError)
    [a], [t] = anomaly_warnings(wa), anomaly_warnings(wt)
    assert a.startswith("Error detected in BoomBackward. Traceback of forward call")
    assert last_frames(a, 1)[0] in t


# --- node metadata and double backward ----------------------------------------------------------


def test_metadata_traceback(torch):
    def fn(m):
        x = m.ones(1, requires_grad=True)
        with m.autograd.set_detect_anomaly(True):
            y = x.exp()
        z = x.exp()
        return y.grad_fn.metadata, z.grad_fn.metadata

    (a, az), (t, tz) = fn(ad), fn(torch)
    assert list(a) == list(t) == ["traceback_"] and az == tz == {}
    assert a["traceback_"][-1] == t["traceback_"][-1]
    assert a["traceback_"][-1].endswith("    y = x.exp()\n")


def test_double_backward_reports_the_parent_chain(torch):
    def fn(m):
        with m.autograd.detect_anomaly():
            x = m.tensor([0.0], requires_grad=True)
            y = x**1.5
            (g,) = m.autograd.grad(y.sum(), x, create_graph=True)
            parent = g.grad_fn.metadata["parent_"].name()
            (g * 0).sum().backward()  # d/dx 1.5 x**0.5 at 0 is inf; times 0: nan
        return parent

    (ea, wa), (et, wt) = both(fn, torch)
    assert str(ea) == "Function 'PowBackward0' returned nan values in its 0th output."
    a, t = anomaly_warnings(wa), anomaly_warnings(wt)
    assert len(a) == len(t) == 2
    assert last_frames(a[0], 1) == last_frames(t[0], 1)  # the grad(...) call
    assert a[1].startswith(
        "\n\nPrevious calculation was induced by PowBackward0. Traceback of "
        "forward call that induced the previous calculation:\n"
    )
    assert last_frames(a[1], 1) == last_frames(t[1], 1)  # y = x ** 1.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError):
            fn(ad)


# --- in-place errors in anomaly mode ------------------------------------------------------------


def test_inplace_error_names_the_saving_line_in_anomaly_mode(torch):
    lines = {}

    def fn(m):
        with m.autograd.set_detect_anomaly(True):
            a = m.ones(3, requires_grad=True)
            b = a.exp(); lines["save"] = _line()  # noqa: E702  # fmt: skip
            b.add_(1); lines["write"] = _line()  # noqa: E702  # fmt: skip
            b.sum().backward()

    (ea, wa), (et, wt) = run(fn, ad), run(fn, torch)
    assert type(ea) is type(et) is RuntimeError
    hint = (
        "Hint: the backtrace further above shows the operation that failed to compute its "
        "gradient. The variable in question was changed in there or anywhere later. Good "
        "luck!"
    )
    assert hint in str(et) and hint in str(ea)
    head = str(et).split(" Hint:")[0]
    assert str(ea).startswith(head)
    name = __file__.rsplit("/", 1)[-1]
    assert re.search(rf"saved by ExpBackward0 at \S*{name}:{lines['save']} ", str(ea))
    assert re.search(rf"modified in place by add_ at \S*{name}:{lines['write']} ", str(ea))
    [a], [t] = anomaly_warnings(wa), anomaly_warnings(wt)
    assert a.startswith("Error detected in ExpBackward0.") and t.startswith(a.split(":")[0])
    assert last_frames(a, 1) == last_frames(t, 1)


def test_inplace_error_without_anomaly_mode_keeps_the_enable_hint(torch):
    def fn(m):
        a = m.ones(3, requires_grad=True)
        b = a.exp()
        b.add_(1)
        b.sum().backward()

    (ea, _), (et, _) = run(fn, ad), run(fn, torch)
    assert "set_detect_anomaly(True, check_nan=False)" in str(ea)
    assert "set_detect_anomaly(True, check_nan=False)" in str(et)
    assert "Good luck" not in str(ea)


def test_anomaly_mode_leaves_no_state_behind():
    x = ad.tensor([0.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError), ad.autograd.detect_anomaly():
            (x.sqrt() * 0).sum().backward()
    assert not ad.is_anomaly_enabled()
    from autodiag.trace import events

    assert events.TRACERS == []
    y = x.exp()
    assert y.grad_fn._trace is None and y.grad_fn.metadata == {}
