"""Backward formulas read what they need by name (NOTE [Backward vocabulary] in core/graph.py):
``self.saved_<name>(xp)`` for a saved value, ``self.needs_grad`` for the inputs that need a
gradient."""

from __future__ import annotations

import pytest

import autodiag as ad
from autodiag.core.graph import Freed, Node
from autodiag.ops._core import ARRAY


class _TwoSaves(Node):
    __slots__ = ()
    _saved_names = ("self", "other")


class _OneSave(_TwoSaves):
    __slots__ = ()
    _saved_names = ("other",)


def _node(cls, saved, edges=()):
    node = cls(edges, saved)
    return node


def test_each_saved_name_has_a_reader_at_its_position():
    a, b = ad.tensor([1.0, 2.0]), ad.tensor([3.0])
    node = _node(_TwoSaves, (a, b))
    assert node.saved_self(ARRAY) is a._data
    assert node.saved_other(ARRAY) is b._data
    assert node.saved_other.__name__ == "saved_other"


def test_a_subclass_that_renames_its_saves_gets_its_own_positions():
    b = ad.tensor([3.0])
    node = _node(_OneSave, (b,))
    assert node.saved_other(ARRAY) is b._data
    with pytest.raises(AttributeError, match="_OneSave saves no 'self' .*other"):
        node.saved_self(ARRAY)


def test_a_constant_or_none_reads_as_saved():
    node = _node(_TwoSaves, (2.5, None))
    assert node.saved_self(ARRAY) == 2.5
    assert node.saved_other(ARRAY) is None


def test_a_reader_checks_the_version_and_the_freed_marker():
    x = ad.ones(2, requires_grad=True)
    y = x * 1
    z = y * y
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.grad_fn.saved_self(ARRAY)
    node = _node(_TwoSaves, Freed())
    node._saved.call, node._saved.code, node._saved.lasti, node._saved.last_seq = 1, None, -1, 0
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        node.saved_other(ARRAY)


def test_a_reader_defined_by_hand_for_a_saved_name_is_refused():
    with pytest.raises(TypeError, match="defined by hand and as a saved name"):

        class _Bad(Node):
            __slots__ = ()
            _saved_names = ("self",)

            def saved_self(self, xp):
                return None


def test_a_node_class_cannot_make_its_edges_false():
    with pytest.raises(TypeError, match="__len__"):

        class _Bad(Node):
            __slots__ = ()

            def __len__(self):
                return 0


def test_needs_grad_is_the_edges_of_the_inputs():
    x = ad.ones(2, requires_grad=True)
    y = x * ad.ones(2)
    needs_self, needs_other = y.grad_fn.needs_grad
    assert needs_self is x.grad_fn or needs_self is y.grad_fn.next_functions[0][0]
    assert needs_other is None
    assert y.grad_fn.needs_grad is y.grad_fn._next


def test_a_custom_function_ctx_keeps_needs_grad_as_a_user_attribute():
    class Double(ad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            assert not hasattr(ctx, "needs_grad")
            ctx.needs_grad = "mine"
            return x * 2

        @staticmethod
        def backward(ctx, g):
            assert ctx.needs_grad == "mine"
            return g * 2

    x = ad.ones(3, requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
