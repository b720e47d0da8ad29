"""Differential tests of ``autograd.functional`` (jacobian, hessian, vjp, jvp, hvp, vhp).

Every snippet runs under autodiag and PyTorch (``m`` is the module): values, the nesting of
tuples, whether results carry history, and strict-mode errors are compared.
"""

from __future__ import annotations

import doctest

import pytest
from differential import run_both, same_error

import autodiag as ad
from autodiag.autograd import functional as ad_functional

# torch's functional API calls torch.jit.script internally, which warns in 2.13
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def structure(x):
    """The nesting of a result and, per tensor, whether it carries history."""
    if isinstance(x, tuple):
        return tuple(structure(e) for e in x)
    return ("T", x.requires_grad, x.grad_fn is not None)


def both_with_structure(fn, torch):
    """run_both, plus the same tuple nesting and history flags."""
    a = run_both(fn, torch)
    assert structure(a) == structure(fn(torch))
    return a


def xs(m):
    return m.tensor([0.5, -1.25, 2.0], dtype=m.float64)


def ys(m):
    return m.tensor([[1.5, 0.25], [-0.75, 1.0]], dtype=m.float64)


def cube_sum(x):
    return (x**3).sum()


def vec_fn(x):
    return x.sin() * x**2


def two_in_two_out(x, y):
    return (x * y.sum(), (x**2).sum() * y)


def scalar_two_in(x, y):
    return (x.exp().sum() * y**2).sum()


# ---------------------------------------------------------------------------------------------
# jacobian
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["scalar", "vector", "tuple_in_out", "tuple_in_scalar_out", "matrix"]
)
def test_jacobian_values_and_structure(torch, kind):
    def f(m):
        J = m.autograd.functional.jacobian
        if kind == "scalar":
            return J(cube_sum, xs(m))
        if kind == "vector":
            return J(vec_fn, xs(m))
        if kind == "tuple_in_out":
            return J(two_in_two_out, (xs(m), ys(m)))
        if kind == "tuple_in_scalar_out":
            return J(scalar_two_in, (xs(m), ys(m)))
        return J(lambda y: y @ y, ys(m))

    both_with_structure(f, torch)


def test_jacobian_single_input_in_a_tuple(torch):
    both_with_structure(lambda m: m.autograd.functional.jacobian(vec_fn, (xs(m),)), torch)


def test_jacobian_unused_input_is_zero(torch):
    def f(m):
        return m.autograd.functional.jacobian(lambda x, y: x * 2, (xs(m), ys(m)))

    both_with_structure(f, torch)


def test_jacobian_vectorize_and_forward_mode_give_the_same_values(torch):
    def f(m):
        J = m.autograd.functional.jacobian
        return (
            J(two_in_two_out, (xs(m), ys(m)), vectorize=True),
            J(vec_fn, xs(m), vectorize=True, strategy="forward-mode"),
        )

    both_with_structure(f, torch)


def test_jacobian_create_graph_is_differentiable(torch):
    def f(m):
        x = xs(m).requires_grad_()
        jac = m.autograd.functional.jacobian(vec_fn, x, create_graph=True)
        (g,) = m.autograd.grad(jac.sum(), x)
        return jac, g

    both_with_structure(f, torch)


def test_jacobian_without_create_graph_detaches(torch):
    def f(m):
        x = xs(m).requires_grad_()
        return m.autograd.functional.jacobian(vec_fn, x)

    both_with_structure(f, torch)


def test_jacobian_int_output_and_captured_input(torch):
    # the function closes over ``x`` itself: the Jacobian is w.r.t. the fresh input object only
    def f(m):
        x = xs(m).requires_grad_()
        return m.autograd.functional.jacobian(lambda t: t * x, x)

    both_with_structure(f, torch)


@pytest.mark.parametrize(
    "case,phrase",
    [
        ("independent", "Output 0 of the user-provided function is independent of input 1"),
        ("no_grad_output", "Output 0 of the user-provided function does not require gradients"),
        ("vectorize", "`strict=True` and `vectorized=True` are not supported together"),
        ("forward_strict", '`strategy="forward-mode"` are not supported together'),
        ("forward_no_vectorize", "only implemented for `vectorize=True`"),
        (
            "create_graph_linear",
            "The jacobian of the user-provided function is independent of input",
        ),
    ],
)
def test_jacobian_strict_errors(torch, case, phrase):
    def f(m):
        J = m.autograd.functional.jacobian
        if case == "independent":
            return J(lambda x, y: x * 2, (xs(m), ys(m)), strict=True)
        if case == "no_grad_output":
            return J(lambda x: x.detach() * 2, xs(m), strict=True)
        if case == "vectorize":
            return J(vec_fn, xs(m), strict=True, vectorize=True)
        if case == "forward_strict":
            return J(vec_fn, xs(m), strict=True, vectorize=True, strategy="forward-mode")
        if case == "forward_no_vectorize":
            return J(vec_fn, xs(m), strategy="forward-mode")
        return J(lambda x: x * 2, xs(m).requires_grad_(), strict=True, create_graph=True)

    same_error(f, torch, phrase)


def test_jacobian_bad_arguments(torch):
    same_error(
        lambda m: m.autograd.functional.jacobian(vec_fn, [xs(m)]),
        torch,
        "The inputs given to jacobian must be either a Tensor or a tuple of Tensors but "
        "the given inputs has type <class 'list'>.",
    )
    same_error(
        lambda m: m.autograd.functional.jacobian(vec_fn, (xs(m), 3)),
        torch,
        "but the value at index 1 has type <class 'int'>.",
    )
    same_error(
        lambda m: m.autograd.functional.jacobian(lambda x: 3, xs(m)),
        torch,
        "The outputs of the user-provided function given to jacobian must be either",
    )
    same_error(
        lambda m: m.autograd.functional.jacobian(vec_fn, xs(m), strategy="x"),
        torch,
        'Expected strategy to be either "forward-mode" or "reverse-mode"',
    )


# ---------------------------------------------------------------------------------------------
# hessian
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["single", "tuple", "matrix"])
def test_hessian_values_and_structure(torch, kind):
    def f(m):
        H = m.autograd.functional.hessian
        if kind == "single":
            return H(lambda x: (x.sin() * x**2).sum(), xs(m))
        if kind == "tuple":
            return H(scalar_two_in, (xs(m), ys(m)))
        return H(lambda y: (y @ y).sum(), ys(m))

    both_with_structure(f, torch)


def test_hessian_create_graph_is_differentiable(torch):
    def f(m):
        x = xs(m).requires_grad_()
        h = m.autograd.functional.hessian(cube_sum, x, create_graph=True)
        (g,) = m.autograd.grad(h.sum(), x)
        return h, g

    both_with_structure(f, torch)


@pytest.mark.parametrize(
    "case,phrase",
    [
        (
            "linear",
            "While computing the hessian, found that the jacobian of the user-provided "
            "function with respect to input 0 is independent of the input",
        ),
        ("vector", "The Tensor returned by the function given to hessian should contain a single"),
        ("tuple", "The function given to hessian should return a single Tensor"),
    ],
)
def test_hessian_errors(torch, case, phrase):
    def f(m):
        H = m.autograd.functional.hessian
        if case == "linear":
            return H(lambda x: (2 * x).sum(), xs(m), strict=True)
        if case == "vector":
            return H(vec_fn, xs(m))
        return H(lambda x: (x.sum(), x.sum()), xs(m))

    same_error(f, torch, phrase)


def test_hessian_of_linear_function_is_zero(torch):
    both_with_structure(
        lambda m: m.autograd.functional.hessian(lambda x: (2 * x).sum(), xs(m)), torch
    )


# ---------------------------------------------------------------------------------------------
# vjp / jvp
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("kind", ["scalar_no_v", "vector", "tuple"])
def test_vjp(torch, kind, create_graph):
    def f(m):
        vjp = m.autograd.functional.vjp
        if kind == "scalar_no_v":
            return vjp(cube_sum, xs(m), create_graph=create_graph)
        if kind == "vector":
            return vjp(vec_fn, xs(m), xs(m) * 3, create_graph=create_graph)
        v = (xs(m) + 1, ys(m) - 2)
        return vjp(two_in_two_out, (xs(m), ys(m)), v, create_graph=create_graph)

    both_with_structure(f, torch)


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("kind", ["scalar_input_no_v", "vector", "tuple"])
def test_jvp(torch, kind, create_graph):
    def f(m):
        jvp = m.autograd.functional.jvp
        if kind == "scalar_input_no_v":
            return jvp(
                lambda x: x.exp() * 2, m.tensor(0.5, dtype=m.float64), create_graph=create_graph
            )
        if kind == "vector":
            return jvp(vec_fn, xs(m), xs(m) * 3, create_graph=create_graph)
        v = (xs(m) + 1, ys(m) - 2)
        return jvp(two_in_two_out, (xs(m), ys(m)), v, create_graph=create_graph)

    both_with_structure(f, torch)


def test_vjp_jvp_create_graph_results_are_differentiable(torch):
    def f(m):
        x = xs(m).requires_grad_()
        _, a = m.autograd.functional.vjp(vec_fn, x, xs(m), create_graph=True)
        _, b = m.autograd.functional.jvp(vec_fn, x, xs(m), create_graph=True)
        return a, b, m.autograd.grad((a.sum(), b.sum()), x)

    both_with_structure(f, torch)


def test_vjp_jvp_unused_input_gives_zeros(torch):
    def f(m):
        fn = lambda x, y: x * 2  # noqa: E731
        return (
            m.autograd.functional.vjp(fn, (xs(m), ys(m)), xs(m)),
            m.autograd.functional.jvp(fn, (xs(m), ys(m)), (xs(m), ys(m))),
        )

    both_with_structure(f, torch)


@pytest.mark.parametrize(
    "case,phrase",
    [
        (
            "vjp_no_v",
            "The vector v can only be None if the user-provided function returns a single "
            "Tensor with a single element.",
        ),
        ("vjp_v_size", "v has invalid size: should be torch.Size([3]) but got torch.Size([2])."),
        ("vjp_v_len", "v is a tuple of invalid length: should be 2 but got 1."),
        ("vjp_v_single", "The given v should contain a single Tensor."),
        ("vjp_v_entry", "Entry 1 in v has invalid size"),
        (
            "vjp_strict",
            "The output of the user-provided function is independent of input 1. This is "
            "not allowed in strict mode.",
        ),
        (
            "jvp_no_v",
            "The vector v can only be None if the input to the user-provided function is a "
            "single Tensor with a single element.",
        ),
        ("jvp_strict", "The output of the user-provided function is independent of input 1."),
        ("jvp_strict_out", "Output 0 of the user-provided function does not require gradients"),
        (
            "jvp_strict_trick",
            "The gradient with respect to the input is independent of entry 1 in the grad_outputs",
        ),
        (
            "vjp_strict_create",
            "The jacobian of the user-provided function is independent of input 0."
            " This is not allowed in strict mode when create_graph=True.",
        ),
    ],
)
def test_vjp_jvp_errors(torch, case, phrase):
    def f(m):
        F = m.autograd.functional
        x, y = xs(m), ys(m)
        if case == "vjp_no_v":
            return F.vjp(vec_fn, x)
        if case == "vjp_v_size":
            return F.vjp(vec_fn, x, x[:2])
        if case == "vjp_v_len":
            return F.vjp(two_in_two_out, (x, y), (x,))
        if case == "vjp_v_single":
            return F.vjp(vec_fn, x, (x, x))
        if case == "vjp_v_entry":
            return F.vjp(two_in_two_out, (x, y), (x, x))
        if case == "vjp_strict":
            return F.vjp(lambda a, b: a * 2, (x, y), x, strict=True)
        if case == "jvp_no_v":
            return F.jvp(vec_fn, x)
        if case == "jvp_strict":
            return F.jvp(lambda a, b: a * 2, (x, y), (x, y), strict=True)
        if case == "jvp_strict_out":
            return F.jvp(lambda a: a.detach(), x, x, strict=True)
        if case == "jvp_strict_trick":
            return F.jvp(lambda a: (a * 2, (a * 0).detach().requires_grad_()), x, x, strict=True)
        return F.vjp(
            lambda a: a * 2, x.requires_grad_(), x.detach(), strict=True, create_graph=True
        )

    same_error(f, torch, phrase)


# ---------------------------------------------------------------------------------------------
# hvp / vhp
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn_name", ["hvp", "vhp"])
@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("kind", ["single", "tuple", "scalar_no_v"])
def test_hvp_vhp(torch, fn_name, kind, create_graph):
    def f(m):
        fn = getattr(m.autograd.functional, fn_name)
        if kind == "single":
            return fn(lambda x: (x.sin() * x**2).sum(), xs(m), xs(m) + 1, create_graph=create_graph)
        if kind == "tuple":
            return fn(
                scalar_two_in, (xs(m), ys(m)), (xs(m) - 1, ys(m) * 2), create_graph=create_graph
            )
        return fn(
            lambda x: x.sin() * x**2, m.tensor(0.7, dtype=m.float64), create_graph=create_graph
        )

    both_with_structure(f, torch)


@pytest.mark.parametrize("fn_name", ["hvp", "vhp"])
def test_hvp_vhp_create_graph_is_differentiable(torch, fn_name):
    def f(m):
        x = xs(m).requires_grad_()
        _, r = getattr(m.autograd.functional, fn_name)(cube_sum, x, xs(m), create_graph=True)
        return r, m.autograd.grad(r.sum(), x)

    both_with_structure(f, torch)


@pytest.mark.parametrize("fn_name", ["hvp", "vhp"])
@pytest.mark.parametrize(
    "case,phrase",
    [
        ("vector_out", "should contain a single element"),
        ("tuple_out", "should return a single Tensor"),
        (
            "no_v",
            "The vector v can only be None if the input to the user-provided function is a "
            "single Tensor with a single element.",
        ),
        (
            "linear",
            "the jacobian of the user-provided function with respect to input 0 is "
            "independent of the input",
        ),
        ("unused", "The output of the user-provided function is independent of input 1"),
    ],
)
def test_hvp_vhp_errors(torch, fn_name, case, phrase):
    def f(m):
        fn = getattr(m.autograd.functional, fn_name)
        x, y = xs(m), ys(m)
        if case == "vector_out":
            return fn(vec_fn, x, x)
        if case == "tuple_out":
            return fn(lambda a: (a.sum(),), x, x)
        if case == "no_v":
            return fn(cube_sum, x)
        if case == "linear":
            return fn(lambda a: (a * 2).sum(), x, x, strict=True)
        return fn(lambda a, b: cube_sum(a), (x, y), (x, y), strict=True)

    same_error(f, torch, phrase)


def test_hvp_vhp_of_quadratic_with_unused_input_are_zero(torch):
    def f(m):
        fn = lambda a, b: cube_sum(a)  # noqa: E731
        return (
            m.autograd.functional.hvp(fn, (xs(m), ys(m)), (xs(m), ys(m))),
            m.autograd.functional.vhp(fn, (xs(m), ys(m)), (xs(m), ys(m))),
        )

    both_with_structure(f, torch)


def test_results_follow_float32_inputs(torch):
    def f(m):
        x = m.tensor([0.5, 1.5])
        return (
            m.autograd.functional.jacobian(vec_fn, x),
            m.autograd.functional.hessian(cube_sum, x),
        )

    both_with_structure(f, torch)


def test_docstring_examples_run():
    assert doctest.testmod(ad_functional).failed == 0
    assert ad.autograd.functional is ad_functional
