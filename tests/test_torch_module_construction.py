"""NOTE [Module construction] (engines/torch/observe.py): the ops PyTorch's own modules run while
they are built (``Linear.__init__``'s ``torch.empty``, ``reset_parameters``' ``kaiming_uniform_``
and its ``dim()``/``size()`` reads) are the backend's, not the script's: no tracer is told of
them. What the script itself calls — ``nn.init.xavier_uniform_(layer.weight)`` at module level
or in its own module's ``__init__``, ``layer.reset_parameters()`` — is still the script's op, and
a layer built and never used is still a ``none_grad`` error, on either engine."""

from __future__ import annotations

import json
import textwrap

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

BUILT = """\
import torch
import torch.nn as nn
layer = nn.Linear(4, 3)
nn.init.xavier_uniform_(layer.weight)
class Mine(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        nn.init.zeros_(self.fc.bias)
        self.conv = nn.Conv2d(1, 2, 3)
        self.norm = nn.BatchNorm1d(2)
        self.rnn = nn.LSTM(2, 2)
m = Mine()
layer.reset_parameters()
"""


def _ops(source: str, where: str) -> list:
    """(op, line) of each op an ``on_op`` listener is told of while ``source`` runs observed."""
    from autodiag.engines.torch.observe import observing, register
    from autodiag.trace import Tracer, tracing

    class Ops(Tracer):
        observes_torch = True

        def __init__(self):
            self.seen = []

        def on_op(self, op, node, inputs, outputs, stack):
            loc = stack.location() if stack is not None else None
            self.seen.append((op, loc["line"] if loc else None))

    register()
    ops = Ops()
    if where == "main":
        source = "def main():\n" + textwrap.indent(source, "    ") + "\nmain()\n"
    with tracing(ops), observing():
        exec(compile(source, "<built>", "exec"), {"__name__": "__main__"})  # noqa: S102
    return ops.seen


@pytest.mark.parametrize("where", ["module", "main"])
def test_ops_of_torchs_module_construction_are_not_the_scripts(where):
    seen = _ops(BUILT, where)
    shift = 1 if where == "main" else 0  # the def line
    lines = {line - shift for _, line in seen}
    # lines 3, 8, 10-12 build PyTorch's modules: none of their ops is the script's
    assert lines == {4, 9, 14}, seen
    names = [op for op, _ in seen]
    assert "empty" not in names and "kaiming_uniform_" in names  # (14: reset_parameters())
    assert "uniform_" in names and "zero_" in names  # xavier at 4, zeros_ at 9


UNUSED = """\
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(4, 2)
built = nn.Linear(4, 3)  # in the optimizer, never used
aside = nn.Linear(4, 3)  # in no optimizer, never used: initialised by the script only
nn.init.xavier_uniform_(aside.weight)
opt = torch.optim.SGD(list(model.parameters()) + list(built.parameters()), lr=0.1)
x = torch.randn(8, 4)
for step in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
@pytest.mark.parametrize("where", ["module", "main"])
def test_a_layer_built_and_never_used_is_still_a_none_grad_error(tmp_path, engine, where):
    source = UNUSED
    if where == "main":
        head, _, body = source.partition("torch.manual_seed(0)\n")
        body = textwrap.indent(body, "    ")
        source = f"{head}torch.manual_seed(0)\n\n\ndef main():\n{body}\n\nmain()\n"
    path = tmp_path / "unused.py"
    if engine == "autodiag":
        source = source.replace("import torch\n", "import autodiag as torch\n", 1).replace(
            "import torch.nn as nn", "import autodiag.nn as nn"
        )
    path.write_text(source)
    r = cli("check", str(path), "-f", "json", "-q", "--engine", engine)
    assert r.exit_code == 1, r.stderr[-3000:]
    found = sorted(
        (f["parameter"], f["reason"])
        for f in json.loads(r.stdout)["findings"]
        if f["kind"] == "none_grad" and f["severity"] == "error"
    )
    assert ("built.weight", "unused") in found and ("built.bias", "unused") in found, found
    # the script's own init of ``aside`` reads its shape and writes it under no_grad: no use
    # that makes it a module run but not trained (NOTE [Untrained on purpose])
    assert any(p == "aside.weight" for p, _ in found), found
    assert ("aside.bias", "unused") in found, found
