"""The in-place error names the line that saved the tensor with no tracer and no anomaly mode
(NOTE [Saving sites] in core/graph.py), for every way an op can be called."""

from __future__ import annotations

import inspect
import re

import pytest

import autodiag as ad
from autodiag.core.graph import Node
from autodiag.trace import sites

FILE = __file__.rsplit("/", 1)[-1]


def _line(back: int = 1) -> int:
    return inspect.currentframe().f_back.f_lineno + back - 1


def _backward_error(loss) -> str:
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as ei:
        loss.backward()
    return str(ei.value)


def _saved_at(msg: str, node_name: str) -> int:
    m = re.search(rf"saved by {node_name} at \S*{FILE}:(\d+) ", msg)
    assert m, msg
    return int(m.group(1))


def test_method_saving_its_input():
    x = ad.ones(3, requires_grad=True)
    a = x * 2.0
    y = a.sin(); line = _line()  # noqa: E702  # fmt: skip
    a.add_(1)
    assert _saved_at(_backward_error(y.sum()), "SinBackward0") == line


def test_module_function_saving_its_result():
    x = ad.ones(3, requires_grad=True)
    h = ad.exp(x); line = _line()  # noqa: E702  # fmt: skip
    h.add_(1)
    msg = _backward_error(h.sum())
    assert _saved_at(msg, "ExpBackward0") == line
    assert re.search(rf"last modified in place by add_ at \S*{FILE}:{line + 1} ", msg)


def test_operator_and_the_public_function_of_a_binary_op():
    x = ad.ones(3, requires_grad=True)
    w = ad.full((3,), 2.0, requires_grad=True)
    y = x * w; line_op = _line()  # noqa: E702  # fmt: skip
    z = ad.mul(x, w); line_fn = _line()  # noqa: E702  # fmt: skip
    with ad.no_grad():
        w.add_(1)
    assert _saved_at(_backward_error(y.sum()), "MulBackward0") == line_op
    assert _saved_at(_backward_error(z.sum()), "MulBackward0") == line_fn


def test_an_op_inside_an_nn_module_names_the_users_call():
    lin = ad.nn.Linear(3, 2)
    out = lin(ad.ones(4, 3, requires_grad=True)); line = _line()  # noqa: E702  # fmt: skip
    with ad.no_grad():
        lin.weight.mul_(2)  # an optimizer step between forward and backward
    msg = _backward_error(out.sum())
    assert _saved_at(msg, "AddmmBackward0") == line


def test_the_innermost_user_frame_wins_and_alternating_callers_stay_right():
    def helper(t):
        return t.sin(), _line()

    x = ad.ones(3, requires_grad=True)
    found = []
    for _ in range(2):  # the hot ops remember the last user frame; alternate between two
        a = x * 1.0
        (y, line_h) = helper(a)
        b = x * 1.0
        z = b.cos(); line_main = _line()  # noqa: E702  # fmt: skip
        a.add_(1)
        b.add_(1)
        found.append(
            (
                _saved_at(_backward_error(y.sum()), "SinBackward0"),
                line_h,
                _saved_at(_backward_error(z.sum()), "CosBackward0"),
                line_main,
            )
        )
    for got_h, want_h, got_main, want_main in found:
        assert (got_h, got_main) == (want_h, want_main)


def test_a_general_op_through_its_traced_wrapper():
    w = ad.ones(3, 2, requires_grad=True)
    x = ad.ones(4, 3)
    y = x @ w; line = _line()  # noqa: E702  # fmt: skip
    x.mul_(2)
    assert _saved_at(_backward_error(y.sum()), "MmBackward0") == line


def test_a_custom_function():
    class Square(ad.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2 * t * g

    x = ad.ones(3, requires_grad=True)
    a = x * 1.0
    y = Square.apply(a); line = _line()  # noqa: E702  # fmt: skip
    a.add_(1)
    assert _saved_at(_backward_error(y.sum()), "SquareBackward") == line


def test_only_saving_nodes_remember_a_site():
    x = ad.ones(3, requires_grad=True)
    s = x + x  # AddBackward0 saves nothing
    assert not hasattr(s.grad_fn, "_src_code")
    y = x.sin()
    assert sites.saver_site(y.grad_fn)[0].co_filename == __file__
    assert sites.saver_site(s.grad_fn) is None


def test_a_new_stop_code_forgets_the_remembered_user_frame():
    x = ad.ones(3, requires_grad=True)
    x.sin()
    assert sites.last_user[0] is not None
    sites.STOP_CODES.add(test_a_new_stop_code_forgets_the_remembered_user_frame.__code__)
    try:
        assert sites.last_user[0] is None
    finally:
        sites.STOP_CODES.discard(test_a_new_stop_code_forgets_the_remembered_user_frame.__code__)
        sites._kind.clear()


@pytest.mark.parametrize(
    "make",
    [
        lambda x, c: x * c,
        lambda x, c: x + c,
        lambda x, c: x * 2.0,
        lambda x, c: x.sin(),
        lambda x, c: x.exp(),
        lambda x, c: ad.relu(x),
        lambda x, c: -x,
    ],
    ids=["mul", "add", "mul-scalar", "sin", "exp", "relu", "neg"],
)
def test_hot_path_nodes_set_every_slot_node_init_sets(make):
    # the hot ops build nodes field by field (NOTE [Hot path]): none may be left unset
    x = ad.ones(3, requires_grad=True) * 1.0
    node = make(x, ad.full((3,), 2.0)).grad_fn
    reference = Node()
    slots = [s for s in Node.__slots__ if s != "__weakref__" and hasattr(reference, s)]
    assert slots and all(hasattr(node, s) for s in slots), [
        s for s in slots if not hasattr(node, s)
    ]
