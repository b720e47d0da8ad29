"""``gradcheck --engine torch``: the checks of ``analysis/gradcheck.py`` on the script's
``torch.autograd.Function`` subclasses, with PyTorch's own ``gradcheck``/``gradgradcheck`` as
the verdict and autodiag's diagnosis on top.

Each Function is planned, generated inputs and all, through its autodiag stand-in
(``engines/torch/gradcheck.standin``: the user's forward and backward, run by PyTorch, behind
an autodiag Function). A check runs PyTorch's function on the real class; when it fails, the
same check on the stand-in gives autodiag's diagnosis (which input and output entry differ, by
how much, the likely mistake) and the backward line, as on autodiag's engine.

What is not covered: the script's own ``torch.autograd.gradcheck`` calls run as written (they
are not recorded: that would mean replacing PyTorch's functions); a failing one fails the
script, and the report says where.
"""

from __future__ import annotations

import time
import warnings

from autodiag.analysis import gradcheck as checks
from autodiag.engines.torch import gradcheck as engine

# On autodiag's engine a Function without sample_inputs() is checked at its first call's inputs
NOT_RECORDED = (
    "PyTorch's Function.apply is seen by none of its public hooks, so the script's own calls "
    "of {name} were not recorded: give {name} a sample_inputs() static method to check it at "
    "inputs you choose"
)


def functions_of_run(result, script_globals: dict | None = None) -> list[type]:
    """Stand-ins for the ``torch.autograd.Function`` subclasses the script defined."""
    found = checks.functions_of_run(result, script_globals, engine.is_script_function)
    return [engine.standin(cls) for cls in found]


def run_checks(plan: list, settings: checks.Settings, progress=None) -> list[checks.Case]:
    """Run the planned checks (stand-ins' cases) with PyTorch's verdict, in order."""
    total = len(plan)
    cases = []
    for done, item in enumerate(plan, 1):
        if isinstance(item, checks.Planned):
            if item.case.generated:
                item.case.notes.append(NOT_RECORDED.format(name=item.case.function))
            run_check(item, settings)
            item = item.case
        cases.append(item)
        if progress is not None:
            progress(done, total, item.name)
    return cases


def run_check(item: checks.Planned, settings: checks.Settings) -> checks.Case:
    case, standin = item.case, item.func.__self__
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            engine.check(
                case.api, standin.torch_function, item.inputs, settings.kwargs(), settings.seed
            )
            error = None
        except Exception as e:  # noqa: BLE001 - every failure of the user's code is a result
            error = e
    case.seconds = time.perf_counter() - start
    for w in caught:
        note = f"{w.category.__name__}: {w.message}"
        if note not in case.notes:
            case.notes.append(note)
    if error is None:
        if case.order == 1:
            case.max_error = checks.max_error(item.func, item.inputs, settings.eps)
        return case
    _diagnose(item, settings, error)
    return case


def _diagnose(item: checks.Planned, settings: checks.Settings, error: Exception) -> None:
    """Fill in a failed case: PyTorch's error, and autodiag's diagnosis of the stand-in."""
    from autodiag.autograd._gradcheck_diagnosis import engine_error

    case = item.case
    text = str(error).strip()
    head = text.splitlines()[0].rstrip(",") if text else ""
    diagnoses = engine_error(text) if not isinstance(error, engine.GradcheckError) else []
    bad_gradient = isinstance(error, (engine.GradcheckError, AssertionError)) or bool(diagnoses)
    case.verdict = "fail" if bad_gradient else "error"
    case.exception = type(error).__name__
    case.error = text
    case.diagnoses = diagnoses
    if not isinstance(error, engine.GradcheckError):
        head = f"{type(error).__name__}: {head}"
    case.message = head
    if case.order == 1:
        # the same check on autodiag's engine, for the entries, the worst one and the mistake
        probe = checks.Case(name=case.name, source=case.source, arg_names=case.arg_names)
        checks.run_check(probe, item.func, item.inputs, settings.kwargs())
        if probe.failed:
            case.diagnoses = probe.diagnoses or diagnoses
            case.comparison = probe.comparison
            case.worst = probe.worst
            case.max_error = probe.max_error
            if probe.worst is not None:
                case.message = checks.with_worst(head, probe.worst)
    else:
        case.notes.append(
            "PyTorch's verdict only: autodiag diagnoses second derivatives on its own engine "
            "(run without --engine torch on the autodiag twin for the likely mistake)"
        )
    if case.source == "function":
        checks.point_at_backward(case, item.func, item.inputs)
