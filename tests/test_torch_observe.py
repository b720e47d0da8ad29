"""``autodiag.torch.observe``: the CLI's observers on a block of real PyTorch code, from Python.

The findings are compared with those of ``autodiag <command> --engine torch`` on a script that
runs the same code; the teardown is checked on PyTorch's own registries (function modes,
saved-tensor hooks, global module and optimizer hooks) and on autodiag's (installed tracers)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import threading
import weakref

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

import autodiag.torch  # noqa: E402
from autodiag.trace import events  # noqa: E402

# The bugs, in a module of their own: the library observes a call of them, the CLI a script
# that makes the same call.
BUGS = """
import torch


def nan():
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    y = torch.sqrt(x) * 3
    y.sum().backward()


def inplace():
    x = torch.tensor([0.5, -1.0], requires_grad=True)
    s = torch.sigmoid(x)
    s.mul_(2)
    s.sum().backward()


def leak(steps=6):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.01)
    history = []
    for _ in range(steps):
        loss = (w * torch.randn(4)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss)
    return history


def clean(steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(8, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model
"""


@pytest.fixture
def bugs(tmp_path, monkeypatch):
    (tmp_path / "observe_bugs.py").write_text(BUGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("observe_bugs", None)
    import observe_bugs

    yield observe_bugs
    sys.modules.pop("observe_bugs", None)


def torch_state() -> dict:
    """Every place PyTorch or autodiag keeps an observer that a block could leave behind."""
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    return {
        "function modes": torch._C._len_torch_function_stack(),
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False),
        "module hooks": (
            len(m._global_forward_pre_hooks),
            len(m._global_forward_hooks),
            len(m._global_backward_hooks),
            len(m._global_backward_pre_hooks),
        ),
        "optimizer hooks": (
            len(o._global_optimizer_pre_hooks),
            len(o._global_optimizer_post_hooks),
        ),
        "tracers": list(events.TRACERS),
        "grad mode": torch.is_grad_enabled(),
        "anomaly mode": torch.is_anomaly_enabled(),
        "default dtype": torch.get_default_dtype(),
    }


def _cli_findings(command: str, tmp_path, call: str) -> list:
    script = tmp_path / "main.py"
    script.write_text(f"import observe_bugs\nobserve_bugs.{call}()\n")
    r = cli(command, str(script), "--engine", "torch", "-f", "json")
    return json.loads(r.stdout)["findings"]


def _essentials(findings: list) -> list:
    """What must agree between the library and the CLI (the stacks' outermost frame differs:
    the test's ``with`` line against the script's line)."""
    return [
        (f["kind"], f["severity"], f["message"], f["location"], f["hint"], f["stack"][1:])
        for f in findings
    ]


# --- the same findings as the CLI --------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "call", "raises"),
    [("anomaly", "nan", False), ("inplace", "inplace", True), ("leaks", "leak", False)],
)
def test_findings_are_the_clis(bugs, tmp_path, command, call, raises):
    with pytest.raises(RuntimeError) if raises else _nothing():
        with autodiag.torch.observe(**{command: True}) as seen:
            getattr(bugs, call)()
    assert seen.command == command
    mine = seen.to_json()
    assert mine["command"] == command and mine["status"] == "findings"
    assert [f.to_json() for f in seen.findings] == mine["findings"]
    theirs = _cli_findings(command, tmp_path, call)
    assert theirs and _essentials(mine["findings"]) == _essentials(theirs)
    line = {"nan": 7, "inplace": 14, "leak": 22}[call]  # sqrt, mul_, history = []
    assert seen.findings[0].location["line"] == line
    assert seen.findings[0].location["file"].endswith("observe_bugs.py")


def test_every_detector_by_default_as_check(bugs, tmp_path):
    with autodiag.torch.observe() as seen:
        bugs.leak()
    assert seen.command == "check"
    assert "graph_leak" in [f.kind for f in seen.findings]
    theirs = _cli_findings("check", tmp_path, "leak")
    assert _essentials(seen.to_json()["findings"]) == _essentials(theirs)
    text = seen.report()
    assert "graph_leak" in text and "history" in text
    assert "1 error, 0 warnings in observe_bugs.py" not in text  # the block is the target
    assert f"in {seen.label} (graph_leak 1; 6 backward calls, 6 optimizer steps)" in text


def test_the_text_report_is_the_clis(bugs, tmp_path):
    with autodiag.torch.observe(anomaly=True) as seen:
        bugs.nan()
    script = tmp_path / "main.py"
    script.write_text("import observe_bugs\nobserve_bugs.nan()\n")
    # --keep-going: a block is never stopped at its first NaN gradient
    r = cli("anomaly", str(script), "--engine", "torch", "--no-color", "--keep-going")
    mine = seen.report()
    # the same report, but for the target's name and the outermost frame of the stack
    theirs = r.stdout.replace("main.py:2 <module>", f"{seen.label.split(':')[0]}:LINE <fn>")
    mine_lines = [ln for ln in mine.splitlines() if "forward stack" not in ln]
    their_lines = [ln for ln in theirs.splitlines() if "forward stack" not in ln]
    assert [ln.replace(seen.label, "T") for ln in mine_lines] == [
        ln.replace(str(script), "T").replace("main.py", "T") for ln in their_lines
    ]


def test_a_clean_block_is_ok(bugs):
    with autodiag.torch.observe() as seen:
        bugs.clean()
    assert seen.status == "ok" and seen.ok and seen.findings == []
    assert seen.ops > 0 and seen.backward_calls == 3 and seen.optimizer_steps == 3
    assert "✓ no findings" in seen.report()
    assert seen.to_json()["status"] == "ok"


def test_print_writes_the_report(bugs, capsys):
    with autodiag.torch.observe(anomaly=True) as seen:
        bugs.nan()
    seen.print()
    assert capsys.readouterr().out == seen.report()


def test_choosing_observers():
    assert autodiag.torch.observe().observers == ("health", "inplace", "leaks", "anomaly")
    assert autodiag.torch.observe(leaks=False).observers == ("health", "inplace", "anomaly")
    assert autodiag.torch.observe(anomaly=True, graph=True).observers == ("anomaly", "graph")
    assert autodiag.torch.observe(inplace=True, leaks=True).command == "check"
    with pytest.raises(ValueError, match="every observer is turned off"):
        autodiag.torch.observe(health=False, inplace=False, leaks=False, anomaly=False)
    with pytest.raises(TypeError, match="expected True or False"):
        autodiag.torch.observe(anomaly="yes")


def test_graph_capture(bugs):
    with autodiag.torch.observe(graph=True) as seen:
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = (x * 3).sin().sum()
        y.backward()
    assert seen.command == "graph" and len(seen.graphs) == 1
    text = seen.report()
    assert "SumBackward0" in text and "SinBackward0" in text and "MulBackward0" in text
    assert "y = (x * 3).sin().sum()" in text
    doc = seen.to_json()
    assert doc["command"] == "graph" and doc["calls"] == 1
    assert {n["name"] for n in doc["nodes"]} >= {"SinBackward0", "AccumulateGrad"}
    assert any(n["variable"] and n["variable"]["name"] == "x" for n in doc["nodes"])
    assert "digraph" in seen.report("dot")


def test_graph_with_detectors_and_no_backward():
    with autodiag.torch.observe(anomaly=True, graph=True) as seen:
        torch.ones(2) * 2
    assert seen.command == "anomaly" and seen.ok
    assert "no backward() call" in seen.report(command="graph")
    with pytest.raises(ValueError, match="reports as 'anomaly' or 'graph'"):
        seen.report(command="leaks")


# --- teardown ----------------------------------------------------------------------------------


def test_everything_installed_is_removed(bugs):
    before = torch_state()
    with autodiag.torch.observe(
        graph=True, health=True, inplace=True, leaks=True, anomaly=True
    ) as seen:
        inside = torch_state()
        bugs.clean()
    assert inside["function modes"] == 1 and inside["saved-tensor hooks"] is not None
    assert inside["tracers"] and inside["module hooks"] != before["module hooks"]
    assert torch_state() == before
    assert seen.ok


def test_an_exception_propagates_with_everything_removed(bugs):
    before = torch_state()
    boom = ValueError("boom")
    with pytest.raises(ValueError) as caught:
        with autodiag.torch.observe() as seen:
            bugs.clean(1)
            raise boom
    assert caught.value is boom
    assert torch_state() == before
    assert seen.status == "error" and not seen.ok
    assert "raised ValueError: boom" in seen.report()
    assert seen.to_json()["error"]["location"]["code"] == "raise boom"


def test_a_version_error_inside_is_the_finding_and_pytorchs_check_holds(bugs):
    before = torch_state()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        with autodiag.torch.observe(inplace=True) as seen:
            bugs.inplace()
    assert torch_state() == before
    assert [f.kind for f in seen.findings] == ["inplace_saved_tensor"]
    assert seen.to_json()["error_is_finding"] is True


def test_grad_mode_and_dtype_are_the_callers():
    with torch.no_grad():
        with autodiag.torch.observe() as seen:
            torch.ones(2) + 1
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
    # what the block sets on purpose stays set (the CLI restores state after a script; a
    # library never undoes its caller's work)
    try:
        with autodiag.torch.observe():
            torch.set_default_dtype(torch.float64)
            torch.ones(2) + 1
        assert torch.get_default_dtype() is torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert seen.ok


def test_no_node_hook_survives_on_a_graph_kept_past_the_block():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with autodiag.torch.observe(anomaly=True):
        y = (x.exp() * 2).sum()
        y.backward(retain_graph=True)
        finder = next(t for t in events.TRACERS if type(t).__name__ == "TorchAnomalyFinder")
        ref = weakref.ref(finder)
        del finder
    gc.collect()
    assert ref() is None  # no hook on y's graph holds the finder
    y.backward()  # the graph works as plain PyTorch
    assert x.grad.tolist() == pytest.approx([4 * 2.718281828, 4 * 7.389056099])


def test_gradients_are_bit_identical_with_and_without(bugs):
    plain = bugs.clean(5)
    with autodiag.torch.observe() as seen:
        observed = bugs.clean(5)
    assert seen.ok, seen.report()
    for p, q in zip(plain.parameters(), observed.parameters()):
        assert torch.equal(p, q)


# --- refusals ----------------------------------------------------------------------------------


def test_nesting_is_an_error_and_the_outer_block_goes_on():
    before = torch_state()
    with autodiag.torch.observe(anomaly=True) as outer:
        with pytest.raises(RuntimeError, match="already observing the code of .*nested"):
            with autodiag.torch.observe():
                pass
        torch.log(torch.zeros(1))
    assert [f.kind for f in outer.findings] == ["inf_forward"]
    assert torch_state() == before


def test_the_same_observation_twice_is_an_error():
    obs = autodiag.torch.observe()
    with obs:
        torch.ones(1) + 1
        with pytest.raises(RuntimeError, match="is already running"):
            obs.__enter__()
    with pytest.raises(RuntimeError, match="has already run .*call autodiag.torch.observe"):
        with obs:
            pass


def test_results_are_read_after_the_block():
    with autodiag.torch.observe() as seen:
        torch.ones(1) + 1
        with pytest.raises(RuntimeError, match="after the `with` block"):
            seen.report()


def test_another_thread_cannot_observe_at_the_same_time():
    errors = []

    def other():
        try:
            with autodiag.torch.observe():
                pass
        except RuntimeError as e:
            errors.append(str(e))

    with autodiag.torch.observe():
        t = threading.Thread(target=other)
        t.start()
        t.join()
        torch.ones(1) + 1
    assert len(errors) == 1 and "two threads" in errors[0]


def test_under_another_autodiag_analysis_it_refuses():
    from autodiag.analysis.anomaly import AnomalyFinder
    from autodiag.trace import tracing

    with tracing(AnomalyFinder()):
        with pytest.raises(RuntimeError, match="another autodiag analysis is running"):
            with autodiag.torch.observe():
                pass


# --- nothing analysed --------------------------------------------------------------------------


def test_a_block_without_a_pytorch_op_is_never_ok():
    with autodiag.torch.observe() as seen:
        sum([1, 2])
    assert seen.status == "error" and not seen.ok
    assert seen.report().startswith("autodiag: nothing analysed: ")
    doc = seen.to_json()
    assert doc["status"] == "error" and doc["error"]["kind"] == "nothing_analysed"


def test_autodiags_own_engine_inside_is_not_a_pass():
    import autodiag as ad

    with autodiag.torch.observe() as seen:
        (ad.ones(2, requires_grad=True) * 2).sum().backward()
        torch.ones(2) * 2
    assert not seen.ok
    assert "computed with autodiag's engine" in seen.report()


def test_without_pytorch_a_clear_import_error(monkeypatch):
    from autodiag.engines import torch as torch_engine

    monkeypatch.setattr(torch_engine, "available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "autodiag\[torch\]"'):
        with autodiag.torch.observe():
            pass
    monkeypatch.undo()
    with autodiag.torch.observe() as seen:  # the failed start left nothing claimed
        torch.ones(1) + 1
    assert seen.ok


def test_importing_it_imports_no_pytorch_and_import_autodiag_not_it():
    code = textwrap.dedent(
        """
        import json, sys
        import autodiag
        first = ["autodiag.torch" in sys.modules, hasattr(autodiag, "torch")]
        import autodiag.torch
        print(json.dumps(first + ["torch" in sys.modules, callable(autodiag.torch.observe)]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, False, False, True]


def test_an_unknown_name_says_what_the_package_is():
    with pytest.raises(AttributeError, match="observer API for real PyTorch code"):
        autodiag.torch.tensor  # noqa: B018


class _nothing:  # noqa: N801 - a context manager like pytest.raises that expects nothing
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_health_judges_what_the_block_touched():
    """NOTE [A block's parameters]: a model the block never used is not its finding; a layer
    of the model it trained that forward leaves out is, as ``autodiag check`` finds it."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used = torch.nn.Linear(2, 1)
            self.forgotten = torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.used(x)

    bystander = torch.nn.Linear(2, 2)  # trained elsewhere in the program
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with autodiag.torch.observe(health=True) as seen:
        for _ in range(2):
            opt.zero_grad()
            net(torch.ones(3, 2)).sum().backward()
            opt.step()
    messages = [f.message for f in seen.findings if f.kind == "none_grad"]
    assert len(messages) == 2 and all("net.forgotten." in m for m in messages)
    assert bystander.weight.grad is None


def test_the_main_threads_stack_may_grow_for_deep_graphs():
    """NOTE [Deep graphs on PyTorch]: freeing a graph of more than ~45k nodes the observer
    touched needs more than the default 8 MB of stack (a 60k chain crashes the process: the
    plugin's test runs one in a subprocess)."""
    resource = pytest.importorskip("resource")
    with autodiag.torch.observe():
        torch.ones(1) + 1
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    assert soft == resource.RLIM_INFINITY or soft >= min(1 << 30, hard)
