"""What every command shares: its options (declared once, ``SHARED``), the CI outputs
(--junit-xml, --annotations), the failure table, and the run pipeline: parse -> run target with
tracers -> analysis -> render -> CI outputs -> exit code.

A command is a ``Spec``: a ``run(cmd, **its own options)`` that runs the target with its tracers
and returns an ``Outcome`` (findings + info), and its renderers by format name
(``report/outcome.py``). ``typer_command(spec)`` makes the typer command of it; ``pipeline``
renders the outcome in the chosen format and turns it into CI outputs and an exit code."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape

from autodiag.cli._files import Protected, recording_opens, refuse_same_file
from autodiag.report import ci
from autodiag.report import no_color as no_color_env
from autodiag.report.outcome import Outcome
from autodiag.report.output import (
    Sink,
    check_writable,
    envelope,
    pending_interrupt,
    reader_gone,
    stderr_console,
    write_atomic,
)
from autodiag.target import Run, Target, run
from autodiag.target.errors import (
    AutodiagError,
    BadInvocation,
    InternalError,
    Interrupted,
    NothingAnalysed,
)

# --- exit codes (DESIGN §4; README lists them) ---------------------------------------------------
EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_TARGET_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED = (
    0,
    1,
    2,
    3,
    4,
    130,
)
# The JSON envelope's status of each exit code: they always agree.
STATUS = {EXIT_OK: "ok", EXIT_FINDINGS: "findings", EXIT_INTERRUPTED: "interrupted"}
# --timeout's ceiling: the interval timer cannot count much further (about 31 years).
MAX_TIMEOUT = 1e9

# --- options shared by the commands -----------------------------------------------------------

TargetArg = Annotated[
    str | None,
    typer.Argument(help="Python script to run as __main__ (or use -e EXPR).", show_default=False),
]
ScriptArgs = Annotated[
    list[str] | None, typer.Argument(help="Arguments for the script, after --.", show_default=False)
]
ExprOpt = Annotated[
    str | None,
    typer.Option(
        "-e",
        "--expr",
        help="An expression instead of a script, e.g. '(3*x+2)**2'.",
        show_default=False,
    ),
]
VarOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        help="NAME=VALUE for -e: a number or nested list; a leaf with requires_grad.",
        metavar="NAME=VALUE",
        show_default=False,
    ),
]
DtypeOpt = Annotated[
    str, typer.Option("--dtype", help="dtype of --var leaves: float64 or float32.")
]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "-o",
        "--output",
        help="Write the report to FILE (atomically) instead of stdout.",
        metavar="FILE",
        show_default=False,
    ),
]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="Plain text without colour.")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress line on stderr while the target runs.")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", help="Stop the target after SECONDS.", metavar="SECONDS", show_default=False
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Let -o/--junit-xml replace an existing .py file (never the target or a "
        "file the run uses).",
    ),
]


class Engine(str, enum.Enum):
    """--engine: which autograd engine runs the target (DESIGN §4)."""

    autodiag = "autodiag"
    torch = "torch"


EngineOpt = Annotated[
    Engine,
    typer.Option(
        "--engine",
        help="autodiag: run the target on autodiag's engine, with `import torch` "
        "resolving to it. torch: run it on real PyTorch, observed through PyTorch's own "
        "extension points.",
    ),
]


class Annotations(str, enum.Enum):
    """--annotations: which CI's annotation syntax to print on stderr."""

    github = "github"
    none = "none"


# The two CI options every command takes (written by ``Command.ci_outputs``).
JunitOpt = Annotated[
    str | None,
    typer.Option(
        "--junit-xml",
        help="Also write a JUnit XML report to FILE, for CI: a failing test case per "
        "finding (gradcheck: a case per check), an error case if the target fails, else one "
        "passing case (graph and trace have no findings: always one case).",
        metavar="FILE",
        show_default=False,
    ),
]
AnnotationsOpt = Annotated[
    Annotations | None,
    typer.Option(
        "--annotations",
        help="github: print a GitHub Actions annotation per finding on stderr; "
        "none: never. Default: github when GITHUB_ACTIONS=true.",
        show_default=False,
    ),
]


@dataclasses.dataclass
class Shared:
    """The options every command takes, as given."""

    target: str | None
    script_args: list | None
    expr: str | None
    var: list | None
    dtype: str
    fmt: str  # the --format name
    output: str | None
    no_color: bool
    timeout: float | None
    junit_xml: str | None
    annotations: Annotations | None
    quiet: bool
    engine: Engine
    force: bool


def _shared(fmt_annotation, fmt_default) -> list[inspect.Parameter]:
    """The shared options as typer parameters, in --help order (the command's own options go
    after --quiet, or where its ``Spec.placed`` says)."""
    k = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(name, k, default=default, annotation=annotation)
        for name, annotation, default in (
            ("target", TargetArg, None),
            ("script_args", ScriptArgs, None),
            ("expr", ExprOpt, None),
            ("var", VarOpt, None),
            ("dtype", DtypeOpt, "float64"),
            ("fmt", fmt_annotation, fmt_default),
            ("output", OutputOpt, None),
            ("no_color", NoColorOpt, False),
            ("timeout", TimeoutOpt, None),
            ("junit_xml", JunitOpt, None),
            ("annotations", AnnotationsOpt, None),
            ("quiet", QuietOpt, False),
            ("engine", EngineOpt, Engine.autodiag),
            ("force", ForceOpt, False),
        )
    ]


SHARED = [p.name for p in _shared(None, None)]


def make_target(
    target: str | None,
    script_args,
    expr,
    var,
    dtype,
    timeout,
    engine: Engine = Engine.autodiag,
    command: str = "graph",
) -> Target:
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT:
        raise BadInvocation(
            f"--timeout {timeout:g}: expected a number of seconds greater than 0 "
            f"and at most {MAX_TIMEOUT:g}",
            "Leave --timeout out to let the target run as long as it takes.",
        )
    if target is not None and expr is not None:
        # with -e, click hands the first word after -- to TARGET: it is a script argument
        raise BadInvocation(
            f"give either a script ({target}) or -e EXPR, not both",
            "Drop the script path to inspect the expression.",
        )
    if target is None and expr is None:
        raise BadInvocation(
            "no target: give a script path or -e EXPR",
            "For example: autodiag graph samples/model.py, or autodiag graph "
            "-e '(3*x+2)**2' --var x=1.",
        )
    if engine is Engine.torch:
        _check_torch_engine(command, expr)
    return Target(
        path=target,
        args=list(script_args or []),
        expr=expr,
        vars=list(var or []),
        dtype=dtype,
        timeout=timeout,
        engine=engine.value,
    )


def _check_torch_engine(command: str, expr: str | None) -> None:
    """``--engine torch`` (issue 21, landing one command at a time): refuse what it cannot run
    yet, and a missing PyTorch, with exit 2 — never a silent pass on the wrong engine."""
    from autodiag.engines import torch as torch_engine

    ready = torch_engine.ready_list()
    if command not in torch_engine.COMMANDS:
        raise BadInvocation(
            f"`{command} --engine torch` is not available yet; {ready} are",
            f"Run `autodiag {command}` on autodiag's engine (--engine autodiag, the default: "
            f"`import torch` then resolves to autodiag), or use {ready} with --engine torch.",
        )
    if expr is not None:
        raise BadInvocation(
            "--engine torch runs scripts; -e EXPR is evaluated on autodiag's engine",
            "Drop --engine torch, or put the computation in a script.",
        )
    if not torch_engine.available():
        raise BadInvocation(
            "--engine torch needs PyTorch, which is not installed", torch_engine.INSTALL_HINT
        )


class Command:
    """One run of a command: holds the sink, writes the CI outputs and turns outcomes into exit
    codes. With ``fmt`` json, ``guarded`` makes sure a JSON envelope is written on every exit.

    Output files (-o, --junit-xml, and a command's own in ``extra_outputs``, such as check's
    --plot): ``start()`` refuses, before the target runs, a path that is
    not writable, the target script or a module it imports, an existing .py file (without
    --force), or the same file for both; ``run_target`` refuses, before anything is written, a
    path that is a file the run opened (``cli/_files.py``).

    CI outputs: ``finish`` writes them from the command's Outcome (``ci_outputs``); ``start()``
    refuses an unwritable --junit-xml before anything runs. For a command with no findings,
    ``guarded`` writes the outputs of every run that got past ``start()`` — one passing case,
    or an error case for the failure it reported."""

    def __init__(self, name: str, opts: Shared):
        self.name = name
        self.opts = opts
        self.format = opts.fmt
        self.json = opts.fmt == "json"
        self.label: str | None = None  # the target as given, once make_target saw it
        self.force = opts.force
        output, no_color, annotations = opts.output, opts.no_color, opts.annotations
        quiet, junit_xml = opts.quiet, opts.junit_xml
        self.protected = Protected()
        self.output_ok: bool | None = None  # -o passed every check (None: not checked yet)
        self.refused = False  # an output file was refused as one of the user's files
        self.quiet = quiet
        self.output = output
        self.color = not no_color and not no_color_env.forbidden()
        self.err = stderr_console(self.color and sys.stderr.isatty())
        self.sink: Sink | None = None
        self.junit_xml = junit_xml
        if annotations is None:  # GitHub sets GITHUB_ACTIONS=true in every job
            annotations = (
                Annotations.github
                if os.environ.get("GITHUB_ACTIONS") == "true"
                else Annotations.none
            )
        self.annotate = annotations is Annotations.github
        self.target: Target | None = None
        self.result: Run | None = None
        self.failure: AutodiagError | None = None  # the last failure reported by fail()
        self.ci_done = False
        self.after_close: list = []  # called once the report is delivered (graph --open)
        # a command's own output files ("--plot", path): checked and refused like -o
        self.extra_outputs: list = []
        self.temporary: list = []  # files the command made itself: removed if left empty

    def make_target(self) -> Target:
        """The command's TARGET, checked (``make_target``); remembered for the envelope."""
        o = self.opts
        self.label = o.target if o.expr is None else f"-e {o.expr}"
        t = make_target(
            o.target, o.script_args, o.expr, o.var, o.dtype, o.timeout, o.engine, self.name
        )
        self.target = t
        return t

    def drop_values(self) -> None:
        """Let go of everything of the script's that can hold a graph: its globals, the locals
        of its frames, the tracebacks of its error (the report is made by then)."""
        import gc

        result = self.result
        if result is not None:
            ns = result.namespace
            if not any(t.is_alive() for t in result.running):  # they still read the globals
                for k in [k for k in ns if not (type(k) is str and k.startswith("__"))]:
                    del ns[k]  # its own names; torch.compile's guards still look at __builtins__
            result.frame_locals.clear()
            seen: set = set()
            for failure in (result.error, self.failure):
                exc = getattr(failure, "exception", None)
                while exc is not None and id(exc) not in seen:
                    seen.add(id(exc))
                    exc.__traceback__ = None
                    exc = exc.__cause__ or exc.__context__
        gc.collect()

    def start(self) -> Sink:
        self.check_outputs()
        self.sink = Sink(self.output, self.color and sys.stdout.isatty())
        return self.sink

    def check_outputs(self) -> None:
        """Refuse output files that cannot or must not be written (before the target runs)."""
        self.output_ok = False
        outputs = [("--output", self.output), ("--junit-xml", self.junit_xml)]
        outputs += self.extra_outputs
        for option, path in outputs:
            check_writable(path, option)
        refuse_same_file(outputs)
        if self.target is not None and self.target.path is not None:
            self.protected.add_script(self.target.path)
        self._refuse_protected()
        self.output_ok = True

    def _refuse_protected(self) -> None:
        outputs = [("--output", self.output), ("--junit-xml", self.junit_xml)]
        for option, path in outputs + self.extra_outputs:
            try:
                self.protected.refuse(path, option, self.force)
            except BadInvocation:
                self.output_ok = False
                self.refused = True  # no output file is written, not even the CI's
                raise

    def run_target(self, target: Target, tracers, need_ops: bool = True) -> Run:
        """Run ``target`` with ``tracers``. ``need_ops``: the command analyses what the engine
        records, so a run that recorded no op is refused (exit 2), never a pass. An output file
        that turns out to be one the run opened is refused here, before anything is written."""
        from autodiag.report.progress import Progress

        self.target = target
        with (
            Progress(target.label, not self.quiet and sys.stderr.isatty()),
            recording_opens() as opened,
        ):
            self.result = run(target, tracers)
        self.protected.add_run(self.result.imported, opened)
        self._refuse_protected()
        if self.result.hard_exit == 0:  # a non-zero status is a failure, reported as such
            at = f" at {self.result.hard_exit_site}" if self.result.hard_exit_site else ""
            self.err.print(
                f"[yellow]note:[/] {escape(target.label)} ended with os._exit(0)"
                f"{escape(at)}; the report covers what ran before it"
            )
        running = [t.name for t in self.result.running if t.is_alive()]
        if running:
            self.err.print(
                f"[yellow]note:[/] {escape(target.label)} ended while {len(running)} of its "
                f"threads still ran ({escape(', '.join(running))}); the report covers what they "
                "did before"
            )
        if self.result.forks and not self.result.analysed_nothing:
            n = self.result.forks
            self.err.print(
                f"[yellow]note:[/] {escape(target.label)} forked {n} process"
                f"{'es' if n != 1 else ''} (os.fork, multiprocessing, DataLoader workers); what "
                "they computed is not in this report"
            )
        if self.result.wrong_engine:
            label = self.result.target.label
            raise NothingAnalysed(
                f"{label} computed with autodiag's engine (it imports autodiag), but --engine "
                "torch observes real PyTorch: nothing it did was checked",
                "Run it without --engine torch (autodiag's engine is the default), or make the "
                "script `import torch`.",
            )
        if need_ops and self.result.analysed_nothing:
            raise nothing_analysed(self.result)
        return self.result

    def ci_outputs(
        self, findings: list, error: AutodiagError | None = None, cases: list | None = None
    ) -> None:
        """Write the JUnit report (--junit-xml) and print the annotations (--annotations), once.

        ``findings``: the run's Findings, one failing test case and one annotation each.
        ``error``: the target's failure when it is not itself a finding (an error case and an
        error annotation). ``cases``: JUnit test cases to use instead of one per finding (a
        command whose checks are enumerable, like gradcheck). With neither findings nor error
        nor cases, the report holds one passing case, so it is never empty."""
        if self.ci_done:
            return
        self.ci_done = True
        label = self.target.label if self.target is not None else "(no target)"
        if error is None and self.result is not None and self.result.interrupted:
            error = AutodiagError("interrupted: the report covers what ran before")
        if self.junit_xml is None and not self.annotate:
            return
        site = self._error_site(error) if error is not None else (None, None)
        if self.junit_xml is not None:
            self.protected.refuse(self.junit_xml, "--junit-xml", self.force)  # never, anyway
            write_atomic(
                self.junit_xml,
                ci.junit_report(self.name, label, findings, error, cases, site),
                "--junit-xml",
            )
        if self.annotate:
            lines = ci.annotation_lines(self.name, findings, error, site)
            # plain writes, not rich: a wrapped or styled line is no longer a workflow command
            try:
                sys.stderr.write("".join(x + "\n" for x in lines))
                sys.stderr.flush()
            except BrokenPipeError:
                reader_gone(sys.stderr)

    def _script(self) -> str | None:
        return self.target.path if self.target is not None else None

    def _error_site(self, error: AutodiagError) -> tuple[str | None, int | None]:
        """Where the target failed: its innermost frame, else the script itself."""
        from autodiag.target.script import user_frames

        if error.location is not None:
            return error.location["file"], error.location["line"]
        exc = getattr(error, "exception", None)
        frames = user_frames(exc.__traceback__) if exc is not None else []
        if frames:
            return frames[-1].filename, frames[-1].lineno
        return self._script(), None

    def fail(self, e: AutodiagError) -> int:
        """Print a failure as one paragraph on stderr; return its exit code."""
        self.failure = e
        self.err.print(f"[bold red]autodiag: {escape(e.title)}:[/] {escape(e.message)}")
        if e.details:
            self.err.print(escape(e.details))
        if e.hint:
            self.err.print(f"  {escape(e.hint)}")
        if os.environ.get("AUTODIAG_DEBUG") == "1":
            exc = e.exception if isinstance(e, InternalError) else e
            self.err.print(escape("".join(traceback.format_exception(exc))))
        return e.exit_code

    def error_envelope(self) -> None:
        """With --format json, when no report was delivered: the envelope of the failure
        (``self.failure``), to -o if that file is not what failed, else to stdout."""
        if not self.json or (self.sink is not None and self.sink.delivered):
            return
        error = self.failure or InternalError(RuntimeError("no report and no failure"))
        doc = envelope(
            self.name, self.label, [], status=STATUS.get(error.exit_code, "error"), error=error
        )
        if self.output is not None and self.output_ok is None:  # failed before start()
            with contextlib.suppress(AutodiagError):
                self.check_outputs()
        if self.output is not None and self.output_ok:
            sink = Sink(self.output, False)
            sink.write_json(doc)
            try:
                sink.close()
                return
            except AutodiagError:
                pass  # the file cannot take it either: stdout does
        Sink(None, False).write_json(doc)


def nothing_analysed(result: Run) -> NothingAnalysed:
    """Why a run that ran to its end recorded no op, and what to do."""
    from autodiag.target.script import foreign_imports

    target = result.target
    label = target.label
    if target.expr is not None:
        return NothingAnalysed(
            f"the expression {target.expr!r} computed nothing with a tensor",
            "Use at least one --var NAME=VALUE in it.",
        )
    if result.forks:
        n = result.forks
        where = "PyTorch" if target.engine == "torch" else "autodiag's engine"
        return NothingAnalysed(
            f"{label} ran, but {where} recorded no op in its process: it computed in the "
            f"{n} process{'es' if n != 1 else ''} it forked (os.fork, multiprocessing, "
            f"DataLoader workers), which autodiag does not observe",
            "Nothing was checked. Make the script compute in its own process for the analysis "
            "run (call the worker's function directly, DataLoader(num_workers=0)).",
        )
    if target.engine == "torch":
        return NothingAnalysed(
            f"{label} ran, but PyTorch recorded no op: it computed nothing with a PyTorch tensor",
            "Nothing was checked. --engine torch observes real PyTorch: run a script that "
            "computes with PyTorch tensors (`import torch`).",
        )
    foreign = foreign_imports(target.path, result.libraries)
    if foreign:
        from autodiag.trace.sites import short_path  # trace/ is the engine's: not at --help

        libs = ", ".join(f"`{m}` ({lib}) at {short_path(label)}:{line}" for m, lib, line in foreign)
        return NothingAnalysed(
            f"{label} ran, but none of its tensors were autodiag tensors: it imported {libs}",
            "autodiag analyses what runs on its own engine, so nothing was checked. Make the "
            "script compute with autodiag (`import autodiag as torch`) and run it again.",
        )
    return NothingAnalysed(
        f"{label} ran, but autodiag's engine recorded no op: it computed nothing with an "
        f"autodiag tensor",
        "Nothing was checked. Run a script that computes with autodiag "
        "tensors (`import autodiag as torch`), or give an expression with -e.",
    )


def guarded(name: str, opts: Shared, body) -> None:
    """Run a command body ``body(cmd) -> exit code`` with the failure table applied, write the
    CI outputs if the body did not, with --format json the error envelope if the body wrote no
    report, and exit."""
    cmd = Command(name, opts)
    try:
        try:
            if opts.engine is Engine.torch:
                from autodiag.engines.torch.threads import in_big_stack

                code = in_big_stack(_body_dropping_values, body, cmd)
            else:
                code = body(cmd)
            if cmd.sink is not None:
                cmd.sink.close()
                if code in (EXIT_OK, EXIT_FINDINGS):
                    for after in cmd.after_close:
                        after()
        except AutodiagError as e:
            code = cmd.fail(e)
        except KeyboardInterrupt:
            code = cmd.fail(Interrupted("the report was not complete"))
        except Exception as e:  # noqa: BLE001 - a bug in autodiag: say so, without a traceback
            code = cmd.fail(InternalError(e))
        if code == EXIT_INTERRUPTED and cmd.failure is None:  # interrupted target, report made
            cmd.failure = Interrupted("the report covers what ran before")
        if cmd.sink is not None and not cmd.ci_done and not cmd.refused:
            # the run got past start(): CI gets its report whatever happened after
            try:
                cmd.ci_outputs([], error=cmd.failure if code else None)
            except AutodiagError as e:
                code = cmd.fail(e)
        if code not in (EXIT_OK, EXIT_FINDINGS):
            cmd.error_envelope()
    except KeyboardInterrupt:  # a second Ctrl-C while failing: leave at once
        code = EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - a bug in the failure handling itself
        code = cmd.fail(InternalError(e))
    for path in cmd.temporary:  # a failure before the report was written (graph --open)
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == 0:
                os.unlink(path)
    if pending_interrupt() and code != EXIT_INTERRUPTED:
        # Ctrl-C came while the report was being written: it is complete, and says so
        cmd.err.print(
            "[bold red]autodiag: interrupted[/] while writing the report; it was completed first"
        )
    raise typer.Exit(code)


def _body_dropping_values(body, cmd: Command) -> int:
    """``body(cmd)``, then drop the script's values in this thread (NOTE [Deep graphs on
    PyTorch] in autodiag/engines/torch/threads.py)."""
    try:
        return body(cmd)
    finally:
        cmd.drop_values()


def target_failure(cmd: Command, result: Run) -> int | None:
    """After rendering: report a failed or interrupted target; the exit code, or None."""
    if result.interrupted:
        cmd.err.print("[bold red]autodiag: interrupted[/] (the report covers what ran before)")
        return EXIT_INTERRUPTED
    if result.error is not None:
        return cmd.fail(result.error)
    return None


# --- the pipeline: a command declared once, run the same way ----------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """A command: its name, what it runs and its renderers.

    ``run(cmd, **own_options) -> Outcome`` (or an exit code when the run ended before there was
    anything to report) makes the target (``cmd.make_target()``), opens the output
    (``cmd.start()``), runs the target with its tracers (``cmd.run_target``) and analyses what
    they recorded; its docstring is the command's help, its keyword parameters (typer
    ``Annotated`` options) the command's own options. ``renderers``: format name -> renderer
    (``report/outcome.py``); the first is the default."""

    name: str
    run: Callable[..., Outcome | int]
    renderers: dict[str, Callable]
    format_help: str = "text or json."
    placed: dict = dataclasses.field(default_factory=dict)  # own option -> the shared option
    # it follows in --help (default: --quiet)


class lazy:  # noqa: N801 - used like a function: ``lazy("autodiag.report.graph", "text_report")``
    """A renderer named by its module and function, imported at its first call: building the
    CLI (``autodiag --help``) then imports no report or analysis module (issue 22, start-up)."""

    __slots__ = ("module", "name", "_fn")

    def __init__(self, module: str, name: str):
        self.module, self.name, self._fn = module, name, None

    def __call__(self, *args, **kwargs):
        fn = self._fn
        if fn is None:
            fn = self._fn = getattr(importlib.import_module(self.module), self.name)
        return fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<renderer {self.module}.{self.name}>"


def typer_command(spec: Spec):
    """The function typer makes ``spec``'s command of: the shared options and the command's
    own, which it hands to ``pipeline``."""
    formats = enum.Enum(f"{spec.name.title()}Format", [(f, f) for f in spec.renderers], type=str)
    fmt_opt = Annotated[formats, typer.Option("--format", "-f", help=spec.format_help)]
    shared = _shared(fmt_opt, next(iter(formats)))
    own = [p for p in inspect.signature(spec.run, eval_str=True).parameters.values()][1:]
    params = list(shared)
    for p in reversed(own):  # each after its anchor, in their own order
        anchor = spec.placed.get(p.name, "quiet")
        at = next(i for i, q in enumerate(params) if q.name == anchor) + 1
        params.insert(at, p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    def command(**options) -> None:
        opts = Shared(**{name: options.pop(name) for name in SHARED})
        opts.fmt = opts.fmt.value
        guarded(spec.name, opts, lambda cmd: pipeline(spec, cmd, options))

    command.__name__ = command.__qualname__ = spec.name
    command.__doc__ = spec.run.__doc__
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def pipeline(spec: Spec, cmd: Command, options: dict) -> int:
    """Run the command, render its outcome in the chosen format, then CI outputs and exit code."""
    outcome = spec.run(cmd, **options)
    if isinstance(outcome, int):  # it ended before there was a report
        return outcome
    outcome.command = spec.name
    note = spec.renderers[cmd.format](cmd.sink, outcome)
    if note:
        outcome.notes.insert(0, note)
    return finish(cmd, outcome)


def finish(cmd: Command, outcome: Outcome) -> int:
    """CI outputs, notes, and the exit code of an outcome: interrupted 130; findings that decide
    it 1 (with the target's failure shown if it is not a finding); a failed target 3; the
    command's own failure; else 0."""
    result = outcome.result
    if outcome.findings is not None:
        cmd.ci_outputs(
            outcome.findings, error=None if outcome.explained else result.error, cases=outcome.cases
        )
    for note in outcome.notes:
        cmd.err.print(note)
    if result.interrupted:
        return target_failure(cmd, result)
    if outcome.failing:
        if result.error is not None and outcome.show_error:
            cmd.fail(result.error)  # shown, but the findings decide the exit code
        return EXIT_FINDINGS
    failed = target_failure(cmd, result)
    if failed is not None:
        return failed
    if outcome.failure is not None:
        return cmd.fail(outcome.failure)
    return EXIT_OK
