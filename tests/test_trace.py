"""The public tracing hooks (autodiag.trace): which events fire, with what, in which order."""

from __future__ import annotations

import sys

import pytest

import autodiag as ad
from autodiag.trace import Tracer, active, capture_stack, step, tracing


class Recorder(Tracer):
    def __init__(self):
        self.events = []

    def on_op(self, op, node, inputs, outputs, stack):
        self.events.append(
            ("op", op, node.name() if node else None, len(inputs), len(outputs), stack.location())
        )

    def on_save(self, node, tensor):
        self.events.append(("save", node.name(), tuple(tensor.shape)))

    def on_inplace(self, tensor, op, stack):
        self.events.append(("inplace", op, tensor._version, stack.location()["line"]))

    def on_backward_begin(self, task):
        self.events.append(("begin", len(task.roots), task.accumulate))

    def on_node_backward(self, node, grad_outputs, grad_inputs):
        self.events.append(("node", node.name(), len(grad_outputs), len(grad_inputs)))

    def on_backward_end(self, task):
        self.events.append(("end",))

    def on_optimizer_step(self, optimizer):
        self.events.append(("optimizer", optimizer))

    def on_step(self):
        self.events.append(("step",))

    def kinds(self, kind):
        return [e for e in self.events if e[0] == kind]


def _line() -> int:
    return sys._getframe(1).f_lineno


def test_ops_are_reported_once_with_their_node_and_the_user_line():
    x = ad.ones(3, requires_grad=True)
    with tracing(Recorder()) as rec:
        y = (x * 2).exp().sum(); line = _line()  # noqa: E702  # fmt: skip
    ops = rec.kinds("op")
    assert [(e[1], e[2]) for e in ops] == [
        ("mul", "MulBackward0"),
        ("exp", "ExpBackward0"),
        ("sum", "SumBackward0"),
    ]
    loc = ops[0][5]
    assert loc["file"] == __file__ and loc["line"] == line and "exp()" in loc["code"]
    assert loc["function"] == "test_ops_are_reported_once_with_their_node_and_the_user_line"
    assert y.grad_fn.name() == "SumBackward0"


def test_ops_called_inside_ops_are_not_reported():
    x = ad.ones(2, 3, requires_grad=True)
    with tracing(Recorder()) as rec:
        x.std(dim=1)  # std is built from other ops internally in some engines
        x.softmax(-1)
    assert [e[1] for e in rec.kinds("op")] == ["std", "softmax"]


def test_unrecorded_ops_are_reported_without_a_node():
    x = ad.ones(3, requires_grad=True)
    c = ad.ones(3)
    with tracing(Recorder()) as rec:
        c + 1
        with ad.no_grad():
            x * 2
        x.detach()
        x.sum().item()
    assert [(e[1], e[2]) for e in rec.kinds("op")] == [
        ("add", None),
        ("mul", None),
        ("detach", None),
        ("sum", "SumBackward0"),
        ("item", None),
    ]


def test_saves_follow_their_op():
    x = ad.ones(2, requires_grad=True)
    with tracing(Recorder()) as rec:
        x.exp()  # saves its result
        x.sin()  # saves its input
    assert rec.events[1] == ("save", "ExpBackward0", (2,))
    assert rec.events[3] == ("save", "SinBackward0", (2,))


def test_inplace_writes_are_reported_with_their_line_also_under_no_grad():
    x = ad.ones(3, requires_grad=True)
    y = x * 1
    with tracing(Recorder()) as rec:
        y.add_(1); line = _line()  # noqa: E702  # fmt: skip
        with ad.no_grad():
            x.mul_(2)
    ins = rec.kinds("inplace")
    assert ins == [("inplace", "add_", 1, line), ("inplace", "mul_", 1, line + 2)]
    assert [e[1:3] for e in rec.kinds("op")] == [("add_", "AddBackward0"), ("mul_", None)]


def test_backward_events_run_in_execution_order():
    x = ad.ones(2, requires_grad=True)
    loss = (x.exp() * 3).sum()
    with tracing(Recorder()) as rec:
        loss.backward()
    assert rec.events == [
        ("begin", 1, True),
        ("node", "SumBackward0", 1, 1),
        ("node", "MulBackward0", 1, 2),
        ("node", "ExpBackward0", 1, 1),
        ("node", "torch::autograd::AccumulateGrad", 1, 0),
        ("end",),
    ]


def test_autograd_grad_is_a_backward_call_that_does_not_accumulate():
    x = ad.ones(2, requires_grad=True)
    with tracing(Recorder()) as rec:
        ad.autograd.grad((x * x).sum(), x)
    assert rec.kinds("begin") == [("begin", 1, False)] and rec.events[-1] == ("end",)


def test_backward_end_is_reported_when_backward_raises():
    x = ad.ones(2, requires_grad=True)
    y = x.exp()
    y.mul_(2)  # ExpBackward0's saved result is now stale
    with tracing(Recorder()) as rec, pytest.raises(RuntimeError, match="inplace operation"):
        y.sum().backward()
    assert rec.events[-1] == ("end",)


def test_custom_function_is_one_op_and_its_inner_ops_are_hidden():
    class Cube(ad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    x = ad.ones(2, requires_grad=True)
    with tracing(Recorder()) as rec:
        Cube.apply(x)
    assert rec.events[0][:3] == ("op", "Cube", "CubeBackward")
    assert rec.events[1] == ("save", "CubeBackward", (2,))
    assert len(rec.events) == 2


def test_operators_report_the_op_name():
    x = ad.ones(2, requires_grad=True)
    with tracing(Recorder()) as rec:
        2 - x
        2 / x
        x @ x
        _ = -x
        _ = x > 0
        x[0]
        x**2
    assert [e[1] for e in rec.kinds("op")] == [
        "rsub",
        "div",
        "matmul",
        "neg",
        "gt",
        "__getitem__",
        "pow",
    ]


def test_several_tracers_and_nesting():
    a, b = Recorder(), Recorder()
    x = ad.ones(2, requires_grad=True)
    with tracing(a):
        x * 2
        with tracing(b):
            x + 1
        assert active() == (a,)
    assert active() == ()
    assert [e[1] for e in a.kinds("op")] == ["mul", "add"]
    assert [e[1] for e in b.kinds("op")] == ["add"]


def test_tracers_are_removed_when_the_block_raises():
    with pytest.raises(ValueError), tracing(Recorder()):
        raise ValueError
    assert active() == ()


def test_step_marker():
    with tracing(Recorder()) as rec:
        step()
    step()  # no tracer: nothing happens
    assert rec.events == [("step",)]


def test_nothing_is_reported_without_tracers():
    rec = Recorder()
    x = ad.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    assert rec.events == []


def test_stack_is_lazy_and_innermost_last():
    def inner():
        return capture_stack()

    s = inner()
    frames = s.frames()
    assert frames[-1]["function"] == "inner"
    assert frames[-2]["function"] == "test_stack_is_lazy_and_innermost_last"
    assert s.site[0] is inner.__code__


def test_optimizer_step_is_reported():
    p = ad.nn.Parameter(ad.ones(2))
    opt = ad.optim.SGD([p], lr=0.1)
    with tracing(Recorder()) as rec:
        (p * 2).sum().backward()
        opt.step()
    assert rec.kinds("optimizer") == [("optimizer", opt)]


def test_stacks_are_shared_by_a_loop_body_and_keep_their_callers_apart():
    def op_in(x):
        return x * 2

    x = ad.ones(2, requires_grad=True)
    with tracing(Recorder()):
        loop = [x * 2 for _ in range(3)]
        a = op_in(x)
        b = op_in(x)  # same code and line inside op_in, another caller line
    assert loop[0].grad_fn._trace is loop[1].grad_fn._trace is loop[2].grad_fn._trace
    fa, fb = a.grad_fn._trace.frames(), b.grad_fn._trace.frames()
    assert fa[-1]["line"] == fb[-1]["line"] and fa[-2]["line"] + 1 == fb[-2]["line"]


def test_tracers_receive_only_the_events_they_override():
    from autodiag.trace import events

    class OnlyOps(Tracer):
        def on_op(self, op, node, inputs, outputs, stack):
            pass

    t = OnlyOps()
    with tracing(t):
        assert t in events.LISTENERS["on_op"] and t not in events.LISTENERS["on_save"]
    assert events.LISTENERS["on_op"] == ()
