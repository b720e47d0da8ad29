"""The detectors ``autodiag check`` runs in one pass, and its --ignore/--warn-only policy.

A detector is a tracer factory plus a function from (that tracer, the Run) to Findings. Adding
one is one entry in ``DETECTORS``:

>>> from autodiag.analysis.check import DETECTORS
>>> [d.name for d in DETECTORS]
['health', 'inplace', 'freed', 'leaks', 'anomaly']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autodiag.analysis.anomaly import AnomalyFinder
from autodiag.analysis.findings import KINDS, Finding
from autodiag.analysis.freed import FreedGraphWatcher
from autodiag.analysis.graph import names_by_id
from autodiag.analysis.health import GradHealth
from autodiag.analysis.inplace import InplaceWatcher
from autodiag.analysis.leaks import LeakFinder


@dataclasses.dataclass(frozen=True)
class Detector:
    """``make()`` builds a fresh tracer; ``findings(tracer, run)`` reads it after the run."""

    name: str
    make: Callable
    findings: Callable


# NOTE: install order matters when a tracer ends a run (trace.StopRun): tracers installed after
# it miss that call's on_backward_end. None of these stops the run (the anomaly finder runs with
# keep_going), and the anomaly finder comes last anyway, so the others always see the end.
DETECTORS: list[Detector] = [
    Detector("health", GradHealth, lambda t, run: t.findings(*run.scopes)),
    Detector("inplace", InplaceWatcher, lambda t, run: t.findings(run.error)[0]),
    Detector("freed", FreedGraphWatcher, lambda t, run: t.findings(run.error)),
    Detector("leaks", LeakFinder, lambda t, run: t.findings()),
    Detector(
        "anomaly",
        lambda: AnomalyFinder(keep_going=True),
        lambda t, run: t.findings(names_by_id(*run.scopes)),
    ),
]


def on_torch() -> list[Detector]:
    """The detectors that run on PyTorch (engines/torch ``CHECK_DETECTORS``), the leak and
    anomaly finders as the PyTorch observer feeds them (``leaks``/``anomaly --engine torch``'s)."""
    from autodiag.analysis.torch_anomaly import TorchAnomalyFinder
    from autodiag.analysis.torch_leaks import TorchLeakFinder
    from autodiag.engines.torch import CHECK_DETECTORS

    finders = {"anomaly": lambda: TorchAnomalyFinder(keep_going=True), "leaks": TorchLeakFinder}
    return [
        dataclasses.replace(d, make=finders[d.name]) if d.name in finders else d
        for d in DETECTORS
        if d.name in CHECK_DETECTORS
    ]


def unknown_kinds(kinds) -> list[str]:
    """The names in ``kinds`` that are not finding kinds."""
    return [k for k in kinds if k not in KINDS]


def apply_policy(findings: list[Finding], ignore=(), warn_only=()) -> list[Finding]:
    """Drop the ``ignore`` kinds, demote the ``warn_only`` kinds to warnings.

    >>> f = Finding("dead_relu", "warning", "m")
    >>> g = Finding("none_grad", "error", "m")
    >>> [(x.kind, x.severity) for x in apply_policy([f, g], ["dead_relu"], ["none_grad"])]
    [('none_grad', 'warning')]
    """
    out = []
    for f in findings:
        if f.kind in ignore:
            continue
        if f.kind in warn_only and f.severity == "error":
            f = dataclasses.replace(f, severity="warning")
        out.append(f)
    return out


# NaN/Inf findings form one group in the anomaly finder's causal order: the log that made an
# Inf comes before the mul that turned it into NaN, whatever their kinds.
_ANOMALY_KINDS = ("nan_forward", "inf_forward", "nan_backward", "inf_backward")


def ordered(findings: list[Finding]) -> list[Finding]:
    """Grouped by kind, in the order of ``KINDS`` (stable within a kind); NaN/Inf origins are
    one group, cause first.

    >>> fs = [Finding("nan_forward", "error", "mul"), Finding("inf_forward", "error", "log"),
    ...       Finding("none_grad", "error", "w")]
    >>> [f.message for f in ordered(fs[1:] + fs[:1])]
    ['log', 'mul', 'w']
    """
    rank = {k: i for i, k in enumerate(KINDS)}
    first = min(rank[k] for k in _ANOMALY_KINDS)
    for k in _ANOMALY_KINDS:
        rank[k] = first
    return sorted(findings, key=lambda f: rank.get(f.kind, len(rank)))
