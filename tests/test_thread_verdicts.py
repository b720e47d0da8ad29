"""A thread the script started that dies of an uncaught exception ends the command as the
script's own exception does (exit 3, the thread named, its traceback trimmed to the user's
frames; the findings made before it still reported), on both engines, whatever
``threading.excepthook`` the script installed (NOTE [Thread errors] in target/script.py). It
was a ✓ (exit 0): the thread's work after its error was never checked."""

from __future__ import annotations

import json
import threading

import pytest
from cli_helpers import check_envelope, cli

ENGINES = ["autodiag", "torch"]
# in-process, pytest's own threading.excepthook gets the threads' errors: a warning each
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

# The worker: a backward, then an error (the line marked RAISE).
WORK = """\
def work():
    x = torch.randn(3, requires_grad=True)
    (x * 2).sum().backward()
    raise ValueError("data file missing")  # RAISE
"""

# Where the thread is started: at module level, in a function, in a method, in a main() loop.
PLACEMENTS = {
    "module": """\
t = threading.Thread(target=work, name="trainer")
t.start()
t.join()
""",
    "function": """\
def run():
    t = threading.Thread(target=work, name="trainer")
    t.start()
    t.join()

run()
""",
    "method": """\
class Trainer:
    def fit(self):
        t = threading.Thread(target=self.step, name="trainer")
        t.start()
        t.join()

    def step(self):
        work()

Trainer().fit()
""",
    "main_loop": """\
def main():
    for epoch in range(2):
        t = threading.Thread(target=work if epoch == 1 else print, name="trainer")
        t.start()
        t.join()

if __name__ == "__main__":
    main()
""",
}

TAIL = """\
y = torch.ones(2, requires_grad=True)
(y * 3).sum().backward()
print("done")
"""


def _source(engine: str, body: str, placement: str = "module", head: str = "") -> str:
    imp = "import autodiag as torch" if engine == "autodiag" else "import torch"
    return f"import threading\n{imp}\n{head}\n{body}\n{PLACEMENTS[placement]}{TAIL}"


def _line(source: str, marker: str) -> int:
    (n,) = [i for i, line in enumerate(source.splitlines(), 1) if f"# {marker}" in line]
    return n


def _run(command: str, path: str, engine: str, *more: str):
    args = [command, path, "-q", "--no-color", *more]
    if engine == "torch":
        pytest.importorskip("torch")
        args += ["--engine", "torch"]
    return cli(*args)


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_thread_that_dies_is_exit_3_naming_it(script, engine, placement):
    source = _source(engine, WORK, placement)
    path = script(source)
    r = _run("check", path, engine, "-f", "json")
    assert r.exit_code == 3, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    check_envelope(doc, "check")
    assert doc["status"] == "error" and doc["findings"] == []
    err = doc["error"]
    assert err["kind"] == "target_failed" and err["exit_code"] == 3
    assert err["thread"] == "trainer"
    assert err["message"] == (f"a thread of {path} (trainer) raised ValueError: data file missing")
    assert err["location"]["line"] == _line(source, "RAISE")
    assert err["location"]["function"] == "work"
    # the traceback is the user's frames only: the script's, not threading's nor autodiag's
    tb = err["traceback"]
    assert tb.startswith("Traceback (user frames only):")
    assert f'File "{path}", line {_line(source, "RAISE")}, in work' in tb
    assert "threading.py" not in tb and "autodiag" not in tb.replace(path, "")
    assert "no verdict covers it" in err["hint"]


@pytest.mark.parametrize("command", ["check", "anomaly", "inplace", "leaks", "graph", "trace"])
@pytest.mark.parametrize("engine", ENGINES)
def test_every_command_fails_on_a_thread_that_died(script, engine, command):
    if engine == "torch" and command == "trace":
        pytest.importorskip("torch")
        from autodiag.engines import torch as torch_engine

        if command not in torch_engine.COMMANDS:
            pytest.skip("trace --engine torch is not available")
    source = _source(engine, WORK)
    r = _run(command, script(source), engine)
    assert r.exit_code == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "autodiag: the target failed: a thread of" in r.stderr
    assert "(trainer) raised ValueError: data file missing" in r.stderr
    assert "✓" not in r.stdout


# The same failure, in a thread or in the script's own thread: the same verdict.
FINDING_THEN_ERROR = """\
def work():
    x = torch.zeros(3, requires_grad=True)
    torch.log(x).sum().backward()  # ORIGIN
    raise ValueError("data file missing")  # RAISE
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_findings_before_a_threads_error_are_reported_as_before_a_scripts_error(script, engine):
    threaded = _source(engine, FINDING_THEN_ERROR)
    inline = threaded.replace(PLACEMENTS["module"], "work()\n")
    docs = []
    for name, source in (("thread.py", threaded), ("inline.py", inline)):
        r = _run("anomaly", script(source, name=name), engine, "--keep-going", "-f", "json")
        # the findings decide the exit code; the error is carried with them
        assert r.exit_code == 1, r.stdout[-2000:] + r.stderr[-2000:]
        docs.append(json.loads(r.stdout))
    thread, inline_doc = docs
    assert thread["status"] == inline_doc["status"] == "findings"

    def facts(doc):
        return sorted((f["kind"], f["location"]["line"]) for f in doc["findings"])

    assert facts(thread) == facts(inline_doc) != []
    where = [{**d["error"]["location"], "file": None} for d in docs]
    assert where[0] == where[1] and where[0]["line"] == _line(threaded, "RAISE")
    assert thread["error"]["thread"] == "trainer" and "thread" not in inline_doc["error"]
    # text: the error is shown after the report, as the script's own error is
    r = _run("anomaly", script(threaded, name="t2.py"), engine, "--keep-going")
    assert r.exit_code == 1
    assert "a thread of" in r.stderr and "ValueError: data file missing" in r.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_a_thread_ending_with_sys_exit_is_no_error(script, engine):
    # Python ends a thread silently on SystemExit, whatever its status: so does autodiag
    body = WORK.replace('raise ValueError("data file missing")', "sys.exit(3)")
    r = _run("check", script(_source(engine, body, head="import sys")), engine)
    assert r.exit_code == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "✓" in r.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_a_thread_error_after_the_script_exits_with_0_still_fails(script, engine):
    source = _source(engine, WORK) + "import sys\nsys.exit(0)\n"
    r = _run("check", script(source), engine, "-f", "json")
    assert r.exit_code == 3, r.stderr[-2000:]
    assert json.loads(r.stdout)["error"]["thread"] == "trainer"


@pytest.mark.parametrize("engine", ENGINES)
def test_the_scripts_own_error_outranks_a_threads(script, engine):
    source = _source(engine, WORK) + 'raise KeyError("main")  # MAIN\n'
    r = _run("check", script(source), engine, "-f", "json")
    assert r.exit_code == 3
    err = json.loads(r.stdout)["error"]
    assert "KeyError" in err["message"] and "thread" not in err
    assert err["location"]["line"] == _line(source, "MAIN")


TWO_DIE = """\
def work():
    raise ValueError("data file missing")  # RAISE

def fine():
    pass

ts = [threading.Thread(target=f, name=n) for f, n in ((work, "a"), (fine, "b"), (work, "c"))]
for t in ts:
    t.start()
    t.join()
"""


def test_the_first_thread_to_die_is_reported_and_the_others_counted(script):
    source = "import threading\nimport autodiag as torch\n" + TWO_DIE + TAIL
    r = _run("check", script(source), "autodiag", "-f", "json")
    assert r.exit_code == 3
    err = json.loads(r.stdout)["error"]
    assert err["thread"] == "a"
    assert "1 other thread died of an error too (c)" in err["hint"]


# --- the script's own threading.excepthook -------------------------------------------------

OWN_HOOK = """\
logged = []

def log_crash(args):
    logged.append(args.exc_type.__name__)
    print("LOGGED", args.exc_type.__name__, args.thread.name)

threading.excepthook = log_crash
"""


@pytest.mark.parametrize("placement", ["module", "main_loop"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_scripts_own_excepthook_does_not_hide_a_threads_error(script, engine, placement):
    before = threading.excepthook
    source = _source(engine, WORK, placement, head=OWN_HOOK) + "print('logged', logged)\n"
    r = _run("check", script(source), engine, "-f", "json")
    assert r.exit_code == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(r.stdout)["error"]["thread"] == "trainer"
    # the script's hook was called, as Python calls it
    assert "LOGGED ValueError trainer" in r.stderr and "logged ['ValueError']" in r.stderr
    assert threading.excepthook is before  # the process's hook is back after the run


NAN_IN_THREAD = """\
def work():
    x = torch.zeros(3, requires_grad=True)
    torch.log(x).sum().backward()  # ORIGIN
    print("went on")
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_tracers_stop_in_a_thread_stays_quiet_under_a_scripts_hook(script, engine):
    # anomaly stops at the first origin, in the thread too: the script's hook never sees
    # autodiag's StopRun, and the run is no failure
    source = _source(engine, NAN_IN_THREAD, head=OWN_HOOK)
    r = _run("anomaly", script(source), engine, "-f", "json")
    assert r.exit_code == 1, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert [(f["kind"], f["location"]["line"]) for f in doc["findings"]] == [
        ("inf_forward", _line(source, "ORIGIN"))
    ]
    assert "error" not in doc
    assert "LOGGED" not in r.stderr and "StopRun" not in r.stderr and "went on" not in r.stderr


def test_a_missing_name_in_a_thread_is_exit_2_under_a_scripts_hook(script):
    body = WORK.replace('raise ValueError("data file missing")', "x.detach().igammac(x.detach())")
    source = _source("autodiag", body, head=OWN_HOOK)
    r = _run("check", script(source), "autodiag", "-f", "json")
    assert r.exit_code == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(r.stdout)["error"]["kind"] == "not_provided"
    assert "uses `Tensor.igammac`, which autodiag's engine does not provide" in r.stderr


def test_a_thread_still_running_after_the_run_is_left_to_python(script):
    # a thread that dies after the run ended is not the run's: Python's hook, no record kept
    source = """\
        import threading
        import autodiag as torch

        go = threading.Event()

        def late():
            go.wait(10)
            raise ValueError("after the run")

        T = threading.Thread(target=late, daemon=True)
        T.start()
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        """
    from autodiag.target import Target, run

    result = run(Target(path=script(source)))
    assert result.error is None
    t = result.namespace["T"]
    got = []
    before = threading.excepthook
    threading.excepthook = lambda args: got.append(args.exc_type)
    try:
        result.namespace["go"].set()
        t.join(10)
    finally:
        threading.excepthook = before
    assert got == [ValueError]


# --- leaks: steps per thread (NOTE [Steps per thread] in analysis/leaks.py) ------------------

# Two threads train at once. ``fast`` steps its optimizer 30 times; ``accumulate`` sums a loss
# over 10 micro-batches per step (3 steps), and ``fast`` steps once between each two of them
# (the semaphores make the interleaving certain). ``accumulate``'s graph in progress spans 10 of
# ``fast``'s steps: with one process-wide step count it was judged graph kept across steps,
# growing, and reported as a graph_leak (a local variable ``total`` that no one leaks).
TWO_TRAINERS = """\
import threading
import torch

built, stepped = threading.Semaphore(0), threading.Semaphore(0)


def fast(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(30):
        built.acquire(timeout=30)  # the other thread added a micro-batch to its graph
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        stepped.release()


def accumulate(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    window = []  # kept for a step, then cleared: no leak either
    for step in range(3):
        total = 0
        for micro in range(10):
            part = model(torch.randn(4, 8)).pow(2).mean()
            window.append(part)
            total = total + part
            built.release()
            stepped.acquire(timeout=30)  # the other thread stepped meanwhile
        opt.zero_grad()
        total.backward()
        opt.step()
        window.clear()
"""

CLEAN_AND_LEAKY = """\
import threading
import torch


def clean(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(20):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def leaky(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []  # HOLDER
    for step in range(12):
        loss = model(torch.randn(4, 8)).pow(2).mean()  # CREATED
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(loss){fix}
"""

# Where the two threads (targets ``{a}`` and ``{b}``) are started.
TWO_PLACEMENTS = {
    "module": """\
ts = [threading.Thread(target={a}, args=(0,)), threading.Thread(target={b}, args=(1,))]
for t in ts:
    t.start()
for t in ts:
    t.join()
""",
    "function": """\
def run():
    ts = [threading.Thread(target={a}, args=(0,)), threading.Thread(target={b}, args=(1,))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

run()
""",
    "method": """\
class Runner:
    def fit(self):
        ts = [threading.Thread(target=self.a), threading.Thread(target=self.b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def a(self):
        {a}(0)

    def b(self):
        {b}(1)

Runner().fit()
""",
    "main_loop": """\
def main():
    for epoch in range(1):
        ts = [threading.Thread(target={a}, args=(0,)), threading.Thread(target={b}, args=(1,))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

if __name__ == "__main__":
    main()
""",
}


def _two(engine: str, source: str, a: str, b: str, placement: str) -> str:
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    start = TWO_PLACEMENTS[placement].format(a=a, b=b)
    return source + "\n\n" + start


def _leaks(doc) -> list:
    return [f for f in doc["findings"] if f["kind"] == "graph_leak"]


@pytest.mark.parametrize("placement", list(TWO_PLACEMENTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_another_threads_steps_do_not_make_a_graph_in_progress_a_leak(script, engine, placement):
    path = script(_two(engine, TWO_TRAINERS, "fast", "accumulate", placement))
    r = _run("leaks", path, engine, "-f", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and _leaks(doc) == [], r.stdout[-3000:] + r.stderr[-2000:]
    # the census shown is the busiest thread's: fast's 30 steps, none of them retained
    assert len(doc["steps"]) == 30 and doc["step_source"] == "optimizer"
    assert all(c["nodes"] == 0 for c in doc["steps"])


@pytest.mark.parametrize("placement", list(TWO_PLACEMENTS))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_leak_in_one_of_two_threads_is_found_with_its_lines(script, engine, placement):
    source = _two(engine, CLEAN_AND_LEAKY.format(fix=""), "clean", "leaky", placement)
    r = _run("leaks", script(source), engine, "-f", "json")
    assert r.exit_code == 1, r.stdout[-3000:] + r.stderr[-2000:]
    (leak,) = _leaks(json.loads(r.stdout))
    assert leak["severity"] == "error"
    assert leak["holder"]["name"] == "history" and leak["holder"]["function"] == "leaky"
    # judged against the steps of the thread that made the graph, which the finding names
    assert leak["thread"].endswith(("(leaky)", "(b)")), leak
    assert f"By step {leak['detected_at_step']} of thread {leak['thread']}," in leak["message"]
    assert leak["location"]["line"] == _line(source, "HOLDER")
    assert leak["created_at"]["line"] == _line(source, "CREATED")
    # fixed (a number kept instead of the tensor): clean
    fixed = _two(engine, CLEAN_AND_LEAKY.format(fix=".item()"), "clean", "leaky", placement)
    fixed = fixed.replace("history.append(loss).item()", "history.append(loss.item())")
    r = _run("leaks", script(fixed, name="fixed.py"), engine, "-f", "json")
    assert r.exit_code == 0 and _leaks(json.loads(r.stdout)) == [], r.stdout[-3000:]


HELD_BY_ANOTHER_THREAD = """\
import queue
import threading
import torch


def produce(q):
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(12):
        loss = model(torch.randn(4, 8)).pow(2).mean()  # CREATED
        opt.zero_grad()
        loss.backward()
        opt.step()
        q.put(loss)
        q.join()  # the main thread has it in its list
    q.put(None)


def main():
    q = queue.Queue()
    t = threading.Thread(target=produce, args=(q,))
    t.start()
    got = []  # HOLDER
    while (item := q.get()) is not None:
        got.append(item)
        q.task_done()
    t.join()


main()
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_leak_held_in_another_threads_frame_is_named(script, engine):
    # the worker's graphs, judged at the worker's steps, are held by a local of main() in the
    # main thread: the holder search reads the other threads' frames too
    source = HELD_BY_ANOTHER_THREAD
    if engine == "autodiag":
        source = source.replace("import torch", "import autodiag as torch")
    r = _run("leaks", script(source), engine, "-f", "json")
    assert r.exit_code == 1, r.stdout[-3000:] + r.stderr[-2000:]
    (leak,) = _leaks(json.loads(r.stdout))
    assert leak["holder"]["name"] == "got" and leak["holder"]["function"] == "main"
    assert leak["location"]["line"] == _line(source, "HOLDER")
    assert leak["created_at"]["line"] == _line(source, "CREATED")
