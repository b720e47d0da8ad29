"""``autodiag inplace`` and ``check`` on both engines: an optimizer step's write to a parameter
that a graph no backward ran saved is reported only once a backward needs it (NOTE [Retained
saves] in analysis/inplace.py): a validation forward kept with grad enabled across the next
``opt.step()`` is a correct program, PyTorch raises nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import cli

ENGINES = ["autodiag", "torch"]

VAL_LOOP = """\
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(16, 4)
    for epoch in range(3):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        val_loss = m(x).pow(2).mean()  # grad enabled: its graph lives until the next epoch's
        print(val_loss.item())
    {after}
    """


def _run(command: str, path: str, engine: str):
    args = [command, path, "-f", "json", "-q"]
    if engine == "torch":
        pytest.importorskip("torch")
        args += ["--engine", "torch"]
    r = cli(*args)
    return r, json.loads(r.stdout)


@pytest.mark.parametrize("command", ["inplace", "check"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_kept_validation_graph_across_optimizer_steps_is_no_finding(script, engine, command):
    path = script(VAL_LOOP.format(after="pass"))
    if engine == "torch":
        pytest.importorskip("torch")
        ran = subprocess.run([sys.executable, path], capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr  # PyTorch runs it without an error
    r, doc = _run(command, path, engine)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert [f for f in doc["findings"] if f["kind"] == "inplace_saved_tensor"] == []


@pytest.mark.parametrize("engine", ENGINES)
def test_the_same_write_is_named_when_a_backward_then_needs_it(script, engine):
    # the last epoch's val_loss graph saved weights the next step writes: backward then fails
    path = script(VAL_LOOP.format(after="opt.step()\n    val_loss.backward()"))
    r, doc = _run("inplace", path, engine)
    assert r.exit_code == 1, r.stdout + r.stderr
    (f,) = doc["findings"]
    assert f["kind"] == "inplace_saved_tensor" and f["location"]["line"] == 12
    assert f["backward_failed"] and f["saved_by"]["location"]["line"] == 10
