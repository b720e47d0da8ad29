"""``check`` and ``trace`` with ``--engine torch`` (issue 21): an unmodified ``import torch``
script on real PyTorch gives the same findings and the same backward trace as on autodiag's
engine, from PyTorch's public hooks (engines/torch/hooks.py)."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest
from cli_helpers import ROOT, check_envelope, cli
from test_torch_engine import SAMPLES, _twins

torch = pytest.importorskip("torch")

# The finding kinds of the detectors check runs on PyTorch (engines/torch CHECK_DETECTORS).
HEALTH_KINDS = {
    "none_grad",
    "unplanned_accumulation",
    "exploding_grad",
    "vanishing_grad",
    "dead_relu",
}
TORCH_KINDS = HEALTH_KINDS | {"inplace_saved_tensor", "inplace_leaf"}
# anomaly and leaks on PyTorch (analysis/torch_anomaly.py, torch_leaks.py)
TORCH_KINDS |= {"nan_forward", "inf_forward", "nan_backward", "inf_backward"}
TORCH_KINDS |= {"graph_leak", "retained_graph"}


def _run_both(command: str, ours: str, theirs: str, *options):
    r1 = cli(command, ours, "-f", "json", "-q", *options)
    r2 = cli(command, theirs, "-f", "json", "-q", "--engine", "torch", *options)
    return r1, r2


def _errors(doc: dict) -> list:
    """(kind, line, parameter) of the error findings of the kinds check runs on PyTorch."""
    return sorted(
        (f["kind"], (f["location"] or {}).get("line"), f.get("parameter"))
        for f in doc["findings"]
        if f["severity"] == "error" and f["kind"] in TORCH_KINDS
    )


def _warnings(doc: dict) -> list:
    """(kind, line, parameter, message) of the warnings of the kinds check runs on PyTorch.
    autodiag draws PyTorch's exact random stream (ops/rng.py), so a sample's weights and data,
    and with them its norms and dead units, are the same on both engines: so is every warning
    of every sample, message and all."""
    return sorted(
        (f["kind"], (f["location"] or {}).get("line"), f.get("parameter"), _no_dirs(f["message"]))
        for f in doc["findings"]
        if f["severity"] == "warning" and f["kind"] in TORCH_KINDS
    )


def _no_dirs(message: str) -> str:
    """The message with each script path's folders dropped (the twins live in two folders)."""
    return re.sub(r"\S*/(?=[^/\s]+\.py)", "", message)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_check_finds_the_same_errors_and_warnings_on_both_engines(tmp_path, name):
    ours, theirs = _twins(tmp_path, name)
    r1, r2 = _run_both("check", ours, theirs)
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    check_envelope(d2, "check")
    assert _errors(d2) == _errors(d1), r2.stderr[-2000:]
    assert _warnings(d2) == _warnings(d1)
    for key in ("backward_calls", "optimizer_steps"):
        assert d2[key] == d1[key], key
    assert set(d2) >= set(d1)  # the same document, plus what PyTorch's run did not check
    assert d2["not_checked"] == ["freed"]
    assert [p["name"] for p in d2["grad_flow"]["parameters"]] == [
        p["name"] for p in d1["grad_flow"]["parameters"]
    ]
    if not {f["kind"] for f in d1["findings"]} - TORCH_KINDS:  # no finding torch cannot see
        assert r2.exit_code == r1.exit_code


def _trace_rows(doc: dict) -> tuple:
    """Per row: node, creation line, leaf name, where its gradients went, incoming shapes.
    Leaves made ready together run in an order neither engine promises: compared as a set."""
    rows = [
        (
            r["node"],
            (r["created_at"] or {}).get("line"),
            r.get("variable"),
            tuple(o["to"] for o in r["outgoing"]),
            tuple(tuple((i or {}).get("shape") or ()) for i in r["incoming"]),
        )
        for r in doc["steps"]
    ]
    ops = [r for r in rows if r[0] != "AccumulateGrad"]
    leaves = sorted((r for r in rows if r[0] == "AccumulateGrad"), key=repr)
    return ops, leaves


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_trace_is_the_same_on_both_engines(tmp_path, name):
    ours, theirs = _twins(tmp_path, name)
    r1, r2 = _run_both("trace", ours, theirs)
    assert r2.exit_code == r1.exit_code, r2.stderr[-2000:]
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    if "steps" not in d1:
        return  # no backward call ran to its end on either engine (the error envelope)
    assert _trace_rows(d2) == _trace_rows(d1)

    def rest(doc):  # the script's error: its kind (PyTorch's message is not autodiag's)
        out = {k: v for k, v in doc.items() if k not in ("steps", "target", "error")}
        return out, (doc.get("error") or {}).get("kind")

    assert rest(d2) == rest(d1)


def test_trace_of_a_pytorch_script_in_text(script):
    path = script("""\
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = (3 * x + 2).pow(2).sum()
        y.backward()
        """)
    r = cli("trace", path, "--engine", "torch", "--no-color")
    assert r.exit_code == 0, r.stderr
    for node in ("SumBackward0", "PowBackward0", "AddBackward0", "MulBackward0"):
        assert node in r.stdout
    assert "AccumulateGrad" in r.stdout and "x" in r.stdout
    r = cli("trace", path, "--engine", "torch", "-f", "json")
    rows = json.loads(r.stdout)["steps"]
    pow_row = next(row for row in rows if row["node"] == "PowBackward0")
    assert pow_row["created_at"]["line"] == 3
    assert pow_row["value"]["values"] == [25.0, 64.0]  # (3x+2)^2, kept in the node's metadata
    assert pow_row["outgoing"][0]["grad"]["values"] == [10.0, 16.0]  # 2 (3x+2)
    leaf = rows[-1]
    assert leaf["node"] == "AccumulateGrad" and leaf["variable"] == "x"
    assert leaf["incoming"][0]["values"] == [30.0, 48.0]


# --- the same bug, wherever it sits in the script ---------------------------------------------

DETACHED = {
    "module level": """\
        import torch
        torch.manual_seed(0)
        w1 = torch.nn.Parameter(torch.randn(4, 3))
        w2 = torch.nn.Parameter(torch.randn(3, 1))
        opt = torch.optim.SGD([w1, w2], lr=0.1)
        x = torch.randn(8, 4)
        for step in range(3):
            opt.zero_grad()
            loss = (torch.tanh(x @ w1) @ w2.detach()).pow(2).mean()
            loss.backward()
            opt.step()
        """,
    "in a function": """\
        import torch
        torch.manual_seed(0)
        def train():
            w1 = torch.nn.Parameter(torch.randn(4, 3))
            w2 = torch.nn.Parameter(torch.randn(3, 1))
            opt = torch.optim.SGD([w1, w2], lr=0.1)
            x = torch.randn(8, 4)
            for step in range(3):
                opt.zero_grad()
                loss = (torch.tanh(x @ w1) @ w2.detach()).pow(2).mean()
                loss.backward()
                opt.step()
        train()
        """,
    "in a method": """\
        import torch
        torch.manual_seed(0)
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w1 = torch.nn.Parameter(torch.randn(4, 3))
                self.w2 = torch.nn.Parameter(torch.randn(3, 1))
            def forward(self, x):
                return torch.tanh(x @ self.w1) @ self.w2.detach()
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        for step in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        """,
    "in a main() loop": """\
        import torch
        def main():
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 1)
            extra = torch.nn.Parameter(torch.ones(1))
            opt = torch.optim.SGD(list(model.parameters()) + [extra], lr=0.1)
            x = torch.randn(8, 4)
            for step in range(3):
                opt.zero_grad()
                loss = (model(x) * extra.detach()).pow(2).mean()
                loss.backward()
                opt.step()
        if __name__ == "__main__":
            main()
        """,
}
NO_ZERO_GRAD = {
    "module level": """\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x = torch.randn(16, 3)
        for step in range(4):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        """,
    "in a main() loop": """\
        import torch
        def main():
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            x = torch.randn(16, 3)
            for step in range(4):
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
        main()
        """,
}


def _same_errors(script, source: str) -> list:
    path = script(source)
    r1, r2 = _run_both("check", path, path)  # `import torch`: autodiag's alias, then PyTorch
    assert r1.exit_code == 1 and r2.exit_code == 1, (r1.stderr[-1500:], r2.stderr[-1500:])
    e1, e2 = _errors(json.loads(r1.stdout)), _errors(json.loads(r2.stdout))
    assert e2 == e1
    return e2


@pytest.mark.parametrize("where", sorted(DETACHED))
def test_a_detached_parameter_is_found_wherever_the_bug_is(script, where):
    found = _same_errors(script, DETACHED[where])
    assert [(k, p is not None) for k, _, p in found] == [("none_grad", True)]


@pytest.mark.parametrize("where", sorted(NO_ZERO_GRAD))
def test_a_missing_zero_grad_is_found_wherever_the_bug_is(script, where):
    found = _same_errors(script, NO_ZERO_GRAD[where])
    assert [(k, line) for k, line, _ in found] == [
        ("unplanned_accumulation", 8 + (where != "module level"))
    ]


REASONS = """\
import torch
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(3))
frozen_by_mistake = torch.randn(3)
only_no_grad = torch.nn.Parameter(torch.randn(3))
unused = torch.nn.Parameter(torch.randn(3))
elsewhere = torch.nn.Parameter(torch.randn(3))
opt = torch.optim.SGD([w, frozen_by_mistake, only_no_grad, unused, elsewhere], lr=0.1)
x = torch.randn(3)
other = (elsewhere * x).sum()
for step in range(2):
    opt.zero_grad()
    with torch.no_grad():
        shift = only_no_grad * 2
    loss = (w * x + shift).sum()
    loss.backward()
    opt.step()
"""


def test_every_none_grad_reason_is_the_same_on_both_engines(script):
    path = script(REASONS)
    r1, r2 = _run_both("check", path, path)
    assert r1.exit_code == r2.exit_code == 1, r2.stderr[-2000:]

    def reasons(doc):
        return sorted(
            (f["parameter"], f["reason"], f["location"]["line"])
            for f in doc["findings"]
            if f["kind"] == "none_grad"
        )

    theirs = reasons(json.loads(r2.stdout))
    assert theirs == reasons(json.loads(r1.stdout))
    assert theirs == [
        ("elsewhere", "not_reached", 16),
        ("frozen_by_mistake", "requires_grad", 16),
        ("only_no_grad", "no_grad", 14),
        ("unused", "unused", 16),
    ]


def test_dead_relu_units_are_named_by_module_path(script):
    path = script("""\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        with torch.no_grad():
            model[0].bias[:3] = -100.0  # three units that never fire
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(32, 4)
        for step in range(6):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        """)
    r = cli("check", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr  # warnings only
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "dead_relu"]
    assert f["units"] == [0, 1, 2] and f["module"] == "model.1" and f["steps"] == 6


def test_ci_outputs_and_plot_on_torch(script, tmp_path):
    path = script(NO_ZERO_GRAD["module level"])
    junit, plot = tmp_path / "r.xml", tmp_path / "flow.html"
    r = cli(
        "check", path, "--engine", "torch", "--junit-xml", str(junit), "--plot", str(plot),
        "--annotations", "github",
    )  # fmt: skip
    assert r.exit_code == 1, r.stderr
    xml = junit.read_text()
    assert "unplanned_accumulation" in xml and "<failure" in xml
    assert "::error file=" in r.stderr and ",line=8" in r.stderr
    assert "model.weight" in plot.read_text()
    assert "check does not run these detectors yet: freed" in r.stderr
    r = cli("check", path, "--engine", "torch", "--warn-only", "unplanned_accumulation")
    assert r.exit_code == 0, r.stderr


def test_a_clean_pytorch_script_passes(script):
    path = script("""\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x = torch.randn(16, 3)
        for step in range(3):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        """)
    r = cli("check", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok" and doc["findings"] == []
    assert doc["backward_calls"] == 3 and doc["optimizer_steps"] == 3
    steps = doc["grad_flow"]["parameters"][0]
    assert steps["name"] == "model.weight"


# --- never change what PyTorch computes ---------------------------------------------------------


def _mlp_params_after(steps: int, tracers) -> list:
    from autodiag.engines.torch.observe import observing
    from autodiag.trace import tracing

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
        torch.nn.Linear(32, 4),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 20), torch.randint(0, 4, (16,))

    def train():
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    if tracers is None:
        train()
    else:
        with tracing(*tracers), observing():
            train()
    return [p.detach().clone() for p in model.parameters()]


def test_check_and_trace_observers_never_change_parameters():
    from autodiag.analysis import backward_trace
    from autodiag.analysis.health import GradHealth
    from autodiag.analysis.inplace import InplaceWatcher
    from autodiag.engines.torch.observe import register

    register()
    backward_trace.bind_seam()
    plain = _mlp_params_after(5, None)
    for tracers in ([GradHealth(), InplaceWatcher()], [backward_trace.BackwardTrace()]):
        observed = _mlp_params_after(5, tracers)
        assert all(torch.equal(a, b) for a, b in zip(plain, observed))
    assert not all(torch.equal(a, b) for a, b in zip(plain, _mlp_params_after(4, None)))


def test_node_hooks_are_removed_after_each_backward_call():
    """A graph kept with retain_graph reports each call once, and no hook outlives its call."""
    from autodiag.engines.torch import hooks
    from autodiag.engines.torch.observe import observing
    from autodiag.trace import Tracer, tracing

    class Nodes(Tracer):
        observes_torch = True

        def __init__(self):
            self.seen = []

        def on_node_backward(self, node, grad_outputs, grad_inputs):
            self.seen.append(type(node).__name__)

    rec = Nodes()
    x = torch.ones(2, requires_grad=True)
    with tracing(rec), observing():
        y = (x.exp() * 2).sum()
        y.backward(retain_graph=True)
        y.backward()
    assert rec.seen == ["SumBackward0", "MulBackward0", "ExpBackward0", "AccumulateGrad"] * 2
    y = (x.exp() * 2).sum()
    handles = hooks.hook_graph([y], (rec,))
    assert len(handles) == 4
    hooks.remove(handles)
    rec.seen.clear()
    y.backward()  # outside the observer: nothing reported
    assert rec.seen == []


def test_a_torch_check_run_leaves_no_graph_alive(script):
    import gc
    import sys

    from test_torch_engine import LEAK_PROBE

    r = cli("check", script(LEAK_PROBE), "--engine", "torch")
    assert r.exit_code == 0, r.stderr
    probes = sys.__dict__.pop("_autodiag_probe")
    gc.collect()
    assert [p() for p in probes] == [None, None]


def test_readme_shows_check_on_a_pytorch_script():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Debugging PyTorch programs") :]
    assert "autodiag check" in section and "--engine torch" in section
    assert textwrap.dedent("unplanned_accumulation") in section


def test_check_on_a_compiled_module(script):
    """The compiled region is one node; autodiag's global module hooks do not make
    torch.compile(module) warn in the user's output."""
    path = script("""\
        import torch
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        f = torch.compile(model, backend="aot_eager")
        x = torch.ones(4, 3)
        for _ in range(3):
            opt.zero_grad()
            f(x).pow(2).mean().backward()
            opt.step()
        """)
    r = cli("check", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["backward_calls"] == 3 and doc["optimizer_steps"] == 3
    assert "global hooks on modules" not in r.stderr


def test_listeners_reads_in_hooks_are_not_the_scripts_ops():
    """What gradient health reads in a node hook or the optimizer step hook (a gradient, a
    parameter: ``detach().numpy()``) is autodiag's, not the script's: no tracer sees it as an
    op (NOTE [Listeners' own reads] in engines/torch/hooks.py)."""
    from autodiag.analysis.health import GradHealth
    from autodiag.engines.torch.observe import observing, register
    from autodiag.trace import Tracer, tracing

    class Ops(Tracer):
        observes_torch = True

        def __init__(self):
            self.names = []

        def on_op(self, op, node, inputs, outputs, stack):
            self.names.append(op)

    register()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    ops = Ops()
    with tracing(GradHealth(), ops), observing():
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert ops.names and not {"detach", "numpy"} & set(ops.names)
