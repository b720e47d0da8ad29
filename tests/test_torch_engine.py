"""``--engine torch`` (issue 21, first increment: ``graph`` and ``inplace``): an unmodified
``import torch`` script runs on real PyTorch, observed through its public extension points, and
the same analyses give the same reports as on autodiag's engine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
from cli_helpers import ROOT, check_envelope, check_graph, cli

torch = pytest.importorskip("torch")

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
SAMPLES = sorted(f for f in os.listdir(os.path.join(ROOT, "samples")) if f.endswith(".py"))


def _twins(tmp_path, name: str) -> tuple[str, str]:
    """The sample as written (autodiag) and rewritten to ``import torch``, in two folders."""
    source = open(os.path.join(ROOT, "samples", name)).read()
    rewritten = (
        source.replace("import autodiag as torch", "import torch")
        .replace("import autodiag.nn.functional as F", "import torch.nn.functional as F")
        .replace("import autodiag.nn as nn", "import torch.nn as nn")
    )
    assert "autodiag" not in "\n".join(
        line for line in rewritten.splitlines() if line.startswith(("import", "from"))
    )
    for folder, text in (("a", source), ("b", rewritten)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / name).write_text(text)
    return str(tmp_path / "a" / name), str(tmp_path / "b" / name)


def _both(command: str, tmp_path, name: str, *options):
    ours, theirs = _twins(tmp_path, name)
    r1 = cli(command, ours, "-f", "json", "-q", *options)
    r2 = cli(command, theirs, "-f", "json", "-q", "--engine", "torch", *options)
    assert r2.exit_code == r1.exit_code, r2.stderr[-3000:]
    return json.loads(r1.stdout), json.loads(r2.stdout)


def _graph_shape(doc: dict) -> list:
    """Per graph shown: node names, edges, creation lines, leaf names and module paths."""
    out = []
    for g in doc.get("graphs") or [doc]:
        if "nodes" not in g:
            continue
        check_graph(g)
        out.append(
            (
                [n["name"] for n in g["nodes"]],
                [n["next"] for n in g["nodes"]],
                [(n["created_at"] or {}).get("line") for n in g["nodes"]],
                [(n["variable"] or {}).get("name") for n in g["nodes"]],
                [n.get("module") for n in g["nodes"]],
                g["order"],
            )
        )
    return out


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_graph_is_the_same_on_both_engines(tmp_path, name):
    """Same node names, edges (input order), creation lines, leaf names and module paths
    (``model.fc1 (Linear)``), in every order.
    The graphs are the same for all samples: autodiag records PyTorch's node names and
    next_functions, so no legitimate difference shows here (saved-tensor lists may differ:
    PyTorch also saves a Python scalar as a 0-d tensor, ``mul_(2)``'s ``other``)."""
    # ids are breadth-first positions whatever the order; "order" is backward's (topo)
    d1, d2 = _both("graph", tmp_path, name, "--order", "topo", "--all")
    check_envelope(d2, "graph")
    ours, theirs = _graph_shape(d1), _graph_shape(d2)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if any("BackwardBackward" in n for n in b[0]):
            # a graph made by a create_graph backward (quickstart's 4th derivative): PyTorch
            # records each double-backward formula as one node (SigmoidBackwardBackward0),
            # autodiag differentiates its backward formula op by op (MulBackward0,
            # RsubBackward1, ...): the same derivative, other nodes
            continue
        assert b == a


def _inplace_facts(doc: dict) -> list:
    out = []
    for f in doc["findings"]:
        saved = f.get("saved_by") or {}
        needed = f.get("needed_by") or {}
        out.append(
            (
                f["kind"],
                (f["location"] or {}).get("line"),
                saved.get("node"),
                (saved.get("location") or {}).get("line"),
                (needed.get("location") or {}).get("line"),
                f.get("backward_failed"),
            )
        )
    return out


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_inplace_is_the_same_on_both_engines(tmp_path, name):
    d1, d2 = _both("inplace", tmp_path, name)
    check_envelope(d2, "inplace")
    assert _inplace_facts(d2) == _inplace_facts(d1)
    assert d2["status"] == d1["status"]


def test_inplace_sample_names_the_three_lines(tmp_path):
    _, theirs = _twins(tmp_path, "inplace_saved.py")
    r = cli("inplace", theirs, "--engine", "torch", "--no-color")
    assert r.exit_code == 1, r.stderr
    assert "SigmoidBackward0" in r.stdout
    assert "inplace_saved.py:16" in r.stdout  # s.mul_(2)
    assert "inplace_saved.py:15" in r.stdout  # s = torch.sigmoid(x)
    assert "inplace_saved.py:18 (backward call 1): it failed there" in r.stdout


def test_inplace_relu_and_setitem_and_out(script):
    path = script("""\
        import torch
        x = torch.randn(5, requires_grad=True)
        s = torch.sigmoid(x)
        r = torch.nn.ReLU(inplace=True)(s)
        e = x.exp()
        e[0] = 1.0
        t = x.tanh()
        with torch.no_grad():
            torch.add(t, 1, out=t)
        """)
    r = cli("inplace", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 1, r.stderr
    found = {
        (f["location"]["line"], f["saved_by"]["node"]) for f in json.loads(r.stdout)["findings"]
    }
    assert found == {(4, "SigmoidBackward0"), (6, "ExpBackward0"), (9, "TanhBackward0")}


def _version_error(observed: bool, anomaly: bool) -> str:
    from autodiag.analysis.inplace import InplaceWatcher
    from autodiag.engines.torch.observe import observing
    from autodiag.trace import tracing

    x = torch.tensor([0.5, -1.0], requires_grad=True)
    with contextlib.ExitStack() as stack:
        if observed:
            stack.enter_context(tracing(InplaceWatcher()))
            stack.enter_context(observing())
        if anomaly:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            stack.enter_context(torch.autograd.detect_anomaly())
        s = torch.sigmoid(x)
        s.mul_(2)
        with pytest.raises(RuntimeError) as e:
            s.sum().backward()
    assert x.grad is None
    return str(e.value)


@pytest.mark.parametrize("anomaly", [False, True])
def test_the_hooks_redo_pytorchs_version_check(anomaly):
    """NOTE [Two pitfalls] (1): with saved-tensor hooks installed PyTorch checks no version;
    the observer's unpack does, with PyTorch's own message ("output 0 of Sigmoid", the hint of
    the anomaly mode in force)."""
    ours = _version_error(observed=True, anomaly=anomaly)
    assert "modified by an inplace operation" in ours
    assert ours == _version_error(observed=False, anomaly=anomaly)


def _mlp_params_after(steps: int, observed: bool) -> list:
    from autodiag.analysis.inplace import InplaceWatcher
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

    if observed:
        with tracing(InplaceWatcher()), observing():
            train()
    else:
        train()
    return [p.detach().clone() for p in model.parameters()]


def test_observers_never_change_gradients():
    plain, observed = _mlp_params_after(5, False), _mlp_params_after(5, True)
    assert all(torch.equal(a, b) for a, b in zip(plain, observed))
    assert not all(torch.equal(a, b) for a, b in zip(plain, _mlp_params_after(4, False)))


LEAK_PROBE = """\
import sys, weakref
import torch
x = torch.ones(1000, requires_grad=True)
s = torch.sigmoid(x * 2)  # SigmoidBackward0 saves its own output
loss = (s * s).sum()
loss.backward(retain_graph=True)
sys._autodiag_probe = [weakref.ref(x), weakref.ref(loss)]
"""


@pytest.mark.parametrize("command", ["graph", "inplace"])
def test_a_torch_run_leaves_no_graph_alive(script, command):
    """Neither the function mode nor the saved-tensor hooks keep a graph (NOTE [Two
    pitfalls] (2): a pack hook returning the tensor itself would leak this one)."""
    import gc

    r = cli(command, script(LEAK_PROBE), "--engine", "torch")
    assert r.exit_code == 0, r.stderr
    probes = sys.__dict__.pop("_autodiag_probe")
    gc.collect()
    assert [p() for p in probes] == [None, None]


def test_a_deep_chain_does_not_crash(tmp_path):
    """NOTE [Deep graphs on PyTorch]: freeing a touched chain of >~45k nodes overflows the
    default thread stack (segfault, exit -11); the command runs in a large-stack thread."""
    (tmp_path / "chain.py").write_text(
        textwrap.dedent("""\
        import torch
        x = torch.ones(1, requires_grad=True)
        y = x
        for _ in range(60_000):
            y = y * 1.0
        y.sum().backward()
        """)
    )
    p = subprocess.run(
        [sys.executable, "-m", "autodiag", "graph", "chain.py", "--engine", "torch", "-q"]
        + ["-f", "json", "-o", "g.json"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "g.json").read_text())
    assert len(doc["nodes"]) == 60_002
    assert doc["nodes"][1]["created_at"]["line"] == 5


def test_leaves_and_parameters_are_named(script):
    path = script("""\
        import torch
        model = torch.nn.Linear(3, 2)
        inp = torch.randn(4, 3, requires_grad=True)
        loss = model(inp).pow(2).mean()
        loss.backward()
        """)
    r = cli("graph", path, "--engine", "torch", "-f", "json", "--show-saved")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    names = {n["variable"]["name"] for n in doc["nodes"] if n["variable"]}
    assert names == {"model.weight", "model.bias", "inp"}
    assert doc["root_names"] == ["loss"]
    pow_node = next(n for n in doc["nodes"] if n["name"] == "PowBackward0")
    assert pow_node["created_at"]["line"] == 4
    assert pow_node["saved"][0] == {
        "name": "self",
        "version": 0,
        "shape": [4, 2],
        "dtype": "float32",
        "bytes": 32,
    }


def test_module_level_roots_without_backward(script):
    path = script("import torch\nw = torch.ones(2, requires_grad=True)\nz = (w * 3).exp()\n")
    r = cli("graph", path, "--engine", "torch", "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "z = ExpBackward0" in r.stdout and "AccumulateGrad w" in r.stdout
    r = cli("graph", path, "--engine", "torch", "--root", "w", "-f", "json")
    assert json.loads(r.stdout)["nodes"][0]["name"] == "AccumulateGrad"


def test_compiled_region_is_transparent(script):
    path = script("""\
        import torch
        def f(x):
            return (x.sin() * 2).sum()
        g = torch.compile(f, backend="aot_eager")
        x = torch.ones(3, requires_grad=True)
        g(x).backward()
        """)
    r = cli("graph", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["nodes"][0]["name"] == "CompiledFunctionBackward"
    assert doc["nodes"][0]["created_at"]["line"] == 6


def test_a_command_not_in_commands_is_refused(script, monkeypatch):
    """Every command runs on PyTorch now; the refusal stays for a command that would not."""
    from autodiag.engines import torch as torch_engine

    monkeypatch.setattr(torch_engine, "COMMANDS", ("graph", "trace"))
    path = script("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    r = cli("gradcheck", path, "--engine", "torch")
    assert r.exit_code == 2
    assert "`gradcheck --engine torch` is not available yet; graph and trace are" in r.stderr


def test_every_command_runs_on_torch():
    from autodiag.cli import app
    from autodiag.engines import torch as torch_engine

    commands = {c.name for c in app.registered_commands} - {None}
    assert commands and commands <= set(torch_engine.COMMANDS)


def test_without_torch_installed_a_clear_exit_2(script, monkeypatch):
    from autodiag.engines import torch as torch_engine

    monkeypatch.setattr(torch_engine, "available", lambda: False)
    path = script("import torch\n")
    r = cli("graph", path, "--engine", "torch", "-f", "json")
    assert r.exit_code == 2
    assert "--engine torch needs PyTorch" in r.stderr
    assert 'pip install "autodiag[torch]"' in r.stderr
    assert json.loads(r.stdout)["status"] == "error"


def test_values_and_expressions_are_refused_on_torch(script):
    path = script("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    r = cli("graph", path, "--engine", "torch", "--values")
    assert r.exit_code == 2 and "--values is not available with --engine torch" in r.stderr
    r = cli("graph", "-e", "x*2", "--var", "x=1", "--engine", "torch")
    assert r.exit_code == 2 and "--engine torch runs scripts" in r.stderr


def test_a_script_that_records_nothing_is_not_a_pass(script):
    r = cli("graph", script("print('hi')\n"), "--engine", "torch")
    assert r.exit_code == 2


def test_timeout_on_the_worker_thread(script):
    path = script("import torch\nx = torch.ones(1, requires_grad=True)\nwhile True:\n    x * 2\n")
    r = cli("inplace", path, "--engine", "torch", "--timeout", "1")
    assert r.exit_code == 3 and "did not finish within --timeout 1 s" in r.stderr


def test_tensors_without_storage_are_not_watched_and_never_break_the_script():
    from autodiag.analysis.inplace import InplaceWatcher
    from autodiag.engines.torch import observe
    from autodiag.trace import tracing

    assert observe._key(torch.ones(2).to_sparse()) is None
    x = torch.ones(3, requires_grad=True)
    with tracing(InplaceWatcher()), observe.observing() as obs:
        for _ in range(3):
            (x.to_sparse() * 2).to_dense().sum().backward()
        obs.sweep()
        assert obs.saves == {}  # every save's node ran and freed it: nothing left to watch
    assert x.grad.tolist() == [6.0, 6.0, 6.0]


def test_the_seam_answers_for_torch_graphs_as_for_autodiags():
    """``autodiag.inspect`` hands PyTorch's nodes and tensors to the torch seam: walking the
    same program on both engines through the seam alone gives the same answers."""
    import autodiag
    from autodiag import inspect
    from autodiag.engines.torch.observe import register

    register()

    def program(lib):
        x = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([0.5, 0.25, 2.0], dtype=lib.float64, requires_grad=True)
        y = (x * w).exp()
        return x, (y.sum() + (x * 2.0).relu().mean())

    (x1, z1), (x2, z2) = program(autodiag), program(torch)
    assert inspect.is_tensor(x1)
    assert inspect.is_tensor(x2) and not inspect.is_tensor(x2.tolist())
    stack = [(inspect.gradient_edge(z1)[0], inspect.gradient_edge(z2)[0])]
    seen = 0
    while stack:
        a, b = stack.pop()
        seen += 1
        ia, ib = inspect.node_info(a), inspect.node_info(b)
        assert type(a).__name__ == type(b).__name__
        assert ia[2] == ib[2] and [c is None for c in ia[1]] == [c is None for c in ib[1]]
        assert inspect.is_leaf_node(a) == inspect.is_leaf_node(b)
        assert inspect.edges(b) == tuple(b.next_functions)
        if inspect.is_leaf_node(b):
            assert inspect.leaf_variable(b) is not None
            assert inspect.shape(inspect.leaf_variable(b)) == (3,)
            assert inspect.dtype_name(inspect.leaf_variable(b)) == "float64"
        else:
            # autodiag leaves Python scalars out; PyTorch keeps some as 0-d tensors (x * 2.0)
            assert inspect.holds_saved(b) >= bool(inspect.saved_entries(a))
            mine = {e.name: e[1:5] for e in inspect.saved_entries(a)}
            theirs = {e.name: e[1:5] for e in inspect.saved_entries(b)}
            assert {k: theirs[k] for k in mine} == mine
        stack.extend((c, d) for c, d in zip(ia[1], ib[1]) if c is not None)
    assert seen == 10
    z2.backward()
    assert inspect.is_freed(z2.grad_fn.next_functions[0][0].next_functions[0][0])
    assert inspect.saved_entries(z2.grad_fn.next_functions[0][0].next_functions[0][0]) == ()


@pytest.mark.parametrize("command", ["graph", "inplace", "anomaly", "leaks", "check", "trace"])
@pytest.mark.parametrize("sample", ["leaky_loop.py", "nan_log.py"])
def test_a_script_on_autodiags_engine_is_refused_by_engine_torch(command, sample):
    # `import autodiag as torch` under --engine torch: PyTorch's observers see none of its ops
    # while autodiag's engine reports them to the same tracers — it was a ✓ ("no graph leak",
    # "no findings") or a crash blamed on the script; never a verdict
    r = cli(command, os.path.join(ROOT, "samples", sample), "--engine", "torch")
    assert r.exit_code == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "computed with autodiag's engine (it imports autodiag)" in r.stderr
    assert "✓" not in r.stdout
