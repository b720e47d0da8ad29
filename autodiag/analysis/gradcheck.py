"""What ``autodiag gradcheck`` checks, as plain data: one ``Case`` per check, Findings for
the failures (no printing; report/ renders).

Checks come from three places:

* **calls** — every ``gradcheck``/``gradgradcheck`` call a script makes. ``CallRecorder``
  replaces the library functions while the script runs: each call is checked, recorded with
  its call site, and returns False instead of raising, so the script goes on;
* **functions** — every ``autograd.Function`` subclass the script defines (``__module__`` is
  ``__main__``), on the input tuples of its ``sample_inputs()`` or, without one, on generated
  float64 inputs (``plan_functions`` / ``run_checks``);
* **the expression** of ``-e EXPR``, with respect to its ``--var`` leaves (``expression_case``).

Failures carry the library's diagnoses (``autodiag.autograd.gradcheck.Diagnosis``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import linecache
import re
import sys
import time
import warnings

import numpy as np

from autodiag._look import is_a, look, variables
from autodiag.analysis.findings import Finding
from autodiag.autograd.function import Function, _has_setup_context
from autodiag.autograd.gradcheck import (
    GradcheckError,
    GradcheckRun,
    analytical_jacobian,
    as_tuple,
    differentiable_outputs,
    numerical_jacobian,
)
from autodiag.inspect import array
from autodiag.tensor import Tensor
from autodiag.trace.sites import capture_stack, short_path

# the module (the attribute ``autodiag.autograd.gradcheck`` is the function, as in PyTorch)
_gc = importlib.import_module("autodiag.autograd.gradcheck")

# The library's functions, captured at import: CallRecorder replaces the public names while a
# script runs, and the checks here always call the real ones.
GRADCHECK = _gc.gradcheck
GRADGRADCHECK = _gc.gradgradcheck
_APIS = {"gradcheck": GRADCHECK, "gradgradcheck": GRADGRADCHECK}

# Shapes tried, in order, for each tensor argument of a Function without sample_inputs(): the
# first that fits is used (a 2-d input catches reductions and transposes that () would miss).
GENERATED_SHAPES = ((2, 3), (3,), ())
# A passing check reports its largest |analytical - numerical| only when recomputing both
# Jacobians is cheap: at most this many input elements (2 calls of the function each).
MAX_ERROR_NUMEL = 512
# gradcheck's warning per lower-precision input, folded into one note
_PRECISION_WARNING = re.compile(r"Input #(\d+) requires gradient and is not a double precision")


@dataclasses.dataclass
class Settings:
    """The command's options for the checks it runs itself (functions and expressions);
    recorded calls keep the script's own arguments."""

    eps: float = 1e-6
    atol: float = 1e-5
    rtol: float = 1e-3
    fast_mode: bool = False
    order: int = 1
    seed: int = 0

    def kwargs(self) -> dict:
        return {"eps": self.eps, "atol": self.atol, "rtol": self.rtol, "fast_mode": self.fast_mode}


@dataclasses.dataclass
class Case:
    """One check: what was checked (``name``, ``inputs``, ``order``), where it comes from
    (``source`` "call", "function" or "expression"; ``location``) and how it went
    (``verdict`` "pass", "fail", "error" or "skip")."""

    name: str
    source: str
    api: str = "gradcheck"  # or "gradgradcheck"
    order: int = 1
    inputs: list = dataclasses.field(default_factory=list)  # one description per argument
    generated: bool = False
    function: str | None = None  # the Function class, for source "function"
    sample: int | None = None  # index in sample_inputs()
    recorded: dict | None = None  # the script's call whose inputs are checked
    verdict: str = "pass"
    max_error: float | None = None
    message: str = ""  # what failed, in one paragraph (or why the case was skipped)
    error: str = ""  # the full exception text
    exception: str = ""  # its type name
    diagnoses: list = dataclasses.field(default_factory=list)  # Diagnosis
    # a Jacobian mismatch: per differentiable input, entries compared and wrong
    comparison: list = dataclasses.field(default_factory=list)
    arg_names: list = dataclasses.field(default_factory=list)  # forward's argument names
    worst: dict | None = None
    location: dict | None = None
    stack: list = dataclasses.field(default_factory=list)
    settings: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)  # warnings, adjustments made
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.verdict in ("fail", "error")

    def arg_name(self, position: int) -> str | None:
        """forward's name for the argument at ``position`` (None when unknown)."""
        return self.arg_names[position] if position < len(self.arg_names) else None

    @property
    def where(self) -> str:
        loc = self.location
        return f"{short_path(loc['file'])}:{loc['line']}" if loc else ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "api": self.api,
            "order": self.order,
            "function": self.function,
            "sample": self.sample,
            "inputs": self.inputs,
            "generated": self.generated,
            "recorded": self.recorded,
            "verdict": self.verdict,
            "max_error": self.max_error,
            "message": self.message,
            "error": self.error,
            "exception": self.exception or None,
            "diagnoses": [diagnosis_json(d) for d in self.diagnoses],
            "comparison": self.comparison,
            "worst": self.worst,
            "location": self.location,
            "settings": self.settings,
            "notes": self.notes,
            "seconds": round(self.seconds, 6),
        }


def diagnosis_json(d) -> dict:
    return {"kind": d.kind, "hint": d.hint, "details": _plain(d.details)}


def _plain(v):
    """JSON-ready copy: tuples to lists, numpy scalars and arrays to Python values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


# ---------------------------------------------------------------------------------------------
# Running one check
# ---------------------------------------------------------------------------------------------


def run_check(case: Case, func, inputs: tuple, kwargs: dict, grad_outputs=None) -> Case:
    """Run ``case.api`` on ``func`` at ``inputs`` and fill in the verdict, the failure and the
    diagnoses. Never raises for a failing check (KeyboardInterrupt passes through)."""
    inner: list = []  # (func, inputs, eps) of the gradcheck that compares Jacobians

    def capture(f, ins, **kw):  # gradgradcheck's own gradcheck call
        inner.append((f, as_tuple(ins), kw.get("eps", 1e-6)))
        return GRADCHECK(f, ins, **kw)

    kwargs = {k: v for k, v in kwargs.items() if k != "raise_exception"}
    saved = _gc.gradcheck
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if case.api == "gradgradcheck":
                _gc.gradcheck = capture  # the name gradgradcheck calls
                GRADGRADCHECK(func, inputs, grad_outputs, raise_exception=True, **kwargs)
            else:
                inner.append((func, as_tuple(inputs), kwargs.get("eps", 1e-6)))
                GRADCHECK(func, inputs, raise_exception=True, **kwargs)
        except Exception as e:  # noqa: BLE001 - every failure of the user's code is a result
            _record_failure(case, e)
        finally:
            _gc.gradcheck = saved
    case.seconds = time.perf_counter() - start
    low = []
    for w in caught:
        m = _PRECISION_WARNING.search(str(w.message))
        if m:
            low.append(m.group(1))
            continue
        note = f"{w.category.__name__}: {w.message}"
        if note not in case.notes:
            case.notes.append(note)
    if low and not any(d.kind == "low_precision" for d in case.diagnoses):
        case.notes.append(
            f"input {', '.join(dict.fromkeys(low))} not float64: gradcheck's "
            f"tolerances assume double precision"
        )
    if case.verdict == "pass" and inner:
        case.max_error = max_error(*inner[-1])
    return case


def _record_failure(case: Case, e: Exception) -> None:
    diagnoses = list(getattr(e, "diagnoses", None) or [])
    # GradcheckError and the engine's errors about returned gradients (which gradcheck
    # diagnoses) are wrong gradients; anything else means the check could not run
    bad_gradient = isinstance(e, (GradcheckError, AssertionError)) or bool(diagnoses)
    case.verdict = "fail" if bad_gradient else "error"
    case.exception = type(e).__name__
    text = str(e)
    case.error = text
    case.diagnoses = diagnoses
    case.comparison = [
        dict(c, name=case.arg_name(c["position"])) for c in getattr(e, "comparison", None) or []
    ]
    failure = getattr(e, "failure", None) or {}
    worst = failure.get("worst")
    if worst is not None:
        case.worst = _plain(worst)
        case.max_error = float(worst["difference"])
    case.message = summary_message(e, worst)


def summary_message(e: Exception, worst: dict | None) -> str:
    """The failure in one paragraph: PyTorch's first line, then the worst element."""
    text = str(e).strip()
    head = text.splitlines()[0].rstrip(",") if text else ""
    if not isinstance(e, GradcheckError):
        head = f"{type(e).__name__}: {head}"
    return with_worst(head, worst)


def with_worst(head: str, worst: dict | None) -> str:
    """``head``, then the worst Jacobian element (when there is one)."""
    if worst is None:
        return head
    return (
        f"{head}: worst element d output {worst['output']}{list(worst['output_index'])} / "
        f"d input {worst['input']}{list(worst['input_index'])}: numerical "
        f"{worst['numerical']:.6g}, analytical {worst['analytical']:.6g} (difference "
        f"{worst['difference']:.3g}, tolerance {worst['tolerance']:.3g})"
    )


def max_error(func, inputs: tuple, eps: float) -> float | None:
    """max |analytical - numerical| over every Jacobian element (slow-mode Jacobians), or None
    when that is costly or cannot be computed.

    NOTE: reuses the library's Jacobian helpers on a hand-filled run, the same fields
    ``autograd.gradcheck.run_checks`` fills before comparing."""
    try:
        run = GradcheckRun(func, inputs, eps, 0.0, 0.0, 0.0, False, False)
        if sum(array(run.inputs[p]).size for p in run.diff_pos) > MAX_ERROR_NUMEL:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = func(*run.inputs)
            run.all_out = as_tuple(out)
            run.float_out = [k for k, o in enumerate(run.all_out) if array(o).dtype.kind == "f"]
            run.keep = [n for n, k in enumerate(run.float_out) if run.all_out[k].requires_grad]
            outputs = differentiable_outputs(out)
            numerical = [numerical_jacobian(run, j) for j in range(len(run.diff_pos))]
            worst = 0.0
            for i, o in enumerate(outputs):
                for j, a in enumerate(analytical_jacobian(run, o, check=False)):
                    n = numerical[j][run.keep[i]]
                    if a.size:
                        d = np.abs(a.astype(np.float64) - n.astype(np.float64))
                        worst = max(worst, float(np.max(d)))
        return worst
    except Exception:  # noqa: BLE001 - the number is a courtesy; the verdict stands without it
        return None


def describe(value) -> str:
    """An input in a few characters: ``(2, 3) float64`` for a tensor, repr otherwise."""
    if isinstance(value, Tensor):
        shape = tuple(value.shape)
        dims = "()" if not shape else f"({shape[0]},)" if len(shape) == 1 else str(shape)
        grad = "" if value.requires_grad else ", no grad"
        return f"{dims} {value.dtype.name if hasattr(value.dtype, 'name') else value.dtype}{grad}"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


# ---------------------------------------------------------------------------------------------
# (a) The script's own gradcheck calls
# ---------------------------------------------------------------------------------------------


class CallRecorder:
    """``with CallRecorder() as rec:`` — every ``gradcheck``/``gradgradcheck`` call made
    meanwhile (through ``autodiag.autograd``, ``autodiag.autograd.gradcheck`` or a name
    imported from them) is checked, recorded in ``rec.cases`` with its call site, and returns
    True or False instead of raising. The library functions are put back on exit."""

    def __init__(self):
        self.cases: list[Case] = []
        self.script_globals: dict | None = None  # __main__'s globals, seen at a call
        # the first call of each Function the script defines, and how many calls it made
        self.function_calls: dict[type, RecordedCall] = {}
        self._saved: list = []
        self._busy = False

    def __enter__(self) -> CallRecorder:
        import autodiag
        import autodiag.autograd as autograd

        wrappers = {name: self._wrap(name, fn) for name, fn in _APIS.items()}
        for module in (autodiag, autograd, _gc):
            for name, fn in _APIS.items():
                if getattr(module, name, None) is fn:
                    self._saved.append((module, name, fn))
                    setattr(module, name, wrappers[name])
        apply = Function.__dict__["apply"]
        self._saved.append((Function, "apply", apply))
        Function.apply = classmethod(self._record_apply(apply.__func__))
        return self

    def __exit__(self, *exc) -> bool:
        for module, name, fn in self._saved:
            setattr(module, name, fn)
        self._saved = []
        return False

    def _record_apply(self, apply):
        """Function.apply, keeping a copy of the inputs of the first call of each Function
        the script defines (not the calls a recorded gradcheck makes)."""

        @functools.wraps(apply)  # callable_name() still says Cubic.apply
        def recording_apply(cls, *args, **kwargs):
            if not self._busy and cls.__module__ == "__main__":
                rec = self.function_calls.get(cls)
                if rec is None:
                    self.function_calls[cls] = RecordedCall.of(args, kwargs, capture_stack(1))
                else:
                    rec.calls += 1
            return apply(cls, *args, **kwargs)

        return recording_apply

    def _wrap(self, api: str, fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if self._busy:  # a gradcheck inside a checked function: not the script's call
                return fn(*args, **kwargs)
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # the library's own error for a wrong call
            caller = sys._getframe(1)
            if caller.f_globals.get("__name__") == "__main__":
                self.script_globals = caller.f_globals
            self._busy = True
            try:
                case = self._check(api, bound.arguments, capture_stack(2))
            finally:
                self._busy = False
            self.cases.append(case)
            return case.verdict == "pass"

        recorded.__autodiag_recorder__ = True
        return recorded

    def _check(self, api: str, arguments: dict, stack) -> Case:
        arguments = dict(arguments)
        func, inputs = arguments.pop("func"), arguments.pop("inputs")
        grad_outputs = arguments.pop("grad_outputs", None)
        arguments.pop("raise_exception", None)
        location = stack.location()
        where = f"{short_path(location['file'])}:{location['line']}" if location else "?"
        case = Case(
            name=f"{api}({callable_name(func)}) at {where}",
            source="call",
            api=api,
            order=2 if api == "gradgradcheck" else 1,
            inputs=[describe(x) for x in as_tuple(inputs)],
            location=location,
            stack=stack.frames(),
            settings=_settings_of(api, arguments),
        )
        return run_check(case, func, inputs, arguments, grad_outputs)


@dataclasses.dataclass
class RecordedCall:
    """The inputs a script passed to a Function, copied when it called ``apply`` (before
    forward could modify them in place): tensors as detached copies of their values, with
    whether each required grad; other arguments as they were."""

    args: tuple
    kwargs: dict
    requires_grad: tuple
    location: dict | None
    calls: int = 1

    @classmethod
    def of(cls, args: tuple, kwargs: dict, stack) -> RecordedCall:
        copied = tuple(
            Tensor._make(np.array(array(a))) if isinstance(a, Tensor) else a for a in args
        )
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        return cls(copied, dict(kwargs), needs, stack.location())


def callable_name(func) -> str:
    """``Cubic.apply`` for a Function's apply (whose own qualname is ``Function.apply``)."""
    owner = getattr(func, "__self__", None)
    if isinstance(owner, type):
        return f"{owner.__name__}.{func.__name__}"
    return getattr(func, "__qualname__", None) or type(func).__name__


def _settings_of(api: str, arguments: dict) -> dict:
    params = inspect.signature(_APIS[api]).parameters
    out = {}
    for k in ("eps", "atol", "rtol", "fast_mode"):
        out[k] = arguments.get(k, params[k].default)
    return out


def failed_call_site(cases: list[Case], exc: BaseException | None) -> Case | None:
    """The failed recorded call at the line where the script's exception was raised (as in
    ``assert gradcheck(...)``, which fails once gradcheck returns False), or None."""
    if exc is None:
        return None
    sites = {
        (c.location["file"], c.location["line"]): c
        for c in cases
        if c.source == "call" and c.failed and c.location
    }
    tb, last = exc.__traceback__, None
    while tb is not None:
        key = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        if key in sites:
            last = sites[key]
        tb = tb.tb_next
    return last


def globals_of_failure(exc: BaseException | None, path: str | None) -> dict | None:
    """The script's globals, from the traceback of the exception it died of."""
    if exc is None or path is None:
        return None
    import os

    target = os.path.abspath(path)
    tb = exc.__traceback__
    while tb is not None:
        g = tb.tb_frame.f_globals
        if g.get("__name__") == "__main__" and g.get("__file__") == target:
            return g
        tb = tb.tb_next
    return None


# ---------------------------------------------------------------------------------------------
# (b) The Functions a script defines
# ---------------------------------------------------------------------------------------------


def find_functions(namespace: dict, is_function=None) -> list[type]:
    """autograd.Function subclasses defined by the script itself, in definition order
    (``is_function(cls)`` says which classes are: autodiag's Functions by default)."""
    is_function = is_function or _script_function
    found: dict = {}  # id -> class: by identity (a user metaclass's __eq__ may raise)
    for _, value in variables(namespace):
        if is_a(value, type) and id(value) not in found and look(is_function, value):
            found[id(value)] = value
    return list(found.values())


def _script_function(cls: type) -> bool:
    return issubclass(cls, Function) and cls is not Function and cls.__module__ == "__main__"


def functions_of_run(result, script_globals: dict | None = None, is_function=None) -> list[type]:
    """The Functions a script run defined: from its globals, or, when it died before
    returning them, from the globals a ``CallRecorder`` saw or the frames of its traceback."""
    exc = result.error.exception if result.error is not None else None
    namespace = (
        result.namespace or script_globals or globals_of_failure(exc, result.target.path) or {}
    )
    return find_functions(namespace, is_function)


def class_location(cls: type) -> dict | None:
    """{'file', 'line', 'function', 'code'} of ``class Name(...)`` in the script."""
    code = None
    # a method written in the class body names the file (an inherited forward may not)
    for value in [*vars(cls).values(), cls.forward]:
        # unwrapped: a stand-in's methods wrap the user's (engines/torch/gradcheck.py)
        code = getattr(inspect.unwrap(getattr(value, "__func__", value)), "__code__", None)
        if code is not None:
            break
    if code is None:
        return None
    path, line = code.co_filename, code.co_firstlineno
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
        # the class of that name around the method's line, else the first of that name
        around = [n for n in defs if n.lineno <= line <= (n.end_lineno or n.lineno)]
        if around or defs:
            line = (around or defs)[-1 if around else 0].lineno
    return {
        "file": path,
        "line": line,
        "function": "<module>",
        "code": linecache.getline(path, line).strip(),
    }


def point_at_backward(case: Case, func, inputs: tuple) -> None:
    """A failed Function check points at the line of its backward that returned (or raised):
    the gradient came from there. The class line stays in the stack, outermost."""
    cls = getattr(func, "func", func).__self__  # functools.partial(cls.apply, ...) or apply
    loc = backward_return_location(cls, func, inputs)
    if loc is not None:
        case.stack = [f for f in (case.location, loc) if f]
        case.location = loc


def backward_return_location(cls: type, func, inputs: tuple) -> dict | None:
    """{'file', 'line', 'function', 'code'} of the statement of ``cls.backward`` that returned
    when backward ran once at (copies of) ``inputs``: traced, so the branch that really ran
    is the one named; None when backward did not run."""
    import autodiag as ad
    from autodiag.autograd import grad

    fn = inspect.unwrap(getattr(cls, "backward", None) or cls.vjp)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    lines: list = []

    def local(frame, event, arg):
        if event == "return":
            lines.append(frame.f_lineno)
        return local

    def on_call(frame, event, arg):
        return local if frame.f_code is code else None

    copies = tuple(
        ad.tensor(array(x).copy(), requires_grad=x.requires_grad) if isinstance(x, Tensor) else x
        for x in inputs
    )
    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = [o for o in as_tuple(func(*copies)) if isinstance(o, Tensor) and o.requires_grad]
            diff = [x for x in copies if isinstance(x, Tensor) and x.requires_grad]
            grad([o.sum() for o in outs], diff, allow_unused=True)
    except Exception:  # noqa: BLE001 - the line it raised at (traced above) is the answer
        pass
    finally:
        sys.settrace(previous)
    if not lines:
        return None
    path, line = code.co_filename, lines[0]
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:  # the first line of a return statement written over several lines
        for node in ast.walk(tree):
            if isinstance(node, ast.Return) and node.lineno <= line <= (node.end_lineno or 0):
                line = node.lineno
                break
    return {
        "file": path,
        "line": line,
        "function": f"{cls.__name__}.{fn.__name__}",
        "code": linecache.getline(path, line).strip(),
    }


@dataclasses.dataclass
class Planned:
    """A check to run: the case (filled in when run) and its arguments."""

    case: Case
    func: object
    inputs: tuple


def plan_functions(classes: list[type], settings: Settings, recorded: dict | None = None) -> list:
    """Cases for ``classes``: a ``Planned`` per input tuple and order, or a finished ``Case``
    (an error or a skip) when inputs cannot be had. Inputs come from ``sample_inputs()``,
    else from the script's first call of the Function (``recorded``, from a
    ``CallRecorder``), else they are generated."""
    out: list = []
    recorded = recorded or {}
    for cls in classes:
        loc = class_location(cls)
        base = {
            "source": "function",
            "function": cls.__name__,
            "location": loc,
            "stack": [loc] if loc else [],
            "settings": settings.kwargs(),
            "arg_names": _arg_names(cls),
        }
        func = cls.apply
        if getattr(cls, "sample_inputs", None) is None and cls in recorded:
            rec = recorded[cls]
            samples, generated, problem = _recorded_inputs(cls, rec)
            label = "script inputs"
            if rec.kwargs:
                func = functools.partial(cls.apply, **rec.kwargs)
        else:
            samples, generated, problem = _inputs_for(cls, settings)
            label = None
        if problem is not None:
            verdict, message, exception = problem
            out.append(
                Case(
                    name=f"{cls.__name__}",
                    verdict=verdict,
                    message=message,
                    exception=exception,
                    **base,
                )
            )
            continue
        for k, (inputs, notes) in enumerate(samples):
            lab = label or ("generated" if generated else f"sample {k}")
            for order in range(1, settings.order + 1):
                case = Case(
                    name=f"{cls.__name__}[{lab}]",
                    api="gradcheck" if order == 1 else "gradgradcheck",
                    order=order,
                    inputs=[describe(x) for x in inputs],
                    generated=generated,
                    sample=None if generated or label else k,
                    notes=list(notes),
                    recorded=recorded[cls].location if label else None,
                    **base,
                )
                out.append(Planned(case, func, inputs))
    return out


def _arg_names(cls: type) -> list:
    """forward's argument names after ctx (all of them with setup_context)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())
    except (TypeError, ValueError):
        return []
    if not _has_setup_context(cls):
        params = params[1:]
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


# The script's inputs are checked element by element (slow mode: two forward calls per input
# element, one backward per output element): above this many elements in the tensors checked,
# each dimension is cut to a few leading entries, the same cut for every dimension of one size.
MAX_RECORDED_NUMEL = 1024
_CUT_FROM = 5  # dimensions of at most this many entries are kept whole


def _recorded_inputs(cls: type, rec: RecordedCall):
    """([(inputs, notes)], False, None) from the script's first call, float64 for finite
    differences, or ([], False, (verdict, message, exception)) when they cannot be used."""
    import autodiag as ad

    where = (
        f"{short_path(rec.location['file'])}:{rec.location['line']}" if rec.location else "its call"
    )
    calls = f"the first of {rec.calls} calls" if rec.calls > 1 else "its only call"
    notes = [
        f"inputs of the script's call at {where} ({calls}): copies of the values, shapes "
        f"and requires_grad it passed"
    ]
    checked = [isinstance(a, Tensor) and rg for a, rg in zip(rec.args, rec.requires_grad)]
    if not any(checked):
        checked = [isinstance(a, Tensor) and a.is_floating_point() for a in rec.args]
        if any(checked):
            notes.append(
                "no input required grad in the script: checked w.r.t. every floating-point tensor"
            )
    if not any(checked):
        return (
            [],
            False,
            (
                "skip",
                f"the script called {cls.__name__} with no floating-point "
                f"tensor at {where}: nothing to differentiate; give it a "
                f"sample_inputs() static method returning a list of input tuples",
                "",
            ),
        )
    args = list(rec.args)
    # every floating-point tensor goes to float64, checked or not: ops such as matmul want
    # their operands in one dtype
    low = sorted(
        {
            a.dtype.name
            for a in args
            if isinstance(a, Tensor) and a.is_floating_point() and array(a).dtype != np.float64
        }
    )
    if low:
        notes.append(f"{', '.join(low)} converted to float64 for finite differences")
    numel = sum(array(a).size for a, c in zip(args, checked) if c)
    if numel > MAX_RECORDED_NUMEL:
        args, cut = _cut(args)
        notes.append(
            f"the script's inputs have {numel} elements to check: each is cut to "
            f"its leading entries ({cut}), the same cut for dimensions of one size"
        )
    inputs = []
    for a, c in zip(args, checked):
        if isinstance(a, Tensor):
            data = array(a).astype(np.float64) if a.is_floating_point() else np.array(array(a))
            a = ad.tensor(data, requires_grad=c) if c else Tensor._make(data)
        inputs.append(a)
    return [(tuple(inputs), notes)], False, None


def _cut(args: list) -> tuple[list, str]:
    """Leading slices of the tensors: each dimension longer than _CUT_FROM gets a new length
    above _CUT_FROM, distinct per original length (so sizes that matched still match and
    sizes that differed still differ)."""
    sizes = sorted(
        {n for a in args if isinstance(a, Tensor) for n in array(a).shape if n > _CUT_FROM}
    )
    new = {n: _CUT_FROM + 1 + k for k, n in enumerate(sizes)}
    out = [
        Tensor._make(np.array(array(a)[tuple(slice(0, new.get(n, n)) for n in array(a).shape)]))
        if isinstance(a, Tensor)
        else a
        for a in args
    ]
    return out, ", ".join(f"{n} -> {m}" for n, m in new.items())


def run_checks(plan: list, settings: Settings, progress=None) -> list[Case]:
    """Run the planned checks in order; ``progress(done, total, name)`` after each."""
    from autodiag.ops import factories

    total = len(plan)
    cases = []
    saved_rng = factories._rng[0]
    try:
        for done, item in enumerate(plan, 1):
            if isinstance(item, Planned):
                # gradgradcheck draws its random grad_outputs from autodiag's generator
                factories.manual_seed(settings.seed)
                run_check(item.case, item.func, item.inputs, settings.kwargs())
                if item.case.failed and item.case.source == "function":
                    point_at_backward(item.case, item.func, item.inputs)
                if item.case.generated and item.case.verdict == "error":
                    item.case.notes.append(
                        f"the inputs were generated, and may be what {item.case.function} "
                        f"cannot take: {_how_to_give_inputs(item.case.function)}"
                    )
                item = item.case
            cases.append(item)
            if progress is not None:
                progress(done, total, item.name)
    finally:
        factories._rng[0] = saved_rng
    return cases


def _inputs_for(cls: type, settings: Settings):
    """(list of (inputs, notes), generated?, None), or ([], generated?, (verdict, message,
    exception type name)) when there are no inputs to check."""
    sampler = getattr(cls, "sample_inputs", None)
    if sampler is None:
        return _generated(cls, settings)
    from autodiag.ops import factories

    saved_rng = factories._rng[0]
    factories.manual_seed(settings.seed)  # sample_inputs may draw random tensors
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = list(sampler())
    except Exception as e:  # noqa: BLE001 - the user's sample_inputs is at fault
        return (
            [],
            False,
            (
                "error",
                f"{cls.__name__}.sample_inputs() raised {type(e).__name__}: {e}",
                type(e).__name__,
            ),
        )
    finally:
        factories._rng[0] = saved_rng
    if not raw:
        return [], False, ("skip", f"{cls.__name__}.sample_inputs() returned no inputs", "")
    samples = []
    for item in raw:
        inputs = tuple(item) if isinstance(item, (tuple, list)) else (item,)
        notes = []
        if not any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
            # the usual intent: check every floating-point tensor
            inputs = tuple(
                x.detach().requires_grad_()
                if isinstance(x, Tensor) and x.is_floating_point()
                else x
                for x in inputs
            )
            if any(isinstance(x, Tensor) and x.requires_grad for x in inputs):
                notes.append("no input required grad: checked w.r.t. every floating-point tensor")
        samples.append((inputs, notes))
    return samples, False, None


def _tensor_params(cls: type):
    """Names of forward's arguments to generate tensors for, or (None, reason)."""
    fwd = cls.forward
    try:
        params = list(inspect.signature(fwd).parameters.values())
    except (TypeError, ValueError):
        return None, "its forward has no inspectable signature"
    if not _has_setup_context(cls):
        params = params[1:]  # ctx
    names = []
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return None, f"forward takes *{p.name}"
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.default is not p.empty:
            break  # defaults are used as they are
        if p.kind is p.KEYWORD_ONLY:
            return None, f"forward's keyword-only argument {p.name!r} has no default"
        if p.annotation is not p.empty and not _is_tensor_annotation(p.annotation):
            ann = (
                p.annotation
                if isinstance(p.annotation, str)
                else getattr(p.annotation, "__name__", repr(p.annotation))
            )
            return None, f"forward's argument {p.name!r} is a {ann}, not a tensor"
        names.append(p.name)
    if not names:
        return None, "forward takes no tensor argument"
    return names, ""


def _is_tensor_annotation(ann) -> bool:
    if isinstance(ann, str):
        return ann.split(".")[-1].strip("'\"") == "Tensor"
    return (
        isinstance(ann, type)
        and issubclass(ann, Tensor)
        or getattr(ann, "__name__", "") == "Tensor"
    )


def _generated(cls: type, settings: Settings):
    """float64 inputs that fit forward (it runs, gives finite outputs that require grad, and
    backward returns a gradient for each)."""
    names, reason = _tensor_params(cls)
    hint = f"; {_how_to_give_inputs(cls.__name__)}"
    if names is None:
        return [], False, ("skip", f"cannot generate inputs: {reason}{hint}", "")
    import autodiag as ad

    rng = np.random.default_rng(settings.seed)
    tried = []
    for shape in GENERATED_SHAPES:
        # |values| in [0.1, 1): away from the kinks of relu/abs/sign at 0; positive values as
        # a second try for functions defined only there (log, sqrt)
        for positive in (False, True):
            arrays = [rng.uniform(0.1, 1.0, size=shape) for _ in names]
            if not positive:
                arrays = [a * _signs(rng, shape) for a in arrays]
            why = _fits(cls, names, arrays)
            if why is None:
                inputs = tuple(ad.tensor(a, dtype=ad.float64, requires_grad=True) for a in arrays)
                note = f"generated float64 inputs of shape {shape} for {', '.join(names)}" + (
                    " (positive values)" if positive else ""
                )
                return [(inputs, [note])], True, None
            if not why.startswith("non-finite"):
                break  # positive values only help against NaN and inf
        if why.startswith("backward returns no gradient"):
            return [], True, ("skip", f"cannot generate inputs: {why}{hint}", "")
        tried.append(f"{shape}: {why}")
    return (
        [],
        True,
        ("skip", "cannot generate inputs: no shape fits (" + "; ".join(tried) + ")" + hint, ""),
    )


def _how_to_give_inputs(name: str) -> str:
    return (
        f"give {name} a sample_inputs() static method returning a list of input tuples "
        f"(e.g. [(A, v)] for forward(ctx, A, v)), or call {name}.apply in the script: "
        f"autodiag then checks it at the inputs of the script's first call"
    )


# A backward error of this kind on generated inputs says the shapes do not fit each other
# (matmul of a vector with a scalar, say), not that the backward is wrong.
_SHAPE_ERROR = re.compile(r"shape|dimension|\bsize|broadcast|\b\d+D\b|mat\d|align", re.IGNORECASE)


def _signs(rng, shape) -> np.ndarray:
    """Half +1, half -1 in random places: both signs always occur (when there are two
    elements), so a function defined only for positive inputs shows it."""
    signs = np.resize(np.array([1.0, -1.0]), int(np.prod(shape, dtype=int)))
    rng.shuffle(signs)
    return signs.reshape(shape)


def _fits(cls: type, names: list, arrays: list) -> str | None:
    """None when ``cls`` works on these inputs, else why not."""
    import autodiag as ad
    from autodiag.autograd import grad

    xs = [ad.tensor(a, dtype=ad.float64, requires_grad=True) for a in arrays]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = cls.apply(*xs)
    except Exception as e:  # noqa: BLE001 - the forward does not take these inputs
        return f"forward raised {type(e).__name__}"
    outs = [o for o in as_tuple(out) if isinstance(o, Tensor)]
    diff = [o for o in outs if o.requires_grad]
    if not diff:
        return "no output requires grad"
    if not all(bool(np.all(np.isfinite(array(o)))) for o in outs if array(o).dtype.kind == "f"):
        return "non-finite output"
    try:
        grads = grad([o.sum() for o in diff], xs, allow_unused=True)
    except Exception as e:  # noqa: BLE001 - a broken backward is for gradcheck to report
        from autodiag.autograd._gradcheck_diagnosis import engine_error

        # ... unless it is the shapes: try the next; the engine's checks of the returned
        # gradients (count, shape, type) are the backward's fault, whatever the inputs
        if _SHAPE_ERROR.search(str(e)) and not engine_error(str(e)):
            return f"backward raised {type(e).__name__}: {str(e).splitlines()[0]}"
        return None
    missing = [n for n, g in zip(names, grads) if g is None]
    if missing:
        return f"backward returns no gradient for {', '.join(missing)} (non-tensor arguments?)"
    return None


# ---------------------------------------------------------------------------------------------
# (c) An expression
# ---------------------------------------------------------------------------------------------


def expression_case(expr: str, var_specs: list, dtype: str, settings: Settings) -> list:
    """Checks of ``expr`` w.r.t. its ``--var`` leaves (one per order)."""
    import autodiag as ad
    from autodiag.target import expression

    variables = dict(expression.parse_var(v) for v in var_specs)
    names = list(variables)
    tree = expression.check(expr, names)
    dt = ad.float32 if dtype == "float32" else ad.float64
    inputs = tuple(ad.tensor(v, dtype=dt, requires_grad=True) for v in variables.values())

    def func(*xs):
        return expression.evaluate(tree, dict(zip(names, xs)))

    plan = []
    for order in range(1, settings.order + 1):
        case = Case(
            name=f"-e {expr}",
            source="expression",
            api="gradcheck" if order == 1 else "gradgradcheck",
            order=order,
            inputs=[f"{n}: {describe(x)}" for n, x in zip(names, inputs)],
            settings=settings.kwargs(),
        )
        plan.append(Planned(case, func, inputs))
    return plan


# ---------------------------------------------------------------------------------------------
# Findings and totals
# ---------------------------------------------------------------------------------------------


def findings(cases: list[Case]) -> list[Finding]:
    """A ``gradcheck_failed`` Finding per failed case."""
    out = []
    for c in cases:
        if not c.failed:
            continue
        hint = c.diagnoses[0].hint if c.diagnoses else ""
        out.append(
            Finding(
                "gradcheck_failed",
                "error",
                f"{c.name}: {c.message}",
                location=c.location,
                stack=c.stack,
                hint=hint,
                extra={
                    "case": c.name,
                    "api": c.api,
                    "order": c.order,
                    "function": c.function,
                    "diagnoses": [diagnosis_json(d) for d in c.diagnoses],
                    "worst": c.worst,
                },
            )
        )
    return out


def totals(cases: list[Case]) -> dict:
    t = {"checks": len(cases), "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    key = {"pass": "passed", "fail": "failed", "error": "errors", "skip": "skipped"}
    for c in cases:
        t[key[c.verdict]] += 1
    return t


def explaining_case(cases: list[Case], error) -> Case | None:
    """The failed check that explains why the script failed with ``error`` (a TargetFailed, or
    None), or None: ``assert gradcheck(...)`` raising at the call's line, ``sys.exit(1)`` after
    a failed call, or the script dying of the very error a Function's check reports (a backward
    returning the wrong number of gradients, say)."""
    if error is None:
        return None
    exc = error.exception
    at_line = failed_call_site(cases, exc)
    if at_line is not None:
        return at_line
    failed = [c for c in cases if c.failed]
    recorded = [c for c in failed if c.source == "call"]
    if recorded and error.exit_status is not None:
        return recorded[-1]
    if exc is not None and str(exc).strip():
        same = [
            c
            for c in failed
            if c.exception == type(exc).__name__
            and c.error.strip().splitlines()[0] == str(exc).strip().splitlines()[0]
        ]
        if same:
            return same[0]
    return None


def checks_time_limit(timeout: float | None):
    """--timeout for the checks run after the script (a separate budget of the same size)."""
    from autodiag.target.script import time_limit

    return time_limit(
        timeout,
        "checking the script's Functions",
        "Raise --timeout, use --fast, or give sample_inputs() smaller inputs.",
    )
