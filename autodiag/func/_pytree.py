"""Nested Python containers of tensors ("pytrees") as ``torch.func`` sees them.

A tree is a tuple, list, dict (or namedtuple) of trees, or a leaf (anything else). ``flatten``
gives the leaves in order and a spec that ``unflatten`` rebuilds the tree from. The spec's
``repr`` follows PyTorch's ``TreeSpec`` (``TreeSpec(tuple, None, [*, *])``) because PyTorch's
error messages show it.

>>> from autodiag.func._pytree import flatten, unflatten
>>> leaves, spec = flatten((1, {"a": 2, "b": [3]}))
>>> leaves
[1, 2, 3]
>>> unflatten([10, 20, 30], spec)
(10, {'a': 20, 'b': [30]})
"""

from __future__ import annotations

__all__ = ["Spec", "LEAF", "flatten", "unflatten", "broadcast_prefix"]


class Spec:
    """The structure of a tree: its container type, the keys (dict) or None, the child specs."""

    __slots__ = ("kind", "keys", "children", "num_leaves")

    def __init__(self, kind, keys, children: list) -> None:
        self.kind = kind  # None for a leaf
        self.keys = keys
        self.children = children
        self.num_leaves = 1 if kind is None else sum(c.num_leaves for c in children)

    def is_leaf(self) -> bool:
        return self.kind is None

    def __eq__(self, other) -> bool:
        # iterative: trees can be deep; a pair of specs per step
        stack = [(self, other)]
        while stack:
            a, b = stack.pop()
            if not isinstance(b, Spec) or a.kind is not b.kind or a.keys != b.keys:
                return False
            if len(a.children) != len(b.children):
                return False
            stack.extend(zip(a.children, b.children))
        return True

    def __hash__(self) -> int:  # pragma: no cover - specs are compared, not hashed
        return hash((self.kind, self.num_leaves))

    def __repr__(self) -> str:
        return _spec_repr(self, 0)


def _spec_repr(spec: Spec, indent: int) -> str:
    if spec.kind is None:
        return "*"
    keys = None if spec.keys is None else list(spec.keys)
    parts = [_spec_repr(c, indent + 2) for c in spec.children]
    sep = ",\n" + " " * (indent + 2)
    return f"TreeSpec({spec.kind.__name__}, {keys}, [{sep.join(parts)}])"


LEAF = Spec(None, None, [])


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _children(tree):
    """(kind, keys, children) of a container, or None for a leaf."""
    if isinstance(tree, (tuple, list)) and type(tree) in (tuple, list) or _is_namedtuple(tree):
        return type(tree), None, list(tree)
    if type(tree) is dict:
        keys = tuple(tree)
        return dict, keys, [tree[k] for k in keys]
    return None


def flatten(tree) -> tuple[list, Spec]:
    """(leaves in order, spec). Iterative, so that deep nesting cannot exhaust the stack."""
    leaves: list = []
    root_holder: list = []
    # each work item: (subtree, list to append its spec to)
    pending: list = []
    work = [(tree, root_holder)]
    while work:
        item = work.pop()
        if item is None:  # close the container whose children were just built
            kind, keys, out, built = pending.pop()
            out.append(Spec(kind, keys, built))
            continue
        sub, out = item
        ch = _children(sub)
        if ch is None:
            leaves.append(sub)
            out.append(LEAF)
            continue
        kind, keys, children = ch
        built: list = []
        pending.append((kind, keys, out, built))
        work.append(None)
        work.extend((c, built) for c in reversed(children))
    return leaves, root_holder[0]


def unflatten(leaves, spec: Spec):
    """The tree of shape ``spec`` holding ``leaves`` in order."""
    it = iter(leaves)
    # post-order rebuild without recursion: expand, then assemble
    results: list = []
    work: list = [(spec, False)]
    while work:
        s, expanded = work.pop()
        if s.kind is None:
            results.append(next(it))
            continue
        if not expanded:
            work.append((s, True))
            work.extend((c, False) for c in reversed(s.children))
            continue
        n = len(s.children)
        values = results[len(results) - n :] if n else []
        del results[len(results) - n :]
        if s.kind is dict:
            results.append(dict(zip(s.keys, values)))
        elif s.kind in (tuple, list):
            results.append(s.kind(values))
        else:  # a namedtuple
            results.append(s.kind(*values))
    return results[0]


def broadcast_prefix(
    prefix, tree_spec: Spec, is_leaf=lambda x: not isinstance(x, (tuple, list, dict))
):
    """Expand ``prefix`` (a tree whose leaves stand for whole subtrees of ``tree_spec``, as
    vmap's ``in_dims``) to one value per leaf of ``tree_spec``; None if the structures differ."""
    out: list = []
    work = [(prefix, tree_spec)]
    while work:
        p, s = work.pop()
        if is_leaf(p):
            out.extend([p] * s.num_leaves)
            continue
        ch = _children(p)
        if ch is None or s.kind is None:
            return None
        kind, keys, children = ch
        same_kind = kind is s.kind or (kind in (tuple, list) and s.kind in (tuple, list))
        if not same_kind or keys != s.keys or len(children) != len(s.children):
            if kind is dict and s.kind is dict and set(keys) == set(s.keys or ()):
                children = [p[k] for k in s.keys]
            else:
                return None
        work.extend(reversed(list(zip(children, s.children))))
    return out
