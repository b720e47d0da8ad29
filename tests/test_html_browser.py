"""The HTML page in a real browser: headless Chromium driven through ChromeDriver's WebDriver
HTTP API (``tests/webdriver.py``, standard library only).

The page must render with no console error, a click on a node must fill the detail panel
(name, creation line with its source, saved tensors, value and gradient), search must find
nodes by line, and a user's ``</script>`` must stay text. A screenshot is kept as an artifact
(its path is printed); with ``AUTODIAG_UPDATE_SCREENSHOT=1`` it also replaces the README's
``tests/screenshots/graph-html.png`` (the top level of the repository is fixed).

Skipped only when no browser can be started here; ``.ci/run`` installs Debian's chromium and
chromium-driver, so CI runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import pytest
from cli_helpers import ROOT, cli
from webdriver import Browser, Unavailable

README_SHOT = os.path.join(ROOT, "tests", "screenshots", "graph-html.png")


@pytest.fixture(scope="module")
def browser():
    try:
        b = Browser.start()
    except Unavailable as e:
        pytest.skip(f"no browser: {e}")
    try:
        yield b
    finally:
        b.close()


def artifacts() -> str:
    folder = os.environ.get("AUTODIAG_ARTIFACTS") or os.path.join(
        tempfile.gettempdir(), "autodiag-artifacts"
    )
    os.makedirs(folder, exist_ok=True)
    return folder


def errors(b: Browser) -> list:
    return [e for e in b.console() if e.get("level") == "SEVERE"]


def write_page(tmp_path, *args) -> str:
    out = tmp_path / "graph.html"
    r = cli("graph", *args, "--format", "html", "-o", str(out))
    assert r.exit_code == 0, r.output
    return out.resolve().as_uri()


def test_page_renders_and_a_click_shows_the_node(browser, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page names the target as given: samples/model.py
    sample = os.path.join("samples", "model.py")
    browser.open(write_page(tmp_path, sample, "--values", "--grads", "--show-saved"))
    assert errors(browser) == []
    assert (
        browser.run("return document.querySelectorAll('.canvas svg:first-of-type g.node').length")
        == 20
    )
    # the page fitted the graph into the window: the whole picture is visible
    box = browser.run(
        "var r = document.querySelector('svg g.viewport').getBoundingClientRect();"
        "var c = document.querySelector('.canvas').getBoundingClientRect();"
        "return [r.left >= c.left - 1, r.right <= c.right + 1, r.height > 100];"
    )
    assert box == [True, True, True]

    browser.click('g.node[data-id="2"]')  # the head's AddmmBackward0
    text = browser.text("section.graph .details")
    assert "AddmmBackward0 (id 2)" in text and "module\nmodel.head (Linear)" in text
    assert "samples/model.py:32" in text and "return self.head(F.relu(self.fc2(h)))" in text
    assert "mat1 [4, 16] float32 v0 256 B" in text
    assert "model.head.bias #3" in text and "LogSoftmaxBackward0 #1" in text
    assert "value\n[4, 3] float32" in text and "grad\n[4, 3] float32" in text
    # the path up to the root is highlighted: the node, LogSoftmax and the loss
    on = browser.run(
        "return Array.from(document.querySelectorAll('.canvas svg:first-of-type g.node.onpath'))"
        ".map(function (e) { return Number(e.dataset.id); }).sort()"
    )
    assert on == [0, 1, 2]

    browser.click('g.node[data-id="3"]')  # a leaf: its variable, shape, dtype
    text = browser.text("section.graph .details")
    assert "model.head.bias" in text and "leaf\nmodel.head.bias [3] float32" in text

    # search by line: the two nodes line 38 made (the loss and its log_softmax)
    browser.type("header .search", "model.py:38")
    assert browser.text("header .matches") == "2 matches"
    matched = browser.run(
        "return Array.from(document.querySelectorAll('.canvas svg:first-of-type g.node.match'))"
        ".map(function (e) { return Number(e.dataset.id); }).sort()"
    )
    assert matched == [0, 1]
    browser.type("header .search", "\ue007")  # Enter: select the first match
    assert "loss = NllLossBackward0" in browser.text("section.graph .details")
    assert errors(browser) == []

    # the modules button folds each module into one box; a click on a member opens it
    browser.click("header .modules")
    shown = browser.run(
        "return Array.from(document.querySelectorAll('.canvas svg'))"
        ".map(function (s) { return s.style.display !== 'none'; })"
    )
    assert shown == [False, True]
    head = browser.run(
        "return Array.from(document.querySelectorAll('g.node.group')).filter(function (e) {"
        "  return e.textContent.indexOf('model.head') >= 0; })[0].dataset.id"
    )
    browser.click(f'g.node.group[data-id="{head}"]')
    text = browser.text("section.graph .details")
    assert "model.head (Linear)" in text and "AddmmBackward0 #2" in text
    browser.click("section.graph .details dd a")  # its first member: back to the full picture
    assert browser.text("section.graph .details h3") == "AddmmBackward0"
    assert browser.run("return document.querySelector('header .modules').className") == "modules"
    assert errors(browser) == []

    # the screenshot: the whole graph, the first layer's weight selected with its path to the loss
    shot = os.path.join(artifacts(), "graph-html.png")
    browser.run(
        "var box = document.querySelector('header .search'); box.value = '';"
        "box.dispatchEvent(new Event('input')); box.blur(); window.autodiagViews[0].fit();"
        "return 1"
    )
    leaf = browser.run(
        "return Array.from(document.querySelectorAll('g.node.leaf')).filter(function (e) {"
        "  return e.textContent.indexOf('model.fc1.weight') >= 0; })[0].dataset.id"
    )
    browser.click(f'g.node[data-id="{leaf}"]')
    assert "model.fc1.weight" in browser.text("section.graph .details h3")
    browser.screenshot(shot)
    print(f"screenshot: {shot}")
    assert os.path.getsize(shot) > 10_000
    if os.environ.get("AUTODIAG_UPDATE_SCREENSHOT") == "1":
        os.makedirs(os.path.dirname(README_SHOT), exist_ok=True)
        shutil.copyfile(shot, README_SHOT)


def test_user_text_stays_text(browser, tmp_path, script):
    path = script(
        "import autodiag as torch\n"
        "x = torch.tensor([1.0], requires_grad=True)\n"
        "y = (x * 2).sum()  # </script><script>window.pwned = 1</script><img src=x "
        "onerror='window.pwned = 2'>\n"
        "y.backward()\n"
    )
    browser.open(write_page(tmp_path, path))
    assert errors(browser) == []
    root = browser.run("return document.querySelector('g.node.root').dataset.id")
    browser.click(f'g.node[data-id="{root}"]')
    assert browser.run("return window.pwned === undefined")
    assert "# </script><script>window.pwned = 1</script><img src=x" in browser.text(
        "section.graph .details pre"
    )
    assert browser.run("return document.querySelectorAll('.details img').length") == 0


def test_a_2000_node_page_loads_quickly(browser, tmp_path, script):
    path = script(
        "import autodiag as torch\n"
        "x = torch.randn(4, 8)\n"
        "h = x\n"
        "for _ in range(500):\n"
        "    w = torch.randn(8, 8, requires_grad=True)\n"
        "    h = h + (h @ w).relu()\n"
        "h.sum().backward()\n"
    )
    url = write_page(tmp_path, path)
    browser.open(url)
    assert errors(browser) == []
    n = browser.run("return document.querySelectorAll('.canvas svg:first-of-type g.node').length")
    assert n >= 1900
    # a frame of panning and zooming: transform set, and the page still answers quickly
    t = browser.run(
        "var t0 = performance.now(); var v = window.autodiagViews[0];"
        "for (var i = 0; i < 20; i++) { v.fit(); v.search(String(i)); }"
        "return performance.now() - t0;"
    )
    assert t < 5000


def test_check_page_shows_findings_on_their_nodes(browser, tmp_path):
    out = tmp_path / "check.html"
    r = cli("check", os.path.join(ROOT, "samples", "nan_log.py"), "-f", "html", "-o", str(out))
    assert r.exit_code == 1
    browser.open(out.resolve().as_uri())
    assert errors(browser) == []
    assert "2 findings" in browser.text("section.graph .details")
    marked = browser.run(
        "return Array.from(document.querySelectorAll('g.node.finding'))"
        ".map(function (e) { return e.textContent; })"
    )
    assert len(marked) == 2 and any("LogBackward0" in m for m in marked)
    log = browser.run(
        "return Array.from(document.querySelectorAll('g.node.finding')).filter(function (e) {"
        "  return e.textContent.indexOf('LogBackward0') >= 0; })[0].dataset.id"
    )
    browser.click(f'g.node[data-id="{log}"]')
    text = browser.text("section.graph .details")
    assert "inf_forward (error)" in text and "log produced ±inf from finite inputs" in text
    assert "hint: log of 0 is -inf" in text
    assert errors(browser) == []
    shot = os.path.join(artifacts(), "check-html.png")
    browser.screenshot(shot)
    print(f"screenshot: {shot}")


FLOW_SHOT = os.path.join(ROOT, "tests", "screenshots", "flow-html.png")


def test_gradient_flow_plot_hover_shows_values(browser, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plot = tmp_path / "grads.html"
    r = cli("check", os.path.join("samples", "train.py"), "--plot", str(plot), "-q")
    assert r.exit_code == 0, r.output
    browser.open(plot.resolve().as_uri())
    assert errors(browser) == []
    # one line per parameter on each chart, the dead ReLUs marked in the legend
    assert browser.run("return document.querySelectorAll('figure svg path.line').length") == 12
    legend = browser.text(".flow-legend")
    doc = json.loads(cli("check", os.path.join("samples", "train.py"), "-f", "json", "-q").stdout)
    dead = [f for f in doc["findings"] if f["kind"] == "dead_relu"]
    assert dead  # train.py's initial weights leave dead units (PyTorch's, under manual_seed(0))
    for f in dead:
        assert f"{f['module']} (ReLU)\ndead_relu: {len(f['units'])} of 32 units" in legend
    # hovering the middle of the norm chart: the step and each parameter's value there
    tip = browser.run(
        "var s = document.querySelector('figure[data-key=norm] svg');"
        "var r = s.getBoundingClientRect();"
        "s.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 62 + (r.width - 76) / 2,"
        "  clientY: r.top + r.height / 2, bubbles: true}));"
        "var t = document.querySelector('.flow-tip');"
        "return [t.hidden, t.textContent, document.querySelector('.guide').getAttribute('x1')];"
    )
    step = re.match(r"optimizer step (\d+) · gradient norm", tip[1])
    assert tip[0] is False and step and 70 <= int(step[1]) <= 80, tip
    w = doc["grad_flow"]["parameters"][0]
    assert w["name"] == "model.0.weight"
    shown = f"model.0.weight  {w['norm'][w['x'].index(int(step[1]))]:.3g}"
    assert shown in tip[1] and tip[2] is not None
    # a click on a legend row hides that parameter's lines; a second click shows them again
    browser.click('.flow-legend .row[data-index="0"]')
    assert browser.run("return document.querySelectorAll('g.off').length") == 2
    browser.click('.flow-legend .row[data-index="0"]')
    assert browser.run("return document.querySelectorAll('g.off').length") == 0
    assert errors(browser) == []
    shot = os.path.join(artifacts(), "flow-html.png")
    browser.run(
        "var s = document.querySelector('figure[data-key=norm] svg');"
        "var r = s.getBoundingClientRect();"
        "s.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.3,"
        "  clientY: r.top + r.height * 0.35, bubbles: true})); return 1;"
    )
    browser.screenshot(shot)
    print(f"screenshot: {shot}")
    assert os.path.getsize(shot) > 10_000
    if os.environ.get("AUTODIAG_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, FLOW_SHOT)


def test_check_page_includes_the_gradient_flow(browser, tmp_path):
    out = tmp_path / "check.html"
    r = cli("check", os.path.join(ROOT, "samples", "train.py"), "-f", "html", "-o", str(out))
    assert r.exit_code == 0
    browser.open(out.resolve().as_uri())
    assert errors(browser) == []
    assert browser.run("return document.querySelectorAll('section.flow path.line').length") == 12
    assert browser.run("return document.querySelectorAll('section.graph g.node').length") > 0


REPEATS_SHOT = os.path.join(ROOT, "tests", "screenshots", "repeats-html.png")
DEEP_MLP = """\
import autodiag as torch
import autodiag.nn as nn
torch.manual_seed(0)
layers = []
for _ in range(420):
    layers += [nn.Linear(8, 8), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(8, 1))
loss = model(torch.randn(4, 8)).pow(2).mean()
loss.backward()
"""


def test_a_graph_beyond_the_limit_opens_folded_and_a_block_expands(
    browser, tmp_path, script, monkeypatch
):
    path = script(DEEP_MLP, "deep_mlp.py")
    monkeypatch.chdir(os.path.dirname(path))  # the page names the target as given
    url = write_page(tmp_path, "deep_mlp.py")
    browser.open(url)
    assert errors(browser) == []
    note = browser.text(".note")
    assert re.fullmatch(
        r"2,\d{3} nodes: \d+ repeated blocks of 5 folded; click a block to expand", note
    )
    shown = browser.run(
        "return Array.from(document.querySelectorAll('.canvas svg')).filter(function (s) {"
        "  return s.style.display !== 'none'; }).map(function (s) {"
        "  return [s.dataset.role, s.querySelectorAll('g.node').length]; })"
    )
    assert shown[0][0] == "repeats" and len(shown) == 1 and shown[0][1] < 20
    assert "on" in browser.run("return document.querySelector('header .repeats').className")
    shot = os.path.join(artifacts(), "repeats-html.png")
    browser.click("g.node.repeat")  # the run's box: its panel, then the screenshot of it folded
    text = browser.text("section.graph .details")
    assert re.search(r"repeats\n\d+ blocks of 5 nodes \(2 ranks each\)", text), text
    role = browser.run(
        "return Array.from(document.querySelectorAll('.canvas svg')).filter(function (s) {"
        "  return s.style.display !== 'none'; }).map(function (s) { return s.dataset.role; })"
    )
    assert role == ["expand"]  # the click expanded the block
    assert (
        browser.run(
            "return document.querySelector('.canvas svg[data-role=\"expand\"]')"
            ".querySelectorAll('g.node').length"
        )
        > 100
    )
    browser.click("section.graph .details a.back")  # fold it back
    assert (
        browser.run(
            "return document.querySelector('.canvas svg[data-role=\"repeats\"]').style.display"
        )
        == ""
    )
    # search finds a node inside the folded run and expands it: a drawn block's weight...
    browser.type("header .search", "model.4.weight")
    assert browser.text("header .matches") == "1 match"
    assert (
        browser.run(
            "return document.querySelectorAll("
            "'.canvas svg[data-role=\"repeats\"] g.node.repeat.match').length"
        )
        == 1
    )
    browser.type("header .search", "\ue007")
    assert browser.text("section.graph .details h3") == "model.4.weight"
    sel = browser.run(
        "var s = document.querySelector('g.node.selected');"
        "return [s.closest('svg').dataset.role, s.textContent]"
    )
    assert sel[0] == "expand" and "model.4.weight" in sel[1]
    # ... and one of a block past the drawn ones: its details, and where it is
    browser.run(
        "var box = document.querySelector('header .search'); box.value = '';"
        "box.dispatchEvent(new Event('input')); return 1"
    )
    browser.type("header .search", "model.800.weight\ue007")
    text = browser.text("section.graph .details")
    assert text.startswith("model.800.weight") and "not drawn" in text and "block " in text
    assert "leaf\nmodel.800.weight [8, 8] float32" in text
    assert errors(browser) == []
    # the screenshot: the graph folded, the run's box selected
    browser.run(
        "var box = document.querySelector('header .search'); box.value = '';"
        "box.dispatchEvent(new Event('input')); box.blur(); return 1"
    )
    browser.click("header .repeats")  # the full picture (its first 2,000 nodes)...
    browser.click("header .repeats")  # ... and back to the folded one
    assert (
        browser.run(
            "return document.querySelector('.canvas svg[data-role=\"repeats\"]').style.display"
        )
        == ""
    )
    browser.screenshot(shot)
    print(f"screenshot: {shot}")
    assert os.path.getsize(shot) > 10_000
    if os.environ.get("AUTODIAG_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPEATS_SHOT)
