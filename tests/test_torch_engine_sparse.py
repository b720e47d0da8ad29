"""``--engine torch`` on a script whose graph saves a sparse tensor (pytorch/examples gcn's
``torch.spmm``): every command runs it (PyTorch's ``nbytes`` refuses a sparse layout; autodiag
stopped with an internal error), and the saved bytes are the sparse tensor's own."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

SPARSE = """\
import torch
a = torch.eye(3).to_sparse()
w = torch.randn(3, 2, requires_grad=True)
loss = torch.spmm(a, w).sum()
loss.backward()
"""


@pytest.mark.parametrize("command", ["graph", "trace", "inplace", "anomaly", "leaks", "check"])
def test_every_command_runs_a_graph_that_saves_a_sparse_tensor(script, command):
    r = cli(command, script(SPARSE), "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "ok"


def test_a_sparse_saved_tensor_counts_its_indices_and_values():
    from autodiag.engines.torch import seam

    a = torch.eye(3).to_sparse()
    assert seam.nbytes(a) == a._indices().nbytes + a._values().nbytes == 60
    csr = torch.eye(3).to_sparse_csr()
    assert seam.nbytes(csr) == sum(
        t.nbytes for t in (csr.crow_indices(), csr.col_indices(), csr.values())
    )
    w = torch.randn(3, 2, requires_grad=True)
    node = torch.spmm(a, w).grad_fn
    (entry,) = seam.saved_entries(node)
    assert entry.nbytes == 60 and entry.shape == (3, 3)
