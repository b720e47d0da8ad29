"""What the anomaly finder does per gradient, for its cost (issue 22): no copy of a transposed
gradient, no second look at a big one; every NaN/Inf still found."""

from __future__ import annotations

import tracemalloc

import numpy as np

import autodiag as torch
from autodiag.analysis import anomaly
from autodiag.analysis.anomaly import AnomalyFinder
from autodiag.trace import tracing


def test_a_transposed_gradient_is_checked_where_it_lies():
    a = np.ones((784, 256), dtype=np.float32).T  # TBackward0's gradient: column-major
    tracemalloc.start()
    try:
        assert anomaly._finite(a)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes // 10  # no copy (a copy is a.nbytes)
    a[3, 5] = np.nan
    assert not anomaly._finite(a)


def _mlp_step(poison: bool):
    torch.manual_seed(0)
    lin = torch.nn.Linear(2048, 4)
    x = torch.ones(3, 2048)
    if poison:
        x[1, 7] = float("inf")
    return lin, (lin(x) * torch.tensor(0.0)).sum()


def test_each_big_gradient_is_measured_once(monkeypatch):
    measured = []
    real = anomaly._finite
    monkeypatch.setattr(anomaly, "_finite", lambda a: measured.append(a.size) or real(a))
    lin, loss = _mlp_step(poison=False)
    with tracing(AnomalyFinder(keep_going=True, forward=False)) as finder:
        loss.backward()
    assert finder.findings() == []
    # the weight's gradient (8192 elements) as AddmmBackward0 sends it (transposed) and as
    # TBackward0 passes it on: twice, and never again at the end of the call
    assert sorted(measured).count(lin.weight.numel()) == 2


def test_a_nan_in_a_big_transposed_gradient_is_still_found():
    lin, loss = _mlp_step(poison=True)  # inf * 0: NaN in the weight's gradient
    with tracing(AnomalyFinder(keep_going=True, forward=False)) as finder:
        loss.backward()
    found = [(f.kind, f.message) for f in finder.findings()]
    assert found and found[0][0] == "nan_backward", found
    assert found[0][1].startswith("AddmmBackward0"), found
