"""A block of code run under autodiag's detectors: the one place that installs them around code
that is not a script, and takes them all down again. ``autodiag.torch.observe`` and the pytest
plugin (``pytest --autodiag``, on either engine) are built on it.

On ``engine="torch"`` the detectors are ``check --engine torch``'s (``analysis.check.on_torch``:
the same tracers, fed by the PyTorch observer of ``engines/torch/observe.py``); on
``engine="autodiag"`` they are autodiag's own. Either way the findings are the CLI's (the
detectors' ``findings``), and the counts say whether the chosen engine recorded anything: a
block that ran no op of it is never a pass (DESIGN §4, "nothing analysed").

Importing this module imports neither torch nor the analyses: ``start()`` does, for its engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import traceback

from autodiag.target import Run, Target
from autodiag.target.errors import TargetFailed
from autodiag.trace import events, sites
from autodiag.trace.sites import short_path

# The detectors a session can run, by the names of ``analysis.check.DETECTORS`` (``freed`` is
# not among them: it does not run on PyTorch yet, engines/torch CHECK_DETECTORS).
DETECTORS = ("health", "inplace", "leaks", "anomaly")

# NOTE [One session at a time]: tracers are installed process-wide (``events.TRACERS``) and the
# PyTorch observer reads them when it starts, so two sessions at once (nested, or in two
# threads), or a session inside an autodiag command or ``pytest --autodiag``, would feed each
# other's events to the wrong detectors. ``claim`` refuses that with a message saying what is
# already running; a session's end releases its claim whatever happened.
_LOCK = threading.Lock()
_ACTIVE: list = [None]  # the label of the running session, or None


def claim(label: str, who: str) -> None:
    """Take the one session slot for ``label`` (``who``: what asks, for the message)."""
    with _LOCK:
        running = _ACTIVE[0]
        if running is not None:
            raise RuntimeError(
                f"{who} cannot start: autodiag is already observing the code of {running}. "
                f"Observers cannot be nested or run in two threads at once: end that block first."
            )
        if events.TRACERS:
            raise RuntimeError(
                f"{who} cannot start: another autodiag analysis is running in this process (an "
                f"`autodiag` command, `pytest --autodiag`, or autodiag.trace.tracing), and its "
                f"observers would see this block's events. Run the code without it."
            )
        _ACTIVE[0] = label


def release() -> None:
    with _LOCK:
        _ACTIVE[0] = None


class Session:
    """The detectors named in ``detectors`` (and a graph capture with ``graph``) around a block
    of code on ``engine``: ``start()`` before it, ``stop(error, scopes)`` after it (always: it
    removes every mode and hook ``start`` installed, then analyses). The caller holds the claim
    (``claim``)."""

    def __init__(
        self,
        engine: str,
        detectors,
        graph: bool = False,
        label: str = "the block",
        stop_at=None,
    ):
        self.engine = engine
        # stacks end at the block's frame: its callers are the caller's business (a test
        # runner, a notebook kernel), as the CLI's stacks end at the script's top level
        self.stop_at = stop_at if stop_at not in sites.STOP_CODES else None
        self.names = tuple(d for d in DETECTORS if d in detectors)  # in check's order
        self.graph = graph
        self.label = label
        self.detectors: dict = {}  # name -> analysis.check.Detector
        self.tracers: dict = {}  # name -> its tracer; "graph" -> the GraphCapture
        self.observer = None  # the PyTorch observer (engine "torch")
        self._stack: contextlib.ExitStack | None = None
        self._before = (0, 0, 0, 0)
        self.ops = self.torch_ops = self.backward_calls = self.optimizer_steps = 0

    # --- around the block -----------------------------------------------------------------

    def start(self) -> None:
        from autodiag.analysis import check
        from autodiag.trace import tracing

        chosen = check.on_torch() if self.engine == "torch" else check.DETECTORS
        self.detectors = {d.name: d for d in chosen if d.name in self.names}
        if "health" in self.detectors:
            self.detectors["health"] = dataclasses.replace(
                self.detectors["health"], make=block_health()
            )
        tracers = []
        if self.graph:
            from autodiag.analysis.graph import GraphCapture

            self.tracers["graph"] = GraphCapture()
            tracers.append(self.tracers["graph"])
        for name in self.names:
            t = self.tracers[name] = self.detectors[name].make()
            if name == "anomaly":
                t.keep_going = True  # a finding never stops the caller's code
                if self.engine == "torch":
                    t.handles = []  # its node hooks, removed at stop()
            tracers.append(t)
        for t in tracers:
            t.internal = True  # code under observation asking autodiag.trace.active() sees none
        self._before = tuple(events.REPORTED[:4])
        stack = contextlib.ExitStack()
        try:
            if self.stop_at is not None:
                sites.STOP_CODES.add(self.stop_at)
                stack.callback(sites.STOP_CODES.discard, self.stop_at)
            stack.enter_context(tracing(*tracers))
            if self.engine == "torch":
                from autodiag.engines.torch import observe

                observe.register()
                # the call sites hold the block's modules' globals: dropped at stop(), as
                # observing() drops the CLI run's
                stack.callback(observe.forget_call_sites)
                self.observer = observe.Observer()
                stack.enter_context(self.observer.installed())
                from autodiag.engines.torch.workers import observing_threads

                stack.enter_context(observing_threads(self.observer))  # threads the block starts
        except BaseException:
            stack.close()
            self._finish()
            raise
        self._stack = stack

    def stop(self, error: BaseException | None, scopes: list) -> Run:
        """Take down everything ``start`` installed, then analyse: the ``Run`` the detectors'
        ``findings`` read (``error``: what the block raised; ``scopes``: the dicts whose names
        name the block's values, globals first)."""
        try:
            if self._stack is not None:
                self._stack.close()
        finally:
            self._stack = None
            ops, calls, steps, torch_ops = (events.REPORTED[i] - self._before[i] for i in range(4))
            self.ops, self.backward_calls = ops, calls
            self.optimizer_steps, self.torch_ops = steps, torch_ops
        run = Run(Target(path=self.label, engine=self.engine), scopes[0] if scopes else {})
        run.frame_locals = list(scopes[1:])
        run.ops, run.torch_ops, run.backward_calls = self.ops, self.torch_ops, self.backward_calls
        if isinstance(error, KeyboardInterrupt):
            run.interrupted = True
        elif error is not None:
            run.error = failure(self.label, error)
        return run

    def findings(self, run: Run) -> dict:
        """Each detector's findings, by name (the CLI's, from the same ``findings``); then every
        hook a detector keeps past the block is removed (``_finish``)."""
        try:
            out = {}
            for name, d in self.detectors.items():
                if name == "inplace":  # (findings, the block's error is one of them)
                    out[name] = self.tracers[name].findings(run.error)
                else:
                    out[name] = d.findings(self.tracers[name], run)
            return out
        finally:
            self._finish()

    def _finish(self) -> None:
        """Remove what detectors keep installed past the block: the leak finder's optimizer
        hooks (its ``finish``), the anomaly finder's node hooks on graphs that outlive it."""
        leaks = self.tracers.get("leaks")
        if leaks is not None and hasattr(leaks, "_hook"):
            type(leaks).finish(leaks)
        anomaly = self.tracers.get("anomaly")
        handles = getattr(anomaly, "handles", None)
        if handles:
            for h in handles:
                h.remove()
            handles.clear()
        if self.observer is not None:
            self.observer.saves.clear()
            del self.observer.pending[:]

    # --- what the engine recorded -----------------------------------------------------------

    @property
    def wrong_engine(self) -> bool:
        """On PyTorch, the block computed with autodiag's engine: PyTorch's observers did not
        see what it did."""
        return self.engine == "torch" and self.ops > self.torch_ops

    @property
    def analysed(self) -> bool:
        """The chosen engine recorded at least one op of the block, and only its ops."""
        if self.engine == "torch":
            return self.torch_ops > 0 and not self.wrong_engine
        return self.ops > 0


def block_health():
    """``GradHealth`` for a block of a larger program (NOTE [A block's parameters])."""
    from autodiag.analysis.health import GradHealth, _has_method, _is_optimizer
    from autodiag.inspect import is_tensor

    # NOTE [A block's parameters]: ``check`` judges every parameter a script holds (a model it
    # never trained is a finding). A block is part of a program whose other models are none of
    # its business (the one trained before it, a teacher used elsewhere): a model, optimizer
    # or tensor in scope is judged only if the block touched it (an op used one of its
    # parameters, or the optimizer stepped). A touched model's parameters are all judged,
    # so its layer left out of forward is found as ``check`` finds it.
    class BlockHealth(GradHealth):
        def _adopt_value(self, k: str, v) -> None:
            if self._touched(v):
                super()._adopt_value(k, v)

        def _touched(self, v) -> bool:
            known = self._leaves
            if _is_optimizer(v):
                return id(v) in self._optimizers
            if is_tensor(v):
                return id(v) in known
            if _has_method(v, "named_parameters"):
                return any(id(p) in known for _, p in v.named_parameters())
            return False

    return BlockHealth


def failure(label: str, e: BaseException) -> TargetFailed:
    """What the block raised, as a failed run reports it (the innermost user frame: where)."""
    from autodiag.target.script import frame_location, user_frames

    exc = "".join(traceback.format_exception_only(type(e), e)).strip()
    frames = user_frames(e.__traceback__)
    return TargetFailed(
        f"{label} raised {exc}",
        "The exception propagated out of the block; the report covers what ran before it.",
        "".join(traceback.format_list(frames)),
        exception=e,
        location=frame_location(frames[-1]) if frames else None,
    )


def label_of(frame) -> str:
    """``file:line`` of the statement a frame is at (the ``with`` that starts a session)."""
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"
