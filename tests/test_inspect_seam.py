"""The inspection seam (autodiag/inspect.py): analyses and reports read the engine only through it
and the tracing events, and what it says matches PyTorch's view of the same graph."""

from __future__ import annotations

import ast
import pathlib

import pytest

import autodiag
from autodiag import inspect

ROOT = pathlib.Path(__file__).resolve().parent.parent / "autodiag"

# (module, private attribute) that an analysis/report may still read, and why
ALLOWED = {
    ("analysis/backward_trace.py", "_code_of"),  # Summaries' own table (analysis, not engine)
    ("report/progress.py", "_progress"),  # the report's own stderr wrapper
    ("analysis/gradcheck.py", "_getframe"),  # sys._getframe
    # the gradcheck analysis draws inputs from the generator and builds result tensors
    ("analysis/gradcheck.py", "_rng"),
    ("analysis/gradcheck.py", "_make"),
}


def private_reads(path: pathlib.Path) -> list[tuple[int, str]]:
    """``x._name`` and ``getattr(x, "_name")`` on anything but ``self``/``cls`` (dunders are
    Python's, not the engine's)."""
    found = []
    for n in ast.walk(ast.parse(path.read_text())):
        name = None
        if isinstance(n, ast.Attribute):
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                continue
            name = n.attr
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr", "setattr")
            and len(n.args) > 1
            and isinstance(n.args[1], ast.Constant)
            and isinstance(n.args[1].value, str)
        ):
            name = n.args[1].value
        if name and name.startswith("_") and not name.startswith("__"):
            found.append((n.lineno, name))
    return found


@pytest.mark.parametrize(
    "path",
    sorted([*(ROOT / "analysis").glob("*.py"), *(ROOT / "report").glob("*.py")]),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_analyses_read_no_private_engine_field(path):
    rel = f"{path.parent.name}/{path.name}"
    bad = [
        f"{rel}:{line}: ._{name[1:]}"
        for line, name in private_reads(path)
        if (rel, name) not in ALLOWED
    ]
    assert not bad, "read the engine through autodiag.inspect:\n" + "\n".join(bad)


def test_the_scan_sees_private_reads(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "def f(node, t, self):\n    self._ok\n    return node._next, getattr(t, '_data')"
        ", t.__class__\n"
    )
    assert private_reads(p) == [(3, "_next"), (3, "_data")]


def _graphs(lib):
    x = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
    w = lib.tensor([0.5, 0.25, 2.0], dtype=lib.float64, requires_grad=True)
    y = (x * w).exp()
    z = y.sum() + (x * 2.0).relu().mean()
    return x, w, y, z


def test_seam_matches_torch_graph():
    torch = pytest.importorskip("torch")
    ours, theirs = _graphs(autodiag), _graphs(torch)
    stack = [(ours[3].grad_fn, theirs[3].grad_fn)]
    seen = 0
    while stack:
        a, b = stack.pop()
        seen += 1
        assert type(a).__name__ == type(b).__name__
        pairs = inspect.edges(a)
        assert [nr for _, nr in pairs] == [nr for _, nr in b.next_functions]
        assert [c is None for c in inspect.children(a)] == [c is None for c, _ in b.next_functions]
        assert inspect.is_leaf_node(a) == (type(b).__name__ == "AccumulateGrad")
        if inspect.is_leaf_node(a):
            assert inspect.shape(inspect.leaf_variable(a)) == tuple(b.variable.shape)
        for e in inspect.saved_entries(a, values=True):
            t = getattr(b, f"_saved_{e.name}")
            assert e.shape == tuple(t.shape) and e.dtype == str(t.dtype).split(".")[-1]
            assert e.value.tolist() == t.tolist()
            assert e.version == e.current_version == 0
        stack.extend((c, d) for (c, _), (d, _) in zip(pairs, b.next_functions) if c is not None)
    assert seen == 10


def test_saved_entries_see_inplace_writes_and_frees():
    x = autodiag.ones(3, requires_grad=True)
    a = x * 1
    y = a.sin()
    node = y.grad_fn
    assert inspect.holds_saved(node) and not inspect.is_freed(node)
    a.add_(1)
    (e,) = inspect.saved_entries(node)
    assert (e.name, e.version, e.current_version) == ("self", 0, 1)
    assert inspect.version(a) == 1
    assert inspect.version_counter(a) is inspect.version_counter(a[1:])
    y = (x * 1).sin()
    y.sum().backward()
    assert inspect.is_freed(y.grad_fn) and not inspect.holds_saved(y.grad_fn)
    assert inspect.saved_entries(y.grad_fn) == ()
    info = inspect.node_info(y.grad_fn)
    assert info[5] is None and info[0] == inspect.sequence_nr(y.grad_fn)


def test_grad_mode_names():
    assert inspect.grad_mode() == "grad"
    with autodiag.no_grad():
        assert inspect.grad_mode() == "no_grad"
    with autodiag.inference_mode():
        assert inspect.grad_mode() == "inference_mode"
