"""NOTE [Forked children] (target/script.py): a process the script forks while it runs is not
observed; it runs as under plain Python. The tracers it inherited stayed installed and changed
what it did: ``anomaly`` stopped a multiprocessing worker at its first NaN (StopRun), so the
worker never put its result on the queue and the script waited for it until --timeout."""

from __future__ import annotations

import subprocess
import sys

import pytest

WORKER_NAN = """\
import multiprocessing
import {lib} as torch
mp = multiprocessing.get_context("fork")

def work(q):
    x = torch.ones(3, requires_grad=True)
    (x * float("nan")).sum().backward()
    q.put(float(x.grad[0]))

if __name__ == "__main__":
{parent}    q = mp.Queue()
    p = mp.Process(target=work, args=(q,))
    p.start()
    print("worker gave", q.get())
    p.join()
    print("exitcode", p.exitcode)
"""


def _run(*args):
    p = subprocess.run(
        [sys.executable, "-m", "autodiag", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
@pytest.mark.parametrize("command", ["anomaly", "check"])
def test_a_forked_worker_runs_as_under_plain_python(script, engine, command):
    if engine == "torch":
        pytest.importorskip("torch")
    lib = "torch" if engine == "torch" else "autodiag"
    path = script(WORKER_NAN.format(lib=lib, parent=""))
    rc, out, err = _run(command, path, "--engine", engine, "--timeout", "40", "--no-color")
    # the worker finished (its NaN gradient on the queue, exit code 0), no StopRun traceback
    assert "worker gave nan" in err and "exitcode 0" in err, out + err
    assert "StopRun" not in err and "did not finish within" not in err, out + err
    assert rc == 2 and "it computed in the 1 process it forked" in err, out + err


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_the_parent_is_still_analysed_when_a_worker_forked(script, engine):
    if engine == "torch":
        pytest.importorskip("torch")
    lib = "torch" if engine == "torch" else "autodiag"
    parent = "    w = torch.ones(2, requires_grad=True)\n    (w * float('inf')).sum().backward()\n"
    path = script(WORKER_NAN.format(lib=lib, parent=parent))
    rc, out, err = _run(
        "anomaly", path, "--engine", engine, "--timeout", "40", "--no-color", "--keep-going"
    )
    assert rc == 1 and "inf_forward" in out, out + err  # the parent's own Inf is found
    assert "worker gave nan" in err and "exitcode 0" in err, out + err
