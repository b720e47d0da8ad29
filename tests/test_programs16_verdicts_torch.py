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
