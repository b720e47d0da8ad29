"""Verdicts on patterns of the public programs of session 16 (pytorch/tutorials'
spatial_transformer_tutorial.py: ``nn.ReLU(True)`` in its localization network and its
regressor): the same findings, worded the same, on both engines."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

pytest.importorskip("torch")  # the torch engine's half of each comparison

# A unit that never fires, behind an in-place relu of a Sequential (the tutorial's fc_loc)
# and behind F.relu(..., inplace=True) in a module's forward.
DEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc_loc = nn.Sequential(nn.Linear(4, 8), nn.ReLU(True), nn.Linear(8, 6))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(F.relu(self.fc_loc(x), inplace=True))


model = Net()
with torch.no_grad():
    model.fc_loc[0].bias.fill_(1.0)
    model.fc_loc[0].bias[3] = -100.0  # unit 3 of the in-place relu never fires
    model.fc_loc[2].bias.fill_(1.0)
    model.fc_loc[2].bias[5] = -100.0  # unit 5 of the functional one neither
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 4)
for step in range(6):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_dead_unit_behind_an_inplace_relu_names_its_module_on_both_engines(tmp_path, engine):
    p = tmp_path / "stn_relu.py"
    p.write_text(textwrap.dedent(DEAD))
    r = cli("check", str(p), "-f", "json", "--engine", engine)
    assert r.exit_code == 0, r.output  # warnings only
    doc = json.loads(r.stdout)
    msgs = sorted(f["message"] for f in doc["findings"] if f["kind"] == "dead_relu")
    assert msgs == [
        "1 of 6 relu units of model passed no gradient for any sample in 6 backward calls",
        "1 of 8 relu units of model.fc_loc.1 passed no gradient for any sample in 6 backward calls",
    ]


# fgsm_tutorial.py's attack: a trained model that nothing updates, one backward per test
# sample for the input's gradient; the weight's gradients are as large as each sample
# makes them (here 1x, 20x, 400x, 8000x: "grew more than 10x over 3 backward calls").
FROZEN = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 3)
model.eval()
for scale in (1.0, 20.0, 400.0, 8000.0):
    data = torch.full((1, 4), scale)
    data.requires_grad = True
    loss = F.cross_entropy(model(data), torch.tensor([0]))
    model.zero_grad()
    loss.backward()
    perturbed = torch.clamp(data + 0.1 * data.grad.data.sign(), 0, 1)
    {STEP}
"""


def _grew(tmp_path, engine, step):
    p = tmp_path / "fgsm_like.py"
    p.write_text(FROZEN.replace("{STEP}", step))
    r = cli("check", str(p), "-f", "json", "--engine", engine)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return sorted(
        f["message"].split(":")[0] for f in doc["findings"] if f["kind"] == "exploding_grad"
    )


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_gradients_of_a_frozen_model_growing_with_the_samples_are_no_explosion(tmp_path, engine):
    # NOTE [Frozen parameters]: before, model.weight warned on both engines
    assert _grew(tmp_path, engine, "pass") == []


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_growth_while_a_manual_step_updates_the_model_still_warns(tmp_path, engine):
    step = "with torch.no_grad():\n        for p in model.parameters(): p -= 1e-12 * p.grad"
    assert _grew(tmp_path, engine, step) == ["model.weight"]


# fgsm_tutorial.py's model under attack: a conv whose input requires grad (a new tensor per
# sample) before a relu, and a relu channel that never fires.
CONV_INPUT_GRAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
conv = nn.Conv2d(1, 4, 3)
with torch.no_grad():
    conv.bias[2] = -100.0  # channel 2 never fires
for i in range(40):
    data = torch.rand(1, 1, 6, 6)
    data.requires_grad = True
    loss = F.relu(F.max_pool2d(conv(data), 2)).sum()
    conv.zero_grad()
    loss.backward()
    keep = data.grad.data.sign()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_relu_after_a_layer_fed_a_fresh_input_is_one_relu_on_both_engines(tmp_path, engine):
    p = tmp_path / "fgsm_conv.py"
    p.write_text(CONV_INPUT_GRAD)
    r = cli("check", str(p), "-f", "json", "--engine", engine)
    doc = json.loads(r.stdout)
    msgs = [f["message"] for f in doc["findings"] if f["kind"] == "dead_relu"]
    assert msgs == ["1 of 4 relu units passed no gradient for any sample in 40 backward calls"]
