"""Every script in ``samples/`` runs as ``python samples/X.py`` and prints what it promises.

The deliberately buggy samples run to completion (their bug is silent) except
``inplace_saved.py``, which must die with PyTorch's in-place RuntimeError, and
``reused_graph.py``, which must die with its "backward through the graph a second time".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# sample -> (expected exit code, phrases its output must contain)
EXPECTED = {
    "quickstart.py": (0, ["PowBackward0", "modified by an inplace operation"]),
    "model.py": (
        0,
        [
            "NllLossBackward0",
            "LogSoftmaxBackward0",
            "AddmmBackward0",
            "NativeLayerNormBackward0",
            "GeluBackward0",
            "head.weight  grad norm",
        ],
    ),
    "train.py": (0, ["step 150", "training accuracy"]),
    "myop.py": (0, ["CubicBackward", "matches finite differences: True", "StraightThroughRound"]),
    "leaky_loop.py": (0, ["history holds 30 losses; 30 of them still carry a grad_fn graph"]),
    "nan_log.py": (0, ["entropy: tensor(nan", "logits.grad has nan: True"]),
    "inplace_saved.py": (
        1,
        [
            "RuntimeError: one of the variables needed for gradient "
            "computation has been modified by an inplace operation",
            "samples/inplace_saved.py:16",
        ],
    ),
    "reused_graph.py": (
        1,
        [
            "step 0 loss",
            "RuntimeError: Trying to backward through the graph a second time",
            "reached TanhBackward0, created at samples/reused_graph.py:22",
            "through `features`",
        ],
    ),
    "bad_backward.py": (0, ["x.grad = [2.0, 4.0, 6.0]", "x.grad = [1.0, 2.0, 3.0]"]),
    "no_zero_grad.py": (0, ["step 30", "weight.grad norm"]),
    "detached_param.py": (0, ["w1.grad is None: False", "w2.grad is None: True"]),
    "lstm.py": (0, ["step 1  loss 4.2103", "step 12  loss 3.0407"]),
}


def test_every_sample_is_listed():
    assert sorted(p.name for p in SAMPLES.glob("*.py")) == sorted(EXPECTED)


def _run(name: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(SAMPLES / name)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _loss_values(stdout: str) -> list[float]:
    return [
        float(line.split("loss")[1].split()[0])
        for line in stdout.splitlines()
        if line.startswith("step")
    ]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_runs(name):
    code, phrases = EXPECTED[name]
    r = _run(name)
    out = r.stdout + r.stderr
    assert r.returncode == code, out
    for phrase in phrases:
        assert phrase in out, f"{phrase!r} not in the output of {name}:\n{out}"
    if name == "train.py":
        losses = _loss_values(r.stdout)
        assert losses[-1] < 0.25 * losses[0], losses  # the loss falls
    if name == "inplace_saved.py":
        assert "not reached" not in out


def test_samples_are_deterministic():
    assert _run("train.py").stdout == _run("train.py").stdout
