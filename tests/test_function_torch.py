"""Differential tests of custom ``autograd.Function`` against PyTorch.

Each Function is defined once per module (``m`` is ``autodiag`` or ``torch``) by a factory, so
the same class body runs under both engines.
"""

from __future__ import annotations

import re

import pytest
from differential import names, run_both, same_error

import autodiag as ad

# ---------------------------------------------------------------------------------------------
# Functions, built per module
# ---------------------------------------------------------------------------------------------


def make_cubic(m):
    class Cubic(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x**2 * g  # differentiable ops: supports double backward

    return Cubic


def make_round_ste(m):
    class RoundSTE(m.autograd.Function):
        """Straight-through round: forward rounds, backward passes the gradient unchanged."""

        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    return RoundSTE


def make_clamp(m):
    class Clamp(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, lo, hi):
            ctx.save_for_backward(x)
            ctx.lo, ctx.hi = lo, hi  # non-tensor state on ctx
            return x.clamp(lo, hi)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            mask = (x >= ctx.lo) & (x <= ctx.hi)
            return g * mask, None, None

    return Clamp


def make_mul_add(m):
    class MulAdd(m.autograd.Function):
        """Two tensor inputs, two outputs; records needs_input_grad."""

        seen = []

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            MulAdd.seen.append(tuple(ctx.needs_input_grad))
            return a * b, a + b

        @staticmethod
        def backward(ctx, g_mul, g_add):
            a, b = ctx.saved_tensors
            ga = g_mul * b + g_add if ctx.needs_input_grad[0] else None
            gb = g_mul * a + g_add if ctx.needs_input_grad[1] else None
            return ga, gb

    return MulAdd


# ---------------------------------------------------------------------------------------------
# Basics
# ---------------------------------------------------------------------------------------------


def test_cubic_forward_backward_and_node(torch):
    def f(m):
        x = m.tensor([1.0, -2.0, 0.5], requires_grad=True)
        y = make_cubic(m).apply(x)
        fn = y.grad_fn
        y.sum().backward()
        return y, x.grad, names(fn), type(fn).__name__, y.is_leaf, y.requires_grad

    run_both(f, torch)


def test_cubic_double_backward(torch):
    def f(m):
        x = m.tensor([1.0, -2.0, 0.5], dtype=m.float64, requires_grad=True)
        y = make_cubic(m).apply(x).sum()
        (g,) = m.autograd.grad(y, x, create_graph=True)
        (gg,) = m.autograd.grad(g.sum(), x, create_graph=True)
        (ggg,) = m.autograd.grad(gg.sum(), x)
        return g, gg, ggg

    run_both(f, torch)


def test_round_ste(torch):
    def f(m):
        x = m.tensor([0.2, 1.7, -2.6], requires_grad=True)
        y = make_round_ste(m).apply(x)
        (y * m.tensor([1.0, 2.0, 3.0])).sum().backward()
        return y, x.grad, y.grad_fn.name()

    run_both(f, torch)


def test_clamp_with_non_tensor_args(torch):
    def f(m):
        x = m.tensor([-2.0, 0.5, 3.0], requires_grad=True)
        y = make_clamp(m).apply(x, -1.0, 1.0)
        fn = y.grad_fn
        y.sum().backward()
        # next_functions only lists the tensor inputs
        return y, x.grad, names(fn), len(fn.next_functions)

    run_both(f, torch)


def test_non_tensor_arg_between_tensors(torch):
    class_cache = {}

    def f(m):
        class Scale(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, k, b):
                ctx.k = k
                return a * k + b

            @staticmethod
            def backward(ctx, g):
                return g * ctx.k, None, g

        class_cache[m.__name__] = Scale
        a = m.tensor([1.0, 2.0], requires_grad=True)
        b = m.tensor([3.0, 4.0], requires_grad=True)
        y = Scale.apply(a, 3.0, b)
        y.sum().backward()
        return a.grad, b.grad, names(y.grad_fn)

    run_both(f, torch)


def test_needs_input_grad_and_multiple_outputs(torch):
    def f(m):
        MulAdd = make_mul_add(m)
        a = m.tensor([1.0, 2.0], requires_grad=True)
        b = m.tensor([3.0, 4.0])
        p, s = MulAdd.apply(a, b)
        (p * 2 + s * 3).sum().backward()
        fn = p.grad_fn
        return (
            list(MulAdd.seen),
            a.grad,
            b.grad,
            p.grad_fn is s.grad_fn,
            names(fn),
            p.requires_grad,
            s.requires_grad,
        )

    run_both(f, torch)


def test_multiple_outputs_one_unused(torch):
    def f(m):
        MulAdd = make_mul_add(m)
        a = m.tensor([1.0, 2.0], requires_grad=True)
        b = m.tensor([3.0, 4.0], requires_grad=True)
        p, s = MulAdd.apply(a, b)
        p.sum().backward()  # g_add arrives materialized as zeros
        return a.grad, b.grad

    run_both(f, torch)


def test_set_materialize_grads_false(torch):
    def f(m):
        got = []

        class Two(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(False)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                got.append((g1 is None, g2 is None))
                out = 0
                if g1 is not None:
                    out = out + 2 * g1
                if g2 is not None:
                    out = out + 3 * g2
                return out

        x = m.tensor([1.0, 2.0], requires_grad=True)
        a, _ = Two.apply(x)
        a.sum().backward()
        return got, x.grad

    run_both(f, torch)


def test_setup_context_style(torch):
    def f(m):
        class Sin(m.autograd.Function):
            @staticmethod
            def forward(x, scale):
                return x.sin() * scale

            @staticmethod
            def setup_context(ctx, inputs, output):
                x, scale = inputs
                ctx.save_for_backward(x)
                ctx.scale = scale

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * x.cos() * ctx.scale, None

        x = m.tensor([0.1, 0.7], requires_grad=True)
        y = Sin.apply(x, 2.0)
        y.sum().backward()
        return y, x.grad, names(y.grad_fn)

    run_both(f, torch)


def test_mark_dirty(torch):
    def f(m):
        class AddOne(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.add_(1)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g

        a = m.tensor([1.0, 2.0], requires_grad=True)
        x = a.clone()
        v0 = x._version
        y = AddOne.apply(x)
        (y * y).sum().backward()
        return y, y is x, x._version - v0, x.grad_fn.name(), a.grad

    run_both(f, torch)


def test_mark_non_differentiable(torch):
    def f(m):
        class SortLike(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x * 2
                idx = (x > 0).float()
                ctx.mark_non_differentiable(idx)
                return y, idx

            @staticmethod
            def backward(ctx, g, g_idx):
                return g * 2

        x = m.tensor([1.0, -2.0], requires_grad=True)
        y, idx = SortLike.apply(x)
        y.sum().backward()
        return idx.requires_grad, idx.grad_fn is None, y.requires_grad, x.grad

    run_both(f, torch)


def _exp_once(m):
    class Exp(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            r = x.exp()
            ctx.save_for_backward(r)
            return r

        @staticmethod
        @m.autograd.function.once_differentiable
        def backward(ctx, g):
            (r,) = ctx.saved_tensors
            return g * r

    return Exp


def test_once_differentiable(torch):
    def f(m):
        x = m.tensor([0.5, 1.0], requires_grad=True)
        # x * Exp(x): the gradient reaching Exp's backward requires grad under create_graph
        (g,) = m.autograd.grad((_exp_once(m).apply(x) * x).sum(), x, create_graph=True)
        return g, g.requires_grad, names(g.grad_fn.next_functions[1][0])

    a = run_both(f, torch)
    assert a[1] is True

    def twice(m):
        g = f(m)[0]
        g.sum().backward()

    same_error(
        twice,
        torch,
        "trying to differentiate twice a function that was marked with @once_differentiable",
    )

    def plain_grad(m):
        # the incoming gradient does not require grad: the result is a plain constant
        x = m.tensor([0.5, 1.0], requires_grad=True)
        (g,) = m.autograd.grad(_exp_once(m).apply(x).sum(), x, create_graph=True)
        return g, g.requires_grad

    run_both(plain_grad, torch)


def test_saved_tensors_after_backward(torch):
    def f(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = make_cubic(m).apply(x)
        y.sum().backward()
        return y.grad_fn.saved_tensors

    same_error(f, torch, "backward through the graph a second time")


def test_function_without_grad_inputs(torch):
    def f(m):
        x = m.tensor([1.0, 2.0])
        y = make_cubic(m).apply(x)
        return y, y.requires_grad, y.grad_fn is None

    run_both(f, torch)


def test_function_under_no_grad(torch):
    def f(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        with m.no_grad():
            y = make_cubic(m).apply(x)
        return y, y.requires_grad

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_wrong_number_of_gradients(torch):
    def f(m):
        class Bad(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g

        a = m.tensor([1.0, 2.0], requires_grad=True)
        b = m.tensor([1.0, 2.0], requires_grad=True)
        Bad.apply(a, b).sum().backward()

    same_error(
        f,
        torch,
        "function BadBackward returned an incorrect number of gradients (expected 2, got 1)",
    )


def test_extra_none_gradients_are_dropped(torch):
    def f(m):
        class Extra(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2, None, None

        a = m.tensor([1.0, 2.0], requires_grad=True)
        Extra.apply(a).sum().backward()
        return a.grad

    run_both(f, torch)


def test_gradient_for_non_tensor_input(torch):
    def f(m):
        class Bad(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, k):
                return a * k

            @staticmethod
            def backward(ctx, g):
                return g, g

        a = m.tensor([1.0, 2.0], requires_grad=True)
        Bad.apply(a, 2.0).sum().backward()

    same_error(
        f,
        torch,
        "function BadBackward returned a gradient different than None at "
        "position 2, but the corresponding forward input was not a Variable",
    )


def test_invalid_gradient_shape(torch):
    def f(m):
        class Bad(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return m.ones(3)

        a = m.tensor([1.0, 2.0], requires_grad=True)
        Bad.apply(a).sum().backward()

    same_error(
        f,
        torch,
        "Function BadBackward returned an invalid gradient at index 0 - got [3] "
        "but expected shape compatible with [2]",
    )


def test_broadcastable_gradient_is_summed(torch):
    def f(m):
        class Wide(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g.expand(3, 2) * 1

        a = m.tensor([1.0, 2.0], requires_grad=True)
        Wide.apply(a).sum().backward()
        return a.grad

    run_both(f, torch)


def test_modified_saved_tensor_in_function(torch):
    def f(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        h = x * 1
        y = make_cubic(m).apply(h)
        h.mul_(2)
        y.sum().backward()

    ea, et = same_error(f, torch, "modified by an inplace operation")
    pat = r"is at version (\d+); expected version (\d+)"
    assert re.search(pat, str(ea)).groups() == re.search(pat, str(et)).groups()


def test_save_for_backward_non_tensor(torch):
    def f(m):
        class Bad(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a, 3)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g

        Bad.apply(m.ones(2, requires_grad=True))

    same_error(f, torch, "save_for_backward can only save variables")


def test_function_requires_grad_false_input_only_tensor_edges(torch):
    def f(m):
        Cubic = make_cubic(m)
        a = m.tensor([1.0, 2.0], requires_grad=True)
        c = m.tensor([1.0, 2.0])
        MulAdd = make_mul_add(m)
        p, _ = MulAdd.apply(c, Cubic.apply(a))
        return names(p.grad_fn)

    run_both(f, torch)


@pytest.mark.parametrize("order", [1, 2])
def test_cubic_gradients_vs_formula(order):
    # no oracle: 3x^2 and 6x
    x = ad.tensor([1.5, -0.5], dtype=ad.float64, requires_grad=True)
    y = make_cubic(ad).apply(x).sum()
    (g,) = ad.autograd.grad(y, x, create_graph=True)
    if order == 1:
        assert g.tolist() == [3 * 1.5**2, 3 * 0.25]
    else:
        (gg,) = ad.autograd.grad(g.sum(), x)
        assert gg.tolist() == [9.0, -3.0]


def test_mark_dirty_on_leaf_errors(torch):
    def f(m):
        class Dirty(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 2

        Dirty.apply(m.tensor([1.0, 2.0], requires_grad=True))

    same_error(
        f, torch, "a leaf Variable that requires grad has been used in an in-place operation."
    )


def test_non_tensor_gradient_error(torch):
    def f(m):
        class F(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return 3

        F.apply(m.tensor([1.0, 2.0], requires_grad=True)).sum().backward()

    same_error(f, torch, "expected Variable or None (got int)")


def test_modified_saved_output_in_function(torch):
    def f(m):
        class F(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x * 2
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y

        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = F.apply(x)
        y.add_(1)
        y.sum().backward()

    ea, et = same_error(f, torch, "modified by an inplace operation", "which is output 0 of F,")
    pat = r"is at version (\d+); expected version (\d+)"
    assert re.search(pat, str(ea)).groups() == re.search(pat, str(et)).groups()


def test_input_returned_as_is(torch):
    def f(m):
        class Id(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 2

        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = Id.apply(x)
        y.sum().backward()
        return y is x, y._base is x, x.grad, y.grad_fn.name()

    run_both(f, torch)
