"""``--engine torch`` observes the threads a script starts (engines/torch/workers.py): every
command gives the same findings, with the same lines, as autodiag's engine gives for the same
script, whether the training runs in a ``threading.Thread`` started at module level, one started
in a function, or a ``ThreadPoolExecutor`` worker inside a ``main()`` loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from cli_helpers import ROOT, check_envelope, cli
from test_torch_engine import ENV, _graph_shape, _inplace_facts
from test_torch_engine_anomaly import _anomaly_facts, _leak_facts
from test_torch_engine_check import _errors, _trace_rows, _warnings

import autodiag
from autodiag.trace.sites import short_path

torch = pytest.importorskip("torch")
# the samples' errors raised in a thread (inplace_saved.py's backward) reach threading's
# excepthook, as with plain python; in-process, pytest reports each one as a warning
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

# How the sample's code is run in a thread: ``{body}`` is the sample, indented into ``work()``.
PLACEMENTS = {
    "module": """\
import threading

def work():
{body}

t = threading.Thread(target=work, name="trainer")
t.start()
t.join()
""",
    "function": """\
import threading

def work():
{body}

def main():
    t = threading.Thread(target=work, name="trainer")
    t.start()
    t.join()

main()
""",
    "main_loop": """\
from concurrent.futures import ThreadPoolExecutor

def work():
{body}

def main():
    for epoch in range(2):
        with ThreadPoolExecutor(1) as pool:
            pool.submit(work).result()

if __name__ == "__main__":
    main()
""",
}

# command -> (the sample whose bug it finds, what to compare between the engines)
COMMANDS = {
    "graph": ("detached_param.py", lambda d: _graph_shape(d)),
    "inplace": ("inplace_saved.py", lambda d: _inplace_facts(d)),
    "anomaly": ("nan_log.py", lambda d: _anomaly_facts(d)),
    "leaks": ("leaky_loop.py", lambda d: _leak_facts(d)),
    "check": ("no_zero_grad.py", lambda d: (_errors(d), _warnings(d))),
    "trace": ("detached_param.py", lambda d: _trace_rows(d)),
}


def _in_a_thread(tmp_path, sample: str, placement: str) -> tuple[str, str]:
    """The sample run in a thread as ``placement`` says, for autodiag's engine and PyTorch."""
    source = open(os.path.join(ROOT, "samples", sample)).read()
    body = textwrap.indent(source, "    ")
    ours = PLACEMENTS[placement].format(body=body)
    theirs = ours.replace("import autodiag as torch", "import torch").replace(
        "import autodiag.nn as nn", "import torch.nn as nn"
    )
    assert "autodiag" not in "".join(ln for ln in theirs.splitlines() if "import" in ln)
    paths = []
    for folder, text in (("a", ours), ("b", theirs)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / sample).write_text(text)
        paths.append(str(tmp_path / folder / sample))
    return paths[0], paths[1]


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_script_training_in_a_thread_gets_the_same_findings_on_both_engines(
    tmp_path, command, placement
):
    sample, facts = COMMANDS[command]
    ours, theirs = _in_a_thread(tmp_path, sample, placement)
    r1 = cli(command, ours, "-f", "json", "-q")
    r2 = cli(command, theirs, "-f", "json", "-q", "--engine", "torch")
    assert r2.exit_code == r1.exit_code, r2.stdout[-2000:] + r2.stderr[-2000:]
    assert r1.exit_code in (0, 1), r1.stdout[-2000:]  # a report, not "nothing analysed"
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    check_envelope(d2, command)
    assert facts(d2) == facts(d1)
    assert facts(d2), "the thread's work was observed"
    if command in ("inplace", "anomaly", "leaks", "check"):
        assert d2["findings"], "the sample's bug is found in the thread"
        lines = [f["location"]["line"] for f in d2["findings"] if f.get("location")]
        assert lines and all(line > 3 for line in lines)  # lines inside work()


IN_A_THREAD = """\
import threading
import torch

def work():
    model = torch.nn.Linear(3, 1)
    s = torch.sigmoid(model(torch.randn(4, 3)))
    s.mul_(2)
    s.sum().backward()

t = threading.Thread(target=work, name="trainer")
t.start()
t.join()
"""


def test_the_text_report_names_the_workers_lines(script):
    path = script(IN_A_THREAD)
    r = cli("inplace", path, "--engine", "torch", "--no-color", env={"COLUMNS": "300"})
    assert r.exit_code == 1, r.stderr
    # the report shortens a path relative to the working directory when that is shorter (a
    # checkout under /tmp, as CI's, prints ../pytest-of-.../s.py)
    out, shown = r.stdout, short_path(path)
    assert f"written at {shown}:7 in work" in out, out
    assert f"saved by SigmoidBackward0 at {shown}:6 in work" in out
    assert f"needed by backward at {shown}:8 (backward call 1): it failed there" in out


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_workers_error_is_printed_as_python_prints_it(script, engine):
    # threading's excepthook prints the thread's traceback; autodiag's frames are not in it
    # (on --engine torch, the observer's mode sat between the script's frames and PyTorch's)
    source = IN_A_THREAD
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    path = script(source)
    run = [sys.executable, "-m", "autodiag", "inplace", path, "--engine", engine, "-q"]
    r = subprocess.run(run, capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "Exception in thread trainer:" in r.stderr
    assert f'File "{path}", line 8, in work' in r.stderr
    package = os.path.dirname(os.path.abspath(autodiag.__file__)) + os.sep
    assert package not in r.stderr.split("Exception in thread trainer:")[1]
    if engine == "torch":
        plain = subprocess.run([sys.executable, path], capture_output=True, text=True, env=ENV)
        assert r.stderr.endswith(plain.stderr), r.stderr


CHAINED_IN_A_THREAD = """\
import threading
import torch

def inner():
    return torch.ones(2).reshape(3)

def work():
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    try:
        inner()
    except RuntimeError as e:
        raise ValueError("wrapped") from e

t = threading.Thread(target=work, name="trainer")
t.start()
t.join()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_workers_chained_errors_are_printed_without_autodiags_frames(script, engine):
    # raise ... from e: the cause's traceback is printed too, and autodiag's frames (its op on
    # the default engine, the observer's mode on --engine torch) are not in it either
    path = script(CHAINED_IN_A_THREAD)
    run = [sys.executable, "-m", "autodiag", "check", path, "--engine", engine, "-q"]
    r = subprocess.run(run, capture_output=True, text=True, env=ENV, timeout=300)
    # the thread died of its error: the run failed (NOTE [Thread errors]), as the script's own
    # error would make it
    assert r.returncode == 3, r.stderr
    assert "a thread of" in r.stderr and "(trainer) raised ValueError: wrapped" in r.stderr
    printed = r.stderr.split("Exception in thread trainer:")[1]
    assert f'File "{path}", line 5, in inner' in printed
    assert "The above exception was the direct cause" in printed
    package = os.path.dirname(os.path.abspath(autodiag.__file__)) + os.sep
    assert package not in printed, printed
    if engine == "torch":
        plain = subprocess.run([sys.executable, path], capture_output=True, text=True, env=ENV)
        assert plain.stderr in r.stderr, r.stderr
    # AUTODIAG_DEBUG=1 keeps autodiag's frames: an error of autodiag's own code stays visible
    debug = subprocess.run(
        run, capture_output=True, text=True, env={**ENV, "AUTODIAG_DEBUG": "1"}, timeout=300
    )
    assert package in debug.stderr.split("Exception in thread trainer:")[1], debug.stderr


BOTH_THREADS = """\
import threading
import torch

w = torch.ones(3, requires_grad=True)
s = torch.sigmoid(w)  # saved here, in the script's thread

def side():
    s.mul_(2)  # written in another thread

t = threading.Thread(target=side)
t.start()
t.join()
s.sum().backward()
"""


def test_a_write_in_one_thread_to_a_tensor_saved_in_another_is_found(script):
    r = cli("inplace", script(BOTH_THREADS), "--engine", "torch", "-f", "json")
    assert r.exit_code == 1, r.stderr
    (f,) = json.loads(r.stdout)["findings"]
    assert f["location"]["line"] == 8
    assert f["saved_by"]["location"]["line"] == 5
    assert f["needed_by"]["location"]["line"] == 13


STILL_RUNNING = """\
import threading, time
import torch

stop = threading.Event()

def forever():  # still running at the end, in Python: PyTorch aborts the process ("terminate
    # called without an active exception") when a daemon thread is inside one of its ops then
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    while not stop.is_set():
        time.sleep(0.001)

def fails():
    torch.log(torch.zeros(2, requires_grad=True)).sum().backward()  # -inf, then it raises
    raise ValueError("the worker failed")

threading.Thread(target=forever, daemon=True).start()
bad = threading.Thread(target=fails)
bad.start()
bad.join()
time.sleep(0.05)
"""


@pytest.mark.parametrize("keep_going", [False, True])
@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_thread_still_running_at_the_end_and_one_that_raises(script, engine, keep_going):
    source = STILL_RUNNING
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    r = subprocess.run(
        [sys.executable, "-m", "autodiag", "anomaly", script(source), "--engine", engine]
        + ["-f", "json", "-q"]
        + (["--keep-going"] if keep_going else []),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    kinds = {(f["kind"], f["location"]["line"]) for f in json.loads(r.stdout)["findings"]}
    assert ("inf_forward", 14) in kinds
    # the run's end is said; the script's globals are kept for the thread that still reads them
    assert "threads still ran (Thread-1 (forever))" in r.stderr
    assert "NameError" not in r.stderr
    if keep_going:  # the thread's own error, printed by threading's excepthook as by python
        assert "Exception in thread" in r.stderr and "ValueError: the worker failed" in r.stderr
    else:  # the worker stopped at the origin as the run would: no traceback of autodiag's
        assert "Exception in thread" not in r.stderr and "StopRun" not in r.stderr


def test_threads_started_inside_observe_are_observed_and_left_alone_after():
    import autodiag.torch

    def work():
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        torch.log(x).sum().backward()

    with autodiag.torch.observe(anomaly=True) as obs:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert [f.kind for f in obs.findings] == ["inf_forward"]

    # a thread still running after the block: its mode passes everything through
    go, done = threading.Event(), threading.Event()
    got: list = []

    def later():
        go.wait(10)
        y = torch.ones(2, requires_grad=True)
        s = torch.sigmoid(y)
        s.mul_(2)
        try:
            s.sum().backward()
        except RuntimeError as e:  # PyTorch's version check still holds
            got.append(str(e))
        done.set()

    with autodiag.torch.observe(inplace=True):
        t = threading.Thread(target=later)
        t.start()
    go.set()
    assert done.wait(10)
    t.join()
    assert got and "modified by an inplace operation" in got[0]


# --- the observers' shared state under several threads at once --------------------------------


def test_saves_writes_and_sweeps_from_several_threads_at_once(switch_often, monkeypatch):
    """NOTE [Shared saves]: four threads save, write in place and sweep the shared saves at
    once; every hazard is found, none raises, gradients are PyTorch's."""
    from autodiag.analysis.inplace import InplaceWatcher
    from autodiag.engines.torch import observe
    from autodiag.engines.torch.workers import observing_threads
    from autodiag.trace import tracing

    monkeypatch.setattr(observe, "SWEEP_EVERY", 5)  # sweep all the time
    errors: list = []
    failed: list = []
    n, steps = 4, 60

    def work(k):
        try:
            w = torch.ones(8, requires_grad=True)
            for i in range(steps):
                s = torch.sigmoid(w * (k + 1))
                t = torch.exp(w)  # saved, and never written
                if i % 3 == 0:
                    s.add_(1)  # a hazard
                try:
                    (s * t).sum().backward()
                except RuntimeError as e:
                    failed.append(str(e))
                    continue
                w.grad = None
        except BaseException as e:  # noqa: BLE001 - what the test looks for
            errors.append(e)

    watcher = InplaceWatcher()
    with tracing(watcher), observe.observing() as obs, observing_threads(obs):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    hazards = n * len(range(0, steps, 3))
    assert len(failed) == hazards
    assert all("modified by an inplace operation" in m for m in failed)
    counts = [h.count for h in watcher.hazards.values()]
    assert sum(counts) == hazards, counts
    assert all(h.failed and h.needed_at is not None for h in watcher.hazards.values())


# --- one NO_COLOR rule for the CLI and autodiag.torch.observe() --------------------------------


class _Terminal:
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("value", "colour"), [(None, True), ("", True), ("1", False)])
def test_observe_follows_the_clis_no_color_rule(monkeypatch, value, colour):
    """no-color.org: NO_COLOR set to a non-empty value turns colour off; an empty one is ignored,
    by the CLI (cli/_common.Command.color) and by observe()'s report alike."""
    from autodiag.report import no_color
    from autodiag.torch._observe import _colour

    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    assert no_color.forbidden() is not colour
    assert _colour(_Terminal()) is colour
    from autodiag.cli._common import Command, Engine, Shared

    opts = Shared(
        *(None, None, None, None, "float32", "text", None, False, None, None, None),
        *(True, Engine.autodiag, False),
    )
    assert Command("graph", opts).color is colour


# --- module paths of nodes no module output reaches ---------------------------------------------

KEPT_ON_THE_MODULE = """\
import torch
import torch.nn.functional as F

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        self.aux = (h * 3).sum()  # made here, kept on the module, never returned
        return F.relu(torch.tanh(h)) + 1  # functional ops inside forward

model = Net()
y = model(torch.randn(2, 4)).sum() + model.aux
y.backward()
"""


@pytest.mark.parametrize("threaded", [False, True])
def test_nodes_a_module_made_that_its_outputs_do_not_reach_are_its_own(tmp_path, threaded):
    source = KEPT_ON_THE_MODULE
    if threaded:
        source = source.replace(
            "y = model(torch.randn(2, 4)).sum() + model.aux\ny.backward()\n",
            "def step():\n    y = model(torch.randn(2, 4)).sum() + model.aux\n    y.backward()\n"
            "import threading\nt = threading.Thread(target=step)\nt.start()\nt.join()\n",
        )
    ours = source.replace("import torch\n", "import autodiag as torch\n").replace(
        "import torch.nn.functional as F", "import autodiag.nn.functional as F"
    )
    shapes = []
    for folder, text, engine in (("a", ours, "autodiag"), ("b", source, "torch")):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "kept.py"
        path.write_text(text)
        r = cli("graph", str(path), "-f", "json", "-q", "--all", "--engine", engine)
        assert r.exit_code == 0, r.stdout[-2000:]
        shapes.append(_graph_shape(json.loads(r.stdout)))
    assert shapes[1] == shapes[0]
    (names, _, lines, _, mods, _) = shapes[1][0]
    by = {(n, line): m for n, line, m in zip(names, lines, mods)}
    assert by[("MulBackward0", 11)] == by[("SumBackward0", 11)] == "model (Net)"
    assert by[("ReluBackward0", 12)] == by[("TanhBackward0", 12)] == "model (Net)"
    assert by[("AddmmBackward0", 10)] == "model.fc (Linear)"


TWO_AT_ONCE = """\
import threading
import torch

def train(k):
    torch.manual_seed(k)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for _ in range(50):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

threads = [threading.Thread(target=train, args=(k,)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_two_threads_training_at_once_are_each_counted(script, engine, switch_often):
    """Gradient health keeps each thread's backward calls apart (trace/per_thread.py): two
    threads' calls at once were one stack, and an end that was not the innermost was lost."""
    source = TWO_AT_ONCE
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    r = cli("check", script(source), "--engine", engine, "-f", "json", "-q")
    assert r.exit_code == 0, r.stdout[-2000:]
    doc = json.loads(r.stdout)
    assert (doc["backward_calls"], doc["optimizer_steps"]) == (100, 100)


OWN_PROFILE = """\
import threading
import torch
seen = []
threading.setprofile(lambda frame, event, arg: seen.append(event))
def work():
    x = torch.randn(3, requires_grad=True)
    y = x.sigmoid()
    y.mul_(2)
    y.sum().backward()
z = torch.randn(3, requires_grad=True)
(z * 2).sum().backward()
t = threading.Thread(target=work)
t.start()
t.join()
print("profiled:", bool(seen), threading.getprofile() is not None)
"""


def test_a_script_setting_its_own_thread_profile_is_still_observed(script):
    """``threading.setprofile`` in the script replaced the observer's: its threads went
    unobserved and ``inplace`` said ✓ (exit 0) over a write that broke backward."""
    r = subprocess.run(
        [sys.executable, "-m", "autodiag", "inplace", script(OWN_PROFILE), "--engine", "torch"]
        + ["-f", "json", "-q"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    (f,) = json.loads(r.stdout)["findings"]
    assert f["location"]["line"] == 8 and f["backward_failed"]
    assert "profiled: True True" in r.stdout + r.stderr  # the script's function ran, and is its
    assert threading.getprofile() is None


def test_a_scripts_own_thread_excepthook_is_removed_after_the_run(script):
    # the runner puts back the process's hook, also when the script replaced autodiag's
    before = threading.excepthook
    path = script("import threading\nthreading.excepthook = lambda args: None\n")
    r = cli("graph", path)
    assert r.exit_code == 2, r.stderr  # no op: nothing analysed
    assert threading.excepthook is before


def test_a_scripts_own_frames_stay_in_a_threads_traceback(tmp_path):
    # only PyTorch's handle_torch_function (torch/overrides.py, called from PyTorch's code) is
    # dispatch to drop with autodiag's frames: a script's function of that name stays
    from autodiag.target.script import _without_autodiag

    (tmp_path / "mine.py").write_text(
        "import autodiag\n"
        "def caller():\n"
        "    return handle_torch_function()\n"
        "def handle_torch_function():\n"
        "    return autodiag.tensor([1.0]).view(5)\n"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("mine", tmp_path / "mine.py")
    mine = importlib.util.module_from_spec(spec)  # not in sys.modules: nothing left behind
    spec.loader.exec_module(mine)
    with pytest.raises(RuntimeError) as info:
        mine.caller()
    names = []
    tb = _without_autodiag(info.value.__traceback__)
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert names[-2:] == ["caller", "handle_torch_function"], names
