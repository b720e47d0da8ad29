"""Crashes, wrong errors and small infidelities found by differential fuzzing (issue 17).

Every snippet runs under autodiag and PyTorch 2.13 (``m`` is the module) and compares values,
gradients (first and second order), node names, exception types and key phrases.
"""

from __future__ import annotations

import warnings

import pytest
from test_autograd_torch import assert_same, run_both, same_error

import autodiag as ad


def _grads(m, y, x, order=2):
    """y's node name, then d(sum(sin(y)*2))/dx and its derivative (create_graph) as lists."""
    out = [type(y.grad_fn).__name__ if y.grad_fn is not None else None]
    g, = m.autograd.grad((y.to(x.dtype).sin() * 2).sum(), x, create_graph=order > 1)
    out.append(g)
    if order > 1:
        g2, = m.autograd.grad(g.sum(), x)
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


@pytest.mark.parametrize("shape, dim, index, phrase", [
    ((3,), 0, [5], "index 5 is out of bounds for dimension 0 with size 3"),
    ((3,), 0, [-1], "index -1 is out of bounds for dimension 0 with size 3"),
    ((), 0, 1, "index 1 is out of bounds for dimension 0 with size 1"),
    ((2, 3), 0, [[0, 0, 0, 0]], "Size does not match at dimension 1"),
])
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


@pytest.mark.parametrize("shape, index, phrase", [
    ((), [0, 0], "Index to scalar can have only 1 value, got 2 value(s)"),
    ((), [1], "index out of range in self"),
    ((3,), [3], "index out of range in self"),
    ((3,), [-1], "index out of range in self"),
    ((3,), [[0]], "Index is supposed to be a vector"),
    ((3,), [0.0], "Expected dtype int32 or int64 for index"),
])
def test_index_select_bad_index(torch, shape, index, phrase):
    same_error(lambda m: m.zeros(shape).index_select(0, m.tensor(index)), torch, phrase)


@pytest.mark.parametrize("call, phrase", [
    (lambda m: m.tensor(1.5).unflatten(0, (1,)), "Dimension specified as 0 but tensor has no"),
    (lambda m: m.ones(6).unflatten(0, (4, 2)), "don't multiply up to the size of dim 0 (6)"),
    (lambda m: m.ones(6).unflatten(0, ()), "unflatten: sizes must be non-empty"),
    (lambda m: m.ones(6).unflatten(0, (-1, -1)), "only one dimension can be inferred"),
    (lambda m: m.tensor(1.5).narrow(0, 0, 1), "narrow() cannot be applied to a 0-dim tensor"),
    (lambda m: m.tensor(1.5).split(1), "split expects at least a 1-dimensional tensor"),
    (lambda m: m.tensor(1.5).split([1]), "split expects at least a 1-dimensional tensor"),
    (lambda m: m.tensor(1.5).chunk(1), "chunk expects at least a 1-dimensional tensor"),
    (lambda m: m.tensor(1.5).unbind(0), "Dimension specified as 0 but tensor has no dim"),
], ids=["unflatten", "unflatten_sizes", "unflatten_empty", "unflatten_two_inferred", "narrow",
        "split", "split_sizes", "chunk", "unbind"])
def test_0d_and_shape_errors(torch, call, phrase):
    same_error(call, torch, phrase)


def test_unflatten_infers_minus_one(torch):
    run_both(lambda m: m.arange(6.0).unflatten(0, (-1, 2)), torch)


# every op with a ``dim`` on a 0-d tensor, dim 0 and -1: value, node name, two derivatives
DIM_OPS_0D = {
    "amax": lambda x, d: x.amax(d), "amin_keepdim": lambda x, d: x.amin(d, keepdim=True),
    "argmax": lambda x, d: x.argmax(d), "argmin_keepdim": lambda x, d: x.argmin(d, keepdim=True),
    "flatten": lambda x, d: x.flatten(d, d),
    "log_softmax": lambda x, d: x.log_softmax(d), "softmax": lambda x, d: x.softmax(d),
    "logsumexp": lambda x, d: x.logsumexp(d), "mean": lambda x, d: x.mean(d),
    "norm": lambda x, d: x.norm(dim=d), "prod": lambda x, d: x.prod(d),
    "prod_keepdim": lambda x, d: x.prod(d, keepdim=True), "squeeze": lambda x, d: x.squeeze(d),
    "sum": lambda x, d: x.sum(d),
    "sum_list": lambda x, d: x.sum([d]), "unsqueeze": lambda x, d: x.unsqueeze(d),
    "permute": lambda x, d: x.permute(()), "T": lambda x, d: x.T,
}


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("op", sorted(DIM_OPS_0D))
def test_dim_ops_on_0d(torch, op, dim):
    def f(m):
        x = _x0(m)
        y = DIM_OPS_0D[op](x, dim)
        return [y] + (_grads(m, y, x) if y.requires_grad else [])

    run_both(f, torch)
