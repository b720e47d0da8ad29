"""Gradient flow: the per-step series (``analysis/flow.py``) and its downsampling, check's
``"grad_flow"`` JSON against norms computed by hand, the sparkline table of the text report,
and ``check --plot FILE`` (written atomically, refused like -o for the user's files)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import ROOT, cli

from autodiag.analysis.flow import MAX_POINTS, Flow, grad_flow, module_of
from autodiag.analysis.health import GradHealth
from autodiag.report.flow import sparkline, table_lines
from autodiag.trace import tracing

TRAIN = os.path.join(ROOT, "samples", "train.py")

# --- the series and its downsampling ------------------------------------------------------------


@pytest.mark.parametrize("n, cap", [(1, 4), (4, 4), (5, 4), (37, 8), (1000, 16), (4096, 256)])
def test_downsampling_keeps_even_buckets_with_their_extremes(n, cap):
    rng = np.random.default_rng(n)
    values = rng.lognormal(size=n).tolist()
    f = Flow(max_points=cap)
    for step, v in enumerate(values, start=1):
        f.add(step, v)
    assert len(f.x) <= cap and f.n == n
    assert f.first == values[0] and f.last == values[-1]
    # every point stands for `stride` consecutive steps: the first one's value, their min/max
    k = f.stride
    assert k == 1 or len(f.x) > cap // 2  # the stride only doubles when the points ran out
    for i, x in enumerate(f.x):
        chunk = values[i * k : (i + 1) * k]
        assert x == i * k + 1
        assert f.norm[i] == chunk[0] and f.lo[i] == min(chunk) and f.hi[i] == max(chunk)
    assert len(f.x) == math.ceil(n / k)


def test_update_ratios_go_to_the_last_point_and_merge_by_their_maximum():
    f = Flow(max_points=2)
    f.add_ratio(0, 9.0)  # before any norm: dropped
    f.add(1, 1.0)
    f.add_ratio(1, 0.5)
    f.add(2, 1.0)
    f.add_ratio(2, 0.25)
    assert f.ratio == [0.5, 0.25]
    f.add(3, 1.0)  # the points ran out: 1 and 2 merge
    assert f.x == [1, 3] and f.ratio == [0.5, None] and f.stride == 2
    with pytest.raises(ValueError, match="even"):
        Flow(max_points=3)


def test_module_of_a_parameter_name():
    assert module_of("model.layers.3.attn.in_proj_weight") == "model.layers.3.attn"
    assert module_of("self.w") == "self" and module_of("w") is None


def test_sparkline_scale_and_resampling():
    assert sparkline([1e-3, 1e-2, 1e-1, 1.0], 4) == "▁▃▆█"
    assert sparkline(list(np.logspace(0, 7, 800)), 8) == "▁▂▃▄▅▆▇█"
    assert sparkline([0.0, 0.0], 5) == "  " and sparkline([2.0] * 3, 3) == "▄▄▄"


# --- the series of a run, in-process ------------------------------------------------------------

LOOP = """\
import autodiag as torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(16, 3), torch.randn(16, 1)
norms, ratios = [], []
for step in range({steps}):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    before = [p.detach().clone() for p in model.parameters()]
    norms.append([float(p.grad.norm()) for p in model.parameters()])
    opt.step()
    moved = zip(model.parameters(), before)
    ratios.append([float((p.detach() - b).norm() / b.norm()) for p, b in moved])
"""


def run_flow(steps: int) -> tuple[dict, dict]:
    ns: dict = {}
    with tracing(GradHealth()) as health:
        exec(LOOP.format(steps=steps), ns)
    findings = health.findings(ns)
    return grad_flow(health, findings, ns), ns


def test_grad_flow_of_a_training_loop_matches_the_norms_computed_by_hand():
    flow, ns = run_flow(6)
    params = flow["parameters"]
    names = ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert [p["name"] for p in params] == names  # named_parameters() order
    assert [p["module"] for p in params] == ["model.0", "model.0", "model.2", "model.2"]
    for k, p in enumerate(params):
        assert p["per"] == "optimizer step" and p["steps"] == 6 and p["stride"] == 1
        assert p["x"] == [1, 2, 3, 4, 5, 6]
        want = [row[k] for row in ns["norms"]]
        assert p["norm"] == pytest.approx(want, rel=1e-3)
        assert p["first"] == pytest.approx(want[0], rel=1e-3)
        # the update of step s is measured when the next gradient arrives: the last is not
        got = p["update_ratio"]
        assert got[-1] is None
        # ||w_new - w_old|| / ||w_old||
        assert got[:-1] == pytest.approx([row[k] for row in ns["ratios"][:-1]], rel=1e-3)


def test_a_long_run_is_sampled_evenly_in_bounded_memory():
    steps = 2 * MAX_POINTS + 40  # past 2 * MAX_POINTS: 4 steps per point
    flow, ns = run_flow(steps)
    p = flow["parameters"][0]
    assert p["steps"] == steps and p["stride"] == 4 and len(p["x"]) == math.ceil(steps / 4)
    assert p["x"][:3] == [1, 5, 9]
    want = [row[0] for row in ns["norms"]]
    assert p["norm_max"][0] == pytest.approx(max(want[:4]), rel=1e-3)
    assert p["norm_min"][-1] == pytest.approx(min(want[-4:]), rel=1e-3)
    assert p["last"] == pytest.approx(want[-1], rel=1e-3)


def test_without_an_optimizer_the_series_is_per_backward_call():
    ns: dict = {}
    src = (
        "import autodiag as torch\n"
        "w = torch.ones(3, requires_grad=True)\n"
        "for k in range(5):\n"
        "    w.grad = None\n"
        "    (w * 2.0 ** k).sum().backward()\n"
    )
    with tracing(GradHealth()) as health:
        exec(src, ns)
    (p,) = grad_flow(health, health.findings(ns), ns)["parameters"]
    assert p["name"] == "w" and p["module"] is None and p["per"] == "backward call"
    assert p["x"] == [1, 2, 3, 4, 5]
    assert p["norm"] == pytest.approx([math.sqrt(3) * 2.0**k for k in range(5)], rel=1e-3)
    assert p["update_ratio"] == [None] * 5  # nothing updated it


# --- check: JSON, text, --plot ------------------------------------------------------------------

VANISHING = """\
import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)
x = torch.randn(64, 4)
y = torch.randn(64, 1)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
with torch.no_grad():
    model[2].weight.mul_(1e-8)  # a frozen, tiny last layer passes almost nothing back
model[2].weight.requires_grad_(False)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
for step in range(12):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


def test_check_json_has_the_grad_flow_of_train_py():
    r = cli("check", TRAIN, "-f", "json", "-q")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    flow = doc["grad_flow"]
    assert flow["max_points"] == MAX_POINTS
    params = flow["parameters"]
    assert [p["name"] for p in params] == [
        f"model.{m}.{k}" for m in (0, 2, 4) for k in ("weight", "bias")
    ]
    for p in params:
        assert p["steps"] == 150 and p["x"] == list(range(1, 151)) and p["marks"] == []
        assert len(p["norm"]) == len(p["update_ratio"]) == 150
        assert all(v > 0 for v in p["norm"]) and all(r > 0 for r in p["update_ratio"][:-1])
    assert params[0]["shape"] == [32, 2]


def test_check_text_shows_a_sparkline_per_parameter_within_80_columns(script):
    r = cli("check", script(VANISHING), "--no-color", env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("gradient flow"))
    table = lines[start : start + 5]
    assert table[0] == "gradient flow: norm over 12 optimizer steps (log scale, each row its own)"
    assert table[1].split() == ["parameter", "norm", "first", "last"]
    rows = {x.split()[0]: x.split() for x in table[2:]}
    assert list(rows) == ["model.0.weight", "model.0.bias", "model.2.bias"]
    assert rows["model.0.weight"][-1] == "vanishing" and rows["model.0.bias"][-1] == "vanishing"
    assert len(rows["model.2.bias"]) == 4  # no mark
    spark = rows["model.0.bias"][1]
    assert len(spark) == 12 and set(spark) <= set("▁▂▃▄▅▆▇█")
    levels = "▁▂▃▄▅▆▇█"
    assert spark[0] == "█" and levels.index(spark[-1]) < 7  # its norm falls over the steps
    assert float(rows["model.0.bias"][2]) < 1e-8  # first norm
    assert all(len(x) <= 80 for x in lines if x and not x.startswith(("!", "  ", "0 errors")))
    assert all(len(x) <= 80 for x in table)


def test_the_table_lists_dead_relus_after_their_layer_and_fits_narrow_terminals():
    doc = json.loads(cli("check", TRAIN, "-f", "json", "-q").stdout)
    for width in (60, 80, 120):
        lines = [t.plain for t in table_lines(doc["grad_flow"], doc["findings"], width)]
        assert all(len(x) <= width for x in lines), (width, lines)
        names = [x.split()[0] for x in lines[2:]]
        # each ReLU with dead units (PyTorch's initial weights under manual_seed(0)) gets a
        # row after the layer before it
        dead = {f["module"]: len(f["units"]) for f in doc["findings"] if f["kind"] == "dead_relu"}
        assert dead
        expected = []
        for layer, relu in (("model.0", "model.1"), ("model.2", "model.3"), ("model.4", None)):
            expected += [f"{layer}.weight", f"{layer}.bias"] + ([relu] if relu in dead else [])
        assert names == expected
        for module, count in dead.items():
            row = lines[2 + names.index(module)].split()
            assert row[1:] == ["(ReLU)", str(count), "of", "32", "dead"]


def test_few_steps_make_no_table(script):
    path = script(
        "import autodiag as torch\n"
        "w = torch.ones(2, requires_grad=True)\n"
        "for _ in range(3):\n"
        "    w.grad = None\n"
        "    (w * w).sum().backward()\n"
    )
    r = cli("check", path, "--no-color")
    assert r.exit_code == 0 and "gradient flow" not in r.stdout
    doc = json.loads(cli("check", path, "-f", "json").stdout)
    assert doc["grad_flow"]["parameters"][0]["steps"] == 3  # the JSON has it anyway


def test_plot_is_written_with_json_and_text_reports(tmp_path, script):
    path = script(VANISHING)
    plot = tmp_path / "grads.html"
    r = cli("check", path, "-f", "json", "--plot", str(plot))
    assert r.exit_code == 0
    doc = json.loads(r.stdout)  # stdout is the JSON alone
    page = plot.read_text()
    assert page.startswith("<!DOCTYPE html>") and "gradient flow" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # self-contained
    assert '<span class="badge">vanishing_grad</span>' in page
    assert doc["grad_flow"]["parameters"][0]["marks"] == ["vanishing_grad"]
    assert "Every one of the 12 optimizer steps is shown" in page
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".autodiag-")]
    plot.unlink()
    r = cli("check", path, "--plot", str(plot), "-o", str(tmp_path / "report.txt"))
    assert r.exit_code == 0 and plot.exists()
    assert "gradient flow" in (tmp_path / "report.txt").read_text()


def test_plot_of_a_long_run_says_it_is_downsampled(tmp_path, script):
    path = script(LOOP.format(steps=600))
    plot = tmp_path / "grads.html"
    assert cli("check", path, "--plot", str(plot), "-q").exit_code == 0
    assert "each point here stands for 4 consecutive optimizer steps" in plot.read_text()


def test_plot_is_refused_like_output(tmp_path, script):
    path = script(VANISHING)
    r = cli("check", path, "--plot", path)
    assert r.exit_code == 2 and "--plot" in r.output and "the target script" in r.output
    other = tmp_path / "keep.py"
    other.write_text("x = 1\n")
    r = cli("check", path, "--plot", str(other))
    assert r.exit_code == 2 and "existing Python file" in r.output
    assert other.read_text() == "x = 1\n"
    same = str(tmp_path / "same.html")
    r = cli("check", path, "--plot", same, "-o", same)
    assert r.exit_code == 2 and "name the same file" in r.output
    r = cli("check", path, "--plot", str(tmp_path / "missing" / "g.html"), "-f", "json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["message"].startswith("--plot")


def test_plot_and_a_closed_pipe(tmp_path, script):
    path = script(VANISHING)
    plot = tmp_path / "grads.html"
    entry = [sys.executable, "-m", "autodiag", "check", path, "--plot", str(plot), "-q"]
    proc = subprocess.run(
        " ".join(entry) + " | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=ROOT,
    )
    assert proc.stdout.strip() == "vanishing_grad (2)"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert plot.exists()


def test_a_target_that_fails_still_gets_the_plot_of_what_ran(tmp_path, script):
    path = script(LOOP.format(steps=5) + "raise ValueError('data ran out')\n")
    plot = tmp_path / "grads.html"
    r = cli("check", path, "--plot", str(plot), "-f", "json", "-q")
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["error"]["kind"] == "target_failed"
    assert doc["grad_flow"]["parameters"][0]["steps"] == 5
    assert "Every one of the 5 optimizer steps is shown" in plot.read_text()


def test_nan_and_inf_norms_are_null_and_counted():
    f = Flow(max_points=2)
    for x, v in enumerate([1.0, float("nan"), 2.0, float("inf"), 0.5], start=1):
        f.add(x, v)
    assert f.nonfinite == 2 and f.nonfinite_at == 2
    assert f.stride == 4 and f.norm == [1.0, 0.5] and f.lo == [1.0, 0.5] and f.hi == [2.0, 0.5]
    f.add_ratio(5, float("nan"))
    assert f.ratio == [None, None]
    g = Flow()
    g.add(1, float("nan"))
    doc = g.to_json()
    assert doc["first"] is None and doc["norm"] == [None] and doc["max"] is None


def _strict(text: str) -> dict:
    def refuse(name):
        raise AssertionError(f"{name} in the JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_run_with_nan_gradients_gives_valid_json(tmp_path):
    nan_log = os.path.join(ROOT, "samples", "nan_log.py")
    r = cli("check", nan_log, "-f", "json", "-q")
    assert r.exit_code == 1
    params = _strict(r.stdout)["grad_flow"]["parameters"]
    assert params and any(p["nonfinite"] for p in params)
    bad = next(p for p in params if p["nonfinite"])
    assert bad["first_nonfinite"] == bad["x"][bad["norm"].index(None)]
    plot = tmp_path / "grads.html"
    assert cli("check", nan_log, "--plot", str(plot), "-q").exit_code == 1
    page = plot.read_text()
    data = page.split('id="autodiag-data">')[1].split("</script>")[0]
    _strict(data)
    series = _strict(page.split('class="flow-data">')[1].split("</script>")[0])["series"]
    assert any(None in s["norm"] for s in series)


def test_check_json_of_train_py_is_compact():
    # 87,706 bytes before: every number of the six 150-step series on a line of its own, and
    # norm_min/norm_max repeating norm at stride 1
    r = cli("check", TRAIN, "-f", "json", "-q")
    assert r.exit_code == 0
    text = r.stdout
    assert len(text.encode()) < 30_000
    for p in json.loads(text)["grad_flow"]["parameters"]:
        assert p["stride"] == 1 and "norm_min" not in p and "norm_max" not in p
    lines = text.splitlines()
    assert sum(line.strip().startswith('"norm": [') for line in lines) == 6  # a list a line


def test_dumps_readable_is_json_dumps_with_lists_of_scalars_on_one_line():
    from autodiag.report.output import dumps_readable

    doc = {
        "a": [1, 2.5, None, True, "x]"],
        "b": [[1, 2], {"c": []}, {}],
        "d": {"e": [], "f": {"g": [0.1]}},
        "s": "line\nbreak",
        "n": np.float64(0.5),
    }
    text = dumps_readable(doc)
    assert json.loads(text) == json.loads(json.dumps(doc, default=float))
    assert '  "a": [1, 2.5, null, true, "x]"],' in text.splitlines()
    assert "    [1, 2]," in text.splitlines()  # a list of lists: one inner list a line
