"""``anomaly`` and ``leaks`` with ``--engine torch`` (issue 21): an unmodified ``import torch``
script runs on real PyTorch, and the findings — kinds, lines, holders — are those autodiag's
engine gives for the same script written with ``import autodiag as torch``."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from cli_helpers import check_envelope, cli
from test_leaks import CLEAN, HEAD, LEAKY, MORE_LEAKY
from test_torch_engine import LEAK_PROBE, SAMPLES, _both, _mlp_params_after, _twins

torch = pytest.importorskip("torch")


def _anomaly_facts(doc: dict) -> list:
    """Per finding: kind, op or node, the line, the forward stack's lines, and the counts."""
    return [
        (
            f["kind"],
            f.get("op") or f.get("node"),
            (f["location"] or {}).get("line"),
            [s["line"] for s in f["stack"]],
            f["count"],
            f["step"],
            f.get("path"),
            [(o["to"], o.get("variable")) for o in f.get("outgoing", [])],
            [(s or {}).get("name") for s in f.get("inputs", [])],
        )
        for f in doc["findings"]
    ]


def _leak_facts(doc: dict) -> list:
    out = []
    for f in doc["findings"]:
        h = f.get("holder") or {}
        out.append(
            (
                f["kind"],
                f["severity"],
                (f["location"] or {}).get("line"),
                h.get("name"),
                h.get("container"),
                (f.get("created_at") or {}).get("line"),
                f.get("detected_at_step"),
                f.get("growth_nodes_per_step"),
                f.get("nodes_per_tensor"),
                f.get("calls"),
            )
        )
    return out


def _same(command: str, tmp_path, name: str, facts, *options):
    d1, d2 = _both(command, tmp_path, name, *options)
    check_envelope(d2, command)
    assert facts(d2) == facts(d1)
    assert d2["status"] == d1["status"]
    return d1, d2


# --- every sample, on both engines ------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_anomaly_is_the_same_on_both_engines(tmp_path, name):
    d1, d2 = _same("anomaly", tmp_path, name, _anomaly_facts)
    assert d2["propagated"] == d1["propagated"]
    assert d2["backward_calls"] == d1["backward_calls"]
    assert d2.get("written") == d1.get("written")


def test_values_the_script_wrote_are_named_on_both_engines(tmp_path):
    # one judge for both engines (AnomalyFinder._judge): a -inf the script put in with
    # masked_fill is neither an origin nor left out of the clean verdict on PyTorch either
    path = tmp_path / "masked.py"
    path.write_text(
        "import torch\n"
        "x = torch.randn(4, 4, requires_grad=True)\n"
        "mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)\n"
        "x.masked_fill(mask, float('-inf')).softmax(-1).sum().backward()\n"
    )
    for engine in ("autodiag", "torch"):
        r = cli("anomaly", str(path), "--engine", engine)
        assert r.exit_code == 0, r.stderr
        assert "except what the script set to NaN/Inf on purpose (masked_fill: 1 output)" in (
            r.stdout
        ), engine


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_leaks_is_the_same_on_both_engines(tmp_path, name):
    d1, d2 = _same("leaks", tmp_path, name, _leak_facts)
    assert d2["step_source"] == d1["step_source"]
    assert [(c["step"], c["nodes"], c["steps"]) for c in d2["steps"]] == [
        (c["step"], c["nodes"], c["steps"]) for c in d1["steps"]
    ]


def test_nan_sample_names_the_log_line_on_torch(tmp_path):
    _, theirs = _twins(tmp_path, "nan_log.py")
    r = cli("anomaly", theirs, "--engine", "torch", "--no-color")
    assert r.exit_code == 1, r.stderr
    assert "inf_forward  log produced ±inf from finite inputs" in r.stdout
    assert "nan_forward  mul produced NaN from inputs without NaN" in r.stdout
    assert "nan_log.py:17" in r.stdout
    assert "the run was stopped at backward call 1" in r.stdout


def test_leaky_sample_names_history_on_torch(tmp_path):
    _, theirs = _twins(tmp_path, "leaky_loop.py")
    r = cli("leaks", theirs, "--engine", "torch", "--no-color")
    assert r.exit_code == 1, r.stderr
    assert "list `history`" in r.stdout and "leaky_loop.py:19" in r.stdout
    assert "created at" in r.stdout and "leaky_loop.py:22" in r.stdout
    assert "retained_graph" in r.stdout


# --- the bug at module level, in a function, a method, a main() loop ------------------------

PLACES = {
    "module level": """\
x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
y = torch.log(x)  # FORWARD
d = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))  # BACKWARD
(y.clamp_min(-5) + d).sum().backward()
""",
    "function": """\
def f(x):
    y = torch.log(x)  # FORWARD
    d = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))  # BACKWARD
    return (y.clamp_min(-5) + d).sum()


x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
f(x).backward()
""",
    "method": """\
class Net(torch.nn.Module):
    def forward(self, x):
        y = torch.log(x)  # FORWARD
        d = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))  # BACKWARD
        return (y.clamp_min(-5) + d).sum()


x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
Net()(x).backward()
""",
    "main() loop": """\
def main():
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.0)
    for step in range(3):
        opt.zero_grad()
        y = torch.log(w)  # FORWARD
        d = torch.where(w > 0, torch.sqrt(w), torch.zeros_like(w))  # BACKWARD
        (y.clamp_min(-5) + d).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
""",
}


def _torch_twin(source: str) -> str:
    return source.replace("import autodiag.nn as nn", "import torch.nn as nn").replace(
        "import autodiag as torch", "import torch"
    )


def _twin_scripts(tmp_path, body: str, head: str = "import autodiag as torch\n"):
    """``head + body`` as written (``import autodiag as torch``) and with ``import torch``."""
    source = head + textwrap.dedent(body)
    paths = []
    for folder, text in (("a", source), ("b", _torch_twin(source))):
        (tmp_path / folder).mkdir(exist_ok=True)
        p = tmp_path / folder / "bug.py"
        p.write_text(text)
        paths.append(str(p))
    marks = {}
    for i, line in enumerate(source.splitlines(), 1):
        for mark in ("FORWARD", "BACKWARD", "HOLDER", "CREATED", "ORIGIN"):
            if f"# {mark}" in line:
                marks[mark] = i
    return paths, marks


def _run_both(command: str, paths, *options):
    docs = []
    for path, engine in zip(paths, ("autodiag", "torch")):
        r = cli(command, path, "-f", "json", "-q", "--engine", engine, *options)
        docs.append((r.exit_code, json.loads(r.stdout)))
    assert docs[0][0] == docs[1][0], docs
    return docs[0][1], docs[1][1]


@pytest.mark.parametrize("place", list(PLACES))
def test_forward_and_backward_origins_wherever_the_bug_is(tmp_path, place):
    """``log(0)`` in forward, and the masked ``where`` + ``sqrt`` whose NaN appears only in
    backward (PyTorch's anomaly mode names the node, not the line)."""
    paths, marks = _twin_scripts(tmp_path, PLACES[place])
    ours, theirs = _run_both("anomaly", paths, "--keep-going")
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    kinds = {f["kind"]: f for f in theirs["findings"]}
    assert kinds["inf_forward"]["op"] == "log"
    assert kinds["inf_forward"]["location"]["line"] == marks["FORWARD"]
    assert kinds["nan_backward"]["node"] == "SqrtBackward0"
    assert kinds["nan_backward"]["location"]["line"] == marks["BACKWARD"]
    assert kinds["nan_backward"]["outgoing"][0]["to"].endswith("AccumulateGrad")


def test_the_run_stops_at_the_first_nan_gradient(tmp_path):
    paths, _ = _twin_scripts(tmp_path, PLACES["main() loop"])
    ours, theirs = _run_both("anomaly", paths)
    assert theirs["stopped_at_call"] == ours["stopped_at_call"] == 1
    ours, theirs = _run_both("anomaly", paths, "--keep-going")
    assert theirs["backward_calls"] == ours["backward_calls"] == 3
    assert theirs["stopped_at_call"] is None
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)


FINITE_AFTER_OVERFLOWING_SUM = """\
x = torch.full((4,), 3e38, requires_grad=True)
z = x * 1.0  # finite, but its sum overflows float32
y = z.sum()  # FORWARD
y.backward()
"""


def test_a_sum_that_overflows_is_no_false_alarm(tmp_path):
    """NOTE [Torch anomaly cost]: the cheap test is confirmed by an exact count."""
    paths, marks = _twin_scripts(tmp_path, FINITE_AFTER_OVERFLOWING_SUM)
    ours, theirs = _run_both("anomaly", paths)
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    # the sum's inf is real; ``z``, whose own sum overflowed, is not reported
    assert [(f["op"], f["location"]["line"]) for f in theirs["findings"]] == [
        ("sum", marks["FORWARD"])
    ]


def test_anomaly_never_changes_gradients():
    """The node hooks return None: parameters after several steps are bit-identical."""
    from autodiag.analysis.torch_anomaly import TorchAnomalyFinder
    from autodiag.trace import tracing

    plain = _mlp_params_after(5, False)
    with tracing(TorchAnomalyFinder(keep_going=True)):
        observed = _mlp_params_after(5, True)
    assert all(torch.equal(a, b) for a, b in zip(plain, observed))


# --- leaks: holders and lines ---------------------------------------------------------------


def _leak_twins(tmp_path, body: str):
    return _twin_scripts(tmp_path, body, HEAD)


@pytest.mark.parametrize("variant", list(LEAKY))
def test_every_leak_variant_is_the_same_on_both_engines(tmp_path, variant):
    container, root, body = LEAKY[variant]
    paths, marks = _leak_twins(tmp_path, body)
    ours, theirs = _run_both("leaks", paths)
    assert _leak_facts(theirs) == _leak_facts(ours)
    f = [f for f in theirs["findings"] if f["kind"] == "graph_leak"][0]
    assert (f["holder"]["name"], f["holder"]["container"]) == (root, container)
    assert f["location"]["line"] == marks["HOLDER"]
    assert f["created_at"]["line"] == marks["CREATED"]


@pytest.mark.parametrize("variant", list(MORE_LEAKY))
def test_more_leak_variants_on_torch(tmp_path, variant):
    root, body = MORE_LEAKY[variant]
    paths, _ = _leak_twins(tmp_path, "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n" + body)
    ours, theirs = _run_both("leaks", paths)
    leaks = [f for f in theirs["findings"] if f["kind"] == "graph_leak"]
    assert len(leaks) == 1 and leaks[0]["holder"]["name"] == root
    assert _leak_facts(theirs) == _leak_facts(ours)


@pytest.mark.parametrize("variant", list(CLEAN))
def test_clean_loops_are_clean_on_torch(tmp_path, variant):
    paths, _ = _leak_twins(tmp_path, CLEAN[variant])
    ours, theirs = _run_both("leaks", paths)
    assert theirs["findings"] == ours["findings"] == []


RECURRENT = """\
class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, h):
        return torch.tanh(self.lin(x) + h)  # CREATED


def main():
    cell = Cell()
    opt = torch.optim.SGD(cell.parameters(), lr=0.01)
    h = torch.zeros(8, 4)  # HOLDER
    for step in range(8):
        opt.zero_grad()
        h = cell(x, h)
        (h ** 2).mean().backward(retain_graph=True)
        opt.step()


main()
"""


def test_a_recurrent_state_without_detach(tmp_path):
    paths, marks = _leak_twins(tmp_path, RECURRENT)
    ours, theirs = _run_both("leaks", paths)
    assert _leak_facts(theirs) == _leak_facts(ours)
    f = [f for f in theirs["findings"] if f["kind"] == "graph_leak"][0]
    assert f["holder"]["name"] == "h" and f["holder"]["kind"] == "local"
    assert f["created_at"]["line"] == marks["CREATED"]


# --- nothing kept alive -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["anomaly", "leaks"])
def test_a_torch_run_leaves_no_graph_alive(script, command):
    """Node hooks hold nothing of their node; step tokens and weak references keep no graph."""
    import gc

    r = cli(command, script(LEAK_PROBE), "--engine", "torch")
    assert r.exit_code in (0, 1), r.stderr  # leaks: a retain_graph=True never used again
    probes = sys.__dict__.pop("_autodiag_probe")
    gc.collect()
    assert [p() for p in probes] == [None, None]


def test_leaks_leaves_no_optimizer_hook_behind(script):
    from torch.optim.optimizer import _global_optimizer_post_hooks as hooks

    before = len(hooks)
    path = script(
        "import torch\nw = torch.ones(2, requires_grad=True)\nopt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(3):\n    (w * 2).sum().backward()\n    opt.step()\n"
    )
    r = cli("leaks", path, "--engine", "torch")
    assert r.exit_code == 0, r.stderr
    assert len(hooks) == before


def test_a_second_finder_hooks_a_graph_another_finder_hooked():
    """Hooks stay on a retained graph's nodes after a run; a later finder adds its own."""
    from autodiag.analysis.torch_anomaly import TorchAnomalyFinder
    from autodiag.engines.torch.observe import observing
    from autodiag.trace import tracing

    x = torch.tensor([0.0, 1.0], requires_grad=True)
    first, second = TorchAnomalyFinder(keep_going=True), TorchAnomalyFinder(keep_going=True)
    with tracing(first), observing():
        y = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x)).sum()
        y.backward(retain_graph=True)
    with tracing(second), observing():
        y.backward()
    for finder in (first, second):
        assert [f.kind for f in finder.findings()] == ["nan_backward"]
        assert finder.findings()[0].extra["node"] == "SqrtBackward0"
