"""NOTE [Untrained on purpose]: a parameter the run used but none of its optimizers holds,
while the run has optimizers, is not trained on purpose (the LSTM tutorial's demonstration
``lstm = nn.LSTM(3, 3)`` run forward once, a DQN target network, a model whose values are
read out to start another, a frozen layer used through ``detach()``): no ``none_grad`` for it,
on either engine. A parameter an optimizer holds that gets no gradient is still an error, so is a
layer built and never used, and every unreached parameter of a script without optimizer (manual
SGD)."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

TUTORIAL = """\
import torch
import torch.nn as nn
torch.manual_seed(0)
lstm = nn.LSTM(3, 3)  # the demonstration: run once, never trained
out, hidden = lstm(torch.randn(5, 1, 3))
target_net = nn.Linear(4, 2)  # a target network: forward under no_grad only
model = nn.Linear(4, 2)
held_unused = nn.Parameter(torch.randn(2))  # in the optimizer, never used
forgotten = nn.Linear(4, 2)  # built, never used, in no optimizer: still a finding
snapshot = nn.Linear(4, 2)  # its values read out once (another model's start), never trained
init = [p.detach().numpy().copy() for p in snapshot.parameters()]
frozen = nn.Linear(4, 4)  # a frozen feature extractor: its weight's detach() feeds the graph
opt = torch.optim.SGD(list(model.parameters()) + [held_unused], lr=0.1)
x = torch.randn(8, 4)
for step in range(3):
    opt.zero_grad()
    with torch.no_grad():
        goal = target_net(x)
    loss = (model(x @ frozen.weight.detach() + frozen.bias.detach()) - goal).pow(2).mean()
    loss.backward()  # LOSS
    opt.step()
"""


def _in_main(source: str) -> str:
    head, _, body = source.partition("torch.manual_seed(0)\n")
    body = textwrap.indent(body, "    ")
    return f"{head}torch.manual_seed(0)\n\n\ndef main():\n{body}\n\nmain()\n"


def _none_grads(path, engine: str):
    r = cli("check", str(path), "-f", "json", "-q", "--engine", engine)
    doc = json.loads(r.stdout)
    found = sorted(
        (f["parameter"], f["reason"], f["severity"])
        for f in doc["findings"]
        if f["kind"] == "none_grad"
    )
    return r.exit_code, found


@pytest.mark.parametrize("place", ["module level", "main()"])
@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_only_what_an_optimizer_holds_is_judged(tmp_path, place, engine):
    source = TUTORIAL if place == "module level" else _in_main(TUTORIAL)
    path = tmp_path / "tutorial.py"
    path.write_text(source)
    code, found = _none_grads(path, engine)
    assert found == [
        ("forgotten.bias", "unused", "error"),
        ("forgotten.weight", "unused", "error"),
        ("held_unused", "unused", "error"),
    ]
    assert code == 1


MANUAL_SGD = """\
import torch
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
x = torch.randn(3)
aux = (b * x).sum()
for step in range(2):
    loss = (w * x).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad = None
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_without_optimizer_every_parameter_is_judged(tmp_path, engine):
    path = tmp_path / "manual.py"
    path.write_text(MANUAL_SGD)
    code, found = _none_grads(path, engine)
    assert found == [("b", "not_reached", "error")]
    assert code == 1
