"""The recurrent sample (``samples/lstm.py``) under every command, its ``import torch`` twin on
real PyTorch, and the leak of a hidden state that is carried over without ``.detach()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import ROOT, check_envelope, check_graph, cli

SAMPLE = os.path.join(ROOT, "samples", "lstm.py")


def _losses(stdout: str) -> list[float]:
    return [float(line.split()[3]) for line in stdout.splitlines() if line.startswith("step")]


def test_graph_shows_the_fused_lstm_node_with_its_line_and_parameters():
    r = cli("graph", SAMPLE, "-f", "json")
    assert r.exit_code == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    check_envelope(doc, "graph")
    check_graph(doc)
    (lstm,) = [n for n in doc["nodes"] if n["name"] == "MkldnnRnnLayerBackward0"]
    assert lstm["created_at"]["line"] == 33 and "self.lstm(" in lstm["created_at"]["code"]
    assert {s["name"] for s in lstm["saved"]} >= {"input", "weight0", "weight1", "hx_", "cx_"}
    names = {n["variable"]["name"] for n in doc["nodes"] if n["variable"]}
    assert {"model.lstm.weight_ih_l0", "model.lstm.bias_hh_l0", "model.embed.weight"} <= names
    # the detached hidden state is a constant: the LSTM node's h0/c0 edges are empty
    by_id = {n["id"]: n for n in doc["nodes"]}
    assert lstm["next"][5:] == [None, None]
    assert by_id[lstm["next"][0][0]]["name"] == "EmbeddingBackward0"


@pytest.mark.parametrize("command", ["check", "anomaly", "inplace", "leaks", "trace"])
def test_every_command_is_clean_on_the_sample(command):
    r = cli(command, SAMPLE, "-f", "json")
    assert r.exit_code == 0, r.stdout[-3000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    check_envelope(doc, command)
    assert doc["findings"] == [] and doc["status"] == "ok"


def test_text_reports_on_the_sample():
    r = cli("leaks", SAMPLE, "--no-color")
    assert r.exit_code == 0 and "no graph leak" in r.stdout
    r = cli("trace", SAMPLE, "--no-color")
    assert r.exit_code == 0 and "MkldnnRnnLayerBackward0" in r.stdout


def test_the_import_torch_version_gives_pytorchs_losses(tmp_path):
    pytest.importorskip("torch")
    source = open(SAMPLE).read()
    twin = source.replace("import autodiag as torch", "import torch").replace(
        "import autodiag.nn as nn", "import torch.nn as nn"
    )
    path = tmp_path / "lstm_torch.py"
    path.write_text(twin)

    def run(p):
        env = dict(os.environ, PYTHONPATH=ROOT)
        r = subprocess.run(
            [sys.executable, str(p)], capture_output=True, text=True, env=env, timeout=300
        )
        assert r.returncode == 0, r.stderr
        return _losses(r.stdout)

    on_torch, on_autodiag = run(path), run(SAMPLE)
    assert len(on_torch) == 12 and on_torch == pytest.approx(on_autodiag, abs=2e-4)
    assert on_autodiag[-1] < 0.8 * on_autodiag[0]  # it learns
    # and the same script under the alias (autodiag's engine) prints autodiag's numbers
    r = cli("check", str(path), "-f", "json")
    assert r.exit_code == 0, r.stderr[-2000:]


LEAKY_EVAL = """\
    # evaluation on held-out text, carrying its own hidden state across steps
    val_logits, val_hidden = model(val, val_hidden)  # BUG: no detach (nor no_grad)
    val_loss = loss_fn(val_logits[:-1].reshape(-1, VOCAB), val[1:].reshape(-1)).item()
    print(f"step {step + 1}  loss {loss.item():.4f}  val {val_loss:.4f}")
"""


def _variant(tmp_path, source: str) -> str:
    path = tmp_path / "variant.py"
    path.write_text(source)
    return str(path)


def test_a_carried_hidden_state_without_detach_is_a_leak_naming_it(tmp_path):
    source = open(SAMPLE).read()
    source = source.replace(
        "hidden = (torch.zeros(1, BATCH, HIDDEN), torch.zeros(1, BATCH, HIDDEN))\n",
        "hidden = (torch.zeros(1, BATCH, HIDDEN), torch.zeros(1, BATCH, HIDDEN))\n"
        "val = (stream[: SEQ * BATCH].reshape(BATCH, SEQ).t() * 3) % VOCAB\n"
        "val_hidden = hidden\n",
    )
    source = source.replace('    print(f"step {step + 1}  loss {loss.item():.4f}")\n', LEAKY_EVAL)
    assert "BUG" in source
    r = cli("leaks", _variant(tmp_path, source), "-f", "json")
    assert r.exit_code == 1, r.stdout[-3000:]
    doc = json.loads(r.stdout)
    leaks = [f for f in doc["findings"] if f["kind"] == "graph_leak"]
    holders = {f["holder"]["name"]: f for f in leaks}
    assert "val_hidden" in holders, leaks
    f = holders["val_hidden"]
    assert f["holder"]["container"] == "tuple" and f["growing"]
    assert "tuple(h.detach() for h in val_hidden)" in f["hint"]
    assert f["created_at"]["line"] == 33  # the LSTM call inside the model
    # the training loop's own hidden state (detached) is never reported
    assert "hidden" not in holders


def test_forgetting_the_detach_in_training_fails_as_in_pytorch(tmp_path):
    # PyTorch raises "backward through the graph a second time" at step 2; check says why
    source = (
        open(SAMPLE)
        .read()
        .replace(
            "    hidden = tuple(h.detach() for h in hidden)  # truncated BPTT: stop at the step "
            "boundary\n",
            "",
        )
    )
    r = cli("check", _variant(tmp_path, source), "-f", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    (f,) = doc["findings"]
    assert f["kind"] == "freed_graph" and "MkldnnRnnLayerBackward0" in f["message"]
    assert "detach()" in f["hint"]
