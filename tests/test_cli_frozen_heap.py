"""NOTE [Frozen heap] (autodiag/target): while the CLI runs a target, the objects that existed
before it are in the cyclic GC's permanent generation, so the collections the target's graphs
trigger do not rescan the interpreter's, numpy's and the CLI's objects; they are moved back
after the run, and ``import autodiag`` alone never freezes anything."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from cli_helpers import cli

PROBE = """
import gc, json, sys
import autodiag as torch
x = torch.ones(3, requires_grad=True)
y = (x * 2).sin().sum()
y.backward()
class Cycle:
    pass
a = Cycle(); a.me = a
del a
collected = gc.collect()  # the target's own garbage is still collected
with open(sys.argv[1], "w") as f:
    json.dump({"frozen": gc.get_freeze_count(), "collected": collected}, f)
"""


@pytest.mark.parametrize("command", ["graph", "inplace", "anomaly", "leaks", "check"])
def test_the_run_sees_a_frozen_heap_and_it_is_restored(script, tmp_path, command):
    out = tmp_path / "probe.json"
    assert gc.get_freeze_count() == 0
    r = cli(command, script(PROBE), "--", str(out))
    assert r.exit_code in (0, 1), r.output
    seen = json.loads(out.read_text())
    assert seen["frozen"] > 0
    assert seen["collected"] >= 1
    assert gc.get_freeze_count() == 0


def test_an_existing_freeze_is_left_alone(script, tmp_path):
    out = tmp_path / "probe.json"
    gc.freeze()
    try:
        cli("graph", script(PROBE), "--", str(out))
        assert gc.get_freeze_count() > 0  # not unfrozen by the run: the caller owns the freeze
    finally:
        gc.unfreeze()


def test_import_autodiag_freezes_nothing():
    code = "import gc, autodiag, autodiag.nn; print(gc.get_freeze_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
