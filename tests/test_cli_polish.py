"""Small things a reader of autodiag's output trips on (issue 15, item 10): help and exit codes,
error titles and hints in both formats, DOT/Mermaid labels and colours, tree back-references."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from typer.testing import CliRunner

from autodiag.cli import app

runner = CliRunner()

TWO_LOCAL_LEAVES = """\
import autodiag as torch


def make():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    return (a * b + a * b * b).sum()


make().backward()
"""


def cli(*args, **kw):
    return runner.invoke(app, list(args), catch_exceptions=False, **kw)


@pytest.fixture
def script(tmp_path):
    def make(source: str, name: str = "s.py") -> str:
        p = tmp_path / name
        p.write_text(textwrap.dedent(source))
        return str(p)

    return make


def test_tree_back_references_say_which_node(script):
    path = script(TWO_LOCAL_LEAVES)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    leaves = {n["id"]: n for n in doc["nodes"] if n["variable"] is not None}
    assert len(leaves) == 2 and all(n["variable"]["name"] is None for n in leaves.values())
    text = cli("graph", path, "--no-color").stdout
    refs = [ln for ln in text.splitlines() if "shown above" in ln]
    assert len(refs) == 3
    seen = set()
    for ln in refs:
        m = re.search(r"\(id (\d+), shared, shown above\)", ln)
        assert m, ln
        i = int(m.group(1))
        assert i in leaves, ln
        seen.add(i)
        shape = "[" + ", ".join(map(str, leaves[i]["variable"]["shape"])) + "]"
        assert f"AccumulateGrad leaf {shape}" in ln
        # the node's first appearance carries the same id
        assert sum(f"(id {i})" in x for x in text.splitlines()) == 1
    assert seen == set(leaves)
