"""GradHealth as the sum of its detectors, one per concern (analysis/health.py): each reports
only the kinds it declares, together they report exactly what GradHealth reports, and the
finding kinds are theirs."""

from __future__ import annotations

import linecache
import textwrap

import pytest
from test_health import DEAD, GROWING, LOOP, SETUP

import autodiag as torch
from autodiag.analysis import findings, health
from autodiag.analysis.health import DETECTORS, KINDS, GradHealth, GradNorms, NoneGrad
from autodiag.trace import tracing

# every kind at once: a detached weight, a forgotten zero_grad, a dead relu unit, an update
# that outgrows its parameter
MIXED = """\
import autodiag as torch
torch.manual_seed(0)
w = torch.tensor([[1.0, -1.0, 1.0]], requires_grad=True)
v = torch.ones(3, requires_grad=True)
u = torch.ones(3, requires_grad=True)
opt = torch.optim.SGD([w, v, u], lr=10.0)
for _ in range(6):
    x = torch.rand(8, 1)
    h = torch.relu(x @ w)
    (h * v.detach() + u).sum().backward()
    opt.step()
"""

SCENARIOS = {
    "mixed": MIXED,
    "none_grad": SETUP + "aux = (x * b).sum()\nloss = (x @ w).sum()\nloss.backward()\n",
    "accumulation": LOOP.format(clear="    pass", step="    opt.step()"),
    "exploding": GROWING.format(base=100.0),
    "vanishing": GROWING.format(base=1e-3),
    "dead_relu": DEAD.format(n=5),
}


def run(source: str, detectors=None) -> list:
    """``source`` run under a GradHealth of ``detectors``; its findings as JSON dicts."""
    namespace = {"torch": torch}
    source = textwrap.dedent(source)
    linecache.cache["snippet.py"] = (len(source), None, source.splitlines(True), "snippet.py")
    with tracing(GradHealth(detectors=detectors)) as tracer:
        exec(compile(source, "snippet.py", "exec"), namespace)
    out = [f.to_json() for f in tracer.findings(namespace)]
    for f in out:  # the snippet's frames: those outside it differ by where run() was called
        f["stack"] = [s for s in f["stack"] if s["file"] == "snippet.py"]
    return out


def test_kinds_are_the_detectors_kinds_in_order():
    assert KINDS == tuple(k for d in DETECTORS for k in d.KINDS)
    assert all(d.KINDS for d in DETECTORS) and len(set(KINDS)) == len(KINDS)
    assert KINDS == (
        "none_grad",
        "unplanned_accumulation",
        "exploding_grad",
        "vanishing_grad",
        "dead_relu",
    )


def test_health_kinds_are_one_run_of_the_finding_kinds():
    # findings.KINDS (the contract every analysis imports) holds health's kinds, together and
    # in their order: `autodiag check` groups findings by that order
    at = findings.KINDS.index(health.KINDS[0])
    assert findings.KINDS[at : at + len(health.KINDS)] == health.KINDS


def test_the_scenarios_report_every_kind():
    seen = {f["kind"] for src in SCENARIOS.values() for f in run(src)}
    assert seen == set(KINDS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_detector_reports_its_kinds_and_together_what_gradhealth_reports(name):
    src = SCENARIOS[name]
    alone = {d: run(src, [d]) for d in DETECTORS}
    for d, found in alone.items():
        assert {f["kind"] for f in found} <= set(d.KINDS), d.__name__
    assert [f for d in DETECTORS for f in alone[d]] == run(src)


def test_mixed_scenario_reports_each_concern():
    found = [(f["kind"], f.get("parameter") or f.get("parameters")) for f in run(MIXED)]
    assert found == [
        ("none_grad", "v"),
        ("unplanned_accumulation", ["w", "u"]),
        ("exploding_grad", "w"),
        ("exploding_grad", "u"),
        ("dead_relu", None),
    ]


def test_a_gradhealth_without_a_detector_does_not_report_its_kinds():
    found = run(MIXED, [NoneGrad])
    assert [(f["kind"], f["reason"]) for f in found] == [("none_grad", "detach")]
    tracer = GradHealth(detectors=[NoneGrad])
    assert isinstance(tracer.detector(NoneGrad), NoneGrad)
    with pytest.raises(KeyError, match="no GradNorms detector"):
        tracer.detector(GradNorms)
