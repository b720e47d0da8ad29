"""Crashes, wrong errors and small infidelities found by differential fuzzing (issue 17).

Every snippet runs under autodiag and PyTorch 2.13 (``m`` is the module) and compares values,
gradients (first and second order), node names, exception types and key phrases.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from differential import run_both, same_error

import autodiag as ad


def _grads(m, y, x, order=2):
    """y's node name, then d(sum(sin(y)*2))/dx and its derivative (create_graph) as lists."""
    out = [type(y.grad_fn).__name__ if y.grad_fn is not None else None]
    (g,) = m.autograd.grad((y.to(x.dtype).sin() * 2).sum(), x, create_graph=order > 1)
    out.append(g)
    if order > 1:
        (g2,) = m.autograd.grad(g.sum(), x)
        out.append(g2)
    return out


def _x0(m):
    return m.tensor(1.5, dtype=m.float64, requires_grad=True)


# ---------------------------------------------------------------------------------------------
# 0-d tensors: an op that takes ``dim`` accepts dim 0 and -1 on a 0-d tensor, as PyTorch does
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, -1])
def test_gather_0d_backward(torch, dim):
    def f(m):
        x = _x0(m)
        return _grads(m, m.gather(x, dim, m.tensor(0)), x)

    run_both(f, torch)


@pytest.mark.parametrize("index", [[0], 0])
@pytest.mark.parametrize("shape", [(), (1,)])
def test_gather_mixes_0d_and_1d_like_torch(torch, shape, index):
    def f(m):
        x = m.full(shape, 1.5, dtype=m.float64, requires_grad=True)
        y = m.gather(x, 0, m.tensor(index))
        return [y] + _grads(m, y, x)

    run_both(f, torch)


def test_gather_index_smaller_than_input(torch):
    # the index may be smaller than the input in the other dims (autodiag broadcast it: wrong
    # shape and values, silently)
    def f(m):
        x = m.arange(6.0, dtype=m.float64).reshape(2, 3).requires_grad_()
        y = x.gather(0, m.tensor([[1], [0], [1]]))
        return [y] + _grads(m, y, x)

    run_both(f, torch)


@pytest.mark.parametrize(
    "shape, dim, index, phrase",
    [
        ((3,), 0, [5], "index 5 is out of bounds for dimension 0 with size 3"),
        ((3,), 0, [-1], "index -1 is out of bounds for dimension 0 with size 3"),
        ((), 0, 1, "index 1 is out of bounds for dimension 0 with size 1"),
        ((2, 3), 0, [[0, 0, 0, 0]], "Size does not match at dimension 1"),
    ],
)
def test_gather_bad_index(torch, shape, dim, index, phrase):
    same_error(lambda m: m.zeros(shape).gather(dim, m.tensor(index)), torch, phrase)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_dim_0d_backward(torch, op, keepdim):
    def f(m):
        x = _x0(m)
        vals, idx = getattr(x, op)(dim=0, keepdim=keepdim)
        return [idx] + _grads(m, vals, x)

    run_both(f, torch)


@pytest.mark.parametrize("dims", [(0, -1), (0, 0), (-1, -1)])
def test_transpose_0d_second_derivative(torch, dims):
    def f(m):
        x = _x0(m)
        return _grads(m, x.transpose(*dims), x)

    run_both(f, torch)


def test_mT_0d_is_the_tensor_itself(torch):
    def f(m):
        x = _x0(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x.mT
        return [y is x, y]

    run_both(f, torch)


def test_mT_1d_raises(torch):
    same_error(lambda m: m.ones(3).mT, torch, "tensor.mT is only supported on matrices")


@pytest.mark.parametrize("index", [0, [0]])
def test_index_select_0d(torch, index):
    def f(m):
        x = _x0(m)
        y = x.index_select(0, m.tensor(index))
        return [y] + _grads(m, y, x)

    run_both(f, torch)


def test_index_select_0d_index_on_1d_gives_1d(torch):
    def f(m):
        x = m.tensor([1.0, 2.0, 3.0], dtype=m.float64, requires_grad=True)
        y = x.index_select(0, m.tensor(2))
        return [y] + _grads(m, y, x)

    run_both(f, torch)


@pytest.mark.parametrize(
    "shape, index, phrase",
    [
        ((), [0, 0], "Index to scalar can have only 1 value, got 2 value(s)"),
        ((), [1], "index out of range in self"),
        ((3,), [3], "index out of range in self"),
        ((3,), [-1], "index out of range in self"),
        ((3,), [[0]], "Index is supposed to be a vector"),
        ((3,), [0.0], "Expected dtype int32 or int64 for index"),
    ],
)
def test_index_select_bad_index(torch, shape, index, phrase):
    same_error(lambda m: m.zeros(shape).index_select(0, m.tensor(index)), torch, phrase)


@pytest.mark.parametrize(
    "call, phrase",
    [
        (lambda m: m.tensor(1.5).unflatten(0, (1,)), "Dimension specified as 0 but tensor has no"),
        (lambda m: m.ones(6).unflatten(0, (4, 2)), "don't multiply up to the size of dim 0 (6)"),
        (lambda m: m.ones(6).unflatten(0, ()), "unflatten: sizes must be non-empty"),
        (lambda m: m.ones(6).unflatten(0, (-1, -1)), "only one dimension can be inferred"),
        (lambda m: m.tensor(1.5).narrow(0, 0, 1), "narrow() cannot be applied to a 0-dim tensor"),
        (lambda m: m.tensor(1.5).split(1), "split expects at least a 1-dimensional tensor"),
        (lambda m: m.tensor(1.5).split([1]), "split expects at least a 1-dimensional tensor"),
        (lambda m: m.tensor(1.5).chunk(1), "chunk expects at least a 1-dimensional tensor"),
        (lambda m: m.tensor(1.5).unbind(0), "Dimension specified as 0 but tensor has no dim"),
    ],
    ids=[
        "unflatten",
        "unflatten_sizes",
        "unflatten_empty",
        "unflatten_two_inferred",
        "narrow",
        "split",
        "split_sizes",
        "chunk",
        "unbind",
    ],
)
def test_0d_and_shape_errors(torch, call, phrase):
    same_error(call, torch, phrase)


def test_unflatten_infers_minus_one(torch):
    run_both(lambda m: m.arange(6.0).unflatten(0, (-1, 2)), torch)


# every op with a ``dim`` on a 0-d tensor, dim 0 and -1: value, node name, two derivatives
DIM_OPS_0D = {
    "amax": lambda x, d: x.amax(d),
    "amin_keepdim": lambda x, d: x.amin(d, keepdim=True),
    "argmax": lambda x, d: x.argmax(d),
    "argmin_keepdim": lambda x, d: x.argmin(d, keepdim=True),
    "flatten": lambda x, d: x.flatten(d, d),
    "log_softmax": lambda x, d: x.log_softmax(d),
    "softmax": lambda x, d: x.softmax(d),
    "logsumexp": lambda x, d: x.logsumexp(d),
    "mean": lambda x, d: x.mean(d),
    "norm": lambda x, d: x.norm(dim=d),
    "prod": lambda x, d: x.prod(d),
    "prod_keepdim": lambda x, d: x.prod(d, keepdim=True),
    "squeeze": lambda x, d: x.squeeze(d),
    "sum": lambda x, d: x.sum(d),
    "sum_list": lambda x, d: x.sum([d]),
    "unsqueeze": lambda x, d: x.unsqueeze(d),
    "permute": lambda x, d: x.permute(()),
    "T": lambda x, d: x.T,
}


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("op", sorted(DIM_OPS_0D))
def test_dim_ops_on_0d(torch, op, dim):
    def f(m):
        x = _x0(m)
        y = DIM_OPS_0D[op](x, dim)
        return [y] + (_grads(m, y, x) if y.requires_grad else [])

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# Empty tensors
# ---------------------------------------------------------------------------------------------


def _empty_grads(m, y, x):
    """y, its node name, and x's gradient (shape, requires_grad) with create_graph."""
    g = m.autograd.grad(y.sum(), x, create_graph=True, allow_unused=True)[0]
    return [y, type(y.grad_fn).__name__, None if g is None else (tuple(g.shape), g.requires_grad)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_empty(torch, reduction):
    # 'mean' raised a raw ZeroDivisionError in backward; PyTorch gives nan and an empty grad
    def f(m):
        x = m.zeros(3, 1, 0, requires_grad=True)
        y = m.nn.functional.mse_loss(x, m.zeros(3, 1, 0), reduction=reduction)
        y.backward(m.ones_like(y))
        return [y, x.grad]

    run_both(f, torch)


@pytest.mark.parametrize(
    "loss",
    [
        "mse",
        "bce_with_logits",
        "cross_entropy_index",
        "cross_entropy_probs",
        "cross_entropy_smoothing",
    ],
)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_on_empty_input(torch, loss, reduction):
    def f(m):
        F = m.nn.functional
        x = m.zeros(0, 3, dtype=m.float64, requires_grad=True)
        probs, labels = m.zeros(0, 3, dtype=m.float64), m.zeros(0, dtype=m.int64)
        y = {
            "mse": lambda: F.mse_loss(x, probs, reduction=reduction),
            "bce_with_logits": lambda: F.binary_cross_entropy_with_logits(
                x, probs, reduction=reduction
            ),
            "cross_entropy_index": lambda: F.cross_entropy(x, labels, reduction=reduction),
            "cross_entropy_probs": lambda: F.cross_entropy(x, probs, reduction=reduction),
            "cross_entropy_smoothing": lambda: F.cross_entropy(
                x, labels, reduction=reduction, label_smoothing=0.1
            ),
        }[loss]()
        y.sum().backward()
        return [y, type(y.grad_fn).__name__, x.grad]

    run_both(f, torch)


@pytest.mark.parametrize(
    "op",
    [
        "mean",
        "mean0",
        "sum",
        "logsumexp0",
        "softmax0",
        "norm",
        "norm0",
        "prod",
        "prod0",
        "prod1",
        "amax1",
        "max1",
        "argmax1",
    ],
)
def test_reductions_on_empty(torch, op):
    def f(m):
        x = m.zeros(0, 3, dtype=m.float64, requires_grad=True)
        y = {
            "mean": lambda: x.mean(),
            "mean0": lambda: x.mean(0),
            "sum": lambda: x.sum(),
            "logsumexp0": lambda: x.logsumexp(0),
            "softmax0": lambda: x.softmax(0),
            "norm": lambda: x.norm(),
            "norm0": lambda: x.norm(dim=0),
            "prod": lambda: x.prod(),
            "prod0": lambda: x.prod(0),
            "prod1": lambda: x.prod(1),
            "amax1": lambda: x.amax(1),
            "max1": lambda: x.max(1)[0],
            "argmax1": lambda: x.argmax(1),
        }[op]()
        if not y.requires_grad:
            return [y]
        out = _empty_grads(m, y, x)
        x.grad = None
        y.sum().backward()
        return out + [x.grad]

    run_both(f, torch)


def test_prod_of_empty_backward(torch):
    # raised "ValueError: cannot reshape array of size 1 into shape (0,3)"
    def f(m):
        x = m.zeros(0, 3, requires_grad=True)
        y = x.prod()
        y.backward()
        return [y, x.grad]

    run_both(f, torch)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.zeros(0).split(2),
        lambda m: m.zeros(0).split(0),
        lambda m: m.zeros(0).split([0]),
        lambda m: m.zeros(0).chunk(3),
        lambda m: m.zeros(0, 2).split(1, 0),
        lambda m: m.zeros(2, 0).chunk(2, 1),
        lambda m: m.zeros(5).split(2),
        lambda m: m.zeros(6).chunk(4),
        lambda m: m.zeros(5).chunk(3),
    ],
    ids=[
        "split",
        "split0",
        "split_sizes",
        "chunk",
        "split_2d",
        "chunk_2d",
        "split_5_by_2",
        "chunk_6_in_4",
        "chunk_5_in_3",
    ],
)
def test_split_and_chunk_pieces(torch, call):
    # zeros(0).split(2) gave () where PyTorch gives one empty piece
    run_both(lambda m: list(call(m)), torch)


def test_split_of_empty_backward(torch):
    def f(m):
        x = m.zeros(0, requires_grad=True)
        parts = x.split(2)
        m.cat(parts).sum().backward()
        return [len(parts), type(parts[0].grad_fn).__name__, x.grad]

    run_both(f, torch)


@pytest.mark.parametrize(
    "call, phrase",
    [
        (lambda m: m.zeros(3).split(0), "split_size can only be 0 if dimension size is 0"),
        (lambda m: m.zeros(3).split(-1), "split expects split_size be non-negative"),
        (lambda m: m.zeros(3).chunk(0), "chunk expects `chunks` to be greater than 0, got: 0"),
    ],
    ids=["split0", "split_negative", "chunk0"],
)
def test_split_and_chunk_errors(torch, call, phrase):
    same_error(call, torch, phrase)


def test_cat_of_empty_gives_empty_gradients(torch):
    # the 1-D empty inputs PyTorch skips in cat got gradient None; PyTorch gives empty tensors
    def f(m):
        a, b = m.zeros(0, requires_grad=True), m.zeros(0, requires_grad=True)
        c = m.ones(2, requires_grad=True)
        y = m.cat([a, c, b])
        y.sum().backward()
        return [y, a.grad, b.grad, c.grad]

    run_both(f, torch)


def test_cat_of_empty_double_backward(torch):
    def f(m):
        a = m.zeros(0, dtype=m.float64, requires_grad=True)
        c = m.ones(2, 2, dtype=m.float64, requires_grad=True)
        y = m.cat([a, c.sin()])
        ga, gc = m.autograd.grad(y.sum(), [a, c], create_graph=True)
        return [ga, ga.requires_grad, gc, m.autograd.grad(gc.sum(), c)[0]]

    run_both(f, torch)


@pytest.mark.parametrize(
    "call, phrase",
    [
        (
            lambda m: m.zeros(0).max(),
            "Expected reduction dim to be specified for input.numel() == 0",
        ),
        (lambda m: m.zeros(0).min(), "Specify the reduction dim with the 'dim' argument"),
        (lambda m: m.zeros(0).amax(), "amax(): Expected reduction dim to be specified"),
        (lambda m: m.zeros(0, 3).amin(), "amin(): Expected reduction dim to be specified"),
        (lambda m: m.zeros(0).argmax(), "argmax(): Expected reduction dim to be specified"),
        (lambda m: m.zeros(0).argmin(), "argmin(): Expected reduction dim to be specified"),
        (lambda m: m.zeros(0, 3).max(0), "max(): Expected reduction dim 0 to have non-zero size"),
        (lambda m: m.zeros(3, 0).min(-1), "min(): Expected reduction dim 1 to have non-zero size"),
        (lambda m: m.zeros(0, 3).max(0, keepdim=True), "Expected reduction dim 0 to have non-zero"),
        (lambda m: m.zeros(0, 3).amax(0), "amax(): Expected reduction dim 0 to have non-zero size"),
        (lambda m: m.zeros(0, 0).amax((1, 0)), "amax(): Expected reduction dim 1 to have non-zero"),
        (
            lambda m: m.zeros(0, 0).norm(p=float("inf"), dim=(1, 0)),
            "norm on the dimension 1because",
        ),
        (lambda m: m.zeros(0, 3).argmax(0), "argmax(): Expected reduction dim 0 to have non-zero"),
        (lambda m: m.zeros(0, 3).argmin(-2), "argmin(): Expected reduction dim 0 to have non-zero"),
        (lambda m: m.zeros(0).norm(p=float("inf")), "cannot compute the inf norm on an empty"),
        (lambda m: m.zeros(0, 2).norm(p=float("-inf")), "cannot compute the -inf norm on an empty"),
        (lambda m: m.zeros(3, 0).norm(p=float("inf"), dim=1), "norm on the dimension 1because"),
    ],
)
def test_reductions_without_identity_on_empty(torch, call, phrase):
    # numpy's ValueError leaked ("zero-size array to reduction operation maximum ...")
    same_error(call, torch, phrase)


def test_norm_inf_over_a_nonempty_dim_of_an_empty_tensor(torch):
    run_both(lambda m: m.zeros(0, 3).norm(p=float("inf"), dim=1), torch)


# ---------------------------------------------------------------------------------------------
# prod's double backward through zeros
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        [1.0, 0.0, 3.0],
        [0.0, 2.0, 0.0],
        [0.0, 0.0, 0.0],
        [[1.0, 0.0, 3.0], [0.0, 0.0, 2.0]],
        [[0.0, 2.0], [3.0, 4.0], [5.0, 0.0]],
    ],
)
@pytest.mark.parametrize(
    "dim, keepdim", [(None, False), (0, False), (0, True), (-1, False), (-1, True)]
)
def test_prod_double_backward_through_zeros(torch, values, dim, keepdim):
    # raised NotImplementedError; PyTorch handles zeros in prod's double backward

    def f(m):
        x = m.tensor(values, dtype=m.float64, requires_grad=True)
        y = x.prod() if dim is None else x.prod(dim, keepdim=keepdim)
        w = m.arange(1.0, y.numel() + 1, dtype=m.float64).reshape(y.shape)
        (g,) = m.autograd.grad((y * w).sum(), x, create_graph=True)
        v = m.arange(2.0, x.numel() + 2, dtype=m.float64).reshape(x.shape)
        (h,) = m.autograd.grad((g * v).sum(), x, create_graph=True)
        (h3,) = m.autograd.grad((h * v).sum(), x)
        return [y, g, h, h3]

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# No numpy exception reaches the user: shapes that do not broadcast
# ---------------------------------------------------------------------------------------------

BROADCAST_CLASHES = {
    "add": lambda m, a, b: a + b,
    "pow": lambda m, a, b: a**b,
    "rpow": lambda m, a, b: b.__rpow__(a),
    "mod": lambda m, a, b: a % b,
    "remainder": lambda m, a, b: m.remainder(a, b),
    "maximum": lambda m, a, b: m.maximum(a, b),
    "minimum": lambda m, a, b: m.minimum(a, b),
    "max_other": lambda m, a, b: m.max(a, b),
    "min_other": lambda m, a, b: m.min(a, b),
    "where": lambda m, a, b: m.where(a > 0, a, b),
    "where_condition": lambda m, a, b: m.where(b > 0, a, a),
    "where_scalar": lambda m, a, b: m.where(b > 0, a, 0.0),
    "eq": lambda m, a, b: a == b,
    "ne": lambda m, a, b: a != b,
    "lt": lambda m, a, b: a < b,
    "ge": lambda m, a, b: a >= b,
    "and": lambda m, a, b: (a > 0) & (b > 0),
    "or": lambda m, a, b: (a > 0) | (b > 0),
    "xor": lambda m, a, b: (a > 0) ^ (b > 0),
    "logical_and": lambda m, a, b: m.logical_and(a, b),
    "bitwise_and": lambda m, a, b: a.long() & b.long(),
    "isclose": lambda m, a, b: m.isclose(a, b),
    "allclose": lambda m, a, b: m.allclose(a, b),
    "clamp_min": lambda m, a, b: a.clamp(min=b),
    "clamp_max": lambda m, a, b: a.clamp(max=b),
    "masked_fill": lambda m, a, b: a.masked_fill(b > 0, 0.0),
    "pow_": lambda m, a, b: a.clone().pow_(b),
    "clamp_": lambda m, a, b: a.clone().clamp_(min=b),
    "copy_": lambda m, a, b: a.clone().copy_(b),
    "mse_loss": lambda m, a, b: m.nn.functional.mse_loss(a, b),
}


@pytest.mark.parametrize("op", sorted(BROADCAST_CLASHES))
def test_shapes_that_do_not_broadcast(torch, op):
    # pow, maximum, minimum, remainder, where ... raised numpy's ValueError
    def f(m):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mse_loss warns about the sizes first
            return BROADCAST_CLASHES[op](m, m.ones(2, 3, requires_grad=True), m.ones(4))

    ea, et = same_error(f, torch, "must match the size of tensor b")
    assert str(ea) == str(et)


def test_copy_into_a_smaller_tensor(torch):
    same_error(
        lambda m: m.ones(3).copy_(m.ones(2, 3)),
        torch,
        "output with shape [3] doesn't match the broadcast shape [2, 3]",
    )


@pytest.mark.parametrize("index", ["slice", "int", "tensor", "mask", "int_slice"])
def test_setitem_value_that_does_not_broadcast(torch, index):
    def f(m):
        a = m.ones(2, 3)
        key = {
            "slice": slice(None),
            "int": 0,
            "tensor": m.tensor([0, 1]),
            "mask": a > 0,
            "int_slice": (0, slice(None)),
        }[index]
        a[key] = m.ones(2, 3) if index == "int_slice" else m.ones(4)

    ea, et = same_error(f, torch)
    assert str(ea) == str(et)


# ---------------------------------------------------------------------------------------------
# requires_grad on integer and bool tensors: PyTorch's message per entry point
# ---------------------------------------------------------------------------------------------


def _set_attribute_then_use(m):
    t = m.tensor([1, 2])
    t.requires_grad = True  # PyTorch refuses here; autodiag when t first enters a graph
    (t * 2).sum().backward()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda m: m.tensor([1, 2]).requires_grad_(),
            "only Tensors of floating point dtype can require gradients",
        ),
        (
            lambda m: m.tensor([True]).requires_grad_(),
            "only Tensors of floating point dtype can require gradients",
        ),
        (
            lambda m: m.tensor([1, 2], requires_grad=True),
            "Only Tensors of floating point and complex dtype can require gradients",
        ),
        (
            lambda m: m.ones(2, dtype=m.int64, requires_grad=True),
            "Only Tensors of floating point and complex dtype can require gradients",
        ),
        (
            lambda m: m.arange(3, requires_grad=True),
            "Only Tensors of floating point and complex dtype can require gradients",
        ),
        (
            lambda m: m.zeros_like(m.tensor([1]), requires_grad=True),
            "Only Tensors of floating point and complex dtype can require gradients",
        ),
        (
            lambda m: m.nn.Parameter(m.tensor([1, 2])),
            "Only Tensors of floating point and complex dtype can require gradients",
        ),
        (
            _set_attribute_then_use,
            "only Tensors of floating point and complex dtype can require gradients",
        ),
    ],
    ids=[
        "requires_grad_",
        "requires_grad_bool",
        "tensor",
        "ones",
        "arange",
        "zeros_like",
        "Parameter",
        "attribute",
    ],
)
def test_requires_grad_on_integer_tensors(torch, call, message):
    ea, et = same_error(call, torch, message)
    assert str(ea) == str(et) == message


# ---------------------------------------------------------------------------------------------
# Node names (and the gradients behind them): rsub, clamp with tensor bounds, whole setitem
# ---------------------------------------------------------------------------------------------


def _graph(t):
    """Node names reachable from t.grad_fn, depth first, with their next_functions' names."""
    out, stack = [], [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None:
            continue
        nxt = [n for n, _ in fn.next_functions]
        out.append((fn.name(), [None if n is None else n.name() for n in nxt]))
        stack.extend(reversed(nxt))
    return out


RSUB = {
    "scalar_minus_tensor": lambda m, x, y: 1.5 - x,
    "rsub_scalar": lambda m, x, y: m.rsub(x, 2),
    "rsub_tensors": lambda m, x, y: m.rsub(x, y),
    "rsub_constant": lambda m, x, y: m.rsub(x, m.ones(3, dtype=m.float64)),
    "dunder_rsub": lambda m, x, y: x.__rsub__(y),
    "rsub_alpha": lambda m, x, y: m.rsub(x, y, alpha=2),
    "rsub_broadcast": lambda m, x, y: m.rsub(x, y[:1]),
    "sub_alpha": lambda m, x, y: m.sub(x, y, alpha=2),
}


@pytest.mark.parametrize("op", sorted(RSUB))
def test_rsub_node_and_gradients(torch, op):
    # rsub(x, y) recorded SubBackward0 with its edges swapped; PyTorch RsubBackward0(x, y)
    def f(m):
        x = m.tensor([1.0, -2.0, 3.0], dtype=m.float64, requires_grad=True)
        y = m.tensor([0.5, 4.0, -1.0], dtype=m.float64, requires_grad=True)
        r = RSUB[op](m, x, y)
        gx, gy = m.autograd.grad((r * r).sum(), [x, y], allow_unused=True)
        return [_graph(r), r, gx, gy]

    run_both(f, torch)


CLAMPS = {
    "min_t": lambda m, x, lo, hi: x.clamp(min=lo),
    "max_t": lambda m, x, lo, hi: x.clamp(max=hi),
    "both_t": lambda m, x, lo, hi: x.clamp(lo, hi),
    "clip_t": lambda m, x, lo, hi: x.clip(lo, hi),
    "crossed": lambda m, x, lo, hi: x.clamp(hi, lo),
    "clamp_min_t": lambda m, x, lo, hi: m.clamp_min(x, lo),
    "clamp_max_t": lambda m, x, lo, hi: m.clamp_max(x, hi),
    "method_clamp_min": lambda m, x, lo, hi: x.clamp_min(lo),
    "broadcast": lambda m, x, lo, hi: x.clamp(lo[:1], hi[1:2]),
    "inplace": lambda m, x, lo, hi: (x * 1).clamp_(min=lo, max=hi),
    "min_s": lambda m, x, lo, hi: x.clamp(min=0.0),
    "both_s": lambda m, x, lo, hi: x.clamp(0.0, 1.0),
    "clamp_min_s": lambda m, x, lo, hi: m.clamp_min(x, 0.0),
}


@pytest.mark.parametrize("op", sorted(CLAMPS))
def test_clamp_node_and_gradients(torch, op):
    # tensor bounds recorded MaximumBackward0/MinimumBackward0 (and split the gradient at ties);
    # PyTorch records ClampBackward0(self, min, max) / ClampMinBackward1 / ClampMaxBackward1
    def f(m):
        x = m.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], dtype=m.float64, requires_grad=True)
        lo = m.tensor([0.0, 0.0, 0.7, -1.0, 3.0], dtype=m.float64, requires_grad=True)
        hi = m.tensor([1.0, 0.5, 0.6, 1.0, 2.5], dtype=m.float64, requires_grad=True)
        r = CLAMPS[op](m, x, lo, hi)
        w = m.arange(1.0, 6.0, dtype=m.float64)
        grads = m.autograd.grad((r * w).sum(), [x, lo, hi], allow_unused=True, create_graph=True)
        return [_graph(r), r, list(grads), [g is not None and g.requires_grad for g in grads]]

    run_both(f, torch)


def test_clamp_mixed_scalar_and_tensor_bounds_refused(torch):
    same_error(
        lambda m: m.ones(3).clamp(min=m.zeros(3), max=1.0),
        torch,
        "clamp() received an invalid combination of arguments",
    )


@pytest.mark.parametrize(
    "call",
    [
        "m.clamp(x, 1, m.tensor(2.0))",
        "m.clamp(x, m.tensor(2.0), 2.5)",
        "x.clamp_(m.tensor(1.5), 2)",
        "m.clamp(w, m.tensor(2.0), 2.5)",
        "m.clamp(m.tensor([1, 2, 3]), m.tensor(1.5), 2)",
    ],
)
def test_clamp_0d_tensor_bound_next_to_a_number_is_a_number(torch, call):
    # PyTorch's parser takes a 0-d tensor that does not require grad as a Number (ClampBackward1);
    # autodiag raised TypeError
    def f(m):
        x = m.tensor([1.0, 2.0, 3.0])
        w = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        r = eval(call, {"m": m, "x": x, "w": w})  # noqa: S307
        return [r, None if r.grad_fn is None else r.grad_fn.name()]

    run_both(f, torch)
    same_error(
        lambda m: m.clamp(m.ones(3), m.tensor(2.0, requires_grad=True), 2.5),
        torch,
        "clamp() received an invalid combination of arguments",
    )


SETITEMS = {
    "0d_empty_tuple": ((), (), "sum"),
    "0d_ellipsis": ((), Ellipsis, "sum"),
    "1d_ellipsis": ((3,), Ellipsis, "x"),
    "1d_full_slice": ((3,), slice(None), "x"),
    "1d_slice_0_to_end": ((3,), slice(0, None), "x"),
    "1d_slice_past_end": ((3,), slice(None, 5), "x"),
    "2d_broadcast_slice": ((2, 3), slice(None), "x"),
    "2d_two_full_slices": ((2, 3), (slice(None), slice(None)), "x"),
    "2d_leading_ones": ((2, 3), Ellipsis, "x_1_1_3"),
    "1d_scalar_value": ((3,), Ellipsis, 2.0),
    "0d_scalar_value": ((), (), 2.0),
    "1d_0d_tensor": ((3,), (), "sum"),
    "partial_slice": ((3,), slice(1, None), "x2"),
    "int": ((3,), 0, "sum"),
    "none": ((), None, "sum"),
}


@pytest.mark.parametrize("case", sorted(SETITEMS))
def test_setitem_node_names(torch, case):
    # a whole-tensor index (), ..., full slices records CopyBackwards/FillBackward3 in PyTorch
    # (copy into the tensor itself), not CopySlices
    shape, index, value = SETITEMS[case]

    def f(m):
        x = m.tensor([1.0, 2.0, 3.0], dtype=m.float64, requires_grad=True)
        base = m.zeros(shape, dtype=m.float64, requires_grad=True)
        z = base.clone()
        v = {
            "sum": lambda: x.sum(),
            "x": lambda: x,
            "x_1_1_3": lambda: x.reshape(1, 1, 3),
            "x2": lambda: x[:2],
        }.get(value, lambda: value)()
        z[index] = v
        gb, gx = m.autograd.grad((z * z).sum(), [base, x], allow_unused=True)
        return [_graph(z), z, gb, gx, z._version]

    run_both(f, torch)


# ---------------------------------------------------------------------------------------------
# Loss dtypes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["none", "weight64", "pos_weight64"])
@pytest.mark.parametrize("dtypes_", [("float64", "float32"), ("float32", "float64")])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_bce_with_logits_has_the_targets_dtype(torch, dtypes_, weights, reduction):
    # float64 input with a float32 target gave float64; PyTorch's loss has the target's dtype
    def f(m):
        x = m.tensor([0.5, -1.0, 2.0], dtype=getattr(m, dtypes_[0]), requires_grad=True)
        t = m.tensor([1.0, 0.0, 1.0], dtype=getattr(m, dtypes_[1]))
        w = m.tensor([1.0, 2.0, 0.5], dtype=m.float64)
        kw = {"none": {}, "weight64": {"weight": w}, "pos_weight64": {"pos_weight": w}}[weights]
        y = m.nn.functional.binary_cross_entropy_with_logits(x, t, reduction=reduction, **kw)
        y.sum().backward()
        return [
            str(y.dtype).split(".")[-1],
            str(x.grad.dtype).split(".")[-1],
            y.detach().double().tolist(),
            x.grad.double().tolist(),
        ]

    a, b = f(ad), f(torch)
    assert a[:2] == b[:2]
    # PyTorch computes part of the loss in the input's precision: float32-level agreement
    np.testing.assert_allclose(a[2], b[2], rtol=1e-6)
    np.testing.assert_allclose(a[3], b[3], rtol=1e-6)


@pytest.mark.parametrize(
    "call, dup",
    [
        ("x.sum((0, -2))", 0),
        ("x.sum((1, 0, 1))", 1),
        ("x.mean([1, 1])", 1),
        ("x.amax((0, 0))", 0),
        ("x.var((0, 0))", 0),
        ("x.std((1, -1))", 1),
        ("m.tensor(1.0).sum((0, -1))", 0),
    ],
)
def test_reduction_over_a_repeated_dim_is_refused(torch, call, dup):
    # autodiag reduced each dim once, silently (var((0, 0)) divided by the wrong count)
    same_error(
        lambda m: eval(call, {"m": m, "x": m.ones(2, 3)}),
        torch,  # noqa: S307
        f"dim {dup} appears multiple times in the list of dims",
    )
