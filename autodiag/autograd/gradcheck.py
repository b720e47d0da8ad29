"""``gradcheck`` and ``gradgradcheck``: PyTorch's checks, in PyTorch's order, with its messages.

gradcheck compares the Jacobian that backward computes (*analytical*) with central finite
differences (*numerical*) at the given inputs:

1. inputs: a float64 warning per lower-precision input, stride-0 inputs refused, at least one
   input must require grad;
2. ``func(*inputs)``; its outputs that require grad are checked;
3. per output, the analytical Jacobian is computed twice (a difference beyond ``nondet_tol`` is
   "Backward is not reentrant"), then compared with the numerical one (slow mode: element by
   element; fast mode: the scalar ``vᵀJu`` for random unit vectors ``u``, ``v``);
4. backward with all-zero ``grad_outputs`` must give zero gradients;
5. backward with undefined output gradients must not fail and must give zero or no gradients.

autodiag adds to a failure: the worst Jacobian element first in the message, and a diagnosis
(``err.diagnosis`` / ``err.diagnoses``, see ``_gradcheck_diagnosis``) naming a likely cause.

Slow mode runs ``func`` twice per input element, which is unavoidable for a black-box function;
everything around those calls is numpy on whole columns. NOTE: the perturbation writes into the
input's array (``._data``), so it bypasses the version counter exactly as PyTorch's ``.data``.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from autodiag import _warnings
from autodiag.core.graph import Node
from autodiag.dtypes import torch_name
from autodiag.ops._core import edge, wrap
from autodiag.size import Size
from autodiag.tensor import Tensor

__all__ = [
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "Diagnosis",
    "GradcheckRun",
    "run_checks",
    "numerical_jacobian",
    "analytical_jacobian",
    "differentiable_outputs",
    "as_tuple",
]


@dataclass(frozen=True)
class Diagnosis:
    """One likely cause of a gradcheck failure: ``kind`` (stable id), a one-sentence ``hint``
    and ``details`` (indices, values) for tools.

    >>> from autodiag.autograd.gradcheck import Diagnosis
    >>> Diagnosis("constant_factor", "off by a factor of 2.", {"factor": 2.0}).kind
    'constant_factor'
    """

    kind: str
    hint: str
    details: dict = field(default_factory=dict, compare=False)


class GradcheckError(RuntimeError):
    """Error raised by gradcheck and gradgradcheck.

    ``diagnoses`` lists autodiag's guesses at the cause (``Diagnosis(kind, hint, details)``),
    most specific first; ``diagnosis`` is the first one, or None.
    """

    def __init__(self, msg: str = "", failure: dict | None = None):
        super().__init__(msg)
        self.failure = failure or {}  # what failed, for the diagnosis (internal)
        self.diagnoses: list = []
        # a Jacobian mismatch: per input, how many entries are wrong (see diagnosis.compare)
        self.comparison: list = []

    @property
    def diagnosis(self):
        return self.diagnoses[0] if self.diagnoses else None


FAILED_NONDET_MSG = """\n
NOTE: If your op relies on non-deterministic operations i.e., it is listed here:
https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html
this failure might be expected.

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck.
If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `nondet_tol=<tol>` as a keyword argument.
- is OpInfo-based (e.g., in test_ops_gradients.py), then modify the OpInfo for the test
  to have `gradcheck_nondet_tol=<tol>`.
- is a Module test (e.g., in common_nn.py), then modify the corresponding
  module_test entry to have `gradcheck_nondet_tol=<tol>`
"""

FAST_FAIL_SLOW_OK_MSG = """
Fast gradcheck failed but element-wise differences are small. This means that the
test might've passed in slow_mode!

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck:

If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `fast_mode=False` as a keyword argument.
- is OpInfo-based (e.g., in test_ops_gradients.py), then modify the OpInfo for the test
  to have `gradcheck_fast_mode=False`
- is a Module test (e.g., in common_nn.py), then modify the corresponding
  module_test entry to have `gradcheck_fast_mode=False`
""".strip()

_UNDEFINED_NOTE = (
    'Please look at "Notes about undefined output gradients" in "tools/autograd/derivatives.yaml"'
)

# Fast mode draws u and v from its own generator with a fixed seed: the check is reproducible
# and the user's random stream is untouched (PyTorch also uses a fresh, default-seeded one).
_FAST_MODE_SEED = 67280421310721


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Check the gradients of ``func`` at ``inputs`` against finite differences.

    Returns True, or raises ``GradcheckError`` (returns False when ``raise_exception=False``;
    other errors, such as a backward returning the wrong number of gradients, always raise).
    ``check_batched_grad``, ``check_batched_forward_grad`` and ``check_forward_ad`` need vmap or
    forward-mode AD, which autodiag lacks: True raises NotImplementedError. ``masked`` (sparse
    inputs) is accepted and ignored.

    >>> import autodiag as torch
    >>> x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    >>> torch.autograd.gradcheck(lambda t: t.sin() * t ** 2, (x,))
    True
    >>> class Wrong(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, t):
    ...         return t * 2
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         return g * 3
    >>> try:
    ...     torch.autograd.gradcheck(Wrong.apply, (x,))
    ... except RuntimeError as err:  # a GradcheckError
    ...     print(str(err).splitlines()[0])
    ...     print(err.diagnosis.kind)
    Jacobian mismatch for output 0 with respect to input 0,
    constant_factor
    """
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError(
            "Expected at least one of check_forward_ad or check_backward_ad to be True"
        )
    if check_batched_grad and not check_backward_ad:
        raise AssertionError(
            "Setting check_batched_grad=True requires check_backward_ad to be True"
        )
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError(
            "Setting check_batched_forward_grad=True requires check_forward_ad to be True"
        )
    for name, value in (
        ("check_forward_ad", check_forward_ad),
        ("check_batched_grad", check_batched_grad),
        ("check_batched_forward_grad", check_batched_forward_grad),
    ):
        if value:
            raise NotImplementedError(
                f"autodiag: gradcheck({name}=True) needs "
                f"{'forward-mode AD' if 'forward' in name else 'vmap'}, "
                f"which autodiag does not have; pass {name}=False"
            )
    run = GradcheckRun(
        func, as_tuple(inputs), eps, atol, rtol, nondet_tol, check_grad_dtypes, fast_mode
    )
    try:
        run_checks(run, check_undefined_grad, check_backward_ad)
    except GradcheckError as err:
        if not raise_exception:
            return False
        _attach_diagnosis(err, run)
        raise
    except RuntimeError as err:
        # errors from the engine (a backward returning the wrong number, shape or type of
        # gradients) propagate as in PyTorch, with autodiag's diagnosis attached
        _attach_diagnosis(err, run)
        raise
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """gradcheck of the map ``(inputs, grad_outputs) -> vᵀJ``: checks second derivatives.

    Random ``grad_outputs`` in [-1, 1) are drawn from autodiag's generator when not given.

    >>> import autodiag as torch
    >>> x = torch.tensor([0.5, -1.5], dtype=torch.float64, requires_grad=True)
    >>> torch.autograd.gradgradcheck(lambda t: t.sin() * t ** 2, (x,))
    True
    """
    if not (check_fwd_over_rev or check_rev_over_rev):
        raise AssertionError(
            "Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True"
        )
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError(
            "Setting check_undefined_grad=True requires check_rev_over_rev to be True"
        )
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError(
            "Setting check_batched_grad=True requires check_rev_over_rev to be True"
        )
    from autodiag.autograd import grad
    from autodiag.ops.factories import rand

    tupled_inputs = as_tuple(inputs)
    if grad_outputs is None:
        outs = differentiable_outputs(func(*tupled_inputs))
        tupled_grad_outputs = tuple(
            (
                rand(*o.shape, dtype=o.dtype if o.is_floating_point() else None) * 2 - 1
            ).requires_grad_()
            for o in outs
        )
    else:
        tupled_grad_outputs = as_tuple(grad_outputs)
    n_out = len(tupled_grad_outputs)
    diff_in = {i for i, x in enumerate(tupled_inputs) if isinstance(x, Tensor) and x.requires_grad}
    diff_go = {i for i, x in enumerate(tupled_grad_outputs) if x.requires_grad}

    def new_func(*args):
        ins = tuple(
            x.requires_grad_() if i in diff_in else x
            for i, x in enumerate(args[: len(args) - n_out])
        )
        outs = differentiable_outputs(func(*ins))
        gos = tuple(
            x.requires_grad_() if i in diff_go else x
            for i, x in enumerate(args[len(args) - n_out :])
        )
        diff_ins = tuple(x for i, x in enumerate(ins) if i in diff_in)
        grads = grad(outs, diff_ins, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        new_func,
        tupled_inputs + tupled_grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
        check_forward_ad=check_fwd_over_rev,
        check_backward_ad=check_rev_over_rev,
        masked=masked,
    )


# ---------------------------------------------------------------------------------------------
# The run and the order of checks
# ---------------------------------------------------------------------------------------------


class GradcheckRun:
    """One gradcheck call: the function, its inputs, the settings, what was observed. With
    ``GradcheckError.failure`` it is what the diagnosis (``_gradcheck_diagnosis``) and the
    CLI's analysis read; they rerun the check's pieces through ``run_checks``,
    ``numerical_jacobian``, ``analytical_jacobian`` and ``differentiable_outputs``."""

    def __init__(self, func, inputs, eps, atol, rtol, nondet_tol, check_grad_dtypes, fast_mode):
        self.func, self.inputs = func, inputs
        self.eps, self.atol, self.rtol, self.nondet_tol = eps, atol, rtol, nondet_tol
        self.check_grad_dtypes, self.fast_mode = check_grad_dtypes, fast_mode
        # positions (in ``inputs``) of the tensors that require grad: "input j" in messages is
        # the j-th of these, as in PyTorch
        self.diff_pos = [
            i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad
        ]
        self.mutated: list = []  # positions of inputs the first call of func modified

    @property
    def diff_inputs(self) -> list:
        return [self.inputs[p] for p in self.diff_pos]


def as_tuple(x) -> tuple:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def differentiable_outputs(x) -> tuple:
    return tuple(o for o in as_tuple(x) if o.requires_grad)


def run_checks(run: GradcheckRun, check_undefined_grad: bool, check_backward_ad: bool) -> None:
    _check_inputs(run.inputs)
    before = [np.array(x._data) if isinstance(x, Tensor) else None for x in run.inputs]
    func_out = run.func(*run.inputs)
    run.mutated = [
        i
        for i, (x, b) in enumerate(zip(run.inputs, before))
        if b is not None and not _same_values(x._data, b)
    ]
    outputs = differentiable_outputs(func_out)
    run.all_out = as_tuple(func_out)
    floats = [k for k, o in enumerate(run.all_out) if o._data.dtype.kind == "f"]
    # numerical Jacobians exist for float outputs; keep[i]: that list's index of output i
    run.float_out = floats
    run.keep = [n for n, k in enumerate(floats) if run.all_out[k].requires_grad]
    run.out_shapes = [o._data.shape for o in outputs]
    if not check_backward_ad:  # only reachable with forward AD, which gradcheck refuses
        return
    if run.fast_mode:
        _fast_gradcheck(run, func_out, outputs)
    else:
        _slow_gradcheck(run, func_out, outputs)
    _test_backward_mul_by_grad_output(run, outputs, retain_graph=check_undefined_grad)
    if check_undefined_grad:
        _test_undefined_backward_mode(run, outputs)


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    # NOTE: NaN != NaN; only an unequal float array pays for the NaN-aware comparison
    return bool((a == b).all()) or (a.dtype.kind == "f" and np.array_equal(a, b, equal_nan=True))


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside this module (the user's gradcheck or
    gradgradcheck call), for warnings raised by the caller of this function."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__") == __name__:
        f, level = f.f_back, level + 1
    return level


def _check_inputs(inputs) -> None:
    any_requires_grad = False
    for idx, inp in enumerate(inputs):
        if not (isinstance(inp, Tensor) and inp.requires_grad):
            continue
        if inp._data.dtype != np.float64:
            _warnings.warn(
                f"Input #{idx} requires gradient and is not a double precision "
                f"floating point or complex. This check will likely fail if all the "
                f"inputs are not of double precision floating point or complex. ",
                UserWarning,
            )
        d = inp._data
        if any(st == 0 and sz > 1 for st, sz in zip(d.strides, d.shape)):
            raise RuntimeError(
                f"The {idx}th input has a dimension with stride 0. gradcheck only "
                f"supports inputs that are non-overlapping to be able to compute "
                f"the numerical gradients correctly. You should call .contiguous "
                f"on the input before passing it to gradcheck."
            )
        any_requires_grad = True
    if not any_requires_grad:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but "
            "none of them have requires_grad=True."
        )


# ---------------------------------------------------------------------------------------------
# Numerical Jacobians (central differences)
# ---------------------------------------------------------------------------------------------


def _outputs_now(run: GradcheckRun) -> list:
    """func at the current (perturbed) inputs: copies of its output arrays (an output may alias
    the input being perturbed)."""
    return [np.array(o._data) for o in as_tuple(run.func(*run.inputs))]


def _check_same_meta(a: np.ndarray, b: np.ndarray, eps: float, idx=None) -> None:
    on_index = f"on index {idx} " if idx is not None else ""
    if a.shape != b.shape:
        raise AssertionError(
            f"Expected `func` to return outputs with the same shape when inputs "
            f"are perturbed {on_index}by {eps}, but got: shapes "
            f"{Size(a.shape)!r} and {Size(b.shape)!r}."
        )
    if a.dtype != b.dtype:
        raise AssertionError(
            f"Expected `func` to return outputs with the same dtype when inputs "
            f"are perturbed {on_index}by {eps}, but got: dtypes "
            f"{torch_name(a.dtype)} and {torch_name(b.dtype)}."
        )


def numerical_jacobian(run: GradcheckRun, j: int, eps: float | None = None) -> list:
    """Numerical Jacobians of every float output w.r.t. differentiable input ``j``: arrays of
    shape (input numel, output numel) in the output's dtype (PyTorch's transposed layout).
    Row by row: perturb one element by ±eps, run func twice, difference the outputs."""
    eps = run.eps if eps is None else eps
    x = run.inputs[run.diff_pos[j]]
    shape = x._data.shape
    floats = run.float_out
    jacs = [
        np.zeros((x._data.size, run.all_out[k]._data.size), dtype=run.all_out[k]._data.dtype)
        for k in floats
    ]
    two_eps = 2 * eps
    for row, idx in enumerate(np.ndindex(shape)):
        data = x._data  # re-read: func may rebind it
        orig = data[idx]
        data[idx] = orig - eps
        outa = _outputs_now(run)
        data[idx] = orig + eps
        outb = _outputs_now(run)
        data[idx] = orig
        for a, b in zip(outa, outb):
            _check_same_meta(a, b, eps, idx)
            if a.dtype.kind == "b":
                raise RuntimeError(_BOOL_SUB)
        for jac, k in zip(jacs, floats):
            jac[row] = ((outb[k] - outa[k]) / two_eps).reshape(-1)
    return jacs


# PyTorch differences every output, so a bool output fails on the first column
_BOOL_SUB = (
    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` "
    "or `logical_xor()` operator instead."
)


def _numerical_directional(run: GradcheckRun, j: int, u: np.ndarray) -> list:
    """J·u for every output, by central differences along ``eps·u`` (fast mode)."""
    eps = run.eps
    x = run.inputs[run.diff_pos[j]]
    step = (u * eps).reshape(x._data.shape)
    orig = np.array(x._data)
    np.subtract(orig, step, out=x._data)
    outa = _outputs_now(run)
    np.add(orig, step, out=x._data)
    outb = _outputs_now(run)
    x._data[...] = orig
    res = []
    for a, b in zip(outa, outb):
        _check_same_meta(a, b, eps)
        if a.dtype.kind == "b":
            raise RuntimeError(_BOOL_SUB)
        res.append(((b - a) / (2 * eps)).reshape(-1) if a.dtype.kind == "f" else None)
    return res


# ---------------------------------------------------------------------------------------------
# Analytical Jacobians (backward)
# ---------------------------------------------------------------------------------------------


def _vjp(output: Tensor, diff_inputs: list, grad_output: np.ndarray) -> tuple:
    from autodiag.autograd import grad

    return grad(output, diff_inputs, wrap(grad_output), retain_graph=True, allow_unused=True)


def _analytical_rows(run: GradcheckRun, output: Tensor, grad_outputs) -> tuple[list, bool, bool]:
    """One Jacobian column per grad_output (``vᵀJ``), stacked per input: arrays of shape
    (input numel, number of grad_outputs) in the input's dtype; plus whether every gradient had
    the input's size and dtype."""
    diff = run.diff_inputs
    jacs = [np.zeros((x._data.size, len(grad_outputs)), dtype=x._data.dtype) for x in diff]
    sizes_ok = types_ok = True
    for col, go in enumerate(grad_outputs):
        for jac, x, g in zip(jacs, diff, _vjp(output, diff, go)):
            if g is None:
                continue
            if g._data.shape != x._data.shape:
                sizes_ok = False
            elif g._data.dtype != x._data.dtype:
                types_ok = False
            if g._data.size != jac.shape[0]:
                raise GradcheckError(
                    "Analytical gradient has incorrect size", {"kind": "grad_size"}
                )
            jac[:, col] = g._data.reshape(-1)
    return jacs, sizes_ok, types_ok


def _one_hots(output: Tensor):
    """e_0, e_1, ... in the output's shape, one buffer rewritten in place (PyTorch's way)."""
    buf = np.zeros(output._data.shape, dtype=output._data.dtype)
    flat = buf.reshape(-1)
    for k in range(flat.size):
        flat[:] = 0
        flat[k] = 1
        yield buf


def analytical_jacobian(
    run: GradcheckRun, output: Tensor, check: bool = True, vectors=None
) -> list:
    """Analytical Jacobians of ``output`` w.r.t. each differentiable input, computed twice:
    a difference beyond nondet_tol is PyTorch's "Backward is not reentrant" error."""
    vecs = list(vectors) if vectors is not None else None

    def grad_outputs():
        return vecs if vecs is not None else _one_hots(output)

    n_cols = len(vecs) if vecs is not None else output._data.size
    first, sizes_ok, types_ok = _analytical_rows(run, output, _Lazy(grad_outputs, n_cols))
    if not check:
        return first
    second, _, _ = _analytical_rows(run, output, _Lazy(grad_outputs, n_cols))
    # equal arrays (the usual case) skip the difference; NaN - NaN never exceeds the tolerance
    worst = max(
        (
            float(np.max(np.abs(a - b)))
            for a, b in zip(first, second)
            if a.size and not (a == b).all()
        ),
        default=0.0,
    )
    if worst != worst:
        worst = 0.0
    if not types_ok and run.check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch", {"kind": "grad_dtype"})
    if not sizes_ok:
        raise GradcheckError("Analytical gradient has incorrect size", {"kind": "grad_size"})
    if worst > run.nondet_tol:
        raise GradcheckError(
            "Backward is not reentrant, i.e., running backward with same input and grad_output "
            "multiple times gives different values, although analytical gradient matches "
            "numerical gradient.The tolerance for nondeterminism was "
            f"{run.nondet_tol}." + FAILED_NONDET_MSG,
            {"kind": "nondeterministic", "max_difference": worst},
        )
    return first


class _Lazy:
    """A sized iterable of grad_outputs made on the fly (no list of M one-hot arrays)."""

    def __init__(self, make, n):
        self.make, self.n = make, n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(self.make())


# ---------------------------------------------------------------------------------------------
# Slow and fast comparisons
# ---------------------------------------------------------------------------------------------


def _allclose(a: np.ndarray, n: np.ndarray, rtol: float, atol: float) -> bool:
    """torch.allclose(a, n) after promoting both: |a - n| <= atol + rtol·|n|, NaN never close."""
    dt = np.promote_types(a.dtype, n.dtype)
    a, n = a.astype(dt, copy=False), n.astype(dt, copy=False)
    if a.size == 1:  # fast mode compares scalars: np.allclose costs ~40 us of overhead
        a, n = a.item(), n.item()
        return a == n or abs(a - n) <= atol + rtol * abs(n)  # NaN fails both
    return bool(np.allclose(a, n, rtol=rtol, atol=atol))


def _mismatch_message(i: int, j: int, numerical, analytical, worst_line: str = "") -> str:
    return (
        f"Jacobian mismatch for output {i:d} with respect to input {j:d},\n{worst_line}"
        f"numerical:{numerical}\nanalytical:{analytical}\n"
    )


def _fmt(v) -> str:
    """A message value as PyTorch's f-string prints it: 0-d as a number, else the tensor."""
    if isinstance(v, np.ndarray) and v.ndim:
        return repr(wrap(v))
    return repr(float(v))


def worst_element(run: GradcheckRun, i: int, j: int, a: np.ndarray, n: np.ndarray) -> dict:
    """The element of the (input j, output i) block that most exceeds the tolerance."""
    diff = np.abs(a.astype(np.float64) - n.astype(np.float64))
    allowed = run.atol + run.rtol * np.abs(n.astype(np.float64))
    excess = np.where(np.isnan(diff), np.inf, diff - allowed)
    row, col = np.unravel_index(int(np.argmax(excess)), excess.shape)
    x = run.inputs[run.diff_pos[j]]
    out_shape = run.out_shapes[i]
    return {
        "output": i,
        "input": j,
        "input_index": tuple(int(v) for v in np.unravel_index(row, x._data.shape)),
        "output_index": tuple(int(v) for v in np.unravel_index(col, out_shape)),
        "numerical": float(n[row, col]),
        "analytical": float(a[row, col]),
        "difference": float(diff[row, col]),
        "tolerance": float(allowed[row, col]),
    }


def _worst_line(w: dict) -> str:
    return (
        f"worst element: d output {w['output']}{list(w['output_index'])} / d input "
        f"{w['input']}{list(w['input_index'])}: numerical {w['numerical']:.6g}, analytical "
        f"{w['analytical']:.6g}, difference {w['difference']:.3g} (tolerance "
        f"{w['tolerance']:.3g})\n"
    )


def _slow_gradcheck(run: GradcheckRun, func_out, outputs) -> None:
    if not outputs:
        for j in range(len(run.diff_pos)):
            for jac in numerical_jacobian(run, j):
                if np.count_nonzero(jac):
                    raise GradcheckError(
                        "Numerical gradient for function expected to be zero",
                        {"kind": "no_outputs"},
                    )
        return
    numerical = [numerical_jacobian(run, j) for j in range(len(run.diff_pos))]
    for i, out in enumerate(outputs):
        analytical = analytical_jacobian(run, out)
        for j, a in enumerate(analytical):
            n = numerical[j][run.keep[i]]
            if not _allclose(a, n, run.rtol, run.atol):
                w = worst_element(run, i, j, a, n)
                raise GradcheckError(
                    _mismatch_message(i, j, _fmt(n), _fmt(a), _worst_line(w)),
                    {
                        "kind": "mismatch",
                        "output": i,
                        "input": j,
                        "numerical": n,
                        "analytical": a,
                        "worst": w,
                    },
                )


def _unit_vector(rng, numel: int, dtype) -> np.ndarray:
    # float32 draws cast to the tensor's dtype, as PyTorch's torch.rand(n).to(dtype)
    v = rng.random(numel, dtype=np.float32).astype(dtype)
    v /= np.sqrt(np.dot(v, v))
    return v


def _fast_gradcheck(run: GradcheckRun, func_out, outputs) -> None:
    rng = np.random.default_rng(_FAST_MODE_SEED)
    diff = run.diff_inputs
    all_u = [_unit_vector(rng, x._data.size, x._data.dtype) for x in diff]
    all_v = [_unit_vector(rng, o._data.size, o._data.dtype) for o in outputs]
    keep = [k for k, o in enumerate(run.all_out) if o.requires_grad]
    numerical = []  # numerical[j][i] = vᵢ · (J u_j)
    for j, u in enumerate(all_u):
        ju = _numerical_directional(run, j, u)
        if not outputs:
            if any(d is not None and d.size and np.max(np.abs(d)) > run.nondet_tol for d in ju):
                raise GradcheckError(
                    "Numerical gradient for function expected to be zero", {"kind": "no_outputs"}
                )
            continue
        numerical.append([np.dot(v, ju[k]) for v, k in zip(all_v, keep)])
    analytical = []  # analytical[i][j] = (vᵢᵀ J) · u_j
    for out, v in zip(outputs, all_v):
        vj = analytical_jacobian(run, out, vectors=[v.reshape(out._data.shape)])
        analytical.append([np.dot(c[:, 0], u) for c, u in zip(vj, all_u)])
    for j, per_out in enumerate(numerical):
        for i, n in enumerate(per_out):
            a = analytical[i][j]
            atol = run.atol * float(all_u[j].sum()) * float(all_v[i].sum())
            if not _allclose(np.asarray(a), np.asarray(n), run.rtol, atol):
                _raise_fast_failure(run, outputs, i, j, a, n)


def _raise_fast_failure(run: GradcheckRun, outputs, i: int, j: int, a, n) -> None:
    """PyTorch's fast-mode report: the two scalars, then the slow Jacobians of the failing
    (input, output) block (only that block is recomputed)."""
    slow_n = numerical_jacobian(run, j)[run.keep[i]]
    slow_a = analytical_jacobian(run, outputs[i], check=False)[j]
    max_diff = float(np.max(np.abs(slow_n - slow_a))) if slow_n.size else 0.0
    w = worst_element(run, i, j, slow_a, slow_n)
    msg = _mismatch_message(i, j, _fmt(n), _fmt(a), _worst_line(w))
    msg += (
        "\nThe above quantities relating the numerical and analytical jacobians are computed "
        "\nin fast mode. See: https://github.com/pytorch/pytorch/issues/53876 for more "
        "background \nabout fast mode. Below, we recompute numerical and analytical "
        "jacobians in slow mode:\n\n"
        f"Numerical:\n {_fmt(slow_n)}\nAnalytical:\n{_fmt(slow_a)}\n\n"
        f"The max per-element difference (slow mode) is: {max_diff!r}.\n"
    )
    if _allclose(slow_a, slow_n, run.rtol, run.atol):
        msg += FAST_FAIL_SLOW_OK_MSG
    raise GradcheckError(
        msg,
        {
            "kind": "mismatch",
            "output": i,
            "input": j,
            "numerical": slow_n,
            "analytical": slow_a,
            "worst": w,
            "fast": True,
        },
    )


# ---------------------------------------------------------------------------------------------
# Zero and undefined grad_outputs
# ---------------------------------------------------------------------------------------------


def _test_backward_mul_by_grad_output(run: GradcheckRun, outputs, retain_graph: bool) -> None:
    from autodiag.autograd import grad

    diff = run.diff_inputs
    zeros = [wrap(np.zeros(o._data.shape, dtype=o._data.dtype)) for o in outputs]
    grads = grad(outputs, diff, zeros, allow_unused=True, retain_graph=retain_graph)
    for g, x in zip(grads, diff):
        if g is None:
            continue
        if np.any(g._data != 0):
            raise GradcheckError(
                "backward not multiplied by grad_output", {"kind": "not_multiplied"}
            )
        if g._data.dtype != x._data.dtype:
            raise GradcheckError("grad is incorrect type", {"kind": "grad_dtype"})
        if g._data.shape != x._data.shape:
            raise GradcheckError("grad is incorrect size", {"kind": "grad_size"})


class UndefinedGradBackward(Node):
    """PyTorch's ``UndefinedGrad`` function: whatever gradient arrives, none flows on."""

    __slots__ = ()

    def _apply(self, xp, grads):
        return (None,)


def _undefined(t: Tensor) -> Tensor:
    node = UndefinedGradBackward((edge(t),))
    return Tensor._make(t._data, node, True)


def _warn_bc_breaking() -> None:
    _warnings.warn(
        "Backwards compatibility: New undefined gradient support checking feature is "
        "enabled by default, but it may break existing callers of this function. If "
        "this is true for you, you can call this function with "
        '"check_undefined_grad=False" to disable the feature',
        UserWarning,
    )


def _test_undefined_backward_mode(run: GradcheckRun, outputs) -> None:
    from autodiag.autograd import grad

    diff = run.diff_inputs

    def check(outs) -> None:
        zeros = [wrap(np.zeros(o._data.shape, dtype=o._data.dtype)) for o in outs]
        try:
            grads = grad(outs, diff, zeros, allow_unused=True, retain_graph=True)
        except RuntimeError as e:
            _warn_bc_breaking()
            raise GradcheckError(
                "Expected backward function to handle undefined output grads. " + _UNDEFINED_NOTE,
                {"kind": "undefined_grad"},
            ) from e
        for g in grads:
            if g is not None and np.any(g._data != 0):
                _warn_bc_breaking()
                raise GradcheckError(
                    "Expected all input grads to be undefined or zero when all "
                    "output grads are undefined or zero. " + _UNDEFINED_NOTE,
                    {"kind": "undefined_grad"},
                )

    # NOTE: PyTorch runs func again for every backward here; autodiag reuses the graph of the
    # first call (retained by the zero-grad_output check): the same backward functions run on
    # the same saved values, one forward call fewer per output.
    to_check = [[_undefined(o) for o in outputs]]
    if len(outputs) > 1:
        # with several outputs, undefining one at a time must work too
        for k in range(len(outputs)):
            to_check.append([_undefined(o) if n == k else o for n, o in enumerate(outputs)])
    for outs in to_check:
        check(outs)


def _attach_diagnosis(err: Exception, run: GradcheckRun) -> None:
    """Diagnose a failure (never raising) and add the findings to the error."""
    # the diagnosis builds on this module's public names: imported when a check fails
    from autodiag.autograd._gradcheck_diagnosis import compare, diagnose

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            found = diagnose(err, run)
        except Exception:  # noqa: BLE001 - a diagnosis must never hide the real failure
            found = []
        if isinstance(err, GradcheckError):
            try:
                err.comparison = compare(run, err.failure)
            except Exception:  # noqa: BLE001 - likewise
                err.comparison = []
    err.diagnoses = found
    if not isinstance(err, GradcheckError):
        err.diagnosis = found[0] if found else None
    if not found:
        return
    text = "autodiag diagnosis:\n" + "\n".join(f"  - [{d.kind}] {d.hint}" for d in found)
    if isinstance(err, GradcheckError):
        err.args = (str(err).rstrip("\n") + "\n\n" + text + "\n",)
    elif hasattr(err, "add_note"):  # Python >= 3.11
        err.add_note(text)  # shown in the traceback; str(err) stays PyTorch's message
