"""Every script in ``samples/`` runs as ``python samples/X.py`` and prints what it promises.

The deliberately buggy samples run to completion (their bug is silent) except
``inplace_saved.py``, which must die with PyTorch's in-place RuntimeError, and
``reused_graph.py``, which must die with its "backward through the graph a second time".
"""

from __future__ import annotations

import json
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
    "tiny_gpt.py": (0, ["step 1  loss 4.1650", "step 6  loss"]),
    "cnn.py": (0, ["step 1  loss", "step 8  loss"]),
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
    if name == "tiny_gpt.py":
        losses = _loss_values(r.stdout)
        assert len(losses) == 6 and losses[-1] < 0.9 * losses[0], losses
    if name == "cnn.py":
        losses = _loss_values(r.stdout)
        assert len(losses) == 8 and losses[-1] < losses[0], losses
    if name == "inplace_saved.py":
        assert "not reached" not in out


def test_samples_are_deterministic():
    assert _run("train.py").stdout == _run("train.py").stdout


# --- the tiny GPT: PyTorch's losses, and every command on it -----------------------------------


def _as_import_torch(source: str) -> str:
    return (
        source.replace("import autodiag as torch", "import torch")
        .replace("import autodiag.nn.functional as F", "import torch.nn.functional as F")
        .replace("import autodiag.nn as nn", "import torch.nn as nn")
    )


def test_tiny_gpt_gives_torchs_losses_under_the_alias(tmp_path):
    """The sample under ``import torch``: on real PyTorch and on autodiag through the alias
    (``python -m autodiag.run``) the losses agree with autodiag's own run."""
    pytest.importorskip("torch")
    script = tmp_path / "tiny_gpt.py"
    script.write_text(_as_import_torch((SAMPLES / "tiny_gpt.py").read_text()))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = {
        "autodiag": _run("tiny_gpt.py").stdout,
        "torch": subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
        ).stdout,
        "alias": subprocess.run(
            [sys.executable, "-m", "autodiag.run", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout,
    }
    losses = {k: _loss_values(v) for k, v in runs.items()}
    assert len(losses["torch"]) == 6, runs["torch"]
    for k in ("autodiag", "alias"):
        assert losses[k] == pytest.approx(losses["torch"], abs=2e-4), (k, losses)


@pytest.mark.parametrize(
    ("command", "phrase"),
    [
        ("graph", "ScaledDotProductFlashAttentionForCpuBackward0"),
        ("trace", "NativeLayerNormBackward0"),
        ("check", "no findings"),
        ("anomaly", "6 backward"),
        ("inplace", "no in-place hazard"),
        ("leaks", "no graph leak"),
    ],
)
def test_tiny_gpt_under_every_command(command, phrase):
    from cli_helpers import check_envelope, cli

    path = str(SAMPLES / "tiny_gpt.py")
    r = cli(command, path, "--no-color")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert phrase in r.stdout, r.stdout[-3000:]
    if command in ("graph", "leaks"):
        return
    doc = json.loads(cli(command, path, "-f", "json").stdout)
    check_envelope(doc, command)
    assert doc["status"] == "ok" and doc["findings"] == []


def _import_torch_copy(tmp_path, name: str) -> Path:
    """``samples/<name>`` with ``import torch`` in place of ``import autodiag as torch``."""
    src = (SAMPLES / name).read_text()
    src = src.replace("import autodiag as torch", "import torch")
    src = src.replace("import autodiag.nn as nn", "import torch.nn as nn")
    assert "autodiag" not in src.split('"""')[-1]
    path = tmp_path / name
    path.write_text(src)
    return path


def test_cnn_sample_gives_torchs_losses_on_both_engines(tmp_path):
    """The ``import torch`` version of samples/cnn.py prints PyTorch's losses on PyTorch, and
    the same losses under the alias (autodiag's engine), as the sample itself does."""
    pytest.importorskip("torch")
    path = _import_torch_copy(tmp_path, "cnn.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    real = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    aliased = subprocess.run(
        [sys.executable, "-m", "autodiag.run", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert real.returncode == 0 and aliased.returncode == 0, real.stderr + aliased.stderr
    want, got = _loss_values(real.stdout), _loss_values(aliased.stdout)
    assert len(want) == 8
    assert got == pytest.approx(want, abs=2e-4)
    assert _loss_values(_run("cnn.py").stdout) == got
