"""``autodiag leaks``: graphs kept alive across steps, who holds them, and what is not a leak.

Each leaky variant marks the holder's line with ``# HOLDER`` and the line that creates the
retained tensor with ``# CREATED``; the report must name both, and find the leak within 5 steps.
"""

from __future__ import annotations

import gc
import json
import os
import textwrap
import weakref

import pytest
from typer.testing import CliRunner

import autodiag as torch
import autodiag.nn as nn
from autodiag.analysis.leaks import LeakFinder
from autodiag.analysis.referrers import find_holder
from autodiag.cli import app
from autodiag.report.leaks import sparkline
from autodiag.trace import step, tracing
from autodiag.trace.sites import short_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runner = CliRunner()

HEAD = """\
import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 4), torch.randn(8, 1)
"""

LEAKY = {
    "list": (
        "list",
        "history",
        """\
history = []  # HOLDER
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()  # CREATED
    loss.backward()
    opt.step()
    history.append(loss)
""",
    ),
    "dict": (
        "dict",
        "stats",
        """\
stats = {}  # HOLDER
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()  # CREATED
    loss.backward()
    opt.step()
    stats[f"step {step}"] = loss
""",
    ),
    "attribute": (
        "attribute",
        "tracker",
        """\
class Tracker:
    def __init__(self):
        self.running = 0.0  # HOLDER

    def update(self, value):
        self.running = self.running + value  # CREATED


tracker = Tracker()
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    tracker.update(loss)
""",
    ),
    "hook closure": (
        "closure",
        "model",
        """\
def make_hook(t):
    def hook(grad):  # HOLDER
        return grad if t is not None else grad
    return hook


for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()  # CREATED
    model.weight.register_hook(make_hook(loss))
    loss.backward()
    opt.step()
""",
    ),
    "total_loss +=": (
        "variable",
        "total_loss",
        """\
total_loss = 0  # HOLDER
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    total_loss += loss  # CREATED
""",
    ),
    "local list in a function": (
        "list",
        "losses",
        """\
def train(steps):
    losses = []  # HOLDER
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()  # CREATED
        loss.backward()
        opt.step()
        losses.append(loss)
    return len(losses)


train(8)
""",
    ),
}

CLEAN = {
    ".item()": """\
history = []
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    history.append(loss.item())
""",
    ".detach()": """\
history = []
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    history.append(loss.detach())
""",
    "prev_loss = loss": """\
prev_loss = None
for step in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    if prev_loss is not None:
        loss = loss + 0 * prev_loss.detach()
    loss.backward()
    opt.step()
    prev_loss = loss
""",
    "micro-batch accumulation": """\
for step in range(6):
    opt.zero_grad()
    for micro in range(4):
        part = slice(2 * micro, 2 * micro + 2)
        loss = ((model(x[part]) - y[part]) ** 2).mean() / 4
        loss.backward()
    opt.step()
""",
    "retain_graph used by a second backward": """\
for step in range(8):
    opt.zero_grad()
    h = model(x)
    (h ** 2).mean().backward(retain_graph=True)
    ((h - y) ** 2).mean().backward()
    opt.step()
""",
    "gradient penalty (create_graph)": """\
w = torch.randn(4, 1, requires_grad=True)
for step in range(8):
    loss = ((x @ w - y) ** 2).mean()
    g, = torch.autograd.grad(loss, w, create_graph=True)
    (loss + (g ** 2).sum()).backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
""",
}


def leaks_json(path: str, *args: str):
    r = runner.invoke(app, ["leaks", path, "-f", "json", *args], catch_exceptions=False)
    return r.exit_code, json.loads(r.stdout)


def write(tmp_path, body: str, name: str = "loop.py") -> tuple[str, dict]:
    source = HEAD + textwrap.dedent(body)
    p = tmp_path / name
    p.write_text(source)
    marks = {}
    for i, line in enumerate(source.splitlines(), 1):
        for mark in ("HOLDER", "CREATED"):
            if f"# {mark}" in line:
                marks[mark] = i
    return str(p), marks


# --- leaks are found, with holder and creation line ----------------------------------------


@pytest.mark.parametrize("variant", list(LEAKY))
def test_leak_variant_reports_holder_and_creation_line(tmp_path, variant):
    container, root, body = LEAKY[variant]
    path, marks = write(tmp_path, body)
    code, doc = leaks_json(path)
    assert code == 1 and doc["status"] == "findings"
    leaks = [f for f in doc["findings"] if f["kind"] == "graph_leak"]
    assert len(leaks) == 1, doc["findings"]
    f = leaks[0]
    assert f["severity"] == "error"
    assert f["holder"]["name"] == root
    assert f["holder"]["container"] == container
    assert f["location"]["line"] == marks["HOLDER"]
    assert f["created_at"]["line"] == marks["CREATED"]
    assert f["detected_at_step"] <= 5
    assert f["growth_nodes_per_step"] > 0
    assert ".item()" in f["hint"] and ".detach()" in f["hint"]  # both ways out, every form


def test_leaky_sample_text_report():
    r = runner.invoke(
        app,
        ["leaks", os.path.join(ROOT, "samples", "leaky_loop.py"), "--no-color"],
        catch_exceptions=False,
    )
    assert r.exit_code == 1
    out = r.stdout
    sample = short_path(os.path.join(ROOT, "samples", "leaky_loop.py"))  # as the report names it
    assert f"list `history` ({sample}:19) holds tensors with grad_fn, created at {sample}:22" in out
    assert "loss = nn.functional.mse_loss(model(x), y)" in out  # the creation line
    assert "← found" in out and "retained bytes per step" in out
    assert "retained_graph" in out and "leaky_loop.py:23" in out
    assert "loss.item()" in out


def test_leaky_sample_json_census():
    code, doc = leaks_json(os.path.join(ROOT, "samples", "leaky_loop.py"))
    assert code == 1 and doc["step_source"] == "optimizer"
    nodes = [c["nodes"] for c in doc["steps"]]
    assert len(nodes) == 30 and nodes[0] == 0
    assert all(b > a for a, b in zip(nodes, nodes[1:]))  # grows at every step
    kinds = sorted(f["kind"] for f in doc["findings"])
    assert kinds == ["graph_leak", "retained_graph"]
    leak = next(f for f in doc["findings"] if f["kind"] == "graph_leak")
    assert leak["retained_steps"] == 3 and leak["detected_at_step"] == 4  # when found
    assert leak["retained_at_end"]["steps"] == 29 and leak["nodes_per_tensor"] == 6


def test_retain_graph_never_reused(tmp_path):
    path, _ = write(
        tmp_path,
        """\
    for step in range(8):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward(retain_graph=True)
        opt.step()
    """,
    )
    code, doc = leaks_json(path)
    assert code == 1
    (f,) = doc["findings"]
    assert f["kind"] == "retained_graph" and f["severity"] == "warning"
    assert f["location"]["line"] == HEAD.count("\n") + 4 and f["calls"] == 8
    assert "retain_graph=True" in f["hint"]


def test_constant_hook_capture_is_a_warning(tmp_path):
    path, marks = write(
        tmp_path,
        """\
    def make(t):
        def hook(g):  # HOLDER
            return g if t is not None else g
        return hook


    model.weight.register_hook(make(((model(x) - y) ** 2).mean()))
    for step in range(8):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    """,
    )
    code, doc = leaks_json(path)
    (f,) = doc["findings"]
    assert f["kind"] == "graph_leak" and f["severity"] == "warning" and not f["growing"]
    assert f["location"]["line"] == marks["HOLDER"]
    assert "closure variable `t`" in f["holder"]["path"] and "t.detach()" in f["hint"]


# --- and clean loops report nothing ----------------------------------------------------------


@pytest.mark.parametrize("variant", list(CLEAN))
def test_clean_loop_reports_nothing(tmp_path, variant):
    path, _ = write(tmp_path, CLEAN[variant])
    code, doc = leaks_json(path)
    assert (code, doc["findings"]) == (0, [])


@pytest.mark.parametrize(
    "sample",
    ["train.py", "model.py", "quickstart.py", "no_zero_grad.py", "detached_param.py", "myop.py"],
)
def test_samples_without_leaks(sample):
    code, doc = leaks_json(os.path.join(ROOT, "samples", sample))
    assert (code, doc["findings"]) == (0, [])


# --- cases from review: what must (not) be a leak, and what must never crash -------------

MORE_LEAKY = {
    "a new optimizer every epoch": (
        "history",
        """\
history = []
for epoch in range(4):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(5):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if epoch >= 1:
            history.append(loss)
""",
    ),
    "constant retention before a late leak": (
        "history",
        """\
w = [torch.randn(3, requires_grad=True) for _ in range(6)]
history = []
for i in range(20):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    s = [(t * 2).sum() for t in w]
    loss.backward()
    opt.step()
    d1, d2, d3, d4, d5, d6 = s
    del s
    if i >= 8:
        history.append(loss)
""",
    ),
    "a leak beside a one-step holder": (
        "extras",
        """\
v = torch.randn(3, requires_grad=True)
extras = []
prev_out = None
for i in range(10):
    opt.zero_grad()
    out = model(x)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    opt.step()
    prev_out = out
    extras.append((v * 2).sum())
""",
    ),
    "t[i] = loss into a tensor": (
        "losses",
        """\
losses = torch.zeros(30)
for i in range(30):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    losses[i] = loss
""",
    ),
    "a list on a class": (
        "Cfg",
        """\
class Cfg:
    hist = []


for i in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    Cfg.hist.append(loss)
""",
    ),
}


@pytest.mark.parametrize("variant", list(MORE_LEAKY))
def test_more_leaks_one_finding_each(tmp_path, variant):
    root, body = MORE_LEAKY[variant]
    path, _ = write(tmp_path, "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n" + body)
    code, doc = leaks_json(path)
    leaks = [f for f in doc["findings"] if f["kind"] == "graph_leak"]
    assert code == 1 and len(leaks) == 1, [f["message"] for f in leaks]
    assert leaks[0]["holder"]["name"] == root and leaks[0]["severity"] == "error"
    assert "next" not in leaks[0]["holder"]["path"]


def test_growing_graph_of_one_step_is_not_a_leak(tmp_path):
    path, _ = write(
        tmp_path,
        """\
    cell = nn.Linear(8, 8)
    opt = torch.optim.SGD(cell.parameters(), lr=0.01)
    for step in range(10):
        h = torch.zeros(1, 8)
        for t in range(2 + step):  # a longer sequence every step
            h = torch.tanh(cell(h))
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        last_h = h
    """,
    )
    code, doc = leaks_json(path)
    assert (code, doc["findings"]) == (0, [])


@pytest.mark.parametrize("holder", ["collections.deque(maxlen=4)", "Window()"])
def test_bounded_retention_is_a_warning_with_true_figures(tmp_path, holder):
    path, _ = write(
        tmp_path,
        f"""\
    import collections
    class Window(list):
        def append(self, t):
            super().append(t)
            if len(self) == 4:
                self.clear()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    recent = {holder}
    for i in range(21):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        recent.append(loss)
    """,
    )
    code, doc = leaks_json(path)
    (f,) = doc["findings"]
    assert f["severity"] == "warning" and f["bounded"] and f["holder"]["name"] == "recent"
    assert f["growth_nodes_per_step"] > 0 and "+-" not in f["message"]


@pytest.mark.parametrize(
    "oddity",
    [
        "class Proxy:\n    def __getattribute__(self, n):\n        raise RuntimeError('unbound')\n"
        "history = [Proxy()]",
        "class Key:\n    def __repr__(self):\n        raise RuntimeError('no repr')\n"
        "history = {}\nhistory[Key()] = 1",
    ],
)
def test_odd_user_objects_never_break_the_run(tmp_path, oddity):
    path, _ = write(
        tmp_path,
        oddity
        + """
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(8):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if isinstance(history, dict):
        history[i] = loss
    else:
        history.append(loss)
""",
    )
    code, doc = leaks_json(path)
    assert code == 1 and doc["status"] == "findings"
    assert [f["kind"] for f in doc["findings"]] == ["graph_leak"]


# --- steps ----------------------------------------------------------------------------------


def test_steps_at_backward_without_optimizer(tmp_path):
    path, _ = write(
        tmp_path,
        """\
    w = torch.randn(4, 1, requires_grad=True)
    kept = []
    for step in range(6):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        kept.append(loss)
    """,
    )
    code, doc = leaks_json(path)
    assert doc["step_source"] == "backward" and len(doc["steps"]) == 6
    assert code == 1 and doc["findings"][0]["holder"]["name"] == "kept"


def test_explicit_step_markers_win(tmp_path):
    path, _ = write(
        tmp_path,
        """\
    import autodiag.trace
    kept = []
    for epoch in range(5):
        for micro in range(3):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        kept.append(loss)
        autodiag.trace.step()
    """,
    )
    code, doc = leaks_json(path)
    assert doc["step_source"] == "marker" and len(doc["steps"]) == 5
    assert code == 1


def test_no_steps_is_said(tmp_path):
    path, _ = write(tmp_path, "z = (model(x) ** 2).sum()\n")
    r = runner.invoke(app, ["leaks", path, "--no-color"], catch_exceptions=False)
    assert r.exit_code == 0 and "no training step" in r.stdout


def test_grow_steps_option(tmp_path):
    path, _ = write(tmp_path, LEAKY["list"][2])
    _, doc = leaks_json(path, "--grow-steps", "5")
    assert doc["findings"][0]["detected_at_step"] == 6


# --- the census keeps nothing alive ----------------------------------------------------------


def test_census_never_keeps_a_graph_alive():
    finder = LeakFinder()
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 3)
    gc.disable()
    try:
        with tracing(finder):
            refs = []
            for _ in range(4):
                opt.zero_grad()
                loss = model(x).pow(2).mean()
                refs.append(weakref.ref(loss.grad_fn))
                loss.backward(retain_graph=True)
                opt.step()
            del loss
            # freed by reference counting alone, while the finder is still installed
            assert all(r() is None for r in refs)
        assert finder.census[-1]["nodes"] == 0
    finally:
        gc.enable()


def test_finder_is_quiet_on_a_clean_loop_in_process():
    finder = LeakFinder()
    w = torch.ones(3, requires_grad=True)
    with tracing(finder):
        for _ in range(6):
            (w * 2).sum().backward()
            step()
    assert finder.mode == "marker" and finder.findings() == []


# --- the referrer search --------------------------------------------------------------------


def test_find_holder_paths():
    kept = {"a": [torch.ones(1)]}
    holder, chain = find_holder(kept["a"][0])
    del chain
    assert (holder.kind, holder.name, holder.path, holder.container) == (
        "local",
        "kept",
        "kept['a'][0]",
        "list",
    )

    class Box:
        pass

    box = Box()
    box.value = torch.ones(2)
    holder, chain = find_holder(box.value)
    del chain
    assert (holder.path, holder.container) == ("box.value", "attribute")


def test_find_holder_path_through_node_metadata():
    """A node keeps metadata in its NodeExtras; the path is what the user wrote."""
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.metadata["kept"] = torch.zeros(3)
    holder, chain = find_holder(y.grad_fn.metadata["kept"])
    del chain
    assert holder.path == "y.grad_fn.metadata['kept']"


def test_sparkline():
    assert sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert sparkline([0, 0]) == "▁▁"
