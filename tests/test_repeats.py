"""Repeated blocks found and folded (``autodiag/report/repeats.py``) on real grad_fn graphs: a
chain of one op, an MLP's layers, an RNN's steps sharing one weight, tiny_gpt's blocks; and the
HTML page that shows a graph beyond its limit folded first, every node still in its data."""

from __future__ import annotations

import collections
import os
import re
import sys
import threading

from cli_helpers import ROOT, cli
from test_cli_html import html_of, page_data

import autodiag as ad
import autodiag.nn as nn
from autodiag.analysis.graph import GraphSnapshot
from autodiag.report import repeats
from autodiag.report.graph import View, to_json
from autodiag.report.repeats import find_repeats, fold_graph


def model_of(root) -> dict:
    snap = GraphSnapshot.capture([root.grad_fn], 1, "backward")
    return to_json(snap, View())


def chain(n: int):
    x = ad.ones(3, requires_grad=True)
    h = x
    for _ in range(n):
        h = h * 1.0001
    return h.sum()


def mlp(layers: int):
    ad.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(8, 8), nn.ReLU()]
    model = nn.Sequential(*mods, nn.Linear(8, 1))
    return model(ad.randn(4, 8)).pow(2).mean()


def rnn(steps: int):
    ad.manual_seed(0)
    w = ad.randn(8, 8, requires_grad=True)
    u = ad.randn(8, 8, requires_grad=True)
    h = ad.randn(1, 8, requires_grad=True)
    xs = ad.randn(steps, 1, 8)
    for t in range(steps):
        h = (h @ w + xs[t] @ u).tanh()
    return h.sum()


def label(node: dict) -> str:
    v = node.get("variable")
    return node["name"] + (f"{v['shape']}" if v else "")


def assert_valid(graph: dict, folds: list) -> None:
    """Each run: instances of one size, disjoint, with the same op names (the same structure
    by rank); the folded graph holds every node once, in a box or as itself."""
    by_id = {n["id"]: n for n in graph["nodes"]}
    seen: set = set()
    for f in folds:
        assert f.count >= 2 and len(f.instances) == f.count
        want = None
        for inst in f.instances:
            assert len(inst) == f.size and not seen & set(inst)
            seen |= set(inst)
            got = collections.Counter(label(by_id[i]) for i in inst)
            assert want is None or got == want
            want = got
    folded = fold_graph(graph, folds)
    shown = [n["id"] for n in folded["nodes"] if "repeat" not in n]
    inside = [
        i for n in folded["nodes"] if "repeat" in n for x in n["repeat"]["instances"] for i in x
    ]
    assert sorted(shown + inside) == sorted(by_id)
    assert len(folded["nodes"]) == repeats.folded_size(len(by_id), folds)
    ids = {n["id"] for n in folded["nodes"]}
    for n in folded["nodes"]:  # edges point at nodes of the folded graph
        assert all(e is None or e[0] in ids for e in n["next"])


def test_a_chain_of_one_op_folds_into_one_box():
    g = model_of(chain(1000))
    (f,) = find_repeats(g)
    assert f.size == 1 and f.count >= 998
    assert_valid(g, [f])
    box = next(n for n in fold_graph(g, [f])["nodes"] if "repeat" in n)
    assert box["name"] == f"×{f.count} MulBackward0"


def test_the_layers_of_an_mlp_fold_into_one_run():
    g = model_of(mlp(50))
    (f,) = find_repeats(g)
    assert f.count >= 48 and f.size == 5  # addmm, its t, relu, the weight's and bias' leaves
    assert_valid(g, [f])
    box = next(n for n in fold_graph(g, [f])["nodes"] if "repeat" in n)
    assert "AddmmBackward0" in box["name"] and "ReluBackward0" in box["name"]
    # in forward order: the first instance ran first, the farthest from the loss (ids are
    # breadth-first from the root)
    assert min(f.instances[0]) > max(f.instances[1]) and min(f.instances[-2]) > max(f.instances[-1])


def test_rnn_steps_fold_and_the_shared_weight_stays_outside():
    g = model_of(rnn(300))
    (f,) = find_repeats(g)
    assert f.count >= 298
    assert_valid(g, [f])
    folded = fold_graph(g, [f])
    box = next(n for n in folded["nodes"] if "repeat" in n)
    by_id = {n["id"]: n for n in folded["nodes"]}
    inputs = {by_id[e[0]]["name"] for e in box["next"]}
    assert "AccumulateGrad" in inputs  # w and u: one edge each from the box
    leaves = [by_id[e[0]] for e in box["next"] if by_id[e[0]]["name"] == "AccumulateGrad"]
    assert len(leaves) == len({leaf["id"] for leaf in leaves}) >= 2
    assert len(folded["nodes"]) < 20


def test_tiny_gpt_blocks_fold(tmp_path):
    text, r = html_of(os.path.join(ROOT, "samples", "tiny_gpt.py"), tmp_path=tmp_path)
    assert r.exit_code == 0
    data = page_data(text)
    (box,) = [n for n in data["repeats"]["nodes"] if "repeat" in n]
    assert box["repeat"]["count"] == 2 and box["repeat"]["size"] > 30  # its two blocks
    assert "start" not in data  # 101 nodes: drawn in full first, folded with the button


def test_no_repeats_in_a_graph_without_any():
    x = ad.ones(3, requires_grad=True)
    y = (x.sin() * x.exp()).log1p().sum()
    assert find_repeats(model_of(y), min_nodes=0) == []


def test_small_graphs_are_not_folded():
    assert find_repeats(model_of(chain(50))) == []
    assert find_repeats(model_of(chain(50)), min_nodes=0) != []


def test_deterministic_and_without_recursion():
    g = model_of(chain(20_000))
    out = {}

    def run():
        out["f"] = find_repeats(g)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        sys.setrecursionlimit(old)
    (f,) = out["f"]
    assert f.count >= 19_998
    assert find_repeats(g) == out["f"]


# --- the page ------------------------------------------------------------------------------------

RNN = """\
import autodiag as torch
torch.manual_seed(0)
w = torch.randn(8, 8, requires_grad=True)
u = torch.randn(8, 8, requires_grad=True)
h = torch.zeros(1, 8)
xs = torch.randn(600, 1, 8)
for t in range(600):
    h = (h @ w + xs[t] @ u).tanh()
h.sum().backward()
"""


def test_a_graph_beyond_the_limit_is_shown_folded_first_with_every_node(script, tmp_path):
    text, r = html_of(script(RNN), tmp_path=tmp_path)
    assert r.exit_code == 0 and "nodes not shown" not in r.stderr
    data = page_data(text)
    n = data["summary"]["nodes"]
    assert n > 2000 and len(data["nodes"]) == n and data["truncated"] == 0
    assert data["start"] == "repeats"
    (box,) = [b for b in data["repeats"]["nodes"] if "repeat" in b]
    rep = box["repeat"]
    assert rep["count"] == 599 and rep["size"] == 4
    assert f"{n:,} nodes: 599 repeated blocks of 4 folded; click a block to expand" in text
    members = [i for inst in rep["instances"] for i in inst]
    outside = [b["id"] for b in data["repeats"]["nodes"] if "repeat" not in b]
    assert sorted(members + outside) == sorted(x["id"] for x in data["nodes"])
    drawn = rep["expanded"]["ids"]
    assert drawn == members[: len(drawn)] and 0 < len(drawn) <= repeats.EXPAND_NODES
    assert set(rep["expanded"]["layout"]["boxes"]) == {str(i) for i in drawn}
    roles = re.findall(r'<svg (?:data-fold="\d+" )?data-role="(\w+)"', text)
    assert roles == ["full", "repeats", "expand"]
    # the full picture draws the page's limit, the folded one every node that is not in the run
    full = text.split('data-role="full"')[1].split("</svg>")[0]
    assert len(re.findall(r'<g class="node[ "]', full)) == 2000


def test_check_page_folds_too_and_marks_the_box_with_its_nodes_findings(script, tmp_path):
    path = script(
        RNN.replace("h.sum().backward()", "(h.sum() * 0 + torch.log(h[0, 0] - 5)).backward()")
    )
    out = tmp_path / "check.html"
    r = cli("check", path, "--format", "html", "-o", str(out))
    text = out.read_text(encoding="utf-8")
    assert r.exit_code == 1
    (g,) = page_data(text)["graphs"]
    assert g["start"] == "repeats" and "repeated blocks of 4 folded" in text
    assert g["node_findings"] and g["repeats"].get("node_findings") is not None


def test_json_output_is_unchanged_by_folding(script):
    import json

    doc = json.loads(cli("graph", script(RNN), "-f", "json").stdout)
    assert "repeats" not in doc and len(doc["nodes"]) == doc["summary"]["nodes"]


def test_a_graph_that_does_not_fold_within_the_limit_is_cut_as_before(script, tmp_path):
    text, r = html_of(script(RNN), "--max-nodes", "5", tmp_path=tmp_path)
    assert r.exit_code == 0 and "nodes not shown" in r.stderr
    data = page_data(text)
    assert len(data["nodes"]) == 5 and "start" not in data


def test_the_note_says_what_was_folded():
    fold = repeats.Fold(0, 3, 40, [[0] * 300] * 40)
    assert repeats.note(12_000, [fold]) == (
        "12,000 nodes: 40 repeated blocks of 300 folded; click a block to expand"
    )
    many = repeats.Fold(0, 1, 99_999, [[0]] * 99_999)
    assert repeats.note(100_002, [many]).startswith("100,002 nodes: 99,999 repeated blocks of 1")
