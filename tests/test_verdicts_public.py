"""Verdicts on the patterns of public programs (issues 20/22): what ``autodiag check`` said
about pytorch/examples' time_sequence_prediction (LBFGS) and the tutorial
polynomial_custom_function was false; these scripts (ours, mimicking them) stay quiet, and
the runs that really explode still warn."""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
from cli_helpers import cli
from test_health import health

import autodiag
from autodiag.analysis.anomaly import AnomalyFinder
from autodiag.analysis.health import _in_optimizer_step
from autodiag.core.sumsq import CHUNK, sum_of_squares
from autodiag.trace import tracing

# --- LBFGS: the moves between closure evaluations are the optimizer's search ------------------

# A full-batch fit with LBFGS from a fixed start, as time_sequence_prediction trains: its first
# step moves the parameters by several times their norms (model.2.bias by 6.7x between two
# evaluations) and takes the loss from 0.339 to 0.023; PyTorch takes it on to 0.0003 at step 5.
LBFGS_FIT = """\
import autodiag as torch
x = torch.linspace(-3, 3, 32).reshape(-1, 1).double()
y = torch.sin(x)
model = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
with torch.no_grad():  # a fixed start, as a seeded initialisation would give
    model[0].weight.copy_(torch.linspace(-1.0, 1.0, 8).reshape(8, 1))
    model[0].bias.copy_(torch.linspace(0.9, -0.9, 8))
    model[2].weight.copy_(torch.linspace(-0.1, 0.1, 8).reshape(1, 8))
    model[2].bias.fill_(-0.2)
opt = torch.optim.LBFGS(model.parameters(), lr=0.8)
losses = []
for step in range(2):
    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss
    losses.append(opt.step(closure).item())
"""


def test_an_lbfgs_fit_that_converges_is_not_exploding():
    # NOTE [Closure evaluations]: before, four exploding_grad warnings (up to 6.73x)
    assert health(LBFGS_FIT) == []


def test_the_lbfgs_fit_converges_in_pytorch_too():
    torch = pytest.importorskip("torch")
    ns = {}
    exec(LBFGS_FIT.replace("import autodiag as torch", "import torch"), ns)
    assert ns["losses"][1] < ns["losses"][0] / 10
    assert ns["losses"][0] == pytest.approx(0.3388205724, rel=1e-6)
    assert torch.is_tensor(ns["x"])


# LBFGS whose learning rate makes it overshoot: the error grows 4x at each step
LBFGS_DIVERGES = """\
import autodiag as torch
w = torch.tensor([1.0, -1.0], requires_grad=True)
opt = torch.optim.LBFGS([w], lr=3.0, max_iter=3)
for step in range(8):
    def closure():
        opt.zero_grad()
        loss = ((w - 2.0) ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
"""


def test_an_lbfgs_that_diverges_is_exploding():
    found = [f for f in health(LBFGS_DIVERGES) if f["kind"] == "exploding_grad"]
    assert [f["parameter"] for f in found] == ["w"], found
    assert "grew more than 10x" in found[0]["message"] and found[0]["per"] == "optimizer step"


def test_a_step_that_evaluates_its_closure_once_is_still_judged_per_update():
    # SGD's step(closure) evaluates once: its update is lr x gradient, judged as without one
    src = """\
    import autodiag as torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr={lr})
    x, y = torch.randn(64, 4) * 10, torch.randn(64, 1)
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    for _ in range(5):
        opt.step(closure)
    """
    assert health(src.format(lr=1e-3)) == []
    found = [f for f in health(src.format(lr=1.0)) if f["kind"] == "exploding_grad"]
    assert found and all("its own norm" in f["message"] for f in found), found


def _indented(src: str, by: str) -> str:
    return "".join(by + line if line.strip() else line for line in src.splitlines(True))


# the LBFGS loop where scripts put it: at module level, in main(), in a function, in a method
_BODY = LBFGS_FIT.split("opt = ", 1)[1]
LBFGS_PLACES = {
    "module": LBFGS_FIT,
    "main": LBFGS_FIT.split("opt = ", 1)[0]
    + "def main():\n    opt = "
    + _indented(_BODY, "    ").lstrip()
    + "\n\nif __name__ == '__main__':\n    main()\n",
    "function": LBFGS_FIT.split("opt = ", 1)[0]
    + "def train(model, steps):\n    opt = "
    + _indented(_BODY.replace("range(2)", "range(steps)"), "    ").lstrip()
    + "\n\ntrain(model, 2)\n",
    "method": LBFGS_FIT.split("opt = ", 1)[0]
    + "class Trainer:\n    def __init__(self, model):\n        self.model = model\n\n"
    + "    def run(self):\n        opt = "
    + _indented(_BODY.replace("model(x)", "self.model(x)"), "        ").lstrip()
    + "\n\nTrainer(model).run()\n",
}


@pytest.mark.parametrize("place", sorted(LBFGS_PLACES))
def test_check_on_an_lbfgs_loop_anywhere_is_clean_and_says_what_it_checked(place, script):
    path = script(LBFGS_PLACES[place], name=f"lbfgs_{place}.py")
    r = cli("check", path, "--no-color")
    assert r.exit_code == 0, r.output
    assert "no findings" in r.output and "40 backward calls, 2 optimizer steps" in r.output
    r = cli("check", path, "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["status"] == "ok" and doc["findings"] == [], doc


def test_check_on_a_diverging_lbfgs_warns(script):
    path = script(LBFGS_DIVERGES)
    r = cli("check", path, "--no-color")
    assert r.exit_code == 0, r.output  # a warning: check fails on errors only
    assert "1 warning" in r.output and "w: gradient norm grew more than 10x" in r.output


# --- rounding noise: a parameter whose gradient is zero in exact arithmetic --------------------

# The tutorial polynomial_custom_function: y = a + b * P3(c + d * x) fitted to sin on a grid
# symmetric about 0. Everything is odd in x, so the gradient of `a` (a sum of 2000 terms) is
# zero in exact arithmetic: in float32 it is 0, 6.1e-05 or 1.2e-04, at or below the rounding
# noise of that sum (1.8e-04), and `a` moves by one such step times the learning rate
# (3e-10) around 0: "2x its own norm" was noise moving noise.
CUSTOM_FUNCTION = """\
import math
import autodiag as torch


class LegendrePolynomial3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
a = torch.full((), 0.0, requires_grad=True)
b = torch.full((), -1.0, requires_grad=True)
c = torch.full((), 0.0, requires_grad=True)
d = torch.full((), 0.3, requires_grad=True)
learning_rate = {lr}
for t in range(60):
    y_pred = a + b * LegendrePolynomial3.apply(c + d * x)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        for p in (a, b, c, d):
            p -= learning_rate * p.grad
            p.grad = None
"""


def test_a_parameter_moved_by_rounding_noise_is_not_exploding():
    assert health(CUSTOM_FUNCTION.format(lr=5e-6)) == []


def test_the_custom_function_tutorial_with_a_learning_rate_too_high_is_exploding():
    found = [f for f in health(CUSTOM_FUNCTION.format(lr=5e-5)) if f["kind"] == "exploding_grad"]
    # b and d carry the explosion; a and c, whose gradients stay rounding noise, are not named
    assert sorted(f["parameter"] for f in found) == ["b", "d"], found


# --- big arrays: sums of squares in chunks (NOTE [BLAS threads]) ----------------------------


@pytest.mark.parametrize("n", [1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
def test_sum_of_squares_in_chunks_is_the_dot(n):
    r = np.linspace(-2.0, 3.0, n)
    assert sum_of_squares(r) == pytest.approx(float(r.dot(r)), rel=1e-12)
    for bad in (np.nan, np.inf, -np.inf):
        s = r.copy()
        s[-1] = bad  # in the last chunk
        assert not math.isfinite(sum_of_squares(s))


@pytest.mark.parametrize("where", [0, CHUNK, 3 * CHUNK + 4])
def test_anomaly_finds_a_nan_anywhere_in_a_big_gradient(where):
    src = f"""\
    import autodiag as torch
    w = torch.ones(3 * {CHUNK} + 5, dtype=torch.float64, requires_grad=True)
    x = torch.ones(3 * {CHUNK} + 5, dtype=torch.float64)
    x[{where}] = 0.0
    (w * x).sqrt().sum().backward()
    """
    with tracing(AnomalyFinder(keep_going=True)) as finder:
        exec(compile(textwrap.dedent(src), "big.py", "exec"), {})
    kinds = [f.kind for f in finder.findings()]
    assert "nan_backward" in kinds or "inf_backward" in kinds, kinds


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
@pytest.mark.filterwarnings("ignore:Error detected in")  # the forward trace both libraries print
@pytest.mark.parametrize("where", [0, CHUNK, 3 * CHUNK + 4])
def test_detect_anomaly_names_a_nan_in_a_big_gradient_as_pytorch_does(where):
    torch = pytest.importorskip("torch")
    n = 3 * CHUNK + 5
    messages = []
    for lib in (torch, autodiag):
        w = lib.ones(n, dtype=lib.float64, requires_grad=True)
        g = lib.ones(n, dtype=lib.float64)
        g[where] = float("nan")
        with lib.autograd.detect_anomaly(), pytest.raises(RuntimeError) as e:
            (w * 2.0).backward(g)
        messages.append(str(e.value).split("\n")[0])
    assert (
        messages[0]
        == messages[1]
        == "Function 'MulBackward0' returned nan values in its 0th output."
    )


# --- anomaly: values the script writes as -inf, and what a softmax makes of them ------------

# nanoGPT's generate(): top-k by writing -inf through a mask (t[mask] = -inf returns None),
# then a softmax over the wrong dim: a column of -inf has no softmax, NaN
GENERATE = """\
import torch
import torch.nn.functional as F
logits = torch.tensor([[0.1, 2.0, 3.0], [0.05, 1.0, 4.0]])
with torch.no_grad():
    v, _ = torch.topk(logits, 2)
    logits[logits < v[:, [-1]]] = -float("Inf")
    probs = F.softmax(logits, dim=0)
"""


def test_anomaly_finds_the_nan_a_softmax_makes_of_values_written_by_setitem(script):
    r = cli("anomaly", script(GENERATE), "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1, r.stdout
    [f] = doc["findings"]
    assert f["kind"] == "nan_forward" and f["location"]["line"] == 7, f
    assert "softmax" in f["message"]


def test_the_generate_snippet_makes_nan_in_pytorch_too():
    torch = pytest.importorskip("torch")
    ns = {}
    exec(GENERATE, ns)
    assert torch.isnan(ns["probs"]).any() and not torch.isnan(ns["logits"]).any()


MASKED = """\
import torch
torch.manual_seed(0)
s = torch.randn(2, 4, 4, requires_grad=True)
mask = {mask}
att = s.masked_fill(mask, float("-inf")).softmax(-1)
att.sum().backward()
"""


def test_anomaly_finds_a_fully_masked_softmax_row_in_the_forward(script):
    # before: reported as a NaN SoftmaxBackward0 made "from finite incoming gradients"
    src = MASKED.format(mask="torch.zeros(4, 4, dtype=torch.bool)\nmask[0] = True")
    r = cli("anomaly", script(src), "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1, r.stdout
    assert [(f["kind"], f["location"]["line"]) for f in doc["findings"]] == [("nan_forward", 6)]


def test_a_clean_anomaly_verdict_says_what_the_script_set_to_inf_itself(script):
    path = script(MASKED.format(mask="torch.tril(torch.ones(4, 4)) == 0"))
    r = cli("anomaly", path, "--no-color")
    assert r.exit_code == 0, r.output
    assert (
        "every op output and every gradient of 1 backward call was finite, except what the "
        "script set to NaN/Inf on purpose (masked_fill: 1 output)." in " ".join(r.output.split())
    )
    doc = json.loads(cli("anomaly", path, "--format", "json").stdout)
    assert doc["status"] == "ok" and doc["written"] == {"masked_fill": 1}


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_closure_knows_it_runs_inside_an_optimizer_step(engine):
    # what NOTE [Closure evaluations] rests on, for both engines' optimizers
    lib = autodiag if engine == "autodiag" else pytest.importorskip("torch")
    w = lib.ones(2, requires_grad=True)
    seen = []

    def closure():
        seen.append(_in_optimizer_step())
        return (w * w).sum()

    closure()
    lib.optim.LBFGS([w], max_iter=1).step(closure)
    assert seen == [False, True]


def test_a_closure_with_two_backward_calls_and_no_move_between_is_still_judged():
    # two losses backpropagated in one closure: no search, SGD's update is judged
    src = """\
    import autodiag as torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x, y = torch.randn(64, 4) * 10, torch.randn(64, 1)
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        (0.1 * model(x).pow(2).mean()).backward()
        return loss
    for _ in range(5):
        opt.step(closure)
    """
    found = [f for f in health(src) if f["kind"] == "exploding_grad"]
    assert found and all("its own norm" in f["message"] for f in found), found


def test_leaks_counts_an_lbfgs_run_in_optimizer_steps(script):
    # before: "2 steps" over table rows 21 and 22 (its closure's backward calls counted first)
    r = cli("leaks", script(LBFGS_FIT), "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["status"] == "ok", r.stdout
    assert [c["step"] for c in doc["steps"]] == [1, 2], doc["steps"]
