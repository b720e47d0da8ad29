"""``--engine torch``: what autodiag itself asks of PyTorch while a script runs (a saved
tensor's ``detach()`` in the pack hook, the leak census at an optimizer step) is not the
script's: no tracer sees it as an op, the ``ops`` count is the script's alone, and PyTorch's own
``detect_anomaly`` stacks show no frame of autodiag's (NOTE [Autodiag's own calls] in
engines/torch/observe.py)."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest
from cli_helpers import cli
from test_torch_engine import ENV, SAMPLES, _twins

torch = pytest.importorskip("torch")


def _ops(command: str, path: str, *options) -> int:
    r = cli(command, path, "-f", "json", "-q", "--engine", "torch", *options)
    assert r.exit_code in (0, 1, 3), r.stderr[-3000:]  # 3: the script raised (a sample bug)
    return json.loads(r.stdout)["ops"]


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_counts_the_same_ops_whatever_the_command(tmp_path, name):
    """``anomaly --keep-going`` installs no saved-tensor hook and no optimizer hook of its own;
    ``inplace`` adds the saved-tensor hooks, ``check`` those and the leak census: the script
    ran the same ops under each, so each counts the same (a custom Function's saves were
    packed under the script's function mode: ``detach`` and ``untyped_storage`` counted)."""
    _, theirs = _twins(tmp_path, name)
    plain = _ops("anomaly", theirs, "--keep-going")
    assert _ops("inplace", theirs) == plain
    assert _ops("check", theirs) == plain


CUSTOM = """\
import torch

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return 2 * a * g

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(5, 4)
history = []
for _ in range(4):
    opt.zero_grad()
    loss = Square.apply(model(x)).mean()
    loss.backward(retain_graph=True)
    opt.step()
    history.append(loss)  # a leak: the census runs at each step
"""


def _op_names(tracers_for, source: str) -> list:
    """The op names an ``on_op`` listener is told of while ``source`` runs observed, with the
    tracers ``tracers_for()`` makes installed too."""
    from autodiag.engines.torch.observe import observing, register
    from autodiag.trace import Tracer, tracing

    class Ops(Tracer):
        observes_torch = True

        def __init__(self):
            self.names = []

        def on_op(self, op, node, inputs, outputs, stack):
            self.names.append(op)

    register()
    ops = Ops()
    with tracing(*tracers_for(), ops), observing():
        exec(compile(source, "<custom>", "exec"), {"__name__": "__main__"})  # noqa: S102
    return ops.names


def test_pack_hook_and_leak_census_are_not_the_scripts_ops():
    from autodiag.analysis import check
    from autodiag.analysis.torch_anomaly import TorchAnomalyFinder

    # the anomaly finder packs nothing and keeps no optimizer hook of its own (with it, an
    # optimizer's own arithmetic is left out, as under check: NOTE [Optimizer internals])
    plain = _op_names(lambda: [TorchAnomalyFinder(keep_going=True)], CUSTOM)
    every = _op_names(lambda: [d.make() for d in check.on_torch()], CUSTOM)
    assert "detach" not in plain and "untyped_storage" not in plain
    assert every == plain


DETECT = """\
import torch

x = torch.tensor([0.0, 1.0], requires_grad=True)
with torch.autograd.detect_anomaly():
    y = torch.nn.functional.softmin(torch.log(x), dim=0)  # softmax of [inf, 0]: NaN
    y.sum().backward()
"""


def _forward_stack(stderr: str) -> list:
    """The frames of PyTorch's "Traceback of forward call that caused the error"."""
    m = re.search(
        r"Traceback of forward call that caused the error:\n(.*?)\(Triggered", stderr, re.S
    )
    assert m, stderr[-3000:]
    return re.findall(r'File "([^"]+)", line (\d+), in (\S+)', m.group(1))


def test_detect_anomaly_forward_stack_shows_no_autodiag_frame(tmp_path):
    """PyTorch records ``traceback.format_stack()`` in a node's metadata when anomaly mode is
    on; under the observer that stack held the CLI's frames and the function mode's: they are
    taken out, leaving what plain PyTorch prints."""
    import subprocess
    import sys

    path = tmp_path / "s.py"
    path.write_text(textwrap.dedent(DETECT))
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    # in a process of its own: the warning is printed as the script's run prints it
    command = ["-m", "autodiag", "inplace", str(path), "--engine", "torch", "-q", "--no-color"]
    r = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=ENV)
    expected = [(os.path.basename(f), line, fn) for f, line, fn in _forward_stack(plain.stderr)]
    # the script's line, then softmin's own line in torch/nn/functional.py (a Python function
    # that hands itself to the function mode first: its frame, handle_torch_function's and the
    # mode's are not in plain PyTorch's stack)
    assert [(f, fn) for f, _, fn in expected] == [
        ("s.py", "<module>"),
        ("functional.py", "softmin"),
    ]
    got = [(os.path.basename(f), line, fn) for f, line, fn in _forward_stack(r.stderr)]
    assert got == expected
