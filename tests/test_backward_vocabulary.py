"""Backward formulas read what they need by name (NOTE [Backward vocabulary] in core/graph.py):
``self.saved_<name>(xp)`` for a saved value, ``self.needs_grad`` for the inputs that need a
gradient."""

from __future__ import annotations

import ast
import pathlib

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
    # NOTE [Flat nodes]: a pointwise node keeps its edges in slots, both names build the same
    # tuple of them; every other node reads the ``_next`` tuple itself
    assert y.grad_fn.needs_grad == y.grad_fn._next
    assert all(a is b for a, b in zip(y.grad_fn.needs_grad, y.grad_fn._next))
    z = ad.stack([x, x])
    assert z.grad_fn.needs_grad is z.grad_fn._next


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


# --- the named form is the only form ------------------------------------------------------------

_ROOT = pathlib.Path(ad.__file__).parent


def _positional_reads(source: str, filename: str = "<src>") -> list[str]:
    """Where a method of a class reads a saved value by an integer position (``self._saved[1]``,
    ``saved = self._saved; saved[1]``, ``self.saved(xp, 1)``) or the edges as ``self._next``."""
    found = []

    def is_self_attr(node, attr):
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    def is_int(node):
        return isinstance(node, ast.Constant) and type(node.value) is int

    for cls in ast.walk(ast.parse(source, filename)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            aliases = {
                t.id
                for a in ast.walk(fn)
                if isinstance(a, ast.Assign) and is_self_attr(a.value, "_saved")
                for t in a.targets
                if isinstance(t, ast.Name)
            }
            for node in ast.walk(fn):
                where = f"{filename}:{getattr(node, 'lineno', '?')} {cls.name}.{fn.name}"
                if is_self_attr(node, "_next") and isinstance(node.ctx, ast.Load):
                    found.append(f"{where}: self._next (use self.needs_grad)")
                elif (
                    isinstance(node, ast.Subscript)
                    and is_int(node.slice)
                    and (
                        is_self_attr(node.value, "_saved")
                        or isinstance(node.value, ast.Name)
                        and node.value.id in aliases
                    )
                ):
                    found.append(f"{where}: a saved value read at position {node.slice.value}")
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "saved"
                    and any(map(is_int, node.args))
                ):
                    found.append(f"{where}: saved(..., <position>)")
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "class A:\n    def backward(self, xp, g):\n        return self._saved[1]\n",
        "class A:\n    def backward(self, xp, g):\n        s = self._saved\n        return s[0]\n",
        "class A:\n    def backward(self, xp, g):\n        return self.saved(xp, 0)\n",
        "class A:\n    def backward(self, xp, g):\n        nf = self._next\n        return nf\n",
    ],
)
def test_the_scan_finds_a_positional_read(snippet):
    assert len(_positional_reads(snippet)) == 1


def test_the_scan_accepts_the_named_form():
    src = (
        "class A:\n    def backward(self, xp, g):\n        needs_self, = self.needs_grad\n"
        "        self._next = ()\n        return (g * self.saved_other(xp),)\n"
    )
    assert _positional_reads(src) == []


def test_no_formula_in_ops_or_autograd_reads_by_position():
    found = []
    for folder in ("ops", "autograd"):
        for path in sorted((_ROOT / folder).glob("*.py")):
            found += _positional_reads(path.read_text(), str(path.relative_to(_ROOT)))
    assert found == [], "\n".join(found)
