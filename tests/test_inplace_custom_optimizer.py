"""A script's own ``torch.optim.Optimizer`` subclass, on both engines: its step's in-place writes
(``p.add_`` under no_grad, ``p.data.add_``) are optimizer writes, as a built-in optimizer's are
(NOTE [Retained saves] in analysis/inplace.py). A validation graph kept with grad enabled across
the step is a correct program (PyTorch raises nothing): no finding on either engine. When that
graph's backward does run after the step, both engines name the same write, save and backward
lines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import cli

ENGINES = ["autodiag", "torch"]

STEP_NO_GRAD = """\
    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])  # WRITE
"""

STEP_DATA = """\
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-group["lr"])  # WRITE
"""

OPTIMIZER = """\
class MySGD(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

{step}"""

MODEL = """\
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x = torch.randn(16, 4)
opt = MySGD(m.parameters(), lr=0.1)
"""

LOOP = """\
for epoch in range(3):
    opt.zero_grad()
    m(x).pow(2).mean().backward()
    opt.step()
    val_loss = m(x).pow(2).mean()  # SAVE (grad enabled: kept until the next epoch)
    print(val_loss.item())
{after}"""

BUG = "opt.step()\nval_loss.backward()  # NEED\n"


def _indent(text: str, n: int = 4) -> str:
    return "".join(" " * n + line if line.strip() else line for line in text.splitlines(True))


def _module_level(step: str, after: str) -> str:
    return (
        "import torch\n\n" + OPTIMIZER.format(step=step) + "\n" + MODEL + LOOP.format(after=after)
    )


def _in_a_function(step: str, after: str) -> str:
    # the optimizer class itself is defined inside the function that trains
    body = OPTIMIZER.format(step=step) + "\n" + MODEL + LOOP.format(after=after)
    return "import torch\n\n\ndef train():\n" + _indent(body) + "\n\ntrain()\n"


def _in_a_method(step: str, after: str) -> str:
    loop = LOOP.format(after=after).replace("opt.", "self.opt.").replace("m(x)", "self.m(x)")
    return (
        "import torch\n\n"
        + OPTIMIZER.format(step=step)
        + "\n\nclass Trainer:\n"
        + "    def __init__(self, m):\n        self.m = m\n"
        + "        self.opt = MySGD(m.parameters(), lr=0.1)\n\n"
        + "    def fit(self, x):\n"
        + _indent(loop, 8)
        + "\n\n"
        + MODEL.replace("opt = MySGD(m.parameters(), lr=0.1)\n", "")
        + "Trainer(m).fit(x)\n"
    )


def _in_main(step: str, after: str) -> str:
    body = MODEL + LOOP.format(after=after)
    return (
        "import torch\n\n"
        + OPTIMIZER.format(step=step)
        + "\n\ndef main():\n"
        + _indent(body)
        + '\n\nif __name__ == "__main__":\n    main()\n'
    )


LAYOUTS = {
    "module": _module_level,
    "function": _in_a_function,
    "method": _in_a_method,
    "main": _in_main,
}


def _line(source: str, marker: str) -> int:
    (n,) = [i for i, line in enumerate(source.splitlines(), 1) if f"# {marker}" in line]
    return n


def _run(command: str, path: str, engine: str):
    args = [command, path, "-f", "json", "-q"]
    if engine == "torch":
        pytest.importorskip("torch")
        args += ["--engine", "torch"]
    r = cli(*args)
    return r, json.loads(r.stdout)


def _plain(path: str):
    pytest.importorskip("torch")
    return subprocess.run([sys.executable, path], capture_output=True, text=True)


@pytest.mark.parametrize("command", ["inplace", "check"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("step", ["no_grad", "data"])
def test_a_custom_optimizers_step_across_a_kept_validation_graph_is_no_finding(
    script, layout, engine, command, step
):
    source = LAYOUTS[layout](STEP_NO_GRAD if step == "no_grad" else STEP_DATA, "")
    path = script(source)
    if engine == "torch" and command == "inplace":
        ran = _plain(path)
        assert ran.returncode == 0, ran.stderr  # PyTorch runs it without an error
    r, doc = _run(command, path, engine)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert [f for f in doc["findings"] if f["kind"] == "inplace_saved_tensor"] == []


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_kept_graphs_backward_after_the_step_is_found_with_the_same_lines(
    script, layout, engine
):
    source = LAYOUTS[layout](STEP_NO_GRAD, BUG)
    path = script(source)
    if engine == "torch":
        ran = _plain(path)
        assert "modified by an inplace operation" in ran.stderr  # the real bug
    r, doc = _run("inplace", path, engine)
    assert r.exit_code == 1, r.stdout + r.stderr
    (f,) = doc["findings"]
    assert f["kind"] == "inplace_saved_tensor" and f["backward_failed"]
    assert f["location"]["line"] == _line(source, "WRITE")
    assert f["saved_by"]["location"]["line"] == _line(source, "SAVE")
    assert f["needed_by"]["location"]["line"] == _line(source, "NEED")
    assert f["message"].startswith("add_ modified a tensor that AddmmBackward0 saved")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_write_outside_any_step_is_still_reported_at_once(script, engine):
    # the same update written by the script itself, not inside an Optimizer.step: PyTorch's
    # backward of the kept graph would fail, and no optimizer step is involved
    source = """\
        import torch
        w = torch.nn.Parameter(torch.ones(3))
        val = (w * w).sum()
        with torch.no_grad():
            w.add_(1.0)
        print(val.item())
        """
    r, doc = _run("inplace", script(source), engine)
    assert r.exit_code == 1, r.stdout + r.stderr
    (f,) = doc["findings"]
    assert f["location"]["line"] == 5 and f["needed_by"] is None
