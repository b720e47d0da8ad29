"""Run a user's script as ``__main__`` under tracing, and put the interpreter back afterwards.

What the script sees is what ``python script.py ARGS`` gives it: ``sys.argv``, its folder first
on ``sys.path``, ``__name__ == "__main__"``, the working directory unchanged. What differs, on
purpose: standard input is closed (a debugger run must not hang waiting for input), the script's
standard output goes to standard error (so autodiag's report on stdout stays parseable), and a
``--timeout`` stops it; ``import torch`` gives autodiag (``autodiag.torch_alias``), and a
``torch`` name autodiag lacks stops the run with NotProvidedByEngine (exit 2); a thread the
script started that dies of an error fails the run as the script's own error does (NOTE [Thread
errors]). ``sys.argv``, ``sys.path``, the modules it imported from its own folder, the working
directory, stdin/stdout, grad mode, anomaly mode, the default dtype and the engine's count of
backward calls (a script's calls are numbered from 1, as in its own process) are restored
afterwards.
"""

from __future__ import annotations

import contextlib
import io
import operator
import os
import signal
import sys
import threading
import traceback
import types

from autodiag import dtypes, printing
from autodiag._interrupts import deferring_sigint
from autodiag._look import module_file
from autodiag.autograd import anomaly, engine
from autodiag.core import grad_mode
from autodiag.target.errors import BadTarget, TargetFailed
from autodiag.torch_alias import missing_name, torch_alias
from autodiag.trace import StopRun, sites


class Timeout(BaseException):
    """Raised inside the script when --timeout expires (not an Exception: scripts' broad
    ``except Exception`` must not swallow it)."""


def load(path: str) -> types.CodeType:
    """Read and compile ``path``; a clear BadTarget when that is impossible."""
    if not os.path.exists(path):
        raise BadTarget(
            f"{path}: no such file", "Check the path; TARGET is a Python script, or use -e EXPR."
        )
    if os.path.isdir(path):
        raise BadTarget(
            f"{path} is a directory, not a script", "Give the path of a .py file inside it."
        )
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise BadTarget(
            f"{path}: cannot be read ({e.strerror})", "Check the file's permissions."
        ) from None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadTarget(
            f"{path} is not UTF-8 text (byte {e.start}: {raw[e.start]:#04x})",
            "TARGET must be a Python source file.",
        ) from None
    if "\x00" in source:
        raise BadTarget(
            f"{path} is a binary file, not a Python script", "TARGET must be a Python source file."
        )
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".ipynb":
        raise BadTarget(
            f"{path} is a Jupyter notebook, not a Python script",
            "Convert it first: jupyter nbconvert --to script NOTEBOOK.ipynb",
        )
    if (
        suffix not in ("", ".py", ".pyw")
        and not source.startswith("#!")
        or source.startswith("#!")
        and "python" not in source.split("\n", 1)[0]
    ):
        # `python data.csv` might even run; a debugger run of it is surely a mistake
        raise BadTarget(
            f"{path} is not a Python script (a {suffix or 'non-Python'} file)",
            "TARGET must be a Python source file (.py).",
        )
    try:
        return compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"{path}:{e.lineno}" if e.lineno else path
        details = ""
        if e.text:
            line = e.text.rstrip("\n")
            caret = " " * max((e.offset or 1) - 1, 0) + "^"
            details = f"    {line}\n    {caret}"
        if not path.endswith((".py", ".pyw")):
            raise BadTarget(
                f"{where}: not a Python script ({e.msg})",
                "TARGET must be a Python source file.",
                details,
            ) from None
        raise BadTarget(
            f"{where}: syntax error: {e.msg}",
            "Fix the syntax error; the script must run with plain python first.",
            details,
            location={
                "file": path,
                "line": e.lineno,
                "function": None,
                "code": (e.text or "").strip(),
            },
        ) from None
    except ValueError as e:  # e.g. "source code string cannot contain null bytes"
        raise BadTarget(
            f"{path}: not a Python script ({e})", "TARGET must be a Python source file."
        ) from None


# Array libraries whose tensors autodiag's engine does not see, by top-level module name.
FOREIGN_ENGINES = {
    "torch": "PyTorch",
    "jax": "JAX",
    "tensorflow": "TensorFlow",
    "mlx": "MLX",
    "tinygrad": "tinygrad",
    "cupy": "CuPy",
    "micrograd": "micrograd",
}


def _libraries() -> dict:
    """The array libraries in ``sys.modules`` now: top-level name -> the module's file."""
    return {name: module_file(sys.modules[name]) for name in FOREIGN_ENGINES if name in sys.modules}


def foreign_imports(path: str, libraries: dict) -> list[tuple[str, str, int]]:
    """``(module, library, line)`` for each import in the script at ``path`` of an array library
    that was not autodiag while it ran (``libraries``: name -> file, as ``_libraries`` saw them
    at the end of the run; ``torch`` is autodiag's alias then), first import of each only."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in libraries or top in found:
                continue
            if not os.path.abspath(libraries[top]).startswith(pkg + os.sep):
                found[top] = (top, FOREIGN_ENGINES[top], node.lineno)
    return sorted(found.values(), key=lambda x: x[2])


# --- standard input: closed for the target ------------------------------------------------------


class StdinClosed(EOFError, io.UnsupportedOperation):
    """What every way of reading the target's standard input raises. An EOFError, so that a
    script that reads until end of input ends as it would with ``< /dev/null``; an
    UnsupportedOperation, as ``fileno()`` of a stream without a file descriptor raises."""


_STDIN_MESSAGE = "standard input is closed under autodiag"


def _refuse(*args, **kwargs):
    raise StdinClosed(_STDIN_MESSAGE)


class _ClosedStdinBuffer(io.BufferedIOBase):
    """``sys.stdin.buffer`` of the target: reading it fails like reading ``sys.stdin``."""

    def readable(self) -> bool:
        return True

    read = read1 = readinto = readinto1 = readline = readlines = peek = fileno = _refuse


class _ClosedStdin(io.TextIOBase):
    """Standard input of the target: reading it, in any way, fails with a clear reason
    (StdinClosed). File descriptor 0 itself is /dev/null during the run (``_Streams``), so
    ``os.read(0, n)`` and ``open(0)`` see an empty input instead of waiting for a terminal."""

    def __init__(self):
        super().__init__()
        self._buffer = _ClosedStdinBuffer()

    @property
    def buffer(self):
        return self._buffer

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    read = readline = readlines = fileno = _refuse

    def __next__(self):
        _refuse()


# --- os._exit and fork ---------------------------------------------------------------------------


class HardExit(BaseException):
    """Raised in place of ``os._exit(status)`` while the target runs: it ends the run where
    ``sys.exit`` would, so autodiag can still report what ran before (the real ``os._exit``
    would end autodiag with it). Not a SystemExit: the script's ``except SystemExit`` must not
    catch what it could not catch in plain Python."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


_REAL_EXIT = os._exit
_RUN_PID = [0]  # the process that started the current run
# processes this one has forked (os.fork, multiprocessing's and DataLoader's fork workers): a
# run that recorded no op but forked did its work where autodiag does not look
_FORKS = [0]


def _count_fork() -> None:
    _FORKS[0] += 1


# NOTE [Forked children]: a process the script forks while it runs (a multiprocessing or
# DataLoader worker, ``os.fork()``) inherits the run's tracers. Its work is not in the report
# (only the process that started the run reports), so it runs as under plain Python: no tracer
# is told of its ops. Left installed, they changed what the child did: the anomaly analysis
# stopped a worker at its first NaN (StopRun), so the worker never put its result on its queue
# and the script waited for it until --timeout. The engines add what else to quiet
# (``events.QUIET_IN_CHILD``: --engine torch's function modes).
_RUNNING = [False]  # a script is running (between run_script's start and end)


def _quiet_child() -> None:
    if not _RUNNING[0]:
        return
    from autodiag.trace import events

    del events.TRACERS[:]
    events._rebuild()
    for quiet in events.QUIET_IN_CHILD:
        quiet()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_parent=_count_fork, after_in_child=_quiet_child)
_RUN_THREAD = [0]  # the thread that runs it (the main thread; a big-stack one on --engine torch)


def _hard_exit(status) -> None:
    status = operator.index(status)  # os._exit's own TypeError for a non-integer
    if os.getpid() != _RUN_PID[0]:
        # a forked child (multiprocessing ends its workers so): it ends here, as in plain
        # Python, without unwinding through the frames it inherited from the parent's run
        _flush()
        _REAL_EXIT(status)
    if threading.get_ident() != _RUN_THREAD[0]:
        # only the run's own thread can be ended by an exception (the script's main thread:
        # autodiag's main thread, or its big-stack thread on --engine torch, NOTE [Deep graphs
        # on PyTorch]); a thread the script started ends the process, as asked
        _flush()
        sys.__stderr__.write(
            f"autodiag: the script called os._exit({status}) in a thread; "
            "the process ended there, with no report\n"
        )
        _flush()
        _REAL_EXIT(status)
    raise HardExit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()


def _end_child(e: BaseException | None) -> None:
    """End a process the script forked (``os.fork()``, multiprocessing's fork start method)
    when its run of the script is over, with the status plain Python would give it and without
    a report: only the process that started the run reports. Never returns."""
    status = 0
    try:
        if isinstance(e, HardExit):
            status = e.status
        elif isinstance(e, SystemExit):
            if e.code is None or isinstance(e.code, int):
                status = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                status = 1
        elif isinstance(e, KeyboardInterrupt):
            status = 130
        elif e is not None:
            traceback.print_exception(e, file=sys.stderr)
            status = 1
    finally:
        _flush()
        _REAL_EXIT(status & 0xFF)


# --- running the script --------------------------------------------------------------------------


def run_script(
    path: str, args: list[str], timeout: float | None = None, run=None, on: str = "autodiag"
) -> dict:
    """Run ``path`` as ``__main__`` and return its globals. Raises TargetFailed when it raises,
    exits with a non-zero status (``sys.exit`` or ``os._exit``) or times out (KeyboardInterrupt
    passes through).

    ``run`` (the caller's Run) gets what is known even when the script fails: its globals
    (``namespace``), the locals of its frames that were live when it stopped
    (``frame_locals``), the status of an ``os._exit`` (``hard_exit``), and ``stopped`` when a
    tracer's ``StopRun`` ended the run (normally: the globals are returned).

    ``on``: the engine. "autodiag" gives the script autodiag for ``import torch``; "torch" runs
    it on real PyTorch, observed through its extension points
    (``autodiag.engines.torch.observe``)."""
    code = load(path)
    abspath = os.path.abspath(path)
    folder = os.path.dirname(abspath)
    module = types.ModuleType("__main__")
    module.__file__ = abspath
    module.__builtins__ = __builtins__
    if run is not None:
        run.namespace = module.__dict__
    saved = _Saved(folder)
    pid = _RUN_PID[0] = os.getpid()
    forks = _FORKS[0]
    _RUN_THREAD[0] = threading.get_ident()
    engine.backward_calls[0] = 0
    sys.argv = [path, *args]
    sys.path.insert(0, folder)
    sys.modules["__main__"] = module
    sys.stdin = _ClosedStdin()
    os._exit = _hard_exit
    alarm = _Alarm(timeout)
    before = set(threading.enumerate())
    threads = None  # what the script's threads died of (_thread_errors)
    try:
        try:
            with (
                contextlib.redirect_stdout(sys.stderr),
                alarm,
                _engine(on, run),
                _thread_errors(on) as threads,
                deferring_sigint(),
            ):
                _RUNNING[0] = True
                try:
                    _exec(code, module.__dict__)
                finally:
                    _RUNNING[0] = False
                if run is not None:  # which array libraries it ran with, as it saw them
                    run.libraries = _libraries()
        except BaseException as e:
            if os.getpid() != pid:
                _end_child(e)
            if run is not None:
                run.frame_locals = _frame_locals(e.__traceback__)
            raise
        if os.getpid() != pid:
            _end_child(None)
    except SystemExit as e:
        status = e.code
        if status not in (None, 0):
            raise TargetFailed(
                f"{path} exited with status {status}",
                "autodiag reports what ran before the exit; a script that "
                "exits with an error status is treated as failed.",
                exit_status=status,
            ) from None
    except HardExit as e:
        tb = _user_traceback(e.__traceback__, path)
        if run is not None:
            run.hard_exit = e.status
            run.hard_exit_site = _innermost(e.__traceback__)
        if e.status != 0:
            raise TargetFailed(
                f"{path} hard-exited with os._exit({e.status})",
                "autodiag reports what ran before the exit; a script that "
                "exits with an error status is treated as failed, as with "
                "sys.exit.",
                tb,
                exit_status=e.status,
            ) from None
    except Timeout:
        tb = sys.exc_info()[2]
        frames = script_frames(tb, path)
        raise TargetFailed(
            f"{path} did not finish within --timeout {timeout:g} s",
            "Raise --timeout, or make the script do less (fewer steps, a smaller "
            "model) for the analysis run.",
            _user_traceback(tb, path),
            kind="timeout",
            location=frame_location(frames[-1]) if frames else None,
        ) from None
    except KeyboardInterrupt:
        raise
    except StopRun:
        if run is None:
            raise
        run.stopped = True
    except StdinClosed as e:
        raise TargetFailed(
            f"{path} reads standard input, which autodiag closes",
            "Pass the data as script arguments after -- or in a file.",
            _user_traceback(e.__traceback__, path),
        ) from None
    except BaseException as e:  # noqa: BLE001 - any error of the user's script is reported
        if not _ran_script(e.__traceback__):
            raise  # the runner's own failure, before or after the script: autodiag's bug
        name = missing_name(e)
        if name is not None:  # outside the engine's subset: exit 2, no verdict
            from autodiag.target.alias import not_provided

            raise not_provided(e, name) from None
        raise _failed(path, e) from None
    finally:
        imported = saved.restore()
        if run is not None:
            run.imported = imported
            run.forks = _FORKS[0] - forks
            before.add(alarm.prev)  # --timeout's timer thread, off the main thread: autodiag's
            run.running = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    # the script's own thread ended without an error of its own (or with sys.exit(0), or a
    # tracer stopped it): what its threads died of decides (NOTE [Thread errors])
    if threads is not None and os.getpid() == pid:
        if threads.outside:  # a thread used a name outside the engine: exit 2, as the script's
            from autodiag.target.alias import not_provided

            raise not_provided(*threads.outside[0])
        failure = threads.failure(path)
        if failure is not None:
            raise failure
    return module.__dict__


class _ThreadErrors:
    """What the threads the script started ended with, while it runs (``_thread_errors``):
    ``outside``, the ``(error, name)`` of those that ended on a name autodiag's engine lacks;
    ``failed``, the ``(error, thread name)`` of those that died of any other uncaught exception
    (``SystemExit`` excepted: Python ends a thread with it silently)."""

    def __init__(self, engine: str):
        self.engine = engine
        self.active = True
        self.outside: list = []
        self.failed: list = []
        self.lock = threading.Lock()

    def invoke(self, thread, exc_type, exc, tb, hook, real) -> None:
        """What Python does when ``thread`` dies of ``exc`` (NOTE [Thread errors]): call
        ``hook()``, the ``threading.excepthook`` to use; ``real(thread)`` is Python's own
        doing of it, used once the run is over."""
        if not self.active or exc is None:
            real(thread)
            return
        if issubclass(exc_type, StopRun):
            return  # a tracer ended the run: the thread ends as the run does, quietly
        if not issubclass(exc_type, SystemExit):
            name = missing_name(exc) if self.engine == "autodiag" else None
            with self.lock:
                if name is not None:  # outside the engine's subset: exit 2, no verdict
                    self.outside.append((exc, name))
                else:
                    self.failed.append((exc, thread.name if thread is not None else "?"))
        if os.environ.get("AUTODIAG_DEBUG") != "1":  # autodiag's frames: to report its bugs
            # (on --engine torch the observer's frames sit between the script's and PyTorch's)
            tb = _without_autodiag(tb)
            _chain_without_autodiag(exc, tb)
        hook = hook() or threading.__excepthook__  # the script's own, if it set one
        try:
            hook(threading.ExceptHookArgs((exc_type, exc, tb, thread)))
        except Exception:  # noqa: BLE001 - the hook's own failure, printed as Python prints it
            print("Exception in threading.excepthook:", file=sys.stderr, flush=True)
            (sys.excepthook or sys.__excepthook__)(*sys.exc_info())
        finally:
            # the thread's dead frames would keep their tensors (and graphs) alive for the
            # rest of the run through the kept error: their locals go, as when Python frees
            # them (the traceback's files and lines stay)
            _clear_frames(exc)
            del exc, tb

    def failure(self, path: str) -> TargetFailed | None:
        """The run's failure when a thread died of an error (the first one to die)."""
        if not self.failed:
            return None
        exc, name = self.failed[0]
        others = [n for _, n in self.failed[1:]]
        also = ""
        if others:
            s = "s" if len(others) > 1 else ""
            also = f"{len(others)} other thread{s} died of an error too ({', '.join(others)}); "
        return _failed(path, exc, name, also)


# NOTE [Thread errors]: a thread the script started that dies of an uncaught exception ends the
# command as the script's own exception does (exit 3, the thread named, its user frames shown):
# what it would have done after the error is work no verdict covered. Python hands a dying
# thread's exception to ``threading.excepthook``, which the script may replace with its own (a
# training script that logs crashes), so the runner does not rely on that hook: each Thread
# created while the script runs gets the runner's invocation of the hook instead of Python's
# (``threading._make_invoke_excepthook``, read by ``Thread.__init__``), which notes the error
# and then calls whichever ``threading.excepthook`` is installed, as Python would.
_MAKE_INVOKE = "_make_invoke_excepthook"


@contextlib.contextmanager
def _thread_errors(engine: str = "autodiag"):
    """Note what the threads the script starts die of (``_ThreadErrors``) while the block runs.
    A tracer's ``StopRun`` raised in such a thread (``autodiag anomaly`` stops at the first
    origin) ends that thread as it ends the run in the script's own thread: the report says
    so, and no hook sees it. Any other error of a thread goes to ``threading.excepthook``
    without autodiag's own frames. Yields the ``_ThreadErrors``."""
    errors = _ThreadErrors(engine)
    previous = threading.excepthook
    real_make = getattr(threading, _MAKE_INVOKE, None)

    def make_invoke():
        real = real_make()

        def installed():
            return threading.excepthook

        return lambda thread: errors.invoke(thread, *sys.exc_info(), installed, real)

    if real_make is not None:
        setattr(threading, _MAKE_INVOKE, make_invoke)
    else:  # pragma: no cover - a Python without it: the hook itself (a script's replaces it)

        def hook(args):
            errors.invoke(
                args.thread,
                args.exc_type,
                args.exc_value,
                args.exc_traceback,
                lambda: previous,
                lambda thread: previous(args),
            )

        threading.excepthook = hook
    try:
        yield errors
    finally:
        errors.active = False
        if real_make is not None:
            setattr(threading, _MAKE_INVOKE, real_make)
        # also when the script set its own since: the process gets back the hook it had (as
        # the runner restores sys.modules, sys.argv, ...)
        threading.excepthook = previous


def _clear_frames(exc: BaseException | None) -> None:
    """Clear the finished frames of ``exc``'s traceback and of those it chains."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__


def _without_autodiag(tb):
    """Traceback ``tb`` without the frames of autodiag's package (a new chain; ``tb`` itself
    is left as it is), nor PyTorch's dispatch to the observer's function mode: a Python method
    of ``torch.Tensor`` calls ``handle_torch_function`` only because a mode is active (plain
    python shows the method's frame at its real work, which follows the mode's frames)."""
    entries = _tb_entries(tb)
    drop = {i for i, t in enumerate(entries) if t.tb_frame.f_code.co_filename.startswith(_PKG)}
    for i, t in enumerate(entries):
        code = t.tb_frame.f_code
        if (
            code.co_name == "handle_torch_function"
            and code.co_filename.endswith(_TORCH_OVERRIDES)
            and i + 1 in drop
            and i > 0
            and _TORCH_DIR in entries[i - 1].tb_frame.f_code.co_filename
        ):  # PyTorch's own dispatch, called by one of PyTorch's methods: a script's frame stays
            drop.update((i - 1, i))
    kept = [t for i, t in enumerate(entries) if i not in drop]
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _chain_without_autodiag(exc: BaseException, kept) -> None:
    """``exc`` (its traceback now ``kept``) and the exceptions it chains
    (``__cause__``, ``__context__``) with tracebacks without autodiag's frames."""
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if e is exc:
            e.__traceback__ = kept
        elif e.__traceback__ is not None:
            e.__traceback__ = _without_autodiag(e.__traceback__)
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]


def _tb_entries(tb) -> list:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.sep + "torch" + os.sep
_TORCH_OVERRIDES = _TORCH_DIR + "overrides.py"


def _engine(engine: str, run=None):
    """What ``import torch`` gives the script: autodiag (the alias), or real PyTorch observed."""
    if engine == "torch":
        return _observed(run)
    return torch_alias()


@contextlib.contextmanager
def _observed(run):
    """Real PyTorch, observed in the thread that runs the script and in each thread it starts
    (engines/torch/workers.py)."""
    from autodiag.engines.torch.observe import observing
    from autodiag.engines.torch.workers import observing_threads

    with observing() as observer, observing_threads(observer):
        yield


def _frame_locals(tb) -> list[dict]:
    """The locals of the script's function frames in a traceback, innermost first (what names
    its tensors when it stopped inside a function)."""
    out = []
    for f, _ in traceback.walk_tb(tb):
        if sites._user(f.f_code) and f.f_locals is not f.f_globals:
            out.append(f.f_locals)
    return out[::-1]


def _innermost(tb) -> str | None:
    """``file:line`` of the innermost user frame of a traceback, or None."""
    frames = user_frames(tb)
    return f"{sites.short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else None


def _exec(code, namespace) -> None:
    exec(code, namespace)  # noqa: S102 - running the user's script is the point


def _ran_script(tb) -> bool:
    """Did the exception of traceback ``tb`` come out of the script (through ``_exec``)? One
    raised by the runner itself (say, setting up the --timeout alarm) is autodiag's failure,
    never the script's."""
    return any(f.f_code is _exec.__code__ for f, _ in traceback.walk_tb(tb))


def _failed(path: str, e: BaseException, thread: str | None = None, also: str = "") -> TargetFailed:
    """The TargetFailed of the script's error ``e``; ``thread``: the name of the thread it
    ended, when not the script's own (``also``: what the hint says first then)."""
    tb = _user_traceback(e.__traceback__, path)
    exc = "".join(traceback.format_exception_only(type(e), e)).strip()
    # The hint holds in both formats: the text report prints the traceback (details) before
    # it, the JSON envelope carries it as error.traceback.
    where = "the traceback shows the script's own frames; " if tb else ""
    hint = f"{where}fix the error, or run the script with plain python to reproduce it."
    who = path
    if thread is not None:
        who = f"a thread of {path} ({thread})"
        hint = f"Its work after the error never ran, so no verdict covers it; {also}{hint}"
    frames = script_frames(e.__traceback__, path)
    out = TargetFailed(
        f"{who} raised {exc}",
        hint[0].upper() + hint[1:],
        tb,
        exception=e,
        location=frame_location(frames[-1]) if frames else None,
    )
    out.thread = thread
    return out


def user_frames(tb) -> list[traceback.FrameSummary]:
    """The frames of a traceback outside autodiag (the user's), outermost first, each at the
    line the exception passed through (``tb_lineno``: a frame still running, such as the one
    of a ``with autodiag.torch.observe()`` block, is at another line by now)."""
    frames = []
    for fs, line in traceback.walk_tb(tb):
        if sites._user(fs.f_code):  # the runner's own frames (and the CLI's) are autodiag's
            frames.append((fs, line))
    summary = traceback.StackSummary.extract(iter(frames), lookup_lines=True)
    return list(summary)


def script_frames(tb, path: str) -> list[traceback.FrameSummary]:
    """The frames of a traceback in the user's own code: the script at ``path`` and the modules
    in its folder (and below), not the standard library, site-packages (numpy, ...) or
    autodiag; outermost first. All frames outside autodiag when none is in the folder."""
    frames = user_frames(tb)
    folder = os.path.dirname(os.path.abspath(path)) + os.sep
    outside = [os.path.abspath(p) + os.sep for p in _library_paths()]
    mine = []
    for f in frames:
        name = os.path.abspath(f.filename)
        if (
            name.startswith(folder)
            and not any(name.startswith(p) for p in outside if not folder.startswith(p))
            and os.sep + "site-packages" + os.sep not in name[len(folder) - 1 :]
            and os.sep + "dist-packages" + os.sep not in name[len(folder) - 1 :]
        ):
            mine.append(f)
    return mine or frames


def _library_paths() -> set:
    """Where the standard library and installed packages live."""
    import sysconfig

    paths = sysconfig.get_paths()
    return {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}


def frame_location(f: traceback.FrameSummary) -> dict:
    """A frame as a Finding's location: file, line, function, code."""
    return {
        "file": f.filename,
        "line": f.lineno,
        "function": f.name,
        "code": (f.line or "").strip(),
    }


def _user_traceback(tb, path: str) -> str:
    frames = script_frames(tb, path)
    if not frames:
        return ""
    return "Traceback (user frames only):\n" + "".join(traceback.format_list(frames)).rstrip()


class _Alarm:
    """SIGALRM-based --timeout (main thread, POSIX); a no-op without a timeout."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.prev = None

    def __enter__(self):
        if self.timeout and threading.current_thread() is not threading.main_thread():
            # a run on a worker thread (``--engine torch``: NOTE [Deep graphs on PyTorch]):
            # no signals there; a timer raises Timeout in it, at its next Python instruction
            self.prev = threading.Timer(self.timeout, _raise_in, (threading.get_ident(),))
            self.prev.daemon = True
            self.prev.start()
        elif self.timeout and hasattr(signal, "setitimer"):
            self.prev = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
        return self

    @staticmethod
    def _fire(signum, frame):
        raise Timeout

    def __exit__(self, *exc):
        if isinstance(self.prev, threading.Timer):
            self.prev.cancel()
        elif self.prev is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.prev)
        return False


def _raise_in(thread_id: int) -> None:
    """Raise Timeout in the thread ``thread_id`` (Python's documented asynchronous exception)."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(Timeout))


@contextlib.contextmanager
def time_limit(timeout: float | None, what: str, hint: str):
    """--timeout for work a command does after the target ran (a separate budget of the same
    size): when it expires, a TargetFailed (kind "timeout") saying ``what`` did not finish."""
    try:
        with _Alarm(timeout):
            yield
    except Timeout:
        raise TargetFailed(
            f"{what} did not finish within --timeout {timeout:g} s", hint, kind="timeout"
        ) from None


class _Saved:
    """Interpreter state a script may change, captured before it runs."""

    def __init__(self, folder: str):
        self.folder = folder + os.sep
        self.argv = sys.argv[:]
        self.path = sys.path[:]
        self.modules = set(sys.modules)
        self.main = sys.modules.get("__main__")
        self.cwd = os.getcwd()
        self.stdin = sys.stdin
        self.exit = os._exit
        self.streams = _Streams()
        self.grad = grad_mode._state.get()
        self.dtype = dtypes.get_default_dtype()
        self.anomaly = tuple(anomaly._state)
        self.backward_calls = engine.backward_calls[0]
        self.print_opts = dict(printing.PRINT_OPTS)  # torch.set_printoptions in the script

    def restore(self) -> list[str]:
        """Put the state back; returns the files of the modules the script imported."""
        sys.argv = self.argv
        sys.path[:] = self.path
        imported = []
        for name in set(sys.modules) - self.modules:
            f = module_file(sys.modules.get(name))
            if f:
                imported.append(f)
            # the script's own helper modules; never autodiag's (a script may sit in a checkout
            # of autodiag, and a second copy of its modules would break class identity)
            if f.startswith(self.folder) and name.split(".")[0] != "autodiag":
                del sys.modules[name]
        if self.main is not None:
            sys.modules["__main__"] = self.main
        with contextlib.suppress(OSError):
            os.chdir(self.cwd)
        sys.stdin = self.stdin
        os._exit = self.exit
        self.streams.restore()
        grad_mode._state.set(self.grad)
        engine.backward_calls[0] = self.backward_calls
        dtypes.set_default_dtype(self.dtype)
        printing.PRINT_OPTS.update(self.print_opts)
        if tuple(anomaly._state) != self.anomaly:  # a script left set_detect_anomaly(True) on
            anomaly.set_anomaly_enabled(*self.anomaly)
        return imported


class _Streams:
    """The standard streams as the run found them, put back afterwards whatever the script
    did to them: ``os.close(1)``, ``os.dup2(f, 1)``, ``sys.stdout = None``, ``sys.stdout.close()``
    (under the run, ``sys.stdout`` is autodiag's stderr). autodiag's report and messages go to
    the user's stdout and stderr as they were before the script ran.

    During the run, file descriptor 0 is /dev/null: reading it gives end of input instead of
    waiting on a terminal (``sys.stdin`` itself is ``_ClosedStdin``)."""

    NAMES = ("stdout", "stderr", "__stdout__", "__stderr__")

    def __init__(self):
        self.objects = {name: getattr(sys, name) for name in self.NAMES}
        self.filenos = {name: _fileno(stream) for name, stream in self.objects.items()}
        self.fds: dict = {}  # fd -> (a duplicate of it, its identity)
        for fd in (0, 1, 2):
            ident = _identity(fd)
            if ident is not None:
                self.fds[fd] = (os.dup(fd), ident)
        if 0 in self.fds:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)

    def restore(self) -> None:
        for fd, (dup, ident) in self.fds.items():
            if _identity(fd) != ident:  # closed, or pointed elsewhere by the script
                os.dup2(dup, fd)
            os.close(dup)
        self.fds = {}
        for name, stream in self.objects.items():
            fd = self.filenos[name]
            if stream is not None and fd is not None and getattr(stream, "closed", False):
                stream = _reopened(stream, fd)
            setattr(sys, name, stream)


def _identity(fd: int):
    """What file ``fd`` is open on (device, inode), or None when it is not open."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, ValueError, OSError):  # None, or an in-memory stream
        return None


def _reopened(stream, fd: int):
    """A new text stream like ``stream`` (which the script closed) on its descriptor ``fd``."""
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=True,
    )
