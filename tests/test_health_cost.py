"""What GradHealth does per event, for its cost (issue 22): work skipped where nothing can come
of it, never a different finding."""

from __future__ import annotations

import autodiag as torch
from autodiag.analysis import health
from autodiag.analysis.health import GradHealth, HealthDetector
from autodiag.trace import tracing


def test_gradnorms_measures_no_gradient_at_an_add_that_feeds_no_leaf(monkeypatch):
    measured = []
    real = health._norm
    monkeypatch.setattr(health, "_norm", lambda a: measured.append(a.size) or real(a))
    x = torch.ones(3, requires_grad=True)
    with tracing(GradHealth(detectors=[health.GradNorms])):
        y = x
        for _ in range(200):
            y = y + 1.0  # AddBackward0 nodes: only the first one hands a leaf its gradient
        y.sum().backward()
    # the noise floor of x at the first add, x's gradient and x itself: never one per node
    assert len(measured) == 3


class _Seen(HealthDetector):
    """Records the nodes it is handed."""

    def __init__(self):
        self.names = []

    def on_node_backward(self, health, node, grad_outputs, grad_inputs):
        self.names.append(node.name())


class _SeenMul(_Seen):
    NODES = frozenset({"MulBackward0"})


def test_node_events_reach_only_the_detectors_that_read_that_node():
    x = torch.ones(3, requires_grad=True)
    tracer = GradHealth(detectors=[_Seen, _SeenMul])
    with tracing(tracer):
        ((x * 2.0 + 1.0) * 3.0).sum().backward()
    every, muls = tracer.detector(_Seen), tracer.detector(_SeenMul)
    assert every.names == ["SumBackward0", "MulBackward0", "AddBackward0", "MulBackward0"]
    assert muls.names == ["MulBackward0", "MulBackward0"]


class _Ops(HealthDetector):
    """Records the ops it is handed."""

    def __init__(self):
        self.ops = []

    def on_op(self, health, op, node, inputs, outputs, stack):
        self.ops.append(op)


class _OpsRelu(_Ops):
    OPS = frozenset({"relu"})


def test_op_events_reach_only_the_detectors_that_read_that_op():
    x = torch.ones(3, requires_grad=True)
    tracer = GradHealth(detectors=[_Ops, _OpsRelu])
    with tracing(tracer):
        (x * 2.0).relu().sum().backward()
    assert tracer.detector(_Ops).ops == ["mul", "relu", "sum"]
    assert tracer.detector(_OpsRelu).ops == ["relu"]


def test_dead_relu_reads_relu_ops_only(monkeypatch):
    seen = []
    real = health.DeadRelu.on_op
    monkeypatch.setattr(
        health.DeadRelu, "on_op", lambda self, h, op, *a: seen.append(op) or real(self, h, op, *a)
    )
    x = torch.ones(3, requires_grad=True)
    with tracing(GradHealth()):
        (x * 2.0).relu().sum().backward()
    assert seen == ["relu"]


def test_an_object_that_becomes_an_optimizer_is_adopted_once_it_has_param_groups():
    # the variables of the frames are looked at again at every backward call, skipping the
    # types that can hold no parameter: an optimizer-like type is never one of those
    class Stepper:
        def step(self):
            pass

    w = torch.ones(2, requires_grad=True)
    tracer = GradHealth()
    opt = Stepper()
    tracer._adopt_namespace({"opt": opt, "n": 3})
    assert tracer.known(id(w)) is None
    opt.param_groups = [{"params": [w]}]
    tracer._adopt_namespace({"opt": opt, "n": 3})
    rec = tracer.known(id(w))
    assert rec is not None and rec.candidate
    assert rec.name == "opt.param_groups[0]['params'][0]"
