"""``--engine torch`` (issue 21): module paths of PyTorch's nodes, scripts whose ops run in
threads they start, and the observers' shared state under several threads."""

from __future__ import annotations

import gc
import json
import sys
import threading
import weakref

import pytest
from cli_helpers import cli

torch = pytest.importorskip("torch")

from torch.nn.modules import module as _torch_module  # noqa: E402


def _graph(path: str, *options) -> dict:
    r = cli("graph", path, "-f", "json", "-q", "--engine", "torch", *options)
    assert r.exit_code == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    return (doc.get("graphs") or [doc])[0]


# --- module paths ------------------------------------------------------------------------------

NESTED = """\
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.last = None

    def forward(self, x):
        y = self.mlp(x) * 2
        self.last = y  # a module that keeps its output: no node may keep the module alive
        return {"out": y}

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.h = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for b in self.h:
            x = b(x)["out"]
        return x.sum()

model = Net()
model(torch.randn(2, 4)).backward()
"""


def test_module_paths_on_torch_nodes_innermost_module_named_from_the_root(script):
    g = _graph(script(NESTED))
    by_name: dict = {}
    for n in g["nodes"]:
        by_name.setdefault(n["name"], []).append(n.get("module"))
    assert by_name["SumBackward0"] == ["model (Net)"]
    # made in Block.forward itself, not in its submodules; outputs returned in a dict
    assert sorted(by_name["MulBackward0"]) == ["model.h.0 (Block)", "model.h.1 (Block)"]
    assert sorted(by_name["ReluBackward0"]) == ["model.h.0.mlp.1 (ReLU)", "model.h.1.mlp.1 (ReLU)"]
    assert sorted(by_name["AddmmBackward0"]) == [
        "model.h.0.mlp.0 (Linear)",
        "model.h.1.mlp.0 (Linear)",
    ]
    assert all(m is None for m in by_name["AccumulateGrad"])


def test_module_hooks_are_removed_and_nodes_hold_no_module(script):
    probe = NESTED + "import sys, weakref\nsys._autodiag_probe = weakref.ref(model)\n"
    _graph(script(probe))
    assert not _torch_module._global_forward_pre_hooks
    assert not _torch_module._global_forward_hooks
    gc.collect()
    assert sys.__dict__.pop("_autodiag_probe")() is None  # model.last's graph did not keep it


def test_tagging_walks_back_only_to_the_module_start():
    """A node made before the module ran (an input's graph) is not the module's."""
    from autodiag.engines.torch.modules import ModuleTagger
    from autodiag.engines.torch.seam import module_entry

    lin = torch.nn.Linear(3, 3)
    x = torch.ones(2, 3, requires_grad=True) * 3  # MulBackward0, before the module
    with ModuleTagger().installed():
        y = lin(x)
    assert module_entry(y.grad_fn)[1:3] == ("", "Linear")
    assert module_entry(x.grad_fn) is None
    ref = weakref.ref(lin)
    del lin
    gc.collect()
    assert ref() is None and y.grad_fn is not None


# --- ops in threads the script starts (engines/torch/workers.py) ---------------------------------

IN_A_THREAD = """\
import threading
import torch

def work():
    model = torch.nn.Linear(3, 1)
    loss = model(torch.randn(4, 3)).pow(2).mean()
    loss.backward()

t = threading.Thread(target=work, name="trainer")
t.start()
t.join()
"""

DATALOADER_IN_AN_EXECUTOR = """\
from concurrent.futures import ThreadPoolExecutor
import torch
from torch.utils.data import DataLoader, TensorDataset

def train():
    data = TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
    model = torch.nn.Linear(3, 1)
    for x, y in DataLoader(data, batch_size=4, num_workers=0):
        torch.nn.functional.mse_loss(model(x), y).backward()

with ThreadPoolExecutor(1) as pool:
    pool.submit(train).result()
"""

BOTH = """\
import threading
import torch

w = torch.ones(3, requires_grad=True)
(w * 2).sum().backward()  # watched: the script's own thread

def side():
    (w * 3).sum().backward()  # observed too: a graph built in another thread

t = threading.Thread(target=side, name="side")
t.start()
t.join()
"""


@pytest.mark.parametrize("command", ["graph", "check", "inplace", "anomaly", "leaks", "trace"])
def test_ops_in_a_thread_are_observed_never_the_import_autodiag_advice(script, command):
    # (until workers.py they were only spotted: exit 2, nothing analysed)
    r = cli(command, script(IN_A_THREAD), "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stdout[-2000:]
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok" and "error" not in doc
    if command == "graph":
        g = (doc.get("graphs") or [doc])[0]
        lines = {(n["created_at"] or {}).get("line") for n in g["nodes"]}
        assert 6 in lines  # the worker's line


def test_a_dataloader_in_an_executor_thread_is_observed(script):
    r = cli("check", script(DATALOADER_IN_AN_EXECUTOR), "--engine", "torch", "-f", "json")
    assert r.exit_code == 0, r.stdout[-2000:]
    assert json.loads(r.stdout)["backward_calls"] == 2


def test_ops_in_the_script_thread_and_another_are_both_observed(script):
    r = cli("graph", script(BOTH), "--engine", "torch", "-f", "json", "--all")
    assert r.exit_code == 0, r.stdout[-2000:]
    doc = json.loads(r.stdout)
    lines = {(n["created_at"] or {}).get("line") for g in doc["graphs"] for n in g["nodes"]}
    assert {5, 8} <= lines  # the script's thread's graph and the side thread's


QUIET_THREADS = """\
import functools, threading
import torch

w = torch.ones(3, requires_grad=True)
(w * 2).sum().backward()
# a thread with no torch call, and one whose torch call comes from no code of the script's
# (as a DataLoader's pin-memory thread: library frames only)
for target in (lambda: sum(range(10)), functools.partial(torch.ones, 3)):
    t = threading.Thread(target=target)
    t.start()
    t.join()
"""


DATA_THREADS = """\
from concurrent.futures import ThreadPoolExecutor
import threading
import torch

with ThreadPoolExecutor(2) as pool:  # data made in worker threads, no autograd there
    batches = list(pool.map(lambda i: torch.tensor([float(i)] * 3), range(4)))
w = torch.ones(3, requires_grad=True)
for x in batches:
    (w * x).sum().backward()
    logger = threading.Thread(target=lambda: print(w.grad.sum().item(), w.detach().norm()))
    logger.start()
    logger.join()
"""


def test_threads_that_only_make_or_read_tensors_leave_the_verdict(script):
    # a data-loading pool, a logging thread: no graph built and no backward there, so nothing
    # an analysis judges is left out (review of session 12: these were refused with exit 2)
    r = cli("check", script(DATA_THREADS), "--engine", "torch", "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "✓ no findings" in r.stdout and "threads" not in r.stderr


def test_threads_without_torch_calls_of_the_script_change_nothing(script):
    r = cli("check", script(QUIET_THREADS), "--engine", "torch", "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "✓ no findings" in r.stdout


# --- shared state of the observers, hammered from several threads ------------------------------


def _in_threads(n: int, work) -> None:
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_module_calls_are_per_thread_on_autodiag_engine(switch_often):
    """Each thread's ops are named after the modules running in that thread."""
    import autodiag as ad
    from autodiag.trace import Tracer, events, tracing

    seen: list = []

    class Innermost(Tracer):
        def on_op(self, op, node, inputs, outputs, stack):
            seen.append(
                (threading.current_thread(), events.MODULES[-1] if len(events.MODULES) else None)
            )

    models = [ad.nn.Sequential(ad.nn.Linear(3, 3), ad.nn.Tanh()) for _ in range(4)]
    owner: dict = {}
    x = ad.ones(2, 3)

    def work(k):
        # keyed by the Thread object: a thread that ended may leave its ident to a later one
        owner[threading.current_thread()] = set(map(id, models[k].modules()))
        for _ in range(200):
            models[k](x)  # every op reported in this thread runs inside models[k]

    with tracing(Innermost()):
        _in_threads(4, work)
    assert seen
    wrong = [(t, m) for t, m in seen if m is None or id(m) not in owner[t]]
    assert not wrong, f"{len(wrong)} of {len(seen)} ops named after another thread's module"


def test_module_calls_on_torch_are_each_threads_own(switch_often):
    """engines/torch/hooks.py reads the modules running from the asking thread's frames (NOTE
    [Modules from frames]): each thread sees its own calls, outermost first."""
    from autodiag.engines.torch import hooks

    wrong: list = []
    together = threading.Barrier(4)
    mine = threading.local()

    class Probe(torch.nn.Module):
        def forward(self, x):
            if [id(c) for c in hooks.module_calls()] != [id(mine.model), id(self)]:
                wrong.append(threading.get_ident())
            return x

    def work(k):
        mine.model = torch.nn.Sequential(torch.nn.Identity(), Probe())
        x = torch.ones(2, 3)
        together.wait()
        for _ in range(500):
            mine.model(x)

    _in_threads(4, work)
    assert not wrong
    assert hooks.module_calls() == []


def test_an_optimizer_step_in_another_thread_hides_none_of_this_threads_ops():
    """NOTE [Optimizer internals]: ops are left out while *this thread's* optimizer steps."""
    from autodiag.engines.torch.observe import observing
    from autodiag.trace import Tracer, tracing

    class Ops(Tracer):
        observes_torch = True

        def __init__(self):
            self.names: list = []

        def on_op(self, op, node, inputs, outputs, stack):
            self.names.append(op)

        def on_optimizer_step(self, optimizer):
            pass

    stepping, release = threading.Event(), threading.Event()

    class Slow(torch.optim.SGD):
        def step(self, closure=None):
            stepping.set()
            release.wait(10)
            return super().step(closure)

    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    opt = Slow([p], lr=0.1)
    ops = Ops()
    with tracing(ops), observing():
        worker = threading.Thread(target=opt.step)
        worker.start()
        assert stepping.wait(10)
        try:
            x = torch.ones(2)
            with torch.no_grad():
                x.add_(1)  # the script's own no-grad op, while another thread steps
        finally:
            release.set()
            worker.join()
    assert "add_" in ops.names


def test_random_draws_from_several_threads_are_whole_draws(switch_often):
    """As PyTorch's generator (one mutex per op): threads drawing at once from the global stream
    get the numbers one thread would have drawn, shared out; state reads and writes meanwhile
    neither crash nor disturb them."""
    import autodiag as ad

    n, k = 4, 400

    def draws(parallel: bool, draw) -> list:
        ad.manual_seed(0)
        out: list = [[] for _ in range(n)]

        def work(i):
            for _ in range(k):
                out[i].append(draw())

        if parallel:
            _in_threads(n, work)
        else:
            for i in range(n):
                work(i)
        return sorted(v for o in out for v in o)

    # scalar normals: the cached second Box-Muller normal serves every other draw
    normal = lambda: float(ad.randn((), dtype=ad.float64))  # noqa: E731
    uniform = lambda: tuple(ad.rand(3).tolist())  # noqa: E731
    for draw in (normal, uniform):
        assert draws(True, draw) == draws(False, draw)

    g = ad.Generator().manual_seed(1)
    errors: list = []

    def hammer(i):
        try:
            for _ in range(100):
                if i % 2:
                    g.set_state(g.get_state())
                else:
                    ad.randn(50, generator=g)
        except Exception as e:  # noqa: BLE001 - what the test looks for
            errors.append(e)

    _in_threads(4, hammer)
    assert not errors


# --- gradcheck on generated inputs -------------------------------------------------------------

NO_SAMPLES = """\
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


y = Square.apply(torch.ones(3, requires_grad=True))  # a call PyTorch's hooks do not see
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_pass_on_generated_inputs_says_so_and_how_to_give_ones_own(script, engine):
    source = NO_SAMPLES.replace("\ny = Square.apply(torch.ones(3, requires_grad=True))", "\n")
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    r = cli("gradcheck", script(source), "--engine", engine, "--no-color", env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.stderr
    section = r.stdout.split("Generated inputs\n", 1)[1]
    assert section.startswith("- Square[generated] (")
    assert "s.py:4): generated float64 inputs of shape (2, 3) for x; " in section
    assert "give Square a sample_inputs() static method" in section
    assert "✓" not in r.stdout


def test_gradcheck_on_torch_says_the_scripts_own_calls_were_not_seen(script):
    r = cli(
        "gradcheck", script(NO_SAMPLES), "--engine", "torch", "--no-color", env={"COLUMNS": "60"}
    )
    assert r.exit_code == 0, r.stderr
    assert "Generated inputs" in r.stdout  # said even where the inputs column is dropped
    assert "the script's own calls of Square were not recorded" in " ".join(r.stdout.split())
