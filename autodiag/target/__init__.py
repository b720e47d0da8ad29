"""Loading and running what a command inspects: a script or an expression (one place for all
commands). The runner installs the command's tracers around the run and hands back what the
analyses need to name things (the script's globals or the expression's variables)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc

from autodiag.target.errors import (
    AutodiagError,
    BadExpression,
    BadInvocation,
    BadTarget,
    TargetFailed,
)

__all__ = [
    "Target",
    "Run",
    "run",
    "AutodiagError",
    "BadExpression",
    "BadInvocation",
    "BadTarget",
    "TargetFailed",
]


@dataclasses.dataclass
class Target:
    """A script path with its arguments, or an expression with its variables."""

    path: str | None = None
    args: list = dataclasses.field(default_factory=list)
    expr: str | None = None
    vars: list = dataclasses.field(default_factory=list)  # ["x=1", ...]
    dtype: str = "float64"
    timeout: float | None = None
    engine: str = "autodiag"  # or "torch": real PyTorch, observed (autodiag/engines/torch)

    @property
    def label(self) -> str:
        return self.path if self.expr is None else f"-e {self.expr}"


@dataclasses.dataclass
class Run:
    """The outcome of running a target."""

    target: Target
    namespace: dict  # the script's globals (also when it failed), or the expression's
    # variables and ``result``
    error: TargetFailed | None = None  # the target failed (the report covers what ran before)
    interrupted: bool = False
    stopped: bool = False  # a tracer ended the run early (trace.StopRun): not a failure
    ops: int = 0  # outermost ops the engine reported while it ran (tracers installed)
    torch_ops: int = 0  # of those, the ones PyTorch's observer reported (--engine torch)
    backward_calls: int = 0  # backward()/autograd.grad() calls it reported
    libraries: dict = dataclasses.field(default_factory=dict)  # array libraries it ran with
    imported: list = dataclasses.field(default_factory=list)  # files of the modules it imported
    # the locals of the script's function frames that were live when it stopped (it failed,
    # exited or was interrupted inside a function), innermost first
    frame_locals: list = dataclasses.field(default_factory=list)
    hard_exit: int | None = None  # the status of an os._exit that ended the script
    hard_exit_site: str | None = None  # "file:line" of that os._exit call
    # the threads the script started that were still running when it ended
    running: list = dataclasses.field(default_factory=list)
    forks: int = 0  # processes it forked (their ops are not observed)

    @property
    def scopes(self) -> list[dict]:
        """Where the user's names for the run's values are: the globals, then the locals of the
        frames that were live when the script stopped (``names_by_id(*run.scopes)``)."""
        return [self.namespace, *self.frame_locals]

    @property
    def wrong_engine(self) -> bool:
        """Run with --engine torch, it computed with autodiag's engine (``import autodiag``):
        what PyTorch's observers saw is not what it did, so no verdict can be about it."""
        return self.target.engine == "torch" and self.ops > self.torch_ops

    @property
    def analysed_nothing(self) -> bool:
        """It ran to its end and the engine recorded no op: no verdict can be about it."""
        return self.ops == 0 and self.error is None and not self.interrupted and not self.stopped


def prepare(target: Target):
    """Check everything that can be checked before running (file, syntax, expression)."""
    if (target.path is None) == (target.expr is None):
        raise BadInvocation(
            "give either a script path or -e EXPR, not both or neither",
            "For example: autodiag graph model.py, or autodiag graph -e 'x**2' --var x=3.",
        )
    if target.expr is None:
        if target.vars:
            raise BadInvocation(
                "--var only applies to -e EXPR", "Scripts take their arguments after --."
            )
        from autodiag.target.script import load

        return load(target.path)
    from autodiag.target import expression

    if target.dtype not in ("float32", "float64"):
        raise BadInvocation(f"--dtype {target.dtype}: expected float32 or float64", "")
    variables: dict = {}
    specs: dict = {}
    for spec in target.vars:
        name, value = expression.parse_var(spec)
        if name in variables:
            raise BadInvocation(
                f"--var {name} is given twice: --var {specs[name]} and --var {spec}",
                "Give each variable once.",
            )
        variables[name], specs[name] = value, spec
    return expression.check(target.expr, variables), variables


def run(target: Target, tracers=()) -> Run:
    """Run ``target`` with ``tracers`` installed. Load errors raise (nothing runs); a failing
    run is returned with ``error`` set so that commands can report what happened before."""
    from autodiag.trace import StopRun, events, sites, tracing

    if run.__code__ not in sites.STOP_CODES:
        # Stacks captured during a run end here: the CLI's own frames are not the user's.
        # (Registered on the first run, not on import: trace/ loads the engine's graph, which
        # ``autodiag --help`` does without.)
        sites.STOP_CODES.add(run.__code__)
    prepared = prepare(target)
    namespace: dict = {}
    result = Run(target, namespace)
    ops, calls, _, torch_ops = events.REPORTED
    try:
        with frozen_heap(), tracing(*tracers):
            if target.expr is None:
                from autodiag.target.script import run_script

                result.namespace = run_script(
                    target.path, target.args, target.timeout, run=result, on=target.engine
                )
            else:
                result.namespace = _run_expression(target, *prepared, result)
    except TargetFailed as e:
        result.error = e
    except StopRun:
        result.stopped = True
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        result.ops = events.REPORTED[0] - ops
        result.torch_ops = events.REPORTED[3] - torch_ops
        result.backward_calls = events.REPORTED[1] - calls
    return result


@contextlib.contextmanager
def frozen_heap():
    """NOTE [Frozen heap]: the objects that exist before the target runs (the interpreter's,
    numpy's, the CLI's: typer, rich, the analyses) are moved to the cyclic GC's permanent
    generation for the run, and moved back after it. A graph leaves a few GC-tracked objects
    per op, and every full collection the run triggers would otherwise rescan that whole
    unchanging heap as well: on a 10k-op chain, GC time went from ~50% of the forward pass to
    ~20% (tests/perf/bench_engine.py). The target still sees its own garbage collected, and
    ``gc.get_referrers`` (the leak detector's holder search) still sees frozen objects. A
    product choice of the CLI's run only: ``import autodiag`` never does this. Left alone
    when something has frozen objects already (it owns them)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _run_expression(target: Target, tree, variables: dict, result: Run) -> dict:
    import autodiag as ad
    from autodiag.target import expression

    dt = ad.float32 if target.dtype == "float32" else ad.float64
    env = {
        name: ad.tensor(value, dtype=dt, requires_grad=True) for name, value in variables.items()
    }
    try:
        out = expression.evaluate(tree, env)
    except Exception as e:  # noqa: BLE001 - e.g. a shape mismatch between variables
        raise TargetFailed(
            f"evaluating the expression failed: {type(e).__name__}: {e}",
            "Check the shapes and values given with --var.",
        ) from None
    namespace = dict(env)
    namespace["result"] = out
    result.namespace = namespace  # kept when a tracer stops the run during backward
    if isinstance(out, ad.Tensor) and out.requires_grad:
        # The expression's gradient: d(result)/d(var), summed over elements for a non-scalar
        # result (as result.sum().backward() would).
        try:
            out.backward(ad.ones_like(out) if out.dim() else None)
        except Exception as e:  # noqa: BLE001
            raise TargetFailed(
                f"backward of the expression failed: {type(e).__name__}: {e}", ""
            ) from None
    return namespace
