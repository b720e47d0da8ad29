"""Scripts that misbehave (issue 18): ``os._exit``, ``os.fork`` and multiprocessing, every way
of reading stdin, objects hostile to introspection, closed or replaced standard streams, and
failures inside functions (names from the frames that were live).

The process-level cases (a hard exit, a fork, a closed file descriptor) run the real entry point
in a subprocess; the others go through typer's CliRunner as test_cli.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from cli_helpers import check_envelope, cli

COMMANDS = ["graph", "trace", "check", "anomaly", "inplace", "leaks", "gradcheck"]


def run(*args, stdin=subprocess.DEVNULL, timeout=120):
    """The real entry point in a subprocess: (exit code, stdout, stderr)."""
    p = subprocess.run(
        [sys.executable, "-m", "autodiag", *args],
        capture_output=True,
        text=True,
        stdin=stdin,
        timeout=timeout,
    )
    return p.returncode, p.stdout, p.stderr


NAN_THEN = """\
import os, sys
import autodiag as torch
x = torch.ones(2, requires_grad=True)
y = (x * float('nan')).sum()
y.backward()
{exit}
"""


# --- os._exit -------------------------------------------------------------------------------


@pytest.mark.parametrize("status,code", [(5, 3), (0, 0)])
def test_os_exit_is_reported_like_sys_exit(script, status, code):
    path = script(
        f"""\
        import os
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        os._exit({status})
        """
    )
    rc, out, err = run("graph", path, "--no-color")
    assert rc == code, err
    assert "MulBackward0" in out and "AccumulateGrad w" in out  # the report of what ran
    if status:
        assert f"hard-exited with os._exit({status})" in err and 's.py", line 5' in err
    else:
        assert "ended with os._exit(0) at" in err and "s.py:5" in err
    # the same verdict as sys.exit with that status
    rc2, _, _ = run("graph", script(NAN_THEN.format(exit=f"sys.exit({status})"), "e.py"))
    rc3, _, _ = run("graph", script(NAN_THEN.format(exit=f"os._exit({status})"), "h.py"))
    assert rc2 == rc3


def test_os_exit_findings_decide_and_json_is_one_document(script):
    path = script(NAN_THEN.format(exit="os._exit(5)"))
    rc, out, err = run("check", path, "-f", "json")
    assert rc == 1, err  # the findings decide, as after sys.exit(5)
    doc = json.loads(out)
    check_envelope(doc, "check")
    assert [f["kind"] for f in doc["findings"]] == ["nan_forward"]
    assert "hard-exited with os._exit(5)" in doc["error"]["message"]


def test_os_exit_is_restored_after_the_run(script):
    real = os._exit
    r = cli("graph", script(NAN_THEN.format(exit="os._exit(3)")))
    assert r.exit_code == 3 and "hard-exited with os._exit(3)" in r.stderr
    assert os._exit is real


def test_os_exit_from_a_thread_ends_the_process_and_says_so(script):
    path = script("""\
        import os, threading, time
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        threading.Thread(target=os._exit, args=(4,)).start()
        time.sleep(30)
        """)
    rc, out, err = run("graph", path)
    assert rc == 4 and "os._exit(4) in a thread" in err


@pytest.mark.parametrize("status,code", [(5, 3), (0, 0)])
def test_os_exit_on_the_torch_engine_is_reported_as_on_autodiags(script, status, code):
    """--engine torch runs the script in a big-stack thread (NOTE [Deep graphs on PyTorch]):
    the script's own os._exit there is still its main thread's, reported as on autodiag's
    engine (it ended the process with no report and exit 0: a pass of nothing checked)."""
    pytest.importorskip("torch")
    path = script(
        f"""\
        import os
        import torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        os._exit({status})
        """
    )
    for command in ("graph", "check"):
        rc, out, err = run(command, path, "--no-color", "--engine", "torch")
        assert rc == code, err
        assert "in a thread" not in err
        if status:
            assert f"hard-exited with os._exit({status})" in err
        else:
            assert "ended with os._exit(0) at" in err and "s.py:5" in err
        if command == "graph":
            assert "MulBackward0" in out and "AccumulateGrad w" in out
        else:
            assert "(1 backward call" in out + err


def test_os_exit_from_a_script_thread_on_the_torch_engine_says_so(script):
    pytest.importorskip("torch")
    path = script("""\
        import os, threading, time
        import torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        threading.Thread(target=os._exit, args=(4,)).start()
        time.sleep(30)
        """)
    rc, out, err = run("graph", path, "--engine", "torch")
    assert rc == 4 and "os._exit(4) in a thread" in err


# --- fork and multiprocessing ---------------------------------------------------------------

FORK = """\
import os, sys
import autodiag as torch
w = torch.ones(2, requires_grad=True)
(w * 2).sum().backward()
pid = os.fork()
if pid == 0:
    print("in the child", file=sys.stderr)
    {child}
else:
    _, st = os.waitpid(pid, 0)
    print("child status", os.waitstatus_to_exitcode(st), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "child,status",
    [
        ("sys.exit(0)", 0),
        ("sys.exit(3)", 3),
        ("os._exit(4)", 4),
        ("pass", 0),
        ("raise ValueError('in child')", 1),
    ],
)
def test_a_forked_child_exits_quietly_with_its_own_status(script, child, status):
    rc, out, err = run("graph", script(FORK.format(child=child)), "-f", "json")
    assert rc == 0, err
    doc = json.loads(out)  # one report: the child printed none
    assert doc["status"] == "ok" and "in the child" in err
    assert f"child status {status}" in err
    if status == 1:
        assert "ValueError: in child" in err  # its traceback, as plain Python prints it


def test_os_exit_in_a_forked_child_ends_it_at_once(script):
    # as in plain Python: no finally block of the frames the child inherited runs
    child = "try:\n        os._exit(4)\n    finally:\n        print('finally ran', file=sys.stderr)"
    rc, out, err = run("graph", script(FORK.format(child=child)), "-f", "json")
    assert rc == 0 and json.loads(out)["status"] == "ok", err
    assert "child status 4" in err and "finally ran" not in err


@pytest.mark.parametrize("how", ["process", "pool"])
def test_multiprocessing_fork_children_print_no_report(script, how):
    work = {
        "process": "p = mp.Process(target=square, args=(3,)); p.start(); p.join()\n"
        "print('exitcode', p.exitcode, file=sys.stderr)",
        "pool": "with mp.Pool(2) as pool:\n"
        "    print('results', pool.map(square, [1, 2, 3]), file=sys.stderr)",
    }[how]
    path = script(
        textwrap.dedent("""\
        import sys
        import multiprocessing
        import autodiag as torch
        mp = multiprocessing.get_context("fork")
        def square(v):
            return v * v
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        """)
        + work
        + "\n"
    )
    rc, out, err = run("check", path, "-f", "json")
    assert rc == 0, err
    doc = json.loads(out)
    check_envelope(doc, "check")
    assert ("exitcode 0" if how == "process" else "results [1, 4, 9]") in err


MP_ONLY = """\
import multiprocessing
import {lib} as torch
mp = multiprocessing.get_context("fork")

def work(q):
    x = torch.ones(3, requires_grad=True)
    (x - 1).log().sum().backward()
    q.put(float(x.grad.sum()))

if __name__ == "__main__":
{parent}    q = mp.Queue()
    p = mp.Process(target=work, args=(q,))
    p.start(); q.get(); p.join()
"""


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_run_that_computed_only_in_forked_processes_says_so(script, engine):
    """The work done in a forked process is not observed: no verdict on it (exit 2), and the
    message says where the work went (it said "computed nothing", or on --engine torch that
    the script's `torch` was not autodiag's)."""
    if engine == "torch":
        pytest.importorskip("torch")
    lib = "torch" if engine == "torch" else "autodiag"
    rc, out, err = run("check", script(MP_ONLY.format(lib=lib, parent="")), "--engine", engine)
    assert rc == 2, out + err
    assert "nothing analysed" in err and "it computed in the 1 process it forked" in err
    assert "autodiag tensors" not in err and "imported `torch`" not in err


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
def test_a_verdict_on_a_run_that_also_forked_notes_what_it_did_not_see(script, engine):
    if engine == "torch":
        pytest.importorskip("torch")
    lib = "torch" if engine == "torch" else "autodiag"
    parent = "    w = torch.ones(2, requires_grad=True)\n    (w * 2).sum().backward()\n"
    rc, out, err = run("check", script(MP_ONLY.format(lib=lib, parent=parent)), "--engine", engine)
    assert rc == 0, out + err
    assert "(1 backward call" in out
    assert "forked 1 process (os.fork, multiprocessing, DataLoader workers); what they " in err


def test_nothing_analysed_on_the_torch_engine_speaks_of_pytorch(script):
    pytest.importorskip("torch")
    rc, out, err = run(
        "check", script("import numpy as np\nprint(np.ones(3).sum())\n"), "--engine", "torch"
    )
    assert rc == 2, out + err
    assert "PyTorch recorded no op" in err and "autodiag tensor" not in err


# --- standard input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        "input()",
        "sys.stdin.read()",
        "sys.stdin.read(3)",
        "sys.stdin.readline()",
        "sys.stdin.readlines()",
        "[line for line in sys.stdin]",
        "next(sys.stdin)",
        "sys.stdin.buffer.read()",
        "sys.stdin.buffer.readline()",
        "sys.stdin.buffer.read1(2)",
        "os.read(sys.stdin.fileno(), 1)",
        "sys.stdin.fileno()",
    ],
)
def test_every_stdin_api_says_it_reads_standard_input(script, read):
    path = script(f"""\
        import os, sys
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        data = {read}
        """)
    r = cli("graph", path, input="data\n")
    assert r.exit_code == 3, r.stderr
    assert "reads standard input, which autodiag closes" in r.stderr
    assert 's.py", line 5' in r.stderr and "MulBackward0" in r.stdout


def test_a_script_that_reads_until_eof_still_ends(script):
    path = script("""\
        import sys
        import autodiag as torch
        try:
            input()
        except EOFError:
            pass  # no more input: go on
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        """)
    r = cli("graph", path)
    assert r.exit_code == 0 and "MulBackward0" in r.stdout


@pytest.mark.parametrize("read", ["open(0).read()", "os.read(0, 10)", "sys.__stdin__.read()"])
def test_file_descriptor_0_is_empty_and_never_waits(script, read):
    path = script(f"""\
        import os, sys
        import autodiag as torch
        print("read", repr({read}), file=sys.stderr)
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        """)
    # stdin is a pipe nobody writes to or closes: reading the real fd 0 would wait forever
    p = subprocess.Popen(
        [sys.executable, "-m", "autodiag", "graph", path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        p.wait(timeout=60)  # the outputs are small: no pipe fills up before the end
        out, err = p.stdout.read(), p.stderr.read()
    finally:
        p.kill()
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()
    assert p.returncode == 0, err
    assert "read ''" in err or "read b''" in err
    assert "MulBackward0" in out


# --- objects hostile to introspection -------------------------------------------------------

HOSTILE = {
    "__getattribute__ raises": """\
        class H:
            def __getattribute__(self, name):
                raise RuntimeError("no " + name)
        """,
    "__getattr__ raises": """\
        class H:
            def __getattr__(self, name):
                raise RuntimeError("no " + name)
        """,
    "__class__ raises": """\
        class H:
            @property
            def __class__(self):
                raise RuntimeError("no class")
        """,
    "__dict__ raises": """\
        class H:
            @property
            def __dict__(self):
                raise RuntimeError("no dict")
        """,
    "dunders raise": """\
        class H:
            def __eq__(self, other):
                raise RuntimeError("eq")
            def __hash__(self):
                raise RuntimeError("hash")
            def __bool__(self):
                raise RuntimeError("bool")
            def __len__(self):
                raise RuntimeError("len")
            def __repr__(self):
                raise RuntimeError("repr")
        """,
    "metaclass raises": """\
        class Meta(type):
            def __getattribute__(cls, name):
                raise RuntimeError("meta " + name)
            def __eq__(cls, other):
                raise RuntimeError("meta eq")
            __hash__ = type.__hash__
        class H(metaclass=Meta):
            pass
        """,
    "__getattr__ exits": """\
        class H:
            def __getattr__(self, name):
                raise SystemExit(7)
        """,
    "a mock": """\
        from unittest import mock
        H = mock.MagicMock
        """,
}

# Hostile objects everywhere autodiag looks: globals (an instance and the class), a function's
# locals, a Module's attribute list, an optimizer's neighbour, sys.modules. The script fails
# inside main(), so the failure's frames are looked at too.
HOSTILE_USE = """\
import sys
import autodiag as torch
h = H()
hc = H
sys.modules["hostile_module"] = h
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)
        self.things = [h]
    def forward(self, x):
        return self.lin(x)
def main():
    obj = h
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    w = torch.ones(2, requires_grad=True)
    kept = []
    for i in range(3):
        loss = net(torch.ones(1, 2) * w).sum() + (w * 2).sum()
        kept.append(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    raise ValueError("stop")
main()
"""


@pytest.fixture
def forget_hostile_module():
    yield
    sys.modules.pop("hostile_module", None)  # the script put it there (in-process runs)


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("command", COMMANDS)
def test_hostile_objects_are_skipped_by_every_command(script, forget_hostile_module, kind, command):
    path = script(textwrap.dedent(HOSTILE[kind]) + HOSTILE_USE)
    r = cli(command, path, "--no-color")
    assert "internal error" not in r.stderr, r.stderr
    assert r.exit_code == 3, r.stderr  # the script's own ValueError, after a full report
    assert "raised ValueError: stop" in r.stderr
    if command in ("graph", "trace"):
        assert "AccumulateGrad w" in r.stdout  # named from main()'s frame


@pytest.mark.parametrize("kind", ["__getattribute__ raises", "metaclass raises"])
def test_root_naming_a_hostile_object_is_a_clear_refusal(script, forget_hostile_module, kind):
    path = script(textwrap.dedent(HOSTILE[kind]) + HOSTILE_USE)
    for name in ("h", "hc"):
        r = cli("graph", path, "--root", name)
        assert r.exit_code == 2 and "not a tensor" in r.stderr, r.stderr


def test_leak_holder_search_walks_past_hostile_objects(script):
    # run in a subprocess: the hostile entry in sys.modules must not outlive the test
    path = script(
        textwrap.dedent(HOSTILE["__getattribute__ raises"])
        + textwrap.dedent("""\
        import sys
        import autodiag as torch
        class D(dict):
            def items(self):
                raise RuntimeError("items")
            def get(self, *args):
                raise RuntimeError("get")
        h = H()
        sys.modules["hostile_module"] = h
        holder = D(h=h)
        w = torch.ones(3, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        history = []
        for step in range(12):
            loss = (w * 2).exp().sum()
            history.append(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
        """)
    )
    rc, out, err = run("leaks", path, "-f", "json")
    assert rc == 1, err
    doc = json.loads(out)
    assert [f["kind"] for f in doc["findings"]] == ["graph_leak"]
    assert "`history`" in doc["findings"][0]["message"]


@pytest.mark.parametrize("kind", ["a mock", "__getattribute__ raises"])
def test_any_object_as_torch_in_sys_modules(script, kind):
    # a script (or its test helpers) may stub torch out; autodiag then looks at it to tell
    # which array libraries the script ran with
    path = script(
        textwrap.dedent(HOSTILE[kind])
        + textwrap.dedent("""\
        import sys
        sys.modules["torch"] = H()
        import autodiag as ad
        w = ad.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        """)
    )
    rc, out, err = run("check", path)
    assert rc == 0 and "no findings" in out, err


# --- standard streams the script closes or replaces -----------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        "os.close(1)",
        "os.close(2)",
        "os.dup2(os.open(os.devnull, os.O_WRONLY), 1)",
        "sys.stdout.close()",
        "sys.stdout = None",
        "sys.stderr = None",
        "sys.__stdout__.close()",
        "sys.__stderr__.close()",
        "sys.stdout = open(os.devnull, 'w')",
    ],
)
def test_the_report_reaches_the_users_stdout_whatever_the_script_did(script, damage):
    path = script(f"""\
        import os, sys
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        {damage}
        raise ValueError("after the damage")
        """)
    rc, out, err = run("graph", path, "-f", "json")
    assert rc == 3, err
    doc = json.loads(out)
    check_envelope(doc, "graph")
    assert doc["status"] == "error" and "after the damage" in doc["error"]["message"]
    assert "raised ValueError: after the damage" in err  # autodiag's stderr works too


# --- names from the frames of a failed or interrupted run -----------------------------------


@pytest.mark.parametrize(
    "stop", ["raise ValueError('late')", "raise KeyboardInterrupt", "sys.exit(2)", "os._exit(2)"]
)
def test_leaves_keep_their_names_when_the_script_stops_inside_a_function(script, stop):
    path = script(f"""\
        import os, sys
        import autodiag as torch
        def main():
            w = torch.tensor([0.0, 1.0], requires_grad=True)
            loss = (w.log() * 0).sum()
            loss.backward()
            {stop}
        main()
        """)
    r = cli("graph", path, "-f", "json")
    doc = json.loads(r.stdout)
    names = [n["variable"]["name"] for n in doc["nodes"] if n["variable"]]
    assert names == ["w"], names
    r = cli("check", path, "-f", "json")
    found = json.loads(r.stdout)["findings"]
    inf = next(f for f in found if f["kind"] == "inf_forward")
    assert any(i.get("name") == "w" for i in inf["inputs"]), inf["inputs"]


def test_module_level_tensors_keep_their_names_when_the_script_fails(script):
    path = script("""\
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        out = w * 3
        raise ValueError("before backward")
        """)
    r = cli("graph", path, "-f", "json")
    assert r.exit_code == 3
    doc = json.loads(r.stdout)  # the module-level graph of what ran before the failure
    assert [n["variable"]["name"] for n in doc["nodes"] if n["variable"]] == ["w"]


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize("damage", ["sys.stdout.close()", "os.close(2)"])
def test_the_progress_line_survives_a_closed_terminal_stream(script, damage):
    from cli_helpers import pty_output

    path = script(f"""\
        import os, sys, time
        import autodiag as torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
        time.sleep(1.6)  # the progress line is up (after 1 s)
        {damage}
        time.sleep(0.6)  # it would be redrawn here
        """)
    text = pty_output(["graph", path, "--no-color"], stderr=True).decode("utf-8", "replace")
    assert "autodiag: running" in text and "internal error" not in text, text
    assert "AccumulateGrad w" in text
    # the line is erased before the report, on the stream put back after the run
    assert text.rindex("\r\x1b[2K") < text.index("SumBackward0")
