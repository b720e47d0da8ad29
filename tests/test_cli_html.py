"""``autodiag graph --format html`` and ``--format svg`` through the real entry point: pictures
drawn by autodiag's own layout, no Graphviz, no network; the page carries the same data as
``--format json``, escaped so that no text of the user's can end its script element."""

from __future__ import annotations

import json
import os
import re
import webbrowser
import xml.etree.ElementTree as ET

import pytest
from cli_helpers import ROOT, check_graph, cli
from test_cli import MODEL

SVG_NS = "{http://www.w3.org/2000/svg}"
DATA = re.compile(r'<script type="application/json" id="autodiag-data">(.*?)</script>', re.S)


def page_data(text: str) -> dict:
    m = DATA.search(text)
    assert m is not None
    return json.loads(m.group(1))


def html_of(*args, tmp_path) -> tuple[str, object]:
    out = tmp_path / "graph.html"
    r = cli("graph", *args, "--format", "html", "-o", str(out))
    return out.read_text(encoding="utf-8") if out.exists() else "", r


def test_html_page_is_self_contained_and_carries_the_json_report(script, tmp_path):
    path = script(MODEL)
    text, r = html_of(path, "--values", "--grads", tmp_path=tmp_path)
    assert r.exit_code == 0, r.output
    assert text.startswith("<!DOCTYPE html>")
    # nothing is fetched: no external script, style, image or link (the SVG namespace is a name)
    assert not re.search(r"\b(src|href)\s*=", text)
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert set(re.findall(r"https?://[^\"' )]+", text)) == {"http://www.w3.org/2000/svg"}
    data = page_data(text)
    doc = json.loads(cli("graph", path, "--values", "--grads", "--format", "json").stdout)
    layout = data.pop("layout")
    assert data.pop("collapsed", None) is None  # no module to fold in this script
    assert data == doc  # the page's data is the JSON report, plus the layout
    check_graph(data)
    assert set(layout["boxes"]) == {str(n["id"]) for n in doc["nodes"]}
    # one box per node, coloured by kind: 2 leaves (x, w), 1 root (loss)
    nodes = re.findall(r'<g class="([^"]+)" data-id="(\d+)"', text)
    assert len(nodes) == len(doc["nodes"])
    assert sum("leaf" in c.split() for c, _ in nodes) == 2
    assert [int(i) for c, i in nodes if "root" in c.split()] == doc["roots"]
    assert text.count('class="edge"') == sum(e is not None for n in doc["nodes"] for e in n["next"])


def test_user_text_cannot_end_the_script_element(script, tmp_path):
    path = script(
        "import autodiag as torch\n"
        "x = torch.tensor([1.0], requires_grad=True)\n"
        "y = (x * 2).sum()  # </script><script>window.pwned = 1</script> <!-- &\n"
        "y.backward()\n"
    )
    text, r = html_of(path, tmp_path=tmp_path)
    assert r.exit_code == 0, r.output
    assert text.count("</script>") == 2  # the data's and the code's own ends
    assert "<!--" not in text
    data = page_data(text)
    codes = {n["created_at"]["code"] for n in data["nodes"] if n["created_at"]}
    assert any("</script><script>window.pwned = 1</script> <!-- &" in c for c in codes)
    # the boxes' tooltips carry the line too, escaped as XML text
    assert "&lt;/script&gt;&lt;script&gt;window.pwned" in text


def test_svg_needs_no_graphviz(script, monkeypatch):
    monkeypatch.setenv("PATH", "")  # no dot program anywhere
    r = cli("graph", script(MODEL), "-f", "svg")
    assert r.exit_code == 0, r.output
    root = ET.fromstring(r.stdout)
    assert root.tag == f"{SVG_NS}svg"
    groups = [g for g in root.iter(f"{SVG_NS}g") if "node" in g.get("class", "").split()]
    doc = json.loads(cli("graph", script(MODEL), "-f", "json").stdout)
    assert sorted(int(g.get("data-id")) for g in groups) == sorted(n["id"] for n in doc["nodes"])
    classes = {int(g.get("data-id")): g.get("class").split() for g in groups}
    assert all("root" in classes[i] for i in doc["roots"])
    labels = {int(g.get("data-id")): [t.text for t in g.iter(f"{SVG_NS}text")] for g in groups}
    leaves = [labels[n["id"]] for n in doc["nodes"] if n["variable"]]
    assert sorted(x[0] for x in leaves) == ["w", "x"] and ["x", "[2] float32"] in leaves
    root_label = labels[doc["roots"][0]]
    assert root_label[0] == "loss = SumBackward0" and root_label[1].endswith(".py:6")
    # deterministic: the same picture twice
    assert cli("graph", script(MODEL), "-f", "svg").stdout == r.stdout


def _boxes(text: str) -> dict:
    return {int(k): v for k, v in page_data(text)["layout"]["boxes"].items()}


def test_direction_lr_puts_the_root_right_of_its_inputs(script, tmp_path):
    path = script(MODEL)
    tb, _ = html_of(path, tmp_path=tmp_path)
    lr, r = html_of(path, "--direction", "lr", tmp_path=tmp_path)
    assert r.exit_code == 0
    doc = page_data(lr)
    root = doc["roots"][0]
    b_tb, b_lr = _boxes(tb), _boxes(lr)
    for n in doc["nodes"]:
        for e in n["next"]:
            if e is not None:
                assert b_lr[n["id"]][0] > b_lr[e[0]][0]  # consumer right of its input
                assert b_tb[n["id"]][1] < b_tb[e[0]][1]  # consumer above its input
    assert b_lr[root][0] == max(b[0] for b in b_lr.values())
    assert doc["layout"]["direction"] == "LR"


def test_max_nodes_says_what_it_left_out(script, tmp_path):
    text, r = html_of(script(MODEL), "--max-nodes", "3", tmp_path=tmp_path)
    assert r.exit_code == 0
    assert "nodes not shown" in r.stderr
    data = page_data(text)
    assert len(data["nodes"]) == 3 and data["truncated"] > 0
    assert f"{data['truncated']} nodes not shown (--max-nodes 3)" in text


def test_all_calls_one_section_each(script, tmp_path):
    path = script(
        "import autodiag as torch\n"
        "x = torch.tensor(2.0, requires_grad=True)\n"
        "for k in range(3):\n"
        "    (x * k).backward()\n"
    )
    text, r = html_of(path, "--all", tmp_path=tmp_path)
    assert r.exit_code == 0
    data = page_data(text)
    assert [g["call"] for g in data["graphs"]] == [1, 2, 3]
    assert text.count('<section class="graph"') == 3
    assert len(set(re.findall(r'<marker id="([^"]+)"', text))) == 3  # ids unique in the page


def test_open_shows_the_written_page(script, tmp_path, monkeypatch):
    opened = []

    def fake_open(url, *a, **k):
        # the page is complete on disk when the browser is asked to show it
        opened.append((url, open(url[len("file://") :], encoding="utf-8").read()))
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    out = tmp_path / "g.html"
    r = cli("graph", script(MODEL), "-f", "html", "-o", str(out), "--open")
    assert r.exit_code == 0
    assert opened == [(out.resolve().as_uri(), out.read_text(encoding="utf-8"))]
    # without -o: a temporary page, its path on stderr
    opened.clear()
    r = cli("graph", script(MODEL), "-f", "html", "--open")
    assert r.exit_code == 0 and r.stdout == ""
    ((url, text),) = opened
    assert "autodiag-graph-" in url and text.startswith("<!DOCTYPE html>")
    assert url[len("file://") :] in r.stderr.replace("\n", "")
    os.unlink(url[len("file://") :])


def test_open_needs_the_html_format(script, monkeypatch):
    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: pytest.fail("opened"))
    r = cli("graph", script(MODEL), "-f", "svg", "--open")
    assert r.exit_code == 2 and "--format html" in r.stderr


def test_open_is_not_called_when_the_target_fails(script, monkeypatch):
    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: pytest.fail("opened"))
    r = cli("graph", script("raise SystemExit(3)\n"), "-f", "html", "--open")
    assert r.exit_code in (2, 3)


def test_open_leaves_no_empty_page_when_nothing_was_written(script, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(webbrowser, "open", lambda *a, **k: pytest.fail("opened"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = cli("graph", script("x = 1\n"), "-f", "html", "--open")  # no op: exit 2, no page
    assert r.exit_code == 2 and "autodiag-graph-" in r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("autodiag-graph-")]


def test_samples_model_page(tmp_path):
    text, r = html_of(os.path.join(ROOT, "samples", "model.py"), "--show-saved", tmp_path=tmp_path)
    assert r.exit_code == 0
    data = page_data(text)
    assert data["root_names"] == ["loss"]
    names = {n["variable"]["name"] for n in data["nodes"] if n["variable"]}
    assert "model.head.weight" in names


# --- autodiag check --format html: the graph with its findings marked --------------------------


def check_page(path: str, tmp_path) -> tuple[dict, str, object]:
    out = tmp_path / "check.html"
    r = cli("check", path, "--format", "html", "-o", str(out))
    text = out.read_text(encoding="utf-8")
    return page_data(text), text, r


def marked_names(data: dict) -> dict:
    (g,) = data["graphs"]
    names = {n["id"]: n["name"] for n in g["nodes"]}
    return {names[int(i)]: ks for i, ks in g.get("node_findings", {}).items()}


def test_check_page_marks_the_nodes_findings_point_at(tmp_path):
    path = os.path.join(ROOT, "samples", "nan_log.py")
    data, text, r = check_page(path, tmp_path)
    assert r.exit_code == 1
    doc = json.loads(cli("check", path, "--format", "json").stdout)
    assert data["findings"] == doc["findings"] and data["status"] == "findings"
    kinds = [f["kind"] for f in data["findings"]]
    # line 17 made four nodes; the findings are about its log (inf) and its mul (nan) only
    marks = marked_names(data)
    assert marks == {
        "LogBackward0": [kinds.index("inf_forward")],
        "MulBackward0": [kinds.index("nan_forward")],
    }
    (g,) = data["graphs"]
    drawn = {
        i for c, i in re.findall(r'<g class="([^"]+)" data-id="(\d+)"', text) if "finding" in c
    }
    assert drawn == set(g["node_findings"])
    assert f"{len(kinds)} findings" in text  # listed in the panel before any click


def test_check_page_inplace_marks_the_saver_and_the_writer(tmp_path):
    data, _, r = check_page(os.path.join(ROOT, "samples", "inplace_saved.py"), tmp_path)
    assert r.exit_code == 1
    assert marked_names(data) == {"SigmoidBackward0": [0], "MulBackward0": [0]}


def test_check_page_without_findings(script, tmp_path):
    data, text, r = check_page(script(MODEL), tmp_path)
    assert r.exit_code == 0 and data["findings"] == [] and "No findings." in text
    assert len(data["graphs"]) == 1 and "node_findings" not in data["graphs"][0]


def test_check_page_without_a_graph(script, tmp_path):
    data, text, r = check_page(
        script("import autodiag as torch\nx = torch.tensor([0.0]).log()\n"), tmp_path
    )
    assert r.exit_code == 1 and data["graphs"] == []
    assert "the target made no graph to draw" in text and "inf_forward" in text


# --- module paths ------------------------------------------------------------------------------


def test_nodes_made_in_a_module_carry_its_path():
    doc = json.loads(cli("graph", os.path.join(ROOT, "samples", "model.py"), "-f", "json").stdout)
    by_module: dict = {}
    for n in doc["nodes"]:
        by_module.setdefault(n.get("module"), []).append(n["name"])
    # linear's two nodes (the one the op reported and the transpose it made) share the path
    assert sorted(by_module["model.fc1 (Linear)"]) == ["AddmmBackward0", "TBackward0"]
    assert by_module["model.norm (LayerNorm)"] == ["NativeLayerNormBackward0"]
    assert by_module["model (MLP)"] == ["ReluBackward0"]  # F.relu in MLP.forward itself
    # made outside any module (the loss), or a leaf: no "module" key at all
    assert set(by_module[None]) == {"NllLossBackward0", "LogSoftmaxBackward0", "AccumulateGrad"}


def test_one_line_running_several_modules_names_each_nodes_own_module(script):
    # a Sequential runs its Linears from one source line: the nodes each Linear made without
    # reporting them (addmm, the transposes, the input's view) take that Linear's path, not
    # the first Linear's (they did, via the shared Stack)
    path = script(
        "import autodiag as torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4))\n"
        "y = m(m(torch.ones(2, 3, 4)))\n"
        "y.sum().backward()\n"
    )
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    by_module: dict = {}
    for n in doc["nodes"]:
        by_module.setdefault(n.get("module"), []).append(n["name"])
    per_call = ["AddmmBackward0", "TBackward0", "ViewBackward0", "ViewBackward0"]
    # the first call's input (ones) needs no grad: its view made no node
    assert sorted(by_module["m.0 (Linear)"]) == sorted(per_call * 2)[:-1]
    assert sorted(by_module["m.2 (Linear)"]) == sorted(per_call * 2)
    assert by_module["m.1 (Tanh)"] == ["TanhBackward0"] * 2


def test_module_without_a_variable_is_named_by_its_class(script):
    path = script(
        "import autodiag as torch\n"
        "def run():\n"
        "    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh())\n"
        "    net(torch.ones(1, 2)).sum().backward()\n"
        "run()\n"
    )
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    modules = {n.get("module") for n in doc["nodes"]} - {None}
    assert modules == {"Sequential.0 (Linear)", "Sequential.1 (Tanh)"}


# two ReLU layers with units that never fire, whatever the random initial weights are
TWO_DEAD_LAYERS = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
with torch.no_grad():
    model[0].bias[:2] = -100.0
    model[2].bias[:3] = -100.0
x, y = torch.randn(64, 2), torch.randint(0, 3, (64,))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


def test_check_page_marks_each_dead_relu_on_its_own_module(tmp_path):
    script = tmp_path / "two_dead.py"
    script.write_text(TWO_DEAD_LAYERS)
    data, _, r = check_page(str(script), tmp_path)
    assert r.exit_code == 0
    (g,) = data["graphs"]
    nodes = {n["id"]: n for n in g["nodes"]}
    dead = [k for k, f in enumerate(data["findings"]) if f["kind"] == "dead_relu"]
    assert len(dead) == 2
    for k in dead:
        (i,) = [int(i) for i, ks in g["node_findings"].items() if k in ks]
        assert nodes[i]["name"] == "ReluBackward0"
        assert nodes[i]["module"] == f"{data['findings'][k]['module']} (ReLU)"


# --- modules folded into one box each ----------------------------------------------------------


def test_modules_fold_into_one_box_each(tmp_path):
    text, r = html_of(os.path.join(ROOT, "samples", "model.py"), tmp_path=tmp_path)
    assert r.exit_code == 0
    data = page_data(text)
    full = {n["id"]: n for n in data["nodes"]}
    folded = data["collapsed"]
    boxes = {n["name"]: n for n in folded["nodes"] if "members" in n}
    # the Linear/LayerNorm layers with their parameters; single-node modules stay as they are
    assert set(boxes) == {"model.fc1", "model.norm", "model.fc2", "model.head"}
    head = boxes["model.head"]
    assert head["kind"] == "Linear"
    names = sorted(
        full[i]["variable"]["name"] if full[i]["variable"] else full[i]["name"]
        for i in head["members"]
    )
    assert names == ["AddmmBackward0", "TBackward0", "model.head.bias", "model.head.weight"]
    # every node is drawn once: in its box or by itself
    inside = [i for b in boxes.values() for i in b["members"]]
    alone = [n["id"] for n in folded["nodes"] if "members" not in n]
    assert sorted(inside + alone) == sorted(full)
    # edges: the chain loss <- log_softmax <- head <- relu <- fc2 <- ...; fc1 takes no input
    ids = {n["id"]: n for n in folded["nodes"]}
    assert [ids[e[0]]["name"] for e in ids[1]["next"]] == ["model.head"]
    assert [ids[e[0]]["name"] for e in head["next"]] == ["ReluBackward0"]
    assert boxes["model.fc1"]["next"] == []
    assert folded["roots"] == data["roots"] and folded["root_names"] == ["loss"]
    # drawn as a second picture, boxes dashed purple ("group")
    assert text.count("<svg ") == 2
    assert len(re.findall(r'<g class="node group"', text)) == 4
    assert set(folded["layout"]["boxes"]) == {str(i) for i in ids}


def test_findings_on_folded_nodes_mark_their_box(script, tmp_path):
    path = script(
        "import autodiag as torch\n"
        "class Block(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(2, 2)\n"
        "    def forward(self, x):\n"
        "        return torch.log(self.lin(x) - 100.0)\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.block = Block()\n"
        "        self.out = torch.nn.Linear(2, 1)\n"
        "    def forward(self, x):\n"
        "        return self.out(self.block(x))\n"
        "net = Net()\n"
        "net(torch.ones(1, 2)).sum().backward()\n"
    )
    data, _, r = check_page(path, tmp_path)
    assert r.exit_code == 1
    (g,) = data["graphs"]
    full = {n["id"]: n for n in g["nodes"]}
    assert {full[int(i)]["name"] for i in g["node_findings"]} == {"LogBackward0"}
    folded = {n["id"]: n for n in g["collapsed"]["nodes"]}
    block = [n for n in folded.values() if n["name"] == "net.block"][0]
    # the block holds its own ops and its inner Linear's parameters (net.block.lin.weight)
    leaves = sorted(full[i]["variable"]["name"] for i in block["members"] if full[i]["variable"])
    assert leaves == ["net.block.lin.bias", "net.block.lin.weight"]
    assert {folded[int(i)]["name"] for i in g["collapsed"]["node_findings"]} == {"net.block"}
