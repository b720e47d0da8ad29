"""NaN/Inf that no op of the run produced (NOTE [Values from outside] in analysis/anomaly.py): an
optimizer's own arithmetic (reported on neither engine: NOTE [Optimizer internals]), a write
through numpy. The first op that meets them is reported, on both engines, instead of a ✓ that
says every op output was finite; values the script wrote itself (``full``), read back through
``.data``, stay unreported."""

from __future__ import annotations

import pytest
from test_torch_engine_anomaly import _anomaly_facts, _run_both, _twin_scripts

torch = pytest.importorskip("torch")

# Adam with eps=0 on zero gradients: 0/0 inside opt.step() makes the parameters NaN; the next
# forward carries them along (its inputs already hold NaN: no op "produced" them)
ADAM_ZERO_EPS = """\
torch.manual_seed(0)
m = torch.nn.Linear(4, 1)
opt = torch.optim.Adam(m.parameters(), lr=0.1, eps=0.0)
x = torch.randn(8, 4)
for i in range(3):
    opt.zero_grad()
    loss = (m(x) * 0).sum()  # FORWARD
    loss.backward()
    opt.step()
"""

NUMPY_WRITE = """\
w = torch.ones(3, requires_grad=True)
x = torch.ones(3)
x.numpy()[1] = float("nan")
(w * x).sum().backward()  # FORWARD
"""

# NaN the script wrote itself, then read through ``.data`` (an attribute read the PyTorch
# observer does not hand on: a new tensor on the same storage)
WRITTEN_THEN_DATA = """\
a = torch.full((2, 2), float("nan"))
b = a.data * 2
c = a.detach() + 1
d = a.t() * 3
w = torch.ones(2, 2, requires_grad=True)
(w * 2).sum().backward()
"""


@pytest.mark.parametrize("command", ["anomaly", "check"])
@pytest.mark.parametrize("body", [ADAM_ZERO_EPS, NUMPY_WRITE], ids=["adam_eps0", "numpy_write"])
def test_nan_from_outside_the_ops_is_reported_where_first_met(tmp_path, command, body):
    paths, marks = _twin_scripts(tmp_path, body)
    docs = _run_both(command, paths)
    ours, theirs = ({"findings": _forward(d)} for d in docs)
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    found = theirs["findings"]
    assert [(f["kind"], f["location"]["line"], f.get("entered")) for f in found] == [
        ("nan_forward", marks["FORWARD"], True)
    ]
    assert "received NaN that no op of the run produced" in found[0]["message"]
    assert docs[1]["status"] == "findings"


def _forward(doc: dict) -> list:
    return [f for f in doc["findings"] if f["kind"].endswith("_forward")]


def test_values_the_script_wrote_stay_unreported_through_data(tmp_path):
    paths, _ = _twin_scripts(tmp_path, WRITTEN_THEN_DATA)
    ours, theirs = _run_both("anomaly", paths, "--keep-going")
    for doc in (ours, theirs):
        assert doc["findings"] == []
        assert doc["written"]["full"] == 1


def test_an_origin_found_first_keeps_its_consequences_unreported(tmp_path):
    """After a real origin, NaN an optimizer step writes into the parameters (it applied NaN
    gradients) is that origin's doing: no second finding, even with --keep-going."""
    body = """\
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.tensor([[1.0, -1.0]])
    for i in range(3):
        opt.zero_grad()
        loss = torch.log(m(x) - 100).sum()  # FORWARD
        loss.backward()
        opt.step()
    """
    paths, marks = _twin_scripts(tmp_path, body)
    ours, theirs = _run_both("anomaly", paths, "--keep-going")
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    forward = [f for f in theirs["findings"] if f["kind"].endswith("_forward")]
    assert [(f["op"], f["location"]["line"], f.get("entered")) for f in forward] == [
        ("log", marks["FORWARD"], None)
    ]
