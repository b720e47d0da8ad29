"""``autodiag inplace`` on both engines: writes after a backward that kept the graph
(``retain_graph=True``, NOTE [Retained saves] in analysis/inplace.py) and optimizer steps that
write a tensor another graph saved (the GAN pattern) are named at the writing line, the same
on autodiag's engine and on PyTorch; the same writes with no later backward are no finding."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

ENGINES = ["autodiag", "torch"]

RETAINED = {
    "module": """\
        import torch
        x = torch.randn(3, requires_grad=True)
        y = x.sigmoid()
        loss = y.sum()
        loss.backward(retain_graph=True)
        y.mul_(2)
        loss.backward()
        """,
    "function": """\
        import torch
        def run():
            x = torch.randn(3, requires_grad=True)
            y = x.sigmoid()
            loss = y.sum()
            loss.backward(retain_graph=True)
            y.mul_(2)
            loss.backward()
        run()
        """,
    "method": """\
        import torch
        class Trainer:
            def run(self):
                x = torch.randn(3, requires_grad=True)
                y = x.sigmoid()
                loss = y.sum()
                loss.backward(retain_graph=True)
                y.mul_(2)
                loss.backward()
        Trainer().run()
        """,
    "main_loop": """\
        import torch
        def main():
            x = torch.randn(3, requires_grad=True)
            y = x.sigmoid()
            loss = y.sum()
            for step in range(3):
                loss.backward(retain_graph=True)
                if step == 1:
                    y.mul_(2)
        main()
        """,
}
# (the line that writes, the backward call that failed after it)
WHERE = {"module": (6, 2), "function": (7, 2), "method": (8, 2), "main_loop": (9, 3)}


def _run(path: str, engine: str, *more):
    args = ["inplace", path, "-f", "json", "-q", *more]
    if engine == "torch":
        pytest.importorskip("torch")
        args += ["--engine", "torch"]
    r = cli(*args)
    return r, json.loads(r.stdout)


def _facts(doc: dict) -> list:
    return sorted(
        (
            f["kind"],
            f["location"]["line"],
            f["op"],
            f["saved_by"]["node"] if f["saved_by"] else None,
            f["backward_failed"],
            f["needed_by"]["call"] if f["needed_by"] else None,
        )
        for f in doc["findings"]
    )


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", sorted(RETAINED))
def test_a_write_after_a_retained_backward_is_named_at_its_line(script, engine, where):
    r, doc = _run(script(RETAINED[where]), engine)
    assert r.exit_code == 1, r.stderr
    line, call = WHERE[where]
    assert _facts(doc) == [("inplace_saved_tensor", line, "mul_", "SigmoidBackward0", True, call)]
    (f,) = doc["findings"]
    assert f["after_backward_call"] == call - 1
    assert "retain_graph=True" in f["message"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_write_after_a_retained_backward_that_no_backward_needs_is_no_finding(script, engine):
    path = script("""\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.randn(4, 3)).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
        y = torch.randn(3, requires_grad=True).sigmoid()
        y.sum().backward(retain_graph=True)
        y.mul_(2)
        """)
    r, doc = _run(path, engine)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert doc["findings"] == []


GAN = """\
    import torch
    torch.manual_seed(0)
    g = torch.nn.Linear(3, 3)
    d = torch.nn.Linear(3, 1)
    opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
    fake = g(torch.randn(4, 3))
    loss_d = d(fake).mean()
    loss_g = -d(fake).mean()
    loss_d.backward(retain_graph=True)
    opt_d.step()
    loss_g.backward()
    """


@pytest.mark.parametrize("engine", ENGINES)
def test_an_optimizer_step_writing_what_another_graph_saved_is_named(script, engine):
    """opt_d.step() (line 10) writes d.weight, which loss_g's graph saved at line 8."""
    r, doc = _run(script(GAN), engine)
    assert r.exit_code == 1, r.stderr
    assert _facts(doc) == [("inplace_saved_tensor", 10, "add_", "AddmmBackward0", True, 2)]
    (f,) = doc["findings"]
    assert f["saved_by"]["location"]["line"] == 8 and not f["saved_by"]["output"]
    assert f["no_grad"] and f["after_backward_call"] is None


@pytest.mark.parametrize("engine", ENGINES)
def test_a_training_loop_stays_clean(script, engine):
    path = script("""\
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.randn(8, 3)).pow(2).mean()
            loss.backward()
            opt.step()
        """)
    r, doc = _run(path, engine)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert doc["findings"] == []
