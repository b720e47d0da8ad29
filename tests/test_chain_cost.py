"""Per-node costs of the detectors on long chains (issue 22: every command on a 1,000,000-op
chain within 2x the plain run): what each node adds must stay small and constant."""

from __future__ import annotations

import autodiag as torch
from autodiag.analysis.leaks import LeakFinder
from autodiag.trace import Stack, Tracer, tracing


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


# --- the tracing cost every command pays per op (issue 22, session 15) -------------------------


class _OnOp(Tracer):
    def __init__(self):
        self.seen = []

    def on_op(self, op, node, inputs, outputs, stack):
        self.seen.append((op, inputs, stack))


def test_traced_node_keeps_its_stack_without_extras():
    # NOTE [Stack for extras]: a traced node whose only extra is its Stack holds the Stack
    # itself, not a NodeExtras made for it (one object, 64 bytes, per node of a huge chain)
    x = torch.ones(1, requires_grad=True)
    with tracing(_OnOp()):
        y = x
        for i in range(10):
            y = y * 1.5 if i % 2 else y + 1.0
        z = y.exp()
    nodes = [z.grad_fn]
    while nodes[-1].next_functions[0][0].name() != "torch::autograd::AccumulateGrad":
        nodes.append(nodes[-1].next_functions[0][0])
    assert len(nodes) == 11
    assert all(type(n._x) is Stack for n in nodes)
    assert nodes[1]._trace is nodes[3]._trace  # one line's adds share their Stack
    n = nodes[0]
    stack = n._trace
    assert stack.site[1] > 0 and n._hooks is None and n._input_meta is None
    assert n._metadata is None and n.metadata == {}
    # another extra moves the Stack into a NodeExtras: the trace stays, the hook runs
    calls = []
    n.register_hook(lambda gi, go: calls.append(1))
    assert type(n._x) is not Stack and n._trace is stack and n._hooks is not None
    n._trace = None
    assert n._trace is None and n._hooks is not None
    z.backward()
    assert calls == [1] and x.grad is not None


def test_binary_operator_reports_inputs_without_the_generic_walk(monkeypatch):
    from autodiag.trace import events

    calls = []
    real = events._tensors_in
    monkeypatch.setattr(events, "_tensors_in", lambda a, k: calls.append(1) or real(a, k))
    x = torch.ones(2, requires_grad=True)
    w = torch.ones(2, requires_grad=True)
    t = _OnOp()
    with tracing(t):
        y = x * 2.0 + w
        y = 3 * y  # reflected: the tensor is the second operand
    assert [(op, len(ins)) for op, ins, _ in t.seen] == [("mul", 1), ("add", 2), ("mul", 1)]
    assert t.seen[0][1][0] is x and t.seen[1][1][1] is w
    assert calls == []


def test_graph_capture_listens_to_backward_nodes_only_for_grads():
    from autodiag.analysis.graph import GraphCapture
    from autodiag.trace import events

    plain, grads = GraphCapture(), GraphCapture(grads=True)
    with tracing(plain, grads):
        assert events.LISTENERS["on_node_backward"] == (grads,)
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
    assert len(grads.snapshots[0].grads) == 3 and plain.snapshots[0].grads == {}


def test_leak_finder_records_an_op_alone_without_reading_its_inputs(monkeypatch):
    # an op numbered two above the last recorded node made no other node: its inputs are not
    # read (a million-op chain read every node's edges, 50 here); an op that calls others still has
    # every node it made counted
    from autodiag.analysis import leaks

    calls = []
    real = leaks.children
    monkeypatch.setattr(leaks, "children", lambda n: calls.append(1) or real(n))
    finder = LeakFinder()
    x = torch.ones(1, 3, requires_grad=True)
    w = torch.ones(2, 3, requires_grad=True)
    with tracing(finder):
        y = x
        for i in range(50):
            y = y * 1.5 if i % 2 else y + 1.0
        assert len(calls) == 1  # the first op (nothing recorded before it)
        z = torch.nn.functional.linear(y, w)  # TBackward0 and MmBackward0: two nodes
        step = finder._steps[-1]
        assert step.alive == 52 and len(calls) == 2
        del y, z
    assert step.alive == 0
