"""``unplanned_accumulation`` on the standard GAN loop (pytorch/examples dcgan), on both engines:
``errG.backward()`` also fills the discriminator's ``.grad`` after ``optimizerD.step()``, but the
next ``netD.zero_grad()`` clears it before ``optimizerD`` steps again: no update consumes the
stale sum, so there is no finding (NOTE [A stale sum is a bug only when an update consumes it]).
Without that clear, ``optimizerD.step()`` reads errG's gradient: found, at the same line, with
the parameters in the same (the model's) order on both engines."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

BODY = """\
torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
netD = nn.Sequential(
    nn.Unflatten(1, (1, 6)), nn.Conv1d(1, 4, 3, bias=False), nn.BatchNorm1d(4), nn.ReLU(),
    nn.Flatten(), nn.Linear(16, 1),
)
criterion = nn.BCEWithLogitsLoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=1e-3)
optimizerG = torch.optim.SGD(netG.parameters(), lr=1e-2)
real = torch.randn(8, 6)
ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
{before}
for it in range({iters}):
    {clear_d}
    errD_real = criterion(netD(real), ones)
    errD_real.backward()
    fake = netG(torch.randn(8, 4))
    errD_fake = criterion(netD(fake.detach()), zeros)
    errD_fake.backward()
    optimizerD.step()
    netG.zero_grad()
    errG = criterion(netD(fake), ones)
    errG.backward()
    optimizerG.step()
"""

HEAD = "import torch\nimport torch.nn as nn\n"
BACKWARD_LINE = 25  # errG.backward() at module level
STEP_LINE = 22  # optimizerD.step() at module level


def gan(where: str, clear_d: str = "netD.zero_grad()", before: str = "", iters: int = 3) -> str:
    body = BODY.format(clear_d=clear_d, before=before, iters=iters)
    if where == "module level":
        return HEAD + body
    call = "main()" if where == "in a main() loop" else "train()"
    name = call[:-2]
    return HEAD + f"def {name}():\n" + textwrap.indent(body, "    ") + f"{call}\n"


WHERE = ["module level", "in a function", "in a main() loop"]


def _check(script, source: str, name: str) -> tuple:
    """The unplanned_accumulation findings of ``check`` on both engines."""
    path = script(source, name)
    out = []
    for engine in (("--engine", "autodiag"), ("--engine", "torch")):
        r = cli("check", path, "-f", "json", "-q", *engine)
        doc = json.loads(r.stdout)
        out.append([f for f in doc["findings"] if f["kind"] == "unplanned_accumulation"])
    return tuple(out)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("iters", [1, 3])
def test_the_standard_gan_loop_has_no_unplanned_accumulation(script, where, iters):
    ours, theirs = _check(script, gan(where, iters=iters), "gan.py")
    assert ours == [] and theirs == []


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    "clear_d, before",
    [("pass", ""), ("pass", "netD.zero_grad()")],
    ids=["never cleared", "cleared once before the loop"],
)
def test_errG_gradient_reaching_optimizerD_is_found_the_same_on_both_engines(
    script, where, clear_d, before
):
    ours, theirs = _check(script, gan(where, clear_d, before), "gan_bug.py")
    assert len(ours) == 1 and len(theirs) == 1
    (f1,), (f2,) = ours, theirs
    shift = where != "module level"  # `def main():`
    assert f1["location"]["line"] == f2["location"]["line"] == BACKWARD_LINE + shift
    assert f1["optimizer_step"]["line"] == f2["optimizer_step"]["line"] == STEP_LINE + shift
    assert f1["steps"] == f2["steps"] == 3
    # the order the optimizer (the model) holds them, on both engines
    assert (
        f1["parameters"]
        == f2["parameters"]
        == [
            "netD.1.weight",
            "netD.2.weight",
            "netD.2.bias",
            "netD.5.weight",
            "netD.5.bias",
        ]
    )


@pytest.mark.parametrize(
    "clear_d",
    ["optimizerD.zero_grad()", "netD.zero_grad(set_to_none=False)"],
)
def test_every_way_of_clearing_the_discriminator_is_seen(script, clear_d):
    ours, theirs = _check(script, gan("in a main() loop", clear_d), "gan.py")
    assert ours == [] and theirs == []


LOOP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(16, 3)
for step in range(6):
    {clear}
    loss = model(x).pow(2).mean()
    loss.backward()
    {between}
    opt.step()
"""


def test_a_clipped_stale_sum_is_still_consumed(script):
    # clip_grad_norm_ writes .grad in place: the step still reads the stale sum, scaled
    src = LOOP.format(clear="pass", between="torch.nn.utils.clip_grad_norm_(model.parameters(), 1)")
    ours, theirs = _check(script, src, "clip.py")
    assert [(f["location"]["line"], f["steps"]) for f in ours] == [(9, 6)]
    assert [(f["location"]["line"], f["steps"]) for f in theirs] == [(9, 6)]


def test_a_clear_every_other_step_still_lets_a_step_read_a_stale_sum(script):
    # cleared on even steps only: the odd steps' updates read the previous step's gradient too
    src = LOOP.format(clear="if step % 2 == 0: opt.zero_grad()", between="pass")
    ours, theirs = _check(script, src, "every_other.py")
    for found in (ours, theirs):
        (f,) = found
        assert (f["location"]["line"], f["optimizer_step"]["line"], f["steps"]) == (9, 11, 4)
        assert ".grad is not cleared before that update" in f["message"]
    assert ours[0]["parameters"] == theirs[0]["parameters"] == ["model.weight", "model.bias"]
