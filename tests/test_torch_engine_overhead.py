"""``--engine torch`` overheads (issue 21, tests/perf/bench_torch_engine.py): the short paths the
observer and the inspection seam take for PyTorch's objects give what the long ones gave, and
what an optimizer's step does to its parameters is reported on neither engine."""

from __future__ import annotations

import pytest
from test_torch_engine_anomaly import _anomaly_facts, _run_both, _twin_scripts

torch = pytest.importorskip("torch")

from autodiag import inspect  # noqa: E402
from autodiag.analysis.graph import GraphCapture  # noqa: E402
from autodiag.engines.torch import observe  # noqa: E402
from autodiag.trace import tracing  # noqa: E402

# An update that overflows the parameters: inf appears inside ``opt.step()`` (the optimizer's
# own ``add_`` under no_grad), and the next forward turns it into NaN.
OVERFLOWING_STEP = """\
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e38)
x = torch.randn(8, 4) * 1e3
for step in range(3):
    opt.zero_grad()
    loss = (model(x) ** 2).mean()  # FORWARD
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("command", ["anomaly", "check"])
def test_an_optimizer_step_is_not_an_origin_on_either_engine(tmp_path, command):
    """NOTE [Optimizer internals]: the step's ``add_`` is not the script's op on autodiag's
    engine; PyTorch's observer reported it (an ``inf_forward add_`` at ``opt.step()``) and tested
    every parameter and momentum buffer for finiteness at every step."""
    paths, marks = _twin_scripts(tmp_path, OVERFLOWING_STEP)
    ours, theirs = _run_both(command, paths, *(["--keep-going"] if command == "anomaly" else []))
    if command == "anomaly":
        assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    found = [
        (f["kind"], f.get("op"), (f["location"] or {}).get("line"))
        for f in theirs["findings"]
        if f["kind"].endswith("_forward")
    ]
    assert found == [("nan_forward", "linear", marks["FORWARD"])]


class _Sub(torch.Tensor):
    """A script's tensor subclass with an attribute named like autodiag's tensor field."""


def test_the_seam_reads_pytorch_objects_by_their_type():
    """A PyTorch tensor that happens to carry ``_data``/``_trace``/``_seq`` attributes is still
    read through the PyTorch seam (asked by type first, NOTE in ``inspect._foreign``), not as
    one of autodiag's objects."""
    observe.register()
    t = torch.arange(3.0).as_subclass(_Sub)
    t._data = "not the values"
    assert inspect.array(t).tolist() == [0.0, 1.0, 2.0]
    assert inspect.values(t).tolist() == [0.0, 1.0, 2.0]
    assert tuple(inspect.shape(t)) == (3,)
    assert inspect.dtype_name(t) == "float32"
    node = (torch.ones(2, requires_grad=True) * 2).grad_fn
    assert inspect.sequence_nr(node) == node._sequence_nr()
    assert [type(c).__name__ for c in inspect.children(node)] == ["AccumulateGrad", "NoneType"]
    assert inspect.node_info(node)[0] == node._sequence_nr()


def test_ops_that_make_one_node_and_composites_get_their_lines():
    """The one-node short path of ``Observer.tag`` (a tiny op in a chain) and the walk of a
    composite (``linear``: ``TBackward0`` and ``AddmmBackward0``) tag every node with its line,
    the one-node ops' before and after the composite too."""
    cap = GraphCapture()
    lines = {}
    with tracing(cap), observe.observing():
        x = torch.ones(2, 3, requires_grad=True)
        lin = torch.nn.Linear(3, 2)
        y = x * 2.0
        lines["mul"] = _line()
        z = lin(y)
        lines["linear"] = _line()
        w = z.exp()
        lines["exp"] = _line()
        w.sum().backward()
    snap = cap.snapshots[-1]
    got = {}
    for i, name in enumerate(snap.names):
        site = snap.sites[i]
        if site is not None:
            got[name] = site.site[1]
    assert got["MulBackward0"] == lines["mul"] - 1
    assert got["AddmmBackward0"] == got["TBackward0"] == lines["linear"] - 1
    assert got["ExpBackward0"] == lines["exp"] - 1


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_backward_with_arguments_still_reads_them():
    """``loss.backward()`` takes the short path; with arguments the signature is bound as before
    (``retain_graph`` seen, a second backward through the graph works)."""
    seen = []

    class Calls(GraphCapture):
        def on_backward_begin(self, task):
            seen.append((task.retain_graph, task.create_graph, task.accumulate))
            super().on_backward_begin(task)

    with tracing(Calls()), observe.observing():
        x = torch.ones(2, requires_grad=True)
        y = (x * 3).sum()
        y.backward(retain_graph=True)
        y.backward()
        torch.autograd.grad((x * 2).sum(), [x])
    assert seen == [(True, False, True), (False, False, True), (False, False, False)]
    assert x.grad.tolist() == [6.0, 6.0]


def _bench():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "perf", "bench_torch_engine.py")
    spec = importlib.util.spec_from_file_location("bench_torch_engine", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name, observers",
    [
        ("observe(anomaly)", ("anomaly",)),
        ("observe(inplace)", ("inplace",)),
        ("observe(leaks)", ("leaks",)),
        ("observe(health)", ("health",)),
        ("observe(graph)", ("graph",)),
        ("observe()", ("health", "inplace", "leaks", "anomaly")),
    ],
)
def test_the_bench_times_the_library_api_with_each_observer(name, observers):
    """bench_torch_engine.py's ``observe(...)`` contestants are ``autodiag.torch.observe`` with
    the one observer they are named after (its default: every detector), and see the workload
    they time: its ops and its backward call."""
    bench = _bench()
    with bench.CONTESTANTS[name]() as seen:
        bench.chain(20)()
    assert sorted(seen.observers) == sorted(observers)
    assert seen.status == "ok"
    assert seen.backward_calls == 1
    assert seen.ops >= 20
