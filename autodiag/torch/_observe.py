"""``autodiag.torch.observe``: the CLI's observers on a block of real PyTorch code
(``autodiag/torch/__init__.py`` says how to use it; ``_session.py`` runs the detectors).

The findings are the detectors' own (``analysis/``), computed as the commands compute them, and
the reports are the commands' renderers (``cli/<command>.COMMAND``), so the library prints what
``autodiag <command> --engine torch`` prints for the same code.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings

from autodiag.torch._session import DETECTORS, Session, claim, label_of, release

OBSERVERS = (*DETECTORS, "graph")
# The observers that are a command of their own; any other choice reports as ``check``.
_OWN_COMMAND = ("anomaly", "inplace", "leaks")


def observe(
    *,
    anomaly: bool | None = None,
    inplace: bool | None = None,
    leaks: bool | None = None,
    health: bool | None = None,
    graph: bool | None = None,
) -> Observation:
    """Observe the PyTorch code run inside the ``with`` block (in this thread) with autodiag's
    observers, as ``autodiag check --engine torch`` observes a script.

    ``anomaly``: where NaN/Inf first appear, forward and backward. ``inplace``: in-place writes
    to tensors a pending backward saved (and PyTorch's version check, kept). ``leaks``: graphs
    kept alive across steps, and who holds them. ``health``: parameters without a gradient (and
    why), forgotten ``zero_grad``, exploding/vanishing gradients, dead ReLUs. ``graph``: the
    graph of the block's last ``backward()``. With none given, every detector (not the graph);
    naming some ``=True`` runs only those; ``=False`` leaves one out of the default set.

    >>> import autodiag.torch, torch
    >>> with autodiag.torch.observe(anomaly=True) as seen:
    ...     torch.log(torch.zeros(1, requires_grad=True)).sum().backward()
    >>> [f.kind for f in seen.findings]
    ['inf_forward']
    """
    asked = {
        "anomaly": anomaly,
        "inplace": inplace,
        "leaks": leaks,
        "health": health,
        "graph": graph,
    }
    for name, value in asked.items():
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"observe({name}=...): expected True or False, got {value!r}")
    on = [n for n in OBSERVERS if asked[n]]
    if not on:
        on = [n for n in DETECTORS if asked[n] is None]
    if not on:
        raise ValueError(
            "observe(): every observer is turned off, so nothing would be observed; turn one "
            "on, e.g. observe(anomaly=True)"
        )
    return Observation(tuple(on))


class Observation:
    """One ``with autodiag.torch.observe(...)`` block: a context manager, then its results.

    After the block: ``findings`` (``analysis.findings.Finding``), ``status`` ("ok",
    "findings", "error" when the block raised or nothing was analysed, "interrupted"),
    ``ok``, ``ops``/``backward_calls``/``optimizer_steps`` (what ran), ``graphs`` (with
    ``graph=True``), ``report(format)``/``print()``/``to_json()`` (the CLI's report of
    ``command``). A block that ran no PyTorch op is never ``ok`` (nothing was analysed)."""

    def __init__(self, observers: tuple):
        self.observers = observers
        detectors = [n for n in observers if n != "graph"]
        if len(detectors) == 1 and detectors[0] in _OWN_COMMAND:
            self.command = detectors[0]
        else:
            self.command = "check" if detectors else "graph"
        self.label: str | None = None  # "file:line" of the ``with``
        self.findings: list = []
        self.ops = self.backward_calls = self.optimizer_steps = 0
        self.graphs: list = []  # analysis.graph.GraphSnapshot, named
        self.nothing_analysed = None  # the NothingAnalysed error, when nothing was
        self._state = "new"  # "running", then "done"
        self._session: Session | None = None
        self._run = None  # the analysed Run, holding no value of the block's
        self._outcomes: dict = {}  # command -> report.outcome.Outcome
        self._graph_calls = 0

    def __repr__(self) -> str:
        what = ", ".join(self.observers)
        if self._state != "done":
            return f"<autodiag.torch.observe({what}) {self._state}>"
        return f"<autodiag.torch.observe({what}) at {self.label}: {self.status}>"

    # --- the block ------------------------------------------------------------------------

    def __enter__(self) -> Observation:
        if self._state != "new":
            when = "is already running" if self._state == "running" else "has already run"
            raise RuntimeError(
                f"this autodiag.torch.observe() {when} (at {self.label}): it observes one "
                f"block; call autodiag.torch.observe() again for another"
            )
        frame = sys._getframe(1)
        label, caller = label_of(frame), frame.f_back
        stop_at = caller.f_code if caller is not None else None
        del frame, caller
        claim(label, "autodiag.torch.observe()")
        try:
            _require_torch()
            if threading.current_thread() is threading.main_thread():
                from autodiag.engines.torch.threads import grow_main_stack

                # NOTE [Deep graphs on PyTorch]: the observer touches every node, and a graph
                # of more than ~45k touched nodes overflows 8 MB when it is freed, which may be
                # after the block: the limit stays raised
                grow_main_stack()
            session = Session(
                "torch",
                [n for n in self.observers if n != "graph"],
                graph="graph" in self.observers,
                label=label,
                stop_at=stop_at,
            )
            session.start()
        except BaseException:
            release()
            raise
        self.label, self._session, self._state = label, session, "running"
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        frame = sys._getframe(1)
        scopes = [frame.f_globals]
        if frame.f_locals is not frame.f_globals:
            scopes.append(frame.f_locals)
        del frame
        session = self._session
        try:
            run = session.stop(exc, scopes)
            try:
                self._analyse(session, run)
            finally:
                # the report keeps no value of the block's: no scope, no exception
                run.namespace, run.frame_locals = {}, []
                if run.error is not None:
                    run.error.exception = None
                self._run = run
        except Exception as bug:  # noqa: BLE001 - autodiag's own failure
            if exc is None:
                raise
            # the block's own exception is what propagates; this one must not replace it
            warnings.warn(
                f"autodiag.torch.observe: the analysis failed ({type(bug).__name__}: {bug}); "
                f"this is a bug in autodiag, please report it",
                RuntimeWarning,
                stacklevel=2,
            )
        finally:
            self._session = None
            self._state = "done"
            release()
        return False

    def _analyse(self, session: Session, run) -> None:
        from autodiag.analysis import check as detectors
        from autodiag.report.outcome import Outcome

        found = session.findings(run)  # always: it also removes the hooks kept past the block
        self.ops, self.backward_calls = session.torch_ops, session.backward_calls
        self.optimizer_steps = session.optimizer_steps
        if not session.analysed and not run.interrupted:
            self.nothing_analysed = _nothing_analysed(session, run)
            return
        tracers = session.tracers
        if "graph" in tracers:
            self._capture_graphs(tracers["graph"], run)
        if self.command == "anomaly":
            f = tracers["anomaly"]
            self.findings = found["anomaly"]
            info = {
                "backward_calls": f.calls,
                "ops": run.ops,
                "written": dict(f.written),
                "masked": dict(f.masked),
                "stopped_at_call": f.stopped_at,
                "propagated": {
                    "forward": f.propagated_forward,
                    "backward": f.propagated_backward,
                },
            }
            self._outcomes["anomaly"] = Outcome(run, self.findings, info=info)
        elif self.command == "inplace":
            self.findings, consumed = found["inplace"]
            info = {"backward_calls": tracers["inplace"].calls, "ops": run.ops}
            if run.error is not None:
                info["error_is_finding"] = consumed
            self._outcomes["inplace"] = Outcome(
                run, self.findings, info=info, explained=consumed, show_error=not consumed
            )
        elif self.command == "leaks":
            f = tracers["leaks"]
            self.findings = found["leaks"]
            info = {"step_source": f.mode, "steps": f.census}
            self._outcomes["leaks"] = Outcome(
                run, self.findings, info=info, failing=bool(self.findings) and run.error is None
            )
        elif self.command == "check":
            every = []
            for name in session.names:
                every += found[name][0] if name == "inplace" else found[name]
            self.findings = detectors.ordered(every)
            self._outcomes["check"] = self._check_outcome(session, run)

    def _check_outcome(self, session: Session, run):
        from autodiag.analysis import check as detectors
        from autodiag.analysis.flow import grad_flow
        from autodiag.report.outcome import Outcome

        health = session.tracers.get("health")
        info = {
            "ops": run.ops,
            "backward_calls": health.backward_calls if health else run.backward_calls,
            "optimizer_steps": health.steps if health else session.optimizer_steps,
            "ignored": [],
            "warn_only": [],
            "grad_flow": grad_flow(health, self.findings, *run.scopes) if health else None,
        }
        unseen = [d.name for d in detectors.DETECTORS if d.name not in session.names]
        notes = []
        if unseen:
            info["not_checked"] = unseen
            off = [n for n in unseen if n in DETECTORS]
            todo = [n for n in unseen if n not in DETECTORS]
            why = []
            if off:
                why.append(f"{', '.join(off)} (not asked for)")
            if todo:
                why.append(f"{', '.join(todo)} (not available on PyTorch yet)")
            notes.append(f"note: these detectors did not run: {'; '.join(why)}")
        explained = any(f.severity == "error" for f in self.findings)
        return Outcome(
            run, self.findings, info=info, failing=explained, explained=explained, notes=notes
        )

    def _capture_graphs(self, cap, run) -> None:
        from autodiag.analysis.graph import module_names, names_by_id
        from autodiag.report import graph as render
        from autodiag.report.outcome import Outcome

        names, modules = names_by_id(*run.scopes), module_names(*run.scopes)
        for s in cap.snapshots:
            s.name_nodes(names, modules)
        self.graphs = list(cap.snapshots)
        self._graph_calls = cap.calls
        if self.graphs:
            view = render.View(max_nodes=None)
            self._outcomes["graph"] = Outcome(
                run, data=render.GraphReport(self.graphs, view, cap.calls, False)
            )

    # --- results --------------------------------------------------------------------------

    @property
    def status(self) -> str:
        """As the JSON envelope's: "ok", "findings", "error" or "interrupted"."""
        self._done()
        run = self._run
        if run.interrupted:
            return "interrupted"
        if self.nothing_analysed is not None:
            return "error"
        if self.findings:
            return "findings"
        return "error" if run.error is not None else "ok"

    @property
    def ok(self) -> bool:
        """Analysed, ran to its end, and no error-severity finding (warnings do not count,
        as for ``autodiag check``'s exit code)."""
        if self.status in ("ok",):
            return True
        return self.status == "findings" and not any(f.severity == "error" for f in self.findings)

    def report(self, format: str = "text", command: str | None = None) -> str:
        """The report ``autodiag <command> --engine torch --format <format>`` prints, as a
        string (text without colour). ``command``: the block's (``self.command``: ``check``
        for several detectors) or ``"graph"`` (with ``graph=True``: text, json, dot, mermaid).
        """
        sink = _string_sink()
        for note in self._render(sink, format, command):
            sink.write_text(note + "\n")
        return sink.getvalue()

    def print(self, format: str = "text", command: str | None = None, file=None) -> None:
        """Print ``report(format, command)``: to ``file`` (default stdout); in colour on a
        terminal, as the CLI."""
        out = sys.stdout if file is None else file
        if format == "text" and file is None and _colour(out):
            from autodiag.report.output import Sink

            for note in self._render(Sink(None, True), format, command):
                out.write(note + "\n")
            return
        out.write(self.report(format, command))

    def to_json(self, command: str | None = None) -> dict:
        """The JSON envelope of ``autodiag <command> --engine torch -f json`` (DESIGN §4)."""
        return json.loads(self.report("json", command))

    def _render(self, sink, format: str, command: str | None) -> list:
        """Render into ``sink``; the notes to print after the report (plain text)."""
        self._done()
        command = command or self.command
        if self.nothing_analysed is not None:
            return _render_failure(sink, format, command, self.label, self.nothing_analysed)
        if command == "graph" and "graph" not in self.observers:
            raise ValueError("report(command='graph') needs observe(graph=True)")
        if command == "graph" and "graph" not in self._outcomes:
            from autodiag.target.errors import NothingToShow

            error = NothingToShow(
                f"{self.label} made no backward() call: there is no graph to show",
                "Call backward() inside the block.",
            )
            return _render_failure(sink, format, command, self.label, error)
        if command != self.command and command != "graph":
            raise ValueError(
                f"report(command={command!r}): this block reports as {self.command!r}"
                + (" or 'graph'" if "graph" in self.observers else "")
            )
        outcome = self._outcomes[command]
        outcome.command = command
        renderers = _renderers(command)
        if format not in renderers:
            raise ValueError(
                f"report(format={format!r}): {command} reports in {', '.join(renderers)}"
            )
        note = renderers[format](sink, outcome)
        notes = [_plain(note)] if note else []
        if format == "text":
            notes += [_plain(n) for n in outcome.notes]
            if self._run.error is not None and outcome.show_error:
                notes.append(f"note: {self._run.error.message}")
        return notes

    def _done(self) -> None:
        if self._state != "done":
            raise RuntimeError(
                "the observation is not over yet: read its results after the `with` block"
            )


# --- helpers ----------------------------------------------------------------------------------


def _require_torch() -> None:
    """PyTorch must be installed, and ``import torch`` must give it (not autodiag's alias)."""
    from autodiag.engines import torch as engine

    if not engine.available():
        raise ModuleNotFoundError(
            f"autodiag.torch.observe() observes real PyTorch, which is not installed. "
            f"{engine.INSTALL_HINT}",
            name="torch",
        )
    mod = sys.modules.get("torch")
    if mod is not None and "_autodiag_target" in vars(mod):
        raise RuntimeError(
            "autodiag.torch.observe() observes real PyTorch, but `import torch` gives "
            "autodiag's engine here (an `autodiag` command on its default engine runs the "
            "script so). Run the program with plain python."
        )


def _renderers(command: str) -> dict:
    """The CLI command's renderers by format name (the one place that says how it reports)."""
    import importlib

    return importlib.import_module(f"autodiag.cli.{command}").COMMAND.renderers


def _nothing_analysed(session: Session, run):
    from autodiag.target.errors import NothingAnalysed

    if session.wrong_engine:
        return NothingAnalysed(
            f"{session.label} computed with autodiag's engine (autodiag tensors), but "
            f"autodiag.torch.observe() observes real PyTorch: nothing it did was checked",
            "Observe PyTorch code (`import torch`), or run autodiag's engine under its own "
            "commands (`autodiag check script.py`).",
        )
    return NothingAnalysed(
        f"{session.label} ran no PyTorch op in this thread: nothing was checked",
        "Put the PyTorch code (forward, backward, optimizer step) inside the `with` block; "
        "ops of other threads are not observed.",
    )


def _render_failure(sink, format: str, command: str, label: str, error) -> list:
    """A block with nothing to report: its JSON envelope, or the CLI's one-paragraph error."""
    if format == "json":
        from autodiag.report.output import envelope

        sink.write_json(envelope(command, label, [], status="error", error=error))
        return []
    return [f"autodiag: {error.title}: {error.message}", f"  {error.hint}"]


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


def _colour(stream) -> bool:
    from autodiag.report import no_color  # the CLI's rule: an empty NO_COLOR is ignored

    return stream.isatty() and not no_color.forbidden()


def _string_sink():
    """A report sink (``report/output.Sink``) that keeps the report as a string."""
    from autodiag.report.output import Sink

    class StringSink(Sink):
        def __init__(self):
            super().__init__("<report>", False)  # an output name: the report is buffered

        def stream(self):
            return self._buffer  # large reports too: never a file

        def close(self) -> None:
            pass

        def getvalue(self) -> str:
            return self._buffer.getvalue()

    return StringSink()
