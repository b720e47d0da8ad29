"""Every command finds its bug wherever the code lives: at module level, in a function, in a
method, and in a loop inside ``main()`` (issue 15: a training loop inside ``train()`` used to
get no gradient-health findings, because they were judged at the end of the run from tensors
that had died with the function's frame).

Each bug runs through the real CLI (``check`` and its own command) in the four layouts, and
the finding must name the same thing in each: the parameter, the kind, the line of the bug."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

HEAD = "import autodiag as torch\nimport autodiag.nn as nn\n"

# name -> (command, body, kind, what the finding names, the marked line's text)
BUGS = {
    "zero_grad": (
        "check",
        """\
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x = torch.randn(32, 3)
        y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
        for step in range(6):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # BUG
            opt.step()
        """,
        "unplanned_accumulation",
        "model.weight",
    ),
    "detached": (
        "check",
        """\
        torch.manual_seed(0)
        w1 = nn.Parameter(torch.randn(4, 8))
        w2 = nn.Parameter(torch.randn(8, 1))
        opt = torch.optim.SGD([w1, w2], lr=0.05)
        for step in range(3):
            opt.zero_grad()
            h = torch.tanh(torch.randn(16, 4) @ w1)
            loss = (h @ w2.detach()).pow(2).mean()  # BUG
            loss.backward()
            opt.step()
        """,
        "none_grad",
        "w2",
    ),
    "unused_layer": (
        "check",
        """\
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        head = nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        for step in range(3):
            opt.zero_grad()
            loss = net(torch.randn(5, 3)).pow(2).mean()
            loss.backward()  # BUG
            opt.step()
        """,
        "none_grad",
        "head.weight",
    ),
    "leak": (
        "leaks",
        """\
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x, y = torch.randn(8, 10), torch.randn(8, 1)
        history = []  # BUG
        for _ in range(10):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            history.append(loss)
        """,
        "graph_leak",
        "history",
    ),
    "nan": (
        "anomaly",
        """\
        logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]], requires_grad=True)
        mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
        p = torch.softmax(logits, dim=1) * mask
        p = p / p.sum(dim=1, keepdim=True)
        entropy = -(p * torch.log(p)).sum()  # BUG
        entropy.backward()
        """,
        "inf_forward",
        "log",
    ),
    "freed": (
        "check",
        """\
        w = torch.ones(3, requires_grad=True)
        h = torch.tanh(w * 2)
        for step in range(2):
            loss = (h * step).sum()
            loss.backward()  # BUG
        """,
        "freed_graph",
        "TanhBackward0",
    ),
    "inplace": (
        "inplace",
        """\
        x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        s = torch.sigmoid(x)
        s.mul_(2)  # BUG
        loss = s.sum()
        loss.backward()
        """,
        "inplace_saved_tensor",
        "mul_",
    ),
}


def layout(body: str, how: str) -> str:
    b = textwrap.dedent(body).strip("\n")
    if how == "module":
        return HEAD + b + "\n"
    if how == "function":
        return HEAD + "\ndef train():\n" + textwrap.indent(b, "    ") + "\n\n\ntrain()\n"
    if how == "method":
        return (
            HEAD
            + "\nclass Trainer:\n    def run(self):\n"
            + textwrap.indent(b, "        ")
            + "\n\n\nTrainer().run()\n"
        )
    assert how == "main"
    return (
        HEAD
        + "\ndef main():\n    for epoch in range(1):\n"
        + textwrap.indent(b, "        ")
        + "\n\n\nif __name__ == '__main__':\n    main()\n"
    )


LAYOUTS = ("module", "function", "method", "main")


def _line_of_bug(source: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if "# BUG" in line)


@pytest.mark.parametrize("how", LAYOUTS)
@pytest.mark.parametrize("bug", sorted(BUGS))
@pytest.mark.parametrize("via", ["own", "check"])
def test_every_command_finds_its_bug_in_every_layout(script, bug, how, via):
    command, body, kind, names = BUGS[bug]
    source = layout(body, how)
    path = script(source, f"{bug}_{how}.py")
    r = cli(command if via == "own" else "check", path, "-f", "json")
    doc = json.loads(r.stdout)
    found = [f for f in doc["findings"] if f["kind"] == kind]
    assert r.exit_code == 1 and found, (r.stdout, r.stderr)
    f = found[0]
    assert names in json.dumps(f), f
    line = _line_of_bug(source)  # a leak: where its holder was made
    where = [fr["line"] for fr in f["stack"]] + ([f["location"]["line"]] if f["location"] else [])
    assert line in where, (line, f)


def test_a_model_held_by_self_is_named_by_its_attribute(script):
    path = script(
        HEAD
        + textwrap.dedent("""\
        class Trainer:
            def __init__(self):
                self.model = nn.Linear(3, 1)
                self.extra = nn.Linear(3, 1)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self):
                for _ in range(2):
                    self.opt.zero_grad()
                    self.model(torch.randn(4, 3)).sum().backward()
                    self.opt.step()


        Trainer().fit()
        """)
    )
    doc = json.loads(cli("check", path, "-f", "json").stdout)
    params = sorted(f["parameter"] for f in doc["findings"] if f["kind"] == "none_grad")
    assert params == ["self.extra.bias", "self.extra.weight"], doc["findings"]
