"""A backward through a graph that an earlier backward freed (NOTE [Freed graphs] in
core/graph.py): PyTorch's error first and unchanged, then autodiag names the node and its
line, the backward call that freed it (number, line) and the tensor the new backward reached it
through; ``autodiag check`` reports it as a ``freed_graph`` finding."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

import autodiag as ad
from autodiag.autograd import engine
from autodiag.cli import app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)


def _catch(fn, m) -> BaseException:
    with pytest.raises(Exception) as ei:
        fn(m)
    return ei.value


def _same_error_then_more(fn, torch) -> str:
    """Same exception type as PyTorch, PyTorch's whole message first, then autodiag's part."""
    et, ea = _catch(fn, torch), _catch(fn, ad)
    assert type(ea) is type(et) is RuntimeError
    assert str(et) == TORCH_MESSAGE  # the oracle's text, as autodiag copies it
    msg = str(ea)
    assert msg.startswith(str(et) + " autodiag: "), msg
    return msg[len(str(et)) :]


@pytest.fixture
def calls_from_zero():
    """Number this test's backward calls from 1, as in a fresh process."""
    before = engine.backward_calls[0]
    engine.backward_calls[0] = 0
    yield
    engine.backward_calls[0] = before


# --- the engine's error against PyTorch ---------------------------------------------------------


def test_backward_twice_in_a_loop(torch, calls_from_zero):
    def f(m):
        x = m.ones(4, 3, requires_grad=True)
        w = m.ones(3, 2, requires_grad=True)
        h = m.tanh(x @ w)
        for step in range(3):
            loss = (h * step).sum()
            loss.backward()

    extra = _same_error_then_more(f, torch)
    assert "backward call 2 at " in extra and "reached TanhBackward0, created at " in extra
    assert "freed by backward call 1, made by the same line" in extra and "through `h`" in extra


def test_autograd_grad_twice(torch, calls_from_zero):
    def f(m):
        x = m.ones(3, requires_grad=True)
        y = x.exp()
        m.autograd.grad(y.sum(), x)
        m.autograd.grad(y.sum(), x)

    extra = _same_error_then_more(f, torch)
    assert "reached ExpBackward0" in extra and "through `y`" in extra


@pytest.mark.parametrize("attr", ["_saved_self", "_saved_other", "_saved_result"])
def test_saved_tensor_accessor_after_free(torch, calls_from_zero, attr):
    def f(m):
        x = m.ones(3, requires_grad=True)
        y = x * x if attr != "_saved_result" else x.exp()
        y.sum().backward()
        getattr(y.grad_fn, attr)

    extra = _same_error_then_more(f, torch)
    node = "ExpBackward0" if attr == "_saved_result" else "MulBackward0"
    assert f"the saved tensors of {node} (created at " in extra
    assert "were freed by backward call 1 at " in extra and "retain_graph=True" in extra


def test_custom_function_saved_tensors(torch, calls_from_zero):
    def f(m):
        class Square(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x * g

        x = m.ones(3, requires_grad=True)
        y = Square.apply(x)
        y.sum().backward()
        y.sum().backward()

    extra = _same_error_then_more(f, torch)
    assert "reached SquareBackward" in extra and "through `y`" in extra


def test_retain_graph_frees_nothing_and_the_freeing_call_is_named(calls_from_zero):
    x = ad.ones(3, requires_grad=True)
    y = x.sin()
    y.sum().backward(retain_graph=True)  # call 1 keeps the graph
    y.sum().backward()  # call 2 frees it
    with pytest.raises(RuntimeError) as ei:
        y.sum().backward()  # call 3
    msg = str(ei.value)
    assert "backward call 3 at " in msg and "were freed by backward call 2 at " in msg


# --- the explanation in four code layouts -------------------------------------------------------

LAYOUTS = {
    "module": """\
        import autodiag as torch
        x = torch.ones(4, 3, requires_grad=True)
        w = torch.ones(3, 2, requires_grad=True)
        h = torch.tanh(x @ w)  # CREATE
        for step in range(3):
            loss = (h * step).sum()
            loss.backward()  # BACKWARD
        """,
    "function": """\
        import autodiag as torch


        def train_step(h, step):
            loss = (h * step).sum()
            loss.backward()  # BACKWARD


        x = torch.ones(4, 3, requires_grad=True)
        w = torch.ones(3, 2, requires_grad=True)
        h = torch.tanh(x @ w)  # CREATE
        for step in range(3):
            train_step(h, step)
        """,
    "method": """\
        import autodiag as torch


        class Trainer:
            def __init__(self):
                self.x = torch.ones(4, 3, requires_grad=True)
                self.w = torch.ones(3, 2, requires_grad=True)

            def fit(self):
                h = torch.tanh(self.x @ self.w)  # CREATE
                for step in range(3):
                    loss = (h * step).sum()
                    loss.backward()  # BACKWARD


        Trainer().fit()
        """,
    "main_loop": """\
        import autodiag as torch


        def main():
            x = torch.ones(4, 3, requires_grad=True)
            w = torch.ones(3, 2, requires_grad=True)
            h = torch.tanh(x @ w)  # CREATE
            for step in range(3):
                loss = (h * step).sum()
                loss.backward()  # BACKWARD


        if __name__ == "__main__":
            main()
        """,
}


def _write(tmp_path, source: str, name: str = "train.py"):
    """The script's path and the lines marked ``# CREATE`` and ``# BACKWARD``."""
    text = textwrap.dedent(source)
    p = tmp_path / name
    p.write_text(text)
    lines = {
        tag: i
        for i, line in enumerate(text.splitlines(), 1)
        for tag in ("CREATE", "BACKWARD")
        if line.endswith(f"# {tag}")
    }
    return str(p), lines


def _run_in_process(path: str) -> str:
    with pytest.raises(RuntimeError) as ei:
        runpy.run_path(path, run_name="__main__")
    return str(ei.value)


def _check_explanation(
    msg: str, name: str, lines: dict, through: str = "h", node: str = "TanhBackward0"
) -> None:
    assert msg.startswith(TORCH_MESSAGE + " autodiag: "), msg
    at = rf"at \S*{re.escape(name)}:"
    create, bw = lines["CREATE"], lines["BACKWARD"]
    assert re.search(
        rf"backward call 2 {at}{bw} \(.*?backward\(\).*?\) reached {node}, "
        rf"created {at}{create} ",
        msg,
    ), msg
    # the freeing call was made by the same line: said so instead of quoting it twice
    assert "whose saved tensors were freed by backward call 1, made by the same line. " in msg
    assert re.search(
        rf"through `{re.escape(through)}` \(grad_fn \w+\), computed {at}{create} ", msg
    ), msg
    assert f"Fix: recompute `{through}` for each backward" in msg
    assert "detach()" in msg and "retain_graph=True" in msg


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_explanation_in_each_layout(tmp_path, calls_from_zero, layout):
    path, lines = _write(tmp_path, LAYOUTS[layout])
    _check_explanation(_run_in_process(path), "train.py", lines)


def test_plain_python_process(tmp_path):
    """No tracer, no CLI: ``python train.py`` prints the explanation, calls counted from 1."""
    path, lines = _write(tmp_path, LAYOUTS["main_loop"])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(
        [sys.executable, path],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: ")
    _check_explanation(last[len("RuntimeError: ") :], "train.py", lines)


def test_a_method_reusing_an_attribute(tmp_path, calls_from_zero):
    path, lines = _write(
        tmp_path,
        """\
        import autodiag as torch


        class Model:
            def __init__(self):
                self.w = torch.ones(3, requires_grad=True)
                self.h = self.w.sin()  # CREATE

            def step(self, k):
                (self.h * k).sum().backward()  # BACKWARD


        m = Model()
        for k in range(2):
            m.step(k)
        """,
    )
    _check_explanation(
        _run_in_process(path), "train.py", lines, through="self.h", node="SinBackward0"
    )


def test_the_frontier_of_the_freed_part(tmp_path, calls_from_zero):
    """``h``'s own node (AddBackward0) saves nothing: the error is raised by ExpBackward0 below
    it, but the tensor the loop reused is ``h``, named with the line that assigned it."""
    path, lines = _write(
        tmp_path,
        """\
        import autodiag as torch
        x = torch.ones(3, requires_grad=True)
        e = x.exp()  # CREATE
        h = e + 1
        for k in range(2):
            torch.autograd.grad((h * k).sum(), x)  # BACKWARD
        """,
    )
    msg = _run_in_process(path)
    assert re.search(rf"reached ExpBackward0, created at \S*train.py:{lines['CREATE']} ", msg)
    assert re.search(
        rf"through `h` \(grad_fn AddBackward0\), computed at \S*train.py:"
        rf"{lines['CREATE'] + 1} \(h = e \+ 1\) before backward call 1\.",
        msg,
    ), msg


def test_an_unnamed_tensor_is_described_by_its_node(calls_from_zero):
    x = ad.ones(3, requires_grad=True)
    kept = [x.sin() + 1]  # AddBackward0 saves nothing: nothing for it to lose
    for k in range(2):
        loss = (kept[0] * k).sum()
        if k:
            with pytest.raises(RuntimeError) as ei:
                loss.backward()
        else:
            loss.backward()
    msg = str(ei.value)
    assert "reached SinBackward0" in msg and "through the output of AddBackward0" in msg
    assert "Fix: recompute that tensor for each backward" in msg


def test_a_long_chain_is_walked_without_recursion(calls_from_zero):
    x = ad.ones(1, requires_grad=True)
    h = x
    for _ in range(200_000):
        h = h.sin()
    h.sum().backward()
    with pytest.raises(RuntimeError) as ei:
        (h * 2).sum().backward()
    assert "reached SinBackward0" in str(ei.value) and "through `h`" in str(ei.value)


# --- autodiag check: a freed_graph finding ------------------------------------------------------

runner = CliRunner()


def test_check_reports_freed_graph(tmp_path):
    path, lines = _write(tmp_path, LAYOUTS["main_loop"])
    r = runner.invoke(app, ["check", path, "--no-color"], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert "freed_graph (1)" in out
    assert "backward call 2 reached TanhBackward0" in out and "through `h`" in out
    assert f"TanhBackward0 created at {path}:{lines['CREATE']}" in out.replace(
        "\n", " "
    ) or re.search(rf"TanhBackward0 created at \S*train.py:{lines['CREATE']}", out), out
    assert "✓" not in out

    r = runner.invoke(app, ["check", path, "--format", "json"], catch_exceptions=False)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "findings"
    (f,) = [f for f in doc["findings"] if f["kind"] == "freed_graph"]
    assert f["severity"] == "error" and f["node"] == "TanhBackward0"
    assert f["location"]["line"] == lines["BACKWARD"]
    assert f["created_at"]["line"] == lines["CREATE"]
    assert f["created_at"]["code"] == "h = torch.tanh(x @ w)  # CREATE"
    assert f["freed_by"]["call"] == 1 and f["freed_by"]["location"]["line"] == lines["BACKWARD"]
    assert f["through"]["name"] == "h" and f["through"]["location"]["line"] == lines["CREATE"]
    assert "retain_graph=True" in f["hint"]


def test_check_numbers_calls_per_run(tmp_path):
    """Calls are counted from the script's first, whatever ran before in the process."""
    path, _ = _write(tmp_path, LAYOUTS["module"])
    x = ad.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    for _ in range(2):
        r = runner.invoke(app, ["check", path, "--format", "json"], catch_exceptions=False)
        (f,) = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "freed_graph"]
        assert f["freed_by"]["call"] == 1 and "backward call 2 " in f["message"]
