"""``autodiag check`` on training loops with every optimizer (and a schedule, gradient clipping,
the new losses): the optimizer steps are seen (``on_optimizer_step``), gradient health runs,
and a forgotten ``zero_grad()`` is found whichever optimizer steps."""

from __future__ import annotations

import json

import pytest
from cli_helpers import check_envelope, cli

LOOP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
opt = {opt}
sched = torch.optim.lr_scheduler.{sched}
x, y = torch.randn(16, 3), torch.randn(16, 1)
for step in range(6):
{clear}
    loss = nn.functional.{loss}(model(x), y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    sched.step()
"""

OPTIMIZERS = {
    "SGD": "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)",
    "Adam": "torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)",
    "AdamW": "torch.optim.AdamW(model.parameters(), lr=1e-3)",
    "RMSprop": "torch.optim.RMSprop(model.parameters(), lr=1e-4, centered=True)",
    "Adagrad": "torch.optim.Adagrad(model.parameters(), lr=1e-3)",
    "Adadelta": "torch.optim.Adadelta(model.parameters(), lr=0.01)",
}
SCHEDULES = {
    "SGD": "OneCycleLR(opt, max_lr=0.01, total_steps=6)",
    "Adam": "CosineAnnealingLR(opt, T_max=4)",
    "AdamW": "LinearLR(opt, start_factor=0.5, total_iters=3)",
    "RMSprop": "StepLR(opt, step_size=2)",
    "Adagrad": "ExponentialLR(opt, gamma=0.9)",
    "Adadelta": "MultiStepLR(opt, milestones=[2, 4])",
}
LOSSES = {
    "SGD": "mse_loss",
    "Adam": "l1_loss",
    "AdamW": "smooth_l1_loss",
    "RMSprop": "huber_loss",
    "Adagrad": "mse_loss",
    "Adadelta": "l1_loss",
}


def check_json(path):
    r = cli("check", path, "-f", "json")
    doc = json.loads(r.stdout)
    check_envelope(doc, "check")
    return r.exit_code, doc


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_check_sees_every_optimizer_step(script, name):
    src = LOOP.format(
        opt=OPTIMIZERS[name], sched=SCHEDULES[name], clear="    opt.zero_grad()", loss=LOSSES[name]
    )
    code, doc = check_json(script(src))
    assert doc["optimizer_steps"] == 6 and doc["backward_calls"] == 6
    assert [f for f in doc["findings"] if f["severity"] == "error"] == []
    assert code == 0


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_forgotten_zero_grad_is_found_with_every_optimizer(script, name):
    src = LOOP.format(
        opt=OPTIMIZERS[name], sched=SCHEDULES[name], clear="    pass", loss="mse_loss"
    )
    code, doc = check_json(script(src))
    kinds = [f["kind"] for f in doc["findings"]]
    assert "unplanned_accumulation" in kinds and code == 1
    f = doc["findings"][kinds.index("unplanned_accumulation")]
    assert f["location"]["line"] == 12 and f["optimizer_step"]["line"] == 14


LBFGS = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, line_search_fn="strong_wolfe")
x, y = torch.randn(16, 3), torch.randn(16, 1)


def closure():
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(3):
    opt.step(closure)
"""


def test_check_on_lbfgs_with_a_closure(script):
    code, doc = check_json(script(LBFGS))
    assert doc["optimizer_steps"] == 3 and doc["backward_calls"] > 3
    assert code == 0 and doc["findings"] == []
