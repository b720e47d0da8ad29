"""``check --engine torch`` runs the anomaly and leak detectors on PyTorch (the finders of
``anomaly``/``leaks --engine torch``): an infinite gradient, a NaN made in the forward pass or a
graph kept across steps is a finding, never a ✓ (review10: all three were "✓ no findings")."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

INF_GRAD = """\
import torch
w = torch.zeros(3, requires_grad=True)
w.sqrt().sum().backward()
"""

NAN_FORWARD = """\
import torch
w = torch.ones(3, requires_grad=True)
x = torch.full((3,), float("inf"))
(w * (x - x)).sum().backward()
"""

LEAK = """\
import torch
w = torch.ones(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
total = 0
for step in range(6):
    opt.zero_grad()
    loss = (w * 2).sum()
    loss.backward()
    opt.step()
    total = total + loss
"""

CLEAN = """\
import torch
w = torch.ones(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(4):
    opt.zero_grad()
    loss = (w * 2).sum()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(
    "source, kinds",
    [
        (INF_GRAD, {"inf_backward"}),
        (NAN_FORWARD, {"nan_forward"}),
        (LEAK, {"graph_leak"}),
    ],
    ids=["inf_grad", "nan_forward", "leak"],
)
def test_check_on_torch_finds_what_autodiag_finds(script, source, kinds):
    path = script(source)
    theirs = cli("check", path, "-f", "json", "-q", "--engine", "torch")
    ours = cli("check", path, "-f", "json", "-q")
    doc = json.loads(theirs.stdout)
    found = {f["kind"] for f in doc["findings"]}
    assert kinds <= found, theirs.stderr[-2000:]
    assert theirs.exit_code == 1
    assert doc["not_checked"] == ["freed"]
    assert ours.exit_code == theirs.exit_code


def test_clean_script_passes_on_torch(script):
    r = cli("check", script(CLEAN), "--engine", "torch", "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "✓ no findings" in r.stdout
