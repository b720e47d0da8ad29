"""The gradient-health detector's findings and measurements on every sample stay what they were
(``tests/data/health_samples.json``, made by ``tests/health_snapshot.py``): a change of how
norms and update sizes are measured (issue 22, ``check``'s overhead) must not change a finding,
a norm or an update ratio."""

from __future__ import annotations

import json

import pytest
from health_snapshot import ROOT, SAMPLES, render, snapshot

STORED = json.loads((ROOT / "tests" / "data" / "health_samples.json").read_text())


def test_every_sample_is_stored():
    assert sorted(STORED) == SAMPLES


@pytest.mark.parametrize("name", SAMPLES)
def test_health_on_sample_unchanged(name):
    assert json.loads(render({name: snapshot(name)}))[name] == STORED[name]
