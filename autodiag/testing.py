"""Test helpers: ``assert_gradcheck`` turns a gradcheck failure into a test failure that says
why (autodiag's diagnosis), for pytest, unittest or a plain ``assert``-style script.

>>> import autodiag as torch
>>> from autodiag.testing import assert_gradcheck
>>> x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
>>> assert_gradcheck(lambda t: t.exp() * t, (x,), gradgrad=True)
>>> class Twice(torch.autograd.Function):
...     @staticmethod
...     def forward(ctx, t):
...         return t * 2
...     @staticmethod
...     def backward(ctx, g):
...         return g * 3  # wrong: the derivative of 2t is 2
>>> try:
...     assert_gradcheck(Twice, x)
... except AssertionError as e:
...     print(str(e).splitlines()[0])
...     print("constant_factor" in str(e))
gradcheck of Twice.apply failed: Jacobian mismatch for output 0 with respect to input 0,
True

The pytest plugin (``pytest --autodiag``, see ``autodiag.pytest_plugin``) also provides this
function as the fixture ``autodiag_gradcheck``.
"""

from __future__ import annotations

from collections.abc import Callable

from autodiag.analysis.gradcheck import callable_name
from autodiag.autograd import Function, GradcheckError, gradcheck, gradgradcheck

__all__ = ["assert_gradcheck"]


def assert_gradcheck(
    fn: Callable | type,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gradgrad: bool = False,
    fast_mode: bool = False,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
) -> None:
    """Assert that ``fn``'s gradients at ``inputs`` match finite differences (``gradcheck``),
    and its second derivatives too with ``gradgrad=True`` (``gradgradcheck``).

    ``fn``: a callable of tensors, or an ``autograd.Function`` subclass (its ``apply`` is
    checked). ``inputs``: a tensor or a tuple of arguments; use float64 tensors with
    ``requires_grad=True`` (finite differences in float32 are too coarse for the default
    tolerances). The other parameters are gradcheck's.

    Raises ``AssertionError`` with gradcheck's message and autodiag's diagnosis (a wrong
    constant factor, a kink at the input, a backward returning the wrong number of gradients,
    ...) when a check fails. Errors of ``fn`` itself (a TypeError in forward, say) propagate
    unchanged: they are bugs in the test, not wrong gradients.
    """
    __tracebackhide__ = True  # pytest: the failure points at the test's line, not here
    func = fn.apply if isinstance(fn, type) and issubclass(fn, Function) else fn
    name = callable_name(func)
    kwargs = {
        "eps": eps,
        "atol": atol,
        "rtol": rtol,
        "fast_mode": fast_mode,
        "nondet_tol": nondet_tol,
        "check_undefined_grad": check_undefined_grad,
    }
    checks = [("gradcheck", gradcheck)]
    if gradgrad:
        checks.append(("gradgradcheck (second derivatives)", gradgradcheck))
    for what, check in checks:
        try:
            check(func, inputs, **kwargs)
        except RuntimeError as err:
            diagnoses = getattr(err, "diagnoses", None)
            if not isinstance(err, GradcheckError) and not diagnoses:
                raise  # not a gradient failure autodiag recognises: the test's own error
            raise AssertionError(f"{what} of {name} failed: {_text(err)}") from None


def _text(err: RuntimeError) -> str:
    """The error's message with the diagnosis: a GradcheckError's message already ends with it;
    an engine error (wrong number of gradients) carries it in ``diagnoses`` only."""
    text = str(err).strip()
    if isinstance(err, GradcheckError) or "autodiag diagnosis:" in text:
        return text
    lines = [f"  - [{d.kind}] {d.hint}" for d in err.diagnoses]
    return text + "\n\nautodiag diagnosis:\n" + "\n".join(lines)
