"""A leak of graphs a worker thread builds for another thread's training loop (a thread pool
runs the forward, the loop's thread calls backward and steps): judged at the loop's steps
(NOTE [Worker threads] in analysis/leaks.py). Since steps are counted per thread it was a ✓: the
worker never ends a step of its own, so no step end ever judged its nodes."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

ENGINES = ["autodiag", "torch"]

POOL = """\
import torch
from concurrent.futures import ThreadPoolExecutor

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
pool = ThreadPoolExecutor(1)


def forward(x):
    return model(x).pow(2).mean()  # CREATED
"""

# Where the training loop runs: at module level, in a function, a method, a main() loop.
PLACEMENTS = {
    "module": """\
history = []  # HOLDER
for step in range(8):
    loss = pool.submit(forward, torch.randn(4, 8)).result()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(loss{fix})
""",
    "function": """\
def train():
    history = []  # HOLDER
    for step in range(8):
        loss = pool.submit(forward, torch.randn(4, 8)).result()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss{fix})

train()
""",
    "method": """\
class Trainer:
    def fit(self):
        self.history = []  # HOLDER
        for step in range(8):
            loss = pool.submit(forward, torch.randn(4, 8)).result()
            opt.zero_grad()
            loss.backward()
            opt.step()
            self.history.append(loss{fix})

Trainer().fit()
""",
    "main_loop": """\
def main():
    history = []  # HOLDER
    for epoch in range(2):
        for step in range(4):
            loss = pool.submit(forward, torch.randn(4, 8)).result()
            loss.backward()  # no optimizer: steps end at backward
            history.append(loss{fix})

if __name__ == "__main__":
    main()
""",
}


def _source(engine: str, placement: str, fix: str) -> str:
    source = POOL + "\n\n" + PLACEMENTS[placement].format(fix=fix) + "pool.shutdown()\n"
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    return source


def _line(source: str, marker: str) -> int:
    (n,) = [i for i, line in enumerate(source.splitlines(), 1) if f"# {marker}" in line]
    return n


def _run(path: str, engine: str):
    args = ["leaks", path, "-q", "--no-color", "-f", "json"]
    if engine == "torch":
        pytest.importorskip("torch")
        args += ["--engine", "torch"]
    return cli(*args)


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_leak_of_graphs_a_pool_worker_built_is_found(script, engine, placement):
    source = _source(engine, placement, "")
    r = _run(script(source), engine)
    assert r.exit_code == 1, r.stdout[-3000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    (leak,) = [f for f in doc["findings"] if f["kind"] == "graph_leak"]
    assert leak["severity"] == "error"
    assert leak["holder"]["name"] == ("self" if placement == "method" else "history")
    assert leak["location"]["line"] == _line(source, "HOLDER")
    assert leak["created_at"]["line"] == _line(source, "CREATED")
    # judged at the steps of the loop's thread (the script's): no thread named
    assert "thread" not in leak
    assert [c["nodes"] for c in doc["steps"]][:4] == [0, 4, 8, 12]


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_pool_worker_whose_graphs_are_freed_is_clean(script, engine, placement):
    r = _run(script(_source(engine, placement, ".item()")), engine)
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert [f for f in doc["findings"] if f["kind"] == "graph_leak"] == []
    assert len(doc["steps"]) == 8 and all(c["nodes"] == 0 for c in doc["steps"])
