"""``dead_relu`` on a network run once per time step (REINFORCE's policy, an unrolled loop):
the calls of one relu after the same layer are the same units, their samples pooled over the
backward call. Judged per time step, a unit that fires only at some steps looked dead at the
others: 20 warnings on a REINFORCE loop before. A unit dead at every step is still found, once,
on both engines; relus after other layers on one line stay apart."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

POLICY = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(1, 4)
        self.affine2 = nn.Linear(4, 2)
        with torch.no_grad():
            self.affine1.weight.copy_(torch.tensor([[1.0], [-1.0], [2.0], [0.0]]))
            self.affine1.bias.copy_(torch.tensor([0.0, 0.0, 0.0, -1.0]))  # unit 3: dead

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)


policy = Policy()
opt = torch.optim.SGD(policy.parameters(), lr=0.0)
for episode in range(6):
    log_probs = []
    for t in range(6):  # one sample a step: positive states feed units 0 and 2, negative unit 1
        state = torch.tensor([[1.0 if t % 2 else -1.0]])
        log_probs.append(policy(state).log()[0, 0])
    opt.zero_grad()
    loss = -torch.stack(log_probs).sum()
    loss.backward()
    opt.step()
"""

LAYERS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.manual_seed(0)
layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
with torch.no_grad():
    for layer in layers:
        layer.weight.copy_(torch.full((3, 3), 1 / 3))
        layer.bias.zero_()
    layers[1].bias[2] = -100.0  # the second layer's unit 2 is dead, the others alive
opt = torch.optim.SGD(layers.parameters(), lr=0.0)
for step in range(6):
    x = torch.rand(5, 3) + 0.1
    for layer in layers:
        x = F.relu(layer(x))
    opt.zero_grad()
    x.sum().backward()
    opt.step()
"""


def _place(source: str, place: str) -> str:
    if place == "module level":
        return source
    head, _, body = source.partition("torch.manual_seed(0)\n")
    body = textwrap.indent(body, "    ")
    if place == "function":
        return f"{head}torch.manual_seed(0)\n\n\ndef main():\n{body}\n\nmain()\n"
    return (
        f"{head}torch.manual_seed(0)\n\n\nclass Run:\n    def go(self):\n"
        f"{textwrap.indent(body, '    ')}\n\nRun().go()\n"
    )


def _dead(tmp_path, source, engine):
    path = tmp_path / "s.py"
    path.write_text(source)
    r = cli("check", str(path), "-f", "json", "-q", "--engine", engine)
    doc = json.loads(r.stdout)
    return (
        r.exit_code,
        [
            (f["units"], f["width"], f["steps"], f["ordinal"])
            for f in doc["findings"]
            if f["kind"] == "dead_relu"
        ],
        doc,
    )


@pytest.mark.parametrize("place", ["module level", "function", "method"])
@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_policy_run_per_time_step_pools_its_steps(tmp_path, place, engine):
    code, dead, doc = _dead(tmp_path, _place(POLICY, place), engine)
    assert dead == [([3], 4, 6, 0)], doc["findings"]
    assert code == 0  # a warning


@pytest.mark.parametrize("place", ["module level", "function"])
@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_relus_after_other_layers_on_one_line_stay_apart(tmp_path, place, engine):
    code, dead, doc = _dead(tmp_path, _place(LAYERS, place), engine)
    assert dead == [([2], 3, 6, 1)], doc["findings"]
    assert "(call #2)" in doc["findings"][0]["message"] or "#2" in doc["findings"][0]["message"]
