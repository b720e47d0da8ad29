"""The gradient-health detector's findings and measurements on every sample stay what they were
(``tests/data/health_samples.json``, made by ``tests/health_snapshot.py``): a change of how
norms and update sizes are measured (issue 22, ``check``'s overhead) must not change a finding,
a norm or an update ratio."""

from __future__ import annotations

import json
import math

import pytest
from health_snapshot import ROOT, SAMPLES, render, snapshot

STORED = json.loads((ROOT / "tests" / "data" / "health_samples.json").read_text())


def test_every_sample_is_stored():
    assert sorted(STORED) == SAMPLES


def _same(new, old, path="") -> list[str]:
    """Where ``new`` differs from ``old``: everything exactly, except measurements (floats),
    which may differ by one in their last stored digit (4 significant): the BLAS and numpy's
    vector loops round in the last place differently on another CPU (AVX-512 vs AVX2)."""
    if isinstance(new, float) and isinstance(old, float):
        return [] if math.isclose(new, old, rel_tol=2e-3) else [f"{path}: {new} vs {old}"]
    if isinstance(new, dict) and isinstance(old, dict) and new.keys() == old.keys():
        return [d for k in new for d in _same(new[k], old[k], f"{path}.{k}")]
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [d for i, (a, b) in enumerate(zip(new, old)) for d in _same(a, b, f"{path}[{i}]")]
    return [] if new == old else [f"{path}: {new!r} vs {old!r}"]


def test_measurements_compare_to_their_last_digit_only():
    assert _same({"a": [0.006578, "x"]}, {"a": [0.006579, "x"]}) == []
    assert _same({"a": [0.00658]}, {"a": [0.00668]}) == [".a[0]: 0.00658 vs 0.00668"]
    assert _same({"m": "3 of 8 units"}, {"m": "4 of 8 units"}) != []
    assert _same({"a": 1}, {"a": 1, "b": 2}) != []


@pytest.mark.parametrize("name", SAMPLES)
def test_health_on_sample_unchanged(name):
    assert _same(json.loads(render({name: snapshot(name)}))[name], STORED[name]) == []
