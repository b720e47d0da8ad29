"""Why did gradcheck fail? Cheap probes run only after a failure, each giving a ``Diagnosis``.

Kinds (a documented contract, most specific first in ``err.diagnoses``):

==========================  ===================================================================
``low_precision``           inputs are float32/float16; says whether a float64 retry passes
                            (first when it does: the failure is rounding, not a wrong gradient)
``mutates_input``           the first call of ``func`` changed an input's values in place
``wrong_grad_count``        backward returned more/fewer gradients than forward had inputs
``wrong_grad_shape``        backward returned a gradient of the wrong shape
``wrong_grad_type``         backward returned something that is not a Tensor or None
``grad_for_non_tensor``     backward returned a gradient for a non-tensor argument
``grad_dtype``              backward returned another dtype (silently cast by autograd)
``nondifferentiable_point`` an input lies within eps of a kink: one-sided derivatives differ
``constant_factor``         analytical = c · numerical at every element, c != 1
``zero_analytical``         backward gives zero where the function changes
``piecewise_constant``      the function does not change (round, floor, straight-through)
``nondeterministic``        two backward passes with the same grad_output differ
``not_multiplied``          a zero grad_output gives a non-zero gradient
``undefined_grad``          backward cannot handle undefined (None) output gradients
``no_differentiable_output`` no output requires grad, yet the function changes with the input
``missing_product_term``    elementwise: analytical = forward/x (or numerical - analytical =
                            forward/x): one term of the product rule d[x·g] = g + x·g' is missing
``returns_forward_value``   elementwise: the analytical derivative equals the forward output
``wrong_on_branch``         elementwise: right where the input is positive (negative), wrong at
                            every element of the other sign: one branch of the rule is wrong
``transposed_grad``         the gradient for a square matrix input is the right one transposed
``swapped_inputs``          the gradient returned for input j is the one of input k
==========================  ===================================================================

The rule-shape kinds (the last five) are only tried when nothing above explains a Jacobian
mismatch, and each is verified numerically on every element before it is reported.
``compare(run, failure)`` adds a per-input summary (which inputs' gradients are wrong, at how
many Jacobian entries) for every mismatch, explained or not.

Probes call ``func`` again (on copies of the inputs where they can); any error inside a probe
only drops that probe.
"""

from __future__ import annotations

import re

import numpy as np

from autodiag.autograd.gradcheck import (
    Diagnosis,
    GradcheckError,
    GradcheckRun,
    analytical_jacobian,
    differentiable_outputs,
    numerical_jacobian,
    run_checks,
)
from autodiag.dtypes import torch_name
from autodiag.tensor import Tensor

__all__ = ["Diagnosis", "diagnose"]


def diagnose(err: Exception, run) -> list:

    found: list = []
    if run.mutated:
        idx = ", ".join(str(p) for p in run.mutated)
        found.append(
            Diagnosis(
                "mutates_input",
                f"The function modified input {idx} in place while gradcheck called it; gradcheck "
                f"perturbs the inputs and needs a pure function: clone() before modifying.",
                {"inputs": list(run.mutated)},
            )
        )
    failure = err.failure if isinstance(err, GradcheckError) else {}
    kind = failure.get("kind")
    if not isinstance(err, GradcheckError):
        found += engine_error(str(err))
    elif kind == "mismatch":
        found += _mismatch(run, failure)
    elif kind in _SIMPLE:
        found.append(_SIMPLE[kind](run, failure))
    low, in_float64 = _low_precision(run, retry=isinstance(err, GradcheckError))
    if low is not None:
        # a passing float64 retry explains the failure better than anything else; a failing
        # one may show a cause that float32 noise hid (a constant factor, say)
        if low.details.get("float64_passes"):
            found.insert(0, low)
        else:
            known = {d.kind for d in found}
            found += [d for d in in_float64 if d.kind not in known]
            found.append(low)
    return found


# ---------------------------------------------------------------------------------------------
# Errors raised by the engine
# ---------------------------------------------------------------------------------------------

_ENGINE_PATTERNS = [
    (
        re.compile(
            r"function (\w+) returned an incorrect number of gradients \(expected (\d+), "
            r"got (\d+)\)"
        ),
        "wrong_grad_count",
        "{0} returned {2} gradients for {1} forward inputs: return exactly one per argument of "
        "forward, None for arguments that need no gradient.",
    ),
    (
        re.compile(
            r"Function (\w+) returned an invalid gradient at index (\d+) - got \[([^\]]*)\] "
            r"but expected shape compatible with \[([^\]]*)\]"
        ),
        "wrong_grad_shape",
        "{0} returned a gradient of shape [{2}] for input {1} of shape [{3}]: sum it over the "
        "broadcast dimensions or reshape it to the input's shape.",
    ),
    (
        re.compile(r"expected Variable or None \(got (\w+)\)"),
        "wrong_grad_type",
        "A backward returned a {0} instead of a Tensor or None: wrap the value with "
        "torch.tensor(...) or build it from grad_output.",
    ),
    (
        re.compile(r"function (\w+) returned a gradient different than None at position (\d+)"),
        "grad_for_non_tensor",
        "{0} returned a gradient at position {1}, whose forward argument is not a Tensor: return "
        "None there.",
    ),
]


def engine_error(msg: str) -> list:
    for pattern, kind, hint in _ENGINE_PATTERNS:
        m = pattern.search(msg)
        if m:
            return [Diagnosis(kind, hint.format(*m.groups()), {"groups": list(m.groups())})]
    return []


# ---------------------------------------------------------------------------------------------
# Jacobian mismatch
# ---------------------------------------------------------------------------------------------


def _mismatch(run, failure: dict) -> list:
    found = []
    # a function that mutates its inputs gives garbage finite differences on every new call:
    # only the probe that needs no call runs then
    probes = (_factor,) if run.mutated else (_returned_dtypes, _kink, _factor)
    for probe in probes:
        try:
            d = probe(run, failure)
        except Exception:  # noqa: BLE001 - a probe that cannot run says nothing
            d = None
        if d is not None:
            found.append(d)
    if found or run.mutated:
        return found
    # nothing simple explains it: try the shapes of known wrong rules, most specific first
    for probe in (_swapped_inputs, _transposed, _product_rule, _forward_value, _branch):
        try:
            d = probe(run, failure)
        except Exception:  # noqa: BLE001 - a probe that cannot run says nothing
            d = None
        if d is not None:
            found.append(d)
            break  # one verified rule shape is the answer; others would only repeat it
    return found


def _factor(run, failure: dict):
    """analytical == c · numerical everywhere in the failing block (c = 0 and numerical = 0 are
    their own kinds)."""
    a = failure["analytical"].astype(np.float64)
    n = failure["numerical"].astype(np.float64)
    atol, rtol = run.atol, run.rtol
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(n))):
        return None
    big_n = np.abs(n) > atol
    if not big_n.any():
        if np.any(np.abs(a) > atol):
            return Diagnosis(
                "piecewise_constant",
                "The numerical derivative is zero where the analytical one is not: the forward "
                "does not change with the input (round, floor, sign, a comparison, or a "
                "straight-through estimator), so gradcheck cannot pass at these points.",
            )
        return None
    c = float(np.median(a[big_n] / n[big_n]))
    if not np.all(np.abs(a - c * n) <= atol + rtol * np.abs(c * n)):
        return None
    if abs(c) <= rtol:
        return Diagnosis(
            "zero_analytical",
            "The analytical Jacobian is zero where the function changes: the gradient is cut "
            "(detach(), .data or no_grad in the forward) or backward drops a term.",
        )
    if abs(c - 1) <= rtol:
        return None
    return Diagnosis(
        "constant_factor",
        f"The analytical Jacobian is the numerical one times {c:.6g} at every element: the "
        f"backward is off by a factor of {c:.6g}.",
        {"factor": c},
    )


# ---------------------------------------------------------------------------------------------
# Rule shapes: a wrong gradient that is a known mistake, verified element by element
# ---------------------------------------------------------------------------------------------

# Rule-shape probes compute the whole Jacobian of the failing output (every input); above this
# many entries they stay silent rather than slow the report down.
MAX_JACOBIAN_ENTRIES = 1_000_000


def _close(a: np.ndarray, b: np.ndarray, run) -> np.ndarray:
    """gradcheck's own element test: |a - b| <= atol + rtol·|b|."""
    return np.abs(a - b) <= run.atol + run.rtol * np.abs(b)


def _blocks(run, i: int):
    """(analytical, numerical) Jacobians of differentiable output ``i`` w.r.t. every
    differentiable input, float64, shape (input numel, output numel) each; None when too big.
    Computed once per run."""
    cached = getattr(run, "_rule_blocks", None)
    if cached is not None and cached[0] == i:
        return cached[1]

    outs = differentiable_outputs(run.func(*run.inputs))
    out = outs[i]
    if sum(x._data.size for x in run.diff_inputs) * out._data.size > MAX_JACOBIAN_ENTRIES:
        return None
    analytical = [a.astype(np.float64) for a in analytical_jacobian(run, out, check=False)]
    numerical = [
        numerical_jacobian(run, j)[run.keep[i]].astype(np.float64) for j in range(len(run.diff_pos))
    ]
    run._rule_blocks = (i, (analytical, numerical))
    return analytical, numerical


def _elementwise(run, failure: dict):
    """(x, f, analytical diagonal, numerical diagonal) when the failing block is elementwise
    (input and output of the same shape, both Jacobians diagonal), else None."""

    j, i = failure["input"], failure["output"]
    a, n = failure["analytical"].astype(np.float64), failure["numerical"].astype(np.float64)
    x = run.inputs[run.diff_pos[j]]
    out = differentiable_outputs(run.func(*_probe_inputs(run)))[i]
    if x._data.shape != out._data.shape or a.shape[0] != a.shape[1] or a.shape[0] < 2:
        return None
    off = ~np.eye(a.shape[0], dtype=bool)
    if np.any(np.abs(n[off]) > run.atol) or np.any(np.abs(a[off]) > run.atol):
        return None
    return (
        x._data.astype(np.float64).reshape(-1),
        out._data.astype(np.float64).reshape(-1),
        np.diag(a).copy(),
        np.diag(n).copy(),
    )


def _product_rule(run, failure: dict):
    """forward = x·g(x) elementwise, so d/dx = g + x·g' with g = forward/x. A backward that
    returns g alone (analytical == forward/x) or x·g' alone (numerical - analytical ==
    forward/x) dropped one term. Verified at every element where |x| is not tiny."""
    e = _elementwise(run, failure)
    if e is None:
        return None
    x, f, a, n = e
    ok = np.abs(x) > 1e-3
    if ok.sum() < 2:
        return None
    g = f[ok] / x[ok]
    j = failure["input"]
    wrong = ~_close(a, n, run)
    missing = n - a
    if np.all(_close(a[ok], g, run)):
        return Diagnosis(
            "missing_product_term",
            f"For input {j}, the analytical derivative equals forward(x)/x at every element: "
            f"writing forward as x·g(x), the backward returns only g(x) and drops the x·g'(x) "
            f"term of the product rule d[x·g(x)]/dx = g(x) + x·g'(x) (numerical - analytical "
            f"is that term, up to {np.max(np.abs(missing)):.3g}): add it.",
            {
                "input": j,
                "returned": "g",
                "missing": "x*g'",
                "elements": int(wrong.sum()),
                "max_missing": float(np.max(np.abs(missing))),
            },
        )
    if np.all(_close(missing[ok], g, run)):
        return Diagnosis(
            "missing_product_term",
            f"For input {j}, numerical - analytical equals forward(x)/x at every element: "
            f"writing forward as x·g(x), the backward returns only x·g'(x) and drops the g(x) "
            f"term of the product rule d[x·g(x)]/dx = g(x) + x·g'(x): add it.",
            {
                "input": j,
                "returned": "x*g'",
                "missing": "g",
                "elements": int(wrong.sum()),
                "max_missing": float(np.max(np.abs(missing))),
            },
        )
    return None


def _forward_value(run, failure: dict):
    """The analytical derivative equals the forward output itself (right only for exp)."""
    e = _elementwise(run, failure)
    if e is None:
        return None
    x, f, a, n = e
    if not np.all(_close(a, f, run)):
        return None
    j = failure["input"]
    return Diagnosis(
        "returns_forward_value",
        f"For input {j}, the analytical derivative equals the forward output at every element "
        f"(d/dx f = f holds only for exp): the backward multiplies grad by the result instead of "
        f"by the derivative.",
        {"input": j},
    )


def _branch(run, failure: dict):
    """Elementwise, the analytical derivative is right for one sign of x and wrong at every
    element of the other: one branch (a where/mask/slope) of the rule is wrong."""
    e = _elementwise(run, failure)
    if e is None:
        return None
    x, f, a, n = e
    wrong = ~_close(a, n, run)
    j = failure["input"]
    for side, mask in (("negative", x < 0), ("positive", x > 0)):
        if mask.any() and (~mask).any() and np.array_equal(wrong, mask):
            other = "positive" if side == "negative" else "negative"
            return Diagnosis(
                "wrong_on_branch",
                f"For input {j}, the analytical derivative is right at every {other} element "
                f"and wrong at every {side} one ({int(mask.sum())} of {mask.size}): the branch "
                f"of the backward for {side} inputs (a where(), mask or slope) is wrong.",
                {"input": j, "side": side, "elements": int(mask.sum())},
            )
    return None


def _transposed(run, failure: dict):
    """For a square matrix input, the analytical gradient is the numerical one transposed."""
    j = failure["input"]
    x = run.inputs[run.diff_pos[j]]
    shape = x._data.shape
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 2:
        return None
    a, n = failure["analytical"].astype(np.float64), failure["numerical"].astype(np.float64)
    m = a.shape[1]
    a_t = a.reshape(shape[0], shape[1], m).transpose(1, 0, 2).reshape(-1, m)
    if np.all(_close(a, n, run)) or not np.all(_close(a_t, n, run)):
        return None
    return Diagnosis(
        "transposed_grad",
        f"The analytical gradient for input {j} (a {shape[0]}x{shape[1]} matrix) is the "
        f"numerical one transposed at every element: transpose it (a .T missing or extra in "
        f"the backward's matrix product).",
        {"input": j},
    )


def _swapped_inputs(run, failure: dict):
    """The gradient returned for input j is the one of another input k (and vice versa):
    the backward returns its gradients in the wrong order."""
    if len(run.diff_pos) < 2:
        return None
    blocks = _blocks(run, failure["output"])
    if blocks is None:
        return None
    analytical, numerical = blocks
    j = failure["input"]
    for k in range(len(analytical)):
        if k == j or analytical[j].shape != numerical[k].shape:
            continue
        if np.all(_close(analytical[j], numerical[k], run)) and np.all(
            _close(analytical[k], numerical[j], run)
        ):
            pj, pk = run.diff_pos[j], run.diff_pos[k]
            return Diagnosis(
                "swapped_inputs",
                f"The analytical gradient for input {j} is the numerical one of input {k}, and "
                f"the other way round: backward returns the gradients in the wrong order (return "
                f"one per forward argument, in forward's order: argument {pj} then {pk}).",
                {"input": j, "other": k, "positions": [pj, pk]},
            )
    return None


def compare(run, failure: dict) -> list:
    """Per differentiable input, how the analytical gradient of the failing output compares
    with the numerical one: ``[{input, position, shape, entries, wrong, max_difference}]``
    (``wrong`` = entries beyond gradcheck's tolerance). Empty when that costs too much."""
    if failure.get("kind") != "mismatch" or run.mutated:
        return []
    blocks = _blocks(run, failure["output"])
    if blocks is None:
        return []
    out = []
    for j, (a, n) in enumerate(zip(*blocks)):
        x = run.inputs[run.diff_pos[j]]
        wrong = ~_close(a, n, run)
        diff = np.abs(a - n)
        out.append(
            {
                "input": j,
                "position": run.diff_pos[j],
                "shape": list(x._data.shape),
                "entries": int(a.size),
                "wrong": int(wrong.sum()),
                "max_difference": float(np.max(diff)) if diff.size else 0.0,
            }
        )
    return out


def _probe_inputs(run) -> tuple:
    """Copies of the inputs, float64 where they are floating point (same requires_grad)."""
    out = []
    for x in run.inputs:
        if isinstance(x, Tensor):
            d = x._data.astype(np.float64) if x._data.dtype.kind == "f" else np.array(x._data)
            t = Tensor._make(d)
            if x.requires_grad:
                t.requires_grad_(True)
            x = t
        out.append(x)
    return tuple(out)


def _kink(run, failure: dict):
    """One-sided differences at the worst element: a jump means a non-differentiable point
    within eps (relu or abs at 0, a clamp bound); the central difference then averages the
    two sides and matches neither."""

    w = failure["worst"]
    inputs = _probe_inputs(run)
    x = inputs[run.diff_pos[w["input"]]]
    idx, h = w["input_index"], run.eps

    def value() -> float:
        out = differentiable_outputs(run.func(*inputs))[w["output"]]
        return float(out._data[w["output_index"]] if out._data.ndim else out._data)

    orig = x._data[idx]
    f0 = value()
    x._data[idx] = orig + h
    fp = value()
    x._data[idx] = orig - h
    fm = value()
    x._data[idx] = orig
    right, left = (fp - f0) / h, (f0 - fm) / h
    if abs(right - left) <= run.atol + run.rtol * max(abs(left), abs(right)):
        return None
    where = f"input {w['input']}{list(idx)} = {float(orig):.6g}"
    return Diagnosis(
        "nondifferentiable_point",
        f"{where} is within eps={h:g} of a point where the function is not differentiable "
        f"(one-sided derivatives {left:.4g} and {right:.4g}): move the input away from the kink.",
        {
            "input": w["input"],
            "index": list(idx),
            "value": float(orig),
            "left": left,
            "right": right,
        },
    )


def _returned_dtypes(run, failure: dict):
    """Custom Functions whose backward returned a dtype other than their input's: autograd
    casts it silently, so a float16/int gradient loses precision without an error."""
    from autodiag.autograd import grad
    from autodiag.autograd.function import BackwardCFunction
    from autodiag.ops._core import wrap

    outs = differentiable_outputs(run.func(*run.inputs))
    seen: list = []
    spied = []
    stack = [o.grad_fn for o in outs]
    visited = set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        stack.extend(e[0] for e in node.next_functions)
        if isinstance(node, BackwardCFunction):
            node._apply = _spy(node, seen)  # instance attribute shadows the method
            spied.append(node)
    try:
        ones = [wrap(np.ones(o._data.shape, dtype=o._data.dtype)) for o in outs]
        grad(outs, run.diff_inputs, ones, allow_unused=True)
    finally:
        for node in spied:
            del node.__dict__["_apply"]
    if not seen:
        return None
    name, k, got, want = seen[0]
    return Diagnosis(
        "grad_dtype",
        f"{name} returned a {got} gradient for its input {k} of dtype {want}; autograd casts it "
        f"silently, losing precision: compute the gradient in the input's dtype.",
        {"node": name, "input": k, "dtype": got, "expected": want},
    )


def _spy(node, seen: list):
    """node._apply, recording gradients whose dtype differs from the input's (before the
    engine's cast)."""
    method = type(node)._apply

    def spy(xp, grads):
        res = method(node, xp, grads)
        for k, (g, meta) in enumerate(zip(res, node._input_meta or ())):
            if g is None or meta is None:
                continue
            dt = g._data.dtype if isinstance(g, Tensor) else np.asarray(g).dtype
            if dt != meta[1]:
                seen.append((node.name(), k, torch_name(dt), torch_name(meta[1])))
        return res

    return spy


# ---------------------------------------------------------------------------------------------
# The other failures
# ---------------------------------------------------------------------------------------------


def _nondeterministic(run, failure: dict) -> Diagnosis:
    d = failure.get("max_difference", float("nan"))
    return Diagnosis(
        "nondeterministic",
        f"Two backward passes with the same grad_output differ by up to {d:.3g} "
        f"(nondet_tol={run.nondet_tol}): the backward is not deterministic; make it so, or "
        f"pass nondet_tol >= {d:.2g} if that is expected.",
        {"max_difference": d},
    )


def _not_multiplied(run, failure: dict) -> Diagnosis:
    return Diagnosis(
        "not_multiplied",
        "Backward returned a non-zero gradient for an all-zero grad_output: multiply the local "
        "derivative by grad_output instead of adding to it or ignoring it.",
    )


def _undefined_grad(run, failure: dict) -> Diagnosis:
    return Diagnosis(
        "undefined_grad",
        "Backward failed or gave non-zero gradients when output gradients are undefined (None): "
        "handle None grad_outputs, or pass check_undefined_grad=False.",
    )


def _no_outputs(run, failure: dict) -> Diagnosis:
    return Diagnosis(
        "no_differentiable_output",
        "No output requires grad, yet the outputs change with the inputs: the result was "
        "computed under no_grad, through .data or detach(), so backward cannot reach the inputs.",
    )


_SIMPLE = {
    "nondeterministic": _nondeterministic,
    "not_multiplied": _not_multiplied,
    "undefined_grad": _undefined_grad,
    "no_outputs": _no_outputs,
}


# ---------------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------------


def _low_precision(run, retry: bool) -> tuple:
    """(the diagnosis or None, diagnoses of a failing float64 retry's mismatch)."""
    low = [(j, x._data.dtype) for j, x in enumerate(run.diff_inputs) if x._data.dtype != np.float64]
    if not low:
        return None, []
    if run.mutated:
        retry = False  # a retry would run on inputs the function keeps changing
    names = ", ".join(f"{j} ({torch_name(dt)})" for j, dt in low)
    if not retry:
        return Diagnosis(
            "low_precision",
            f"Input {names} is not float64: gradcheck's default "
            f"tolerances assume double precision.",
            {"inputs": [j for j, _ in low]},
        ), []

    again = GradcheckRun(
        run.func,
        _probe_inputs(run),
        run.eps,
        run.atol,
        run.rtol,
        run.nondet_tol,
        run.check_grad_dtypes,
        run.fast_mode,
    )
    in_float64 = []
    try:
        run_checks(again, check_undefined_grad=False, check_backward_ad=True)
        passes, outcome = True, "passes"
    except GradcheckError as e:
        passes, outcome = False, "fails too"
        if e.failure.get("kind") == "mismatch":
            in_float64 = [d for d in [_factor(again, e.failure)] if d is not None]
    except Exception as e:  # noqa: BLE001 - the function may not accept float64
        passes, outcome = None, f"could not run ({type(e).__name__})"
    if passes:
        hint = (
            f"Input {names} is not float64, and the same check passes with float64 inputs: "
            f"the mismatch is rounding error in the finite differences, not a wrong "
            f"gradient; use float64 inputs for gradcheck."
        )
    else:
        hint = (
            f"Input {names} is not float64; with float64 inputs the check {outcome}"
            f"{', so the gradient itself is likely wrong' if passes is False else ''}."
        )
    return Diagnosis(
        "low_precision", hint, {"inputs": [j for j, _ in low], "float64_passes": passes}
    ), in_float64
