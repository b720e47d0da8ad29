"""Gradient health (analysis/health.py) in-process on purpose-built snippets, and ``autodiag
check`` through the CLI on the samples: each finding kind with its reason and line, and no
false positives on the clean samples or on deliberate micro-batch accumulation."""

from __future__ import annotations

import json
import linecache
import os
import textwrap

import numpy as np
import pytest
from cli_helpers import ROOT, check_envelope, cli

import autodiag as torch
from autodiag.analysis.health import GradHealth, GradNorms, Thresholds
from autodiag.trace import tracing

SAMPLES = os.path.join(ROOT, "samples")


def health(source: str, thresholds: Thresholds | None = None) -> list:
    """Run ``source`` (lines numbered from 1) under GradHealth; its findings as JSON dicts."""
    namespace = {"torch": torch, "nn": torch.nn}
    source = textwrap.dedent(source)
    # as for a script on disk, findings can read the snippet's lines
    linecache.cache["snippet.py"] = (len(source), None, source.splitlines(True), "snippet.py")
    code = compile(source, "snippet.py", "exec")
    with tracing(GradHealth(thresholds)) as tracer:
        exec(code, namespace)
    return [f.to_json() for f in tracer.findings(namespace)]


def only(findings: list, kind: str) -> dict:
    assert [f["kind"] for f in findings] == [kind], findings
    return findings[0]


# --- none_grad: one test per reason -----------------------------------------------------------

SETUP = """\
import autodiag as torch
x = torch.randn(8, 3)
w = torch.randn(3, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
"""


@pytest.mark.parametrize(
    "body, reason, line",
    [
        ("loss = (x @ w).sum()\nloss.backward()\n", "unused", 6),
        ("loss = (x @ w.detach() + b).sum()\nloss.backward()\n", "detach:w", 5),
        ("h = (x @ w).detach()\nloss = (h * b).sum()\nloss.backward()\n", "detach:w", 5),
        ("s = w.sum().item()\nloss = (x @ w + b * s).sum()\nloss.backward()\n", None, None),
        (
            "with torch.no_grad():\n    c = b * 2\nloss = (x @ w + c).sum()\nloss.backward()\n",
            "no_grad",
            6,
        ),
        (
            "with torch.inference_mode():\n    c = b * 2\nloss = (x @ w).sum()\nloss.backward()\n",
            "inference_mode",
            6,
        ),
        ("s = b.item()\nloss = (x @ w + s).sum()\nloss.backward()\n", "item", 5),
        ("s = b.tolist()[0]\nloss = (x @ w + s).sum()\nloss.backward()\n", "tolist", 5),
        (
            "s = float(b.detach().numpy()[0])\nloss = (x @ w + s).sum()\nloss.backward()\n",
            "numpy",
            5,
        ),
        ("aux = (x * b).sum()\nloss = (x @ w).sum()\nloss.backward()\n", "not_reached", 7),
    ],
)
def test_none_grad_reasons(body, reason, line):
    found = health(SETUP + body)
    if reason is None:  # w and b both reach the loss: nothing to report
        assert found == []
        return
    reason, _, name = reason.partition(":")
    f = only(found, "none_grad")
    assert (f["parameter"], f["reason"], f["severity"]) == (name or "b", reason, "error")
    assert f["location"]["line"] == line and f["location"]["file"] == "snippet.py"
    assert f["steps"] == 1 and f["hint"]


def test_none_grad_item_of_a_derived_tensor_and_numpy():
    src = SETUP + "s = (b * 2).item()\nloss = (x @ w + s).sum()\nloss.backward()\n"
    f = only(health(src), "none_grad")
    assert (f["reason"], f["location"]["line"]) == ("item", 5)
    src = SETUP + "with torch.no_grad():\n    s = b.numpy()\n"
    src += "loss = (x @ w).sum()\nloss.backward()\n"
    f = only(health(src), "none_grad")
    assert (f["reason"], f["location"]["line"]) == ("numpy", 6)


def test_none_grad_requires_grad_never_set_in_an_optimizer():
    src = """\
    import autodiag as torch
    x = torch.randn(8, 3)
    w = torch.randn(3, 1)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (x @ w + b).pow(2).mean().backward()
        opt.step()
    """
    f = only(health(src), "none_grad")
    assert (f["parameter"], f["reason"], f["steps"]) == ("w", "requires_grad", 3)


def test_none_grad_one_finding_per_parameter_and_no_false_positives():
    # frozen on purpose, set_to_none after the last backward, autograd.grad inputs, a failed
    # backward's leaves: none of them is a finding; the unused layer is, once, with its steps
    src = """\
    import autodiag as torch
    import autodiag.nn as nn
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    unused = nn.Linear(3, 1)
    model[0].bias.requires_grad_(False)
    opt = torch.optim.SGD(list(model.parameters()) + list(unused.parameters()), lr=0.1)
    x = torch.randn(8, 3)
    for _ in range(4):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    s = torch.tensor(0.5, requires_grad=True)
    (g,) = torch.autograd.grad(s * s, s)
    a = torch.tensor([1.0], requires_grad=True)
    e = a.exp()
    e.add_(1)
    try:
        e.sum().backward()
    except RuntimeError:
        pass
    """
    found = health(src)
    assert sorted((f["parameter"], f["reason"], f["steps"]) for f in found) == [
        ("unused.bias", "unused", 4),
        ("unused.weight", "unused", 4),
    ]


def test_none_grad_all_zero_is_a_warning():
    src = SETUP + "loss = (x @ w).sum() + (b * 0).sum()\nloss.backward()\n"
    f = only(health(src), "none_grad")
    assert (f["parameter"], f["reason"], f["severity"]) == ("b", "zero", "warning")


# --- unplanned_accumulation ---------------------------------------------------------------------

LOOP = """\
import autodiag as torch
import autodiag.nn as nn
torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 3), torch.randn(16, 1)
for step in range(12):
{clear}
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
{step}
"""


def test_forgotten_zero_grad_is_unplanned_accumulation():
    f = only(health(LOOP.format(clear="    pass", step="    opt.step()")), "unplanned_accumulation")
    assert f["location"]["line"] == 10 and f["optimizer_step"]["line"] == 11
    assert f["parameters"] == ["model.weight", "model.bias"] and f["steps"] == 12
    assert "zero_grad()" in f["hint"]


@pytest.mark.parametrize(
    "clear",
    [
        "    opt.zero_grad()",
        "    opt.zero_grad(set_to_none=False)",
        "    model.zero_grad()",
        "    for p in model.parameters():\n        p.grad = None",
        "    for p in model.parameters():\n        if p.grad is not None:\n"
        "            p.grad.zero_()",
    ],
)
def test_every_way_of_clearing_is_seen(clear):
    assert health(LOOP.format(clear=clear, step="    opt.step()")) == []


def test_micro_batch_accumulation_is_not_a_finding():
    # four backward calls per step, cleared after each step: deliberate accumulation
    step = "    if step % 4 == 3:\n        opt.step()\n        opt.zero_grad()"
    assert health(LOOP.format(clear="    pass", step=step)) == []


def test_manual_update_without_clearing_is_unplanned_accumulation():
    src = """\
    import autodiag as torch
    w = torch.ones(3, requires_grad=True)
    for _ in range(5):
        (w * w).sum().backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
    """
    f = only(health(src), "unplanned_accumulation")
    assert f["location"]["line"] == 4 and f["parameters"] == ["w"]


# --- exploding / vanishing norms, dead ReLUs -------------------------------------------------

# a manual step between the calls (NOTE [Frozen parameters]: the gradients of a parameter that
# nothing updates grow with whatever the script feeds it, and are not judged for growth)
GROWING = """\
import autodiag as torch
w = torch.ones(2, requires_grad=True)
for k in range(5):
    w.grad = None
    (w * {base} ** k).sum().backward()
    with torch.no_grad():
        w -= 1e-20 * w.grad
"""


def test_exploding_growth_and_configurable_thresholds():
    f = only(health(GROWING.format(base=100.0)), "exploding_grad")
    assert f["parameter"] == "w" and f["per"] == "backward call" and f["steps"] == 5
    assert f["first"] == 4  # 4 norms of strict growth, the last > 10x the first, at call 4
    assert f["norms"][-1] == pytest.approx(np.sqrt(2) * 1e8, rel=1e-5)
    # 2x per call is 8x over 3 calls: under the default growth (10x); over 3x in 2 calls
    assert health(GROWING.format(base=2.0)) == []
    f = only(
        health(GROWING.format(base=2.0), Thresholds(growth=3.0, growth_steps=2)), "exploding_grad"
    )
    assert "grew more than 3x over 2 backward calls" in f["message"] and f["first"] == 3


def test_vanishing_and_its_threshold():
    f = only(health(GROWING.format(base=1e-3)), "vanishing_grad")
    assert f["first"] == 4  # 1.4e-9 < 1e-7 from the fourth call
    assert health(GROWING.format(base=1e-3), Thresholds(min_norm=1e-12)) == []


DEAD = """\
import autodiag as torch
w = torch.tensor([[1.0, -1.0, 1.0]], requires_grad=True)
for _ in range({n}):
    x = torch.rand(8, 1)
    h = torch.relu(x @ w)
    h.sum().backward()
"""


def test_dead_relu_units_over_steps():
    f = only(health(DEAD.format(n=5)), "dead_relu")
    assert (f["units"], f["width"], f["steps"], f["location"]["line"]) == ([1], 3, 5, 5)
    assert health(DEAD.format(n=4)) == []  # fewer calls than dead_steps
    assert health(DEAD.format(n=4), Thresholds(dead_steps=4))[0]["units"] == [1]


# --- autodiag check through the CLI -------------------------------------------------------------


def check_json(*args):
    r = cli("check", *args, "-f", "json")
    doc = json.loads(r.stdout)
    check_envelope(doc, "check")
    return r.exit_code, doc


def test_check_no_zero_grad_sample():
    code, doc = check_json(os.path.join(SAMPLES, "no_zero_grad.py"))
    assert code == 1 and doc["status"] == "findings"
    (f,) = doc["findings"]
    assert f["kind"] == "unplanned_accumulation" and f["location"]["line"] == 23
    assert f["optimizer_step"]["line"] == 24 and f["severity"] == "error"
    assert doc["backward_calls"] == 30 and doc["optimizer_steps"] == 30


def test_check_detached_param_sample_text_and_json():
    path = os.path.join(SAMPLES, "detached_param.py")
    code, doc = check_json(path)
    (f,) = doc["findings"]
    assert code == 1 and (f["kind"], f["parameter"], f["reason"]) == (
        "none_grad",
        "model.w2",
        "detach",
    )
    assert f["location"]["line"] == 25 and ".detach()" in f["location"]["code"]
    r = cli("check", path, "--no-color")
    assert r.exit_code == 1
    assert "none_grad (1)" in r.stdout and "detached_param.py:25" in r.stdout
    assert "1 error, 0 warnings" in r.stdout


def _dead_units_of_train_sample() -> list:
    """The ReLU units of samples/train.py that are never positive for any sample before any
    optimizer step, computed from the activations (the detector reads gradients instead)."""
    import contextlib
    import io

    namespace: dict = {"__name__": "__main__"}
    seen: list = []
    real_step = torch.optim.Adam.step

    def step(self, *a, **k):
        model, points = namespace["model"], namespace["points"]
        with torch.no_grad():
            h1 = model[1](model[0](points))
            h2 = model[3](model[2](h1))
        seen.append(((h1.numpy() > 0).any(0), (h2.numpy() > 0).any(0)))
        return real_step(self, *a, **k)

    path = os.path.join(SAMPLES, "train.py")
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    torch.optim.Adam.step = step
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, namespace)
    finally:
        torch.optim.Adam.step = real_step
    alive = [np.logical_or.reduce([s[i] for s in seen]) for i in (0, 1)]
    return [np.flatnonzero(~a).tolist() for a in alive]


@pytest.mark.parametrize("name", ["train.py", "model.py", "quickstart.py", "myop.py"])
def test_clean_samples_have_no_false_positive(name):
    code, doc = check_json(os.path.join(SAMPLES, name))
    kinds = [f["kind"] for f in doc["findings"]]
    if name == "train.py":
        # train.py's ReLUs really have dead units: the only findings, warnings (exit 0), one
        # per layer that has any
        expected = [units for units in _dead_units_of_train_sample() if units]
        assert expected and code == 0 and kinds == ["dead_relu"] * len(expected)
        assert [f["units"] for f in doc["findings"]] == expected
    elif name == "quickstart.py":
        # its in-place demo (a caught RuntimeError) is the in-place detector's true finding
        assert code == 1 and kinds == ["inplace_saved_tensor"]
        assert doc["findings"][0]["location"]["line"] == 34
    else:
        assert code == 0 and kinds == [] and doc["status"] == "ok"


def test_micro_batch_training_loop_passes_check(script):
    step = "    if step % 4 == 3:\n        opt.step()\n        opt.zero_grad()"
    code, doc = check_json(script(LOOP.format(clear="    pass", step=step)))
    assert code == 0 and doc["findings"] == [] and doc["backward_calls"] == 12


def test_ignore_warn_only_and_unknown_kinds():
    path = os.path.join(SAMPLES, "no_zero_grad.py")
    code, doc = check_json(path, "--ignore", "unplanned_accumulation")
    assert code == 0 and doc["findings"] == [] and doc["ignored"] == ["unplanned_accumulation"]
    code, doc = check_json(path, "--warn-only", "unplanned_accumulation")
    assert code == 0 and [f["severity"] for f in doc["findings"]] == ["warning"]
    r = cli("check", path, "--ignore", "nope")
    assert r.exit_code == 2 and "unknown finding kind 'nope'" in r.stderr
    assert "unplanned_accumulation" in r.stderr and "dead_relu" in r.stderr


def test_gradcheck_option_on_bad_backward():
    path = os.path.join(SAMPLES, "bad_backward.py")
    code, doc = check_json(path)
    assert code == 0 and doc["findings"] == []
    code, doc = check_json(path, "--gradcheck")
    assert code == 1 and doc["gradchecks"]["failed"] == 2
    assert sorted(f["function"] for f in doc["findings"]) == ["Cube", "Square"]
    assert {f["kind"] for f in doc["findings"]} == {"gradcheck_failed"}


def test_check_reports_nan_and_inplace_in_the_same_run():
    code, doc = check_json(os.path.join(SAMPLES, "nan_log.py"))
    assert code == 1 and {f["kind"] for f in doc["findings"]} == {"nan_forward", "inf_forward"}
    code, doc = check_json(os.path.join(SAMPLES, "inplace_saved.py"))
    assert code == 1 and [f["kind"] for f in doc["findings"]] == ["inplace_saved_tensor"]


# --- a read to print a parameter is not why it got no gradient (issue 15, item 9) -------------


@pytest.mark.parametrize(
    "body, reason",
    [
        # used in the graph, not reached by the loss; printed through .detach().numpy()
        (
            "aux = (x * b).sum()\nprint('b is', b.detach().numpy())\nloss = (x @ w).sum()\n"
            "loss.backward()\n",
            "not_reached",
        ),
        (
            "aux = (x * b).sum()\nprint(f'b={b.item():.3f}')\nloss = (x @ w).sum()\n"
            "loss.backward()\n",
            "not_reached",
        ),
        # never used by an op that records, only printed: unused, and the message says so
        ("print(b.detach().numpy())\nloss = (x @ w).sum()\nloss.backward()\n", "unused"),
    ],
)
def test_a_print_of_the_parameter_is_not_blamed(body, reason):
    f = only(health(SETUP + body), "none_grad")
    assert (f["parameter"], f["reason"]) == ("b", reason), f
    if reason == "unused":
        assert "only read, with .numpy() at line 5" in f["message"]


# --- exploding_grad is relative: the update against the parameter (issue 15, item 8) ---------

POLYNOMIAL = """\
import math
import autodiag as torch
# PyTorch's "Learning PyTorch with Examples" tutorial: a sum-reduced loss over 2000 points, raw
# gradient norms in the thousands, a learning rate to match; it trains fine
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
torch.manual_seed(0)
a, b, c, d = (torch.randn((), requires_grad=True) for _ in range(4))
for t in range(200):
    loss = (a + b * x + c * x ** 2 + d * x ** 3 - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= {lr} * p.grad
            p.grad = None
"""


def test_a_sum_reduced_tutorial_that_trains_is_not_exploding():
    found = health(POLYNOMIAL.format(lr=1e-6))
    assert [f["kind"] for f in found] == [], found
    # its raw gradient norms are large: an absolute threshold of 1e3 would have fired
    with tracing(GradHealth()) as tracer:
        ns = {}
        exec(compile(POLYNOMIAL.format(lr=1e-6), "poly.py", "exec"), ns)
    norms = tracer.detector(GradNorms)  # its records of the leaves
    sizes = [r.state[norms] for r in tracer._records() if norms in r.state]
    assert max(s.bwd_norms.max for s in sizes if s.bwd_norms) > 1e3


def test_a_learning_rate_too_high_is_exploding():
    found = health(POLYNOMIAL.format(lr=1e-3))
    kinds = {f["kind"] for f in found}
    assert "exploding_grad" in kinds, found
    f = next(f for f in found if f["kind"] == "exploding_grad")
    assert f["max_update_ratio"] > 1 and "its own norm" in f["message"]


def test_an_optimizer_step_that_outgrows_the_parameter_is_exploding():
    src = """\
    import autodiag as torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr={lr})
    x, y = torch.randn(64, 4) * 10, torch.randn(64, 1)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    """
    assert health(src.format(lr=1e-3)) == []
    found = health(src.format(lr=1.0))
    f = next(f for f in found if f["kind"] == "exploding_grad")
    assert f["parameter"] in ("model.weight", "model.bias") and f["per"] == "optimizer step"


def test_a_bias_starting_near_zero_that_converges_is_not_exploding():
    # its first update is 40x its norm (0.005 -> 0.205) while every gradient is smaller than the
    # last: the parameter moving to its optimum, not an explosion (a random nn.Linear bias near 0
    # gave this false alarm in about 1 run in 25)
    src = """\
    import autodiag as torch
    p = torch.tensor([0.005], requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    for _ in range(6):
        opt.zero_grad()
        (p - 1.0).pow(2).sum().backward()
        opt.step()
    """
    assert health(src) == []
    # a learning rate that overshoots (the error doubles each step, so do the gradients) is one
    found = health(src.replace("lr=0.1", "lr=1.5"))
    assert [f["kind"] for f in found] == ["exploding_grad"], found
    assert "its own norm" in found[0]["message"]


TOO_HIGH = {
    # the next gradient collapses: tanh units saturated by a 352x update
    "tanh_saturated": """\
    import autodiag as torch
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, :1] > 0).double() * 2 - 1
    w = (torch.randn(4, 1) * 0.1).requires_grad_()
    opt = torch.optim.SGD([w], lr=50.0)
    for _ in range(20):
        opt.zero_grad()
        ((torch.tanh(x @ w) - y) ** 2).mean().backward()
        opt.step()
    """,
    # the next gradient is exactly 0: the ReLU unit died
    "relu_killed": """\
    import autodiag as torch
    torch.manual_seed(1)  # PyTorch's stream: seed 0's weights do not overshoot into dead
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    lin = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=5.0)
    for _ in range(10):
        opt.zero_grad()
        ((torch.relu(lin(x)) - y) ** 2).mean().backward()
        opt.step()
    """,
    # one outlier batch throws the parameter 200x its norm away; training then recovers
    "outlier_step": """\
    import autodiag as torch
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    for i in range(40):
        opt.zero_grad()
        scale = 1000.0 if i == 3 else 1.0
        (scale * ((w - 2.0) ** 2).sum()).backward()
        opt.step()
    """,
}


@pytest.mark.parametrize("case", sorted(TOO_HIGH))
def test_a_large_update_whose_next_gradient_does_not_settle_is_exploding(case):
    # NOTE [Large updates]: excusing the near-zero bias must not excuse these
    found = [f for f in health(TOO_HIGH[case]) if f["kind"] == "exploding_grad"]
    assert found and all(f["max_update_ratio"] > 30 for f in found), found


def test_dead_relu_in_a_sequential_is_named_by_its_module_path():
    src = """\
    import autodiag as torch
    import autodiag.nn as nn
    model = nn.Sequential(nn.Linear(1, 3), nn.ReLU(), nn.Linear(3, 3), nn.ReLU())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0], [-1.0], [1.0]]))
        model[0].bias.zero_()
        model[2].weight.copy_(torch.eye(3))
        model[2].bias.copy_(torch.tensor([0.0, 0.0, -100.0]))
    for _ in range(5):
        model(torch.rand(8, 1)).sum().backward()
    """
    found = [f for f in health(src) if f["kind"] == "dead_relu"]
    # unit 2 of model.1 passes nothing either: model.3 stops its gradient
    assert [(f["module"], f["units"]) for f in found] == [("model.1", [1, 2]), ("model.3", [1, 2])]
    assert "relu units of model.3 passed no gradient" in found[1]["message"]
    assert "on this line" not in found[1]["message"]
