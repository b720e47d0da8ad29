"""The import contract (NOTE [Layers] in autodiag/core/__init__.py): every module imports only
from its own layer or the layers below it, at the top of the module and inside functions alike,
and the engine's modules import each other without a cycle.

Imports are read with ``ast``, not by importing: ``from P import name`` depends on ``P.name``
when that is a module, else on ``P``; ``import P.Q`` depends on ``P.Q``. The packages a dotted
import runs on the way (``autodiag/__init__.py`` for every ``autodiag.*``) are not counted: the
namespace package imports everything, by design, and a module depending on it says so by
importing it.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "autodiag"

# Lowest first. A module belongs to the first layer with a matching pattern.
LAYERS = [
    (
        "base",
        [
            "autodiag._version",
            "autodiag._device",
            "autodiag._look",
            "autodiag._interrupts",
            "autodiag._warnings",
            "autodiag.dtypes",
            "autodiag.size",
            "autodiag.printing",
            "autodiag.trace.sites",
            "autodiag.accelerator",
            "autodiag.cuda",
            "autodiag.backends",
            "autodiag.backends.*",
            "autodiag.amp",
            "autodiag.cuda_amp",
            "autodiag.onnx",
            "autodiag.hub",
            "autodiag.trace.per_thread",
            "autodiag._pytorch_names",
        ],
    ),
    # the engine core and the event API the engine reports through
    ("core", ["autodiag.core", "autodiag.core.*", "autodiag.trace", "autodiag.trace.events"]),
    ("tensor", ["autodiag.tensor"]),
    (
        "ops",
        [
            "autodiag.ops",
            "autodiag.ops.*",
            "autodiag.sparse",
            "autodiag.compat",
            "autodiag.generator",
            "autodiag.random",
            "autodiag.linalg",
        ],
    ),
    ("autograd", ["autodiag.autograd", "autodiag.autograd.*"]),
    # the inspection seam: what analyses may read of nodes and tensors
    ("inspect", ["autodiag.inspect"]),
    (
        "nn/optim",
        [
            "autodiag.nn",
            "autodiag.nn.*",
            "autodiag.optim",
            "autodiag.optim.*",
            "autodiag.utils",
            "autodiag.utils.*",
            "autodiag.serialization",
            "autodiag.func",
            "autodiag.func.*",
            "autodiag.distributions",
            "autodiag.distributions.*",
        ],
    ),
    ("namespace", ["autodiag", "autodiag.torch_alias"]),
    # other engines autodiag observes (--engine torch): their seam and observers, which feed
    # the tracers and are run by the target runner
    ("engines", ["autodiag.engines", "autodiag.engines.*"]),
    (
        "target/analysis",
        [
            "autodiag.target",
            "autodiag.target.*",
            "autodiag.analysis",
            "autodiag.analysis.*",
            "autodiag.testing",
        ],
    ),
    ("report", ["autodiag.report", "autodiag.report.*"]),
    (
        "cli",
        [
            "autodiag.cli",
            "autodiag.cli.*",
            "autodiag.__main__",
            "autodiag.run",
            "autodiag.pytest_plugin",
            # the library API over PyTorch (autodiag.torch.observe): it renders the CLI's reports
            "autodiag.torch",
            "autodiag.torch.*",
        ],
    ),
]
# The engine: the layers whose top-level imports must not form a cycle.
ENGINE = ("base", "core", "tensor", "ops", "autograd")

# Where a lower layer calls a higher one at run time, the higher one binds the name at import
# (autodiag/core/bindings.py): those are the only back edges, and they are not imports. This
# lists the modules that do the binding, with what they bind; the test checks each still does.
BINDINGS = {
    "autodiag.tensor": "bind_tensor_type",
    "autodiag.autograd.engine": "bind_engine",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported autodiag module, line, at top level?) for every import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def add(name: str, line: int, top: bool) -> None:
        if name == "autodiag" or name.startswith("autodiag."):
            found.append((name, line, top))

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child.lineno, top)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    add(sub if sub in MODULES else base, child.lineno, top)
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def _shown(module: str) -> Path:
    path = MODULES[module]
    return Path(*path.parts[-(module.count(".") + 1 + (path.name == "__init__.py")) :])


def back_edges() -> list[str]:
    bad = []
    for module in MODULES:
        mine = layer_of(module)
        for target, line, top in imports(module):
            theirs = layer_of(target)
            if theirs > mine:
                where = "" if top else " (inside a function)"
                bad.append(
                    f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})"
                    f" at {_shown(module)}:{line}{where}"
                )
    return bad


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_higher_layer():
    bad = back_edges()
    assert not bad, (
        "imports against the layers (NOTE [Layers] in autodiag/core/__init__.py; "
        "bind the name from the higher layer instead, core/bindings.py):\n  " + "\n  ".join(bad)
    )


def test_no_import_cycle_among_the_engine_modules():
    engine = {m for m in MODULES if LAYERS[layer_of(m)][0] in ENGINE}
    graph = {
        m: sorted({t for t, _, top in imports(m) if top and t in engine and t != m}) for m in engine
    }
    # iterative depth-first search (colours: 0 new, 1 on the stack, 2 done)
    colour = dict.fromkeys(graph, 0)
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(graph[start]))]
        path = [start]
        colour[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[nxt] == 1:
                cycle = path[path.index(nxt) :] + [nxt]
                pytest.fail("import cycle at module level: " + " -> ".join(cycle))
            elif colour[nxt] == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(graph[nxt])))
                path.append(nxt)


def test_the_named_bindings_are_made():
    """Each binding the core documents is made, once, by the module listed for it."""
    from autodiag.core import bindings

    for module, name in BINDINGS.items():
        calls = [
            n
            for n in ast.walk(ast.parse(MODULES[module].read_text()))
            if isinstance(n, ast.Call)
            and getattr(n.func, "attr", getattr(n.func, "id", "")) == name
        ]
        assert len(calls) == 1, f"{module} should call bindings.{name} once"
        assert callable(getattr(bindings, name))
    assert sorted(bindings.__all__) == sorted(BINDINGS.values())


def test_the_test_sees_a_back_edge(tmp_path, monkeypatch):
    """The checker itself: a core module importing the tensor is named as a back edge."""
    fake = tmp_path / "autodiag" / "core" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from autodiag.tensor import Tensor\n")
    monkeypatch.setitem(MODULES, "autodiag.core.fake", fake)
    assert any(
        e.startswith(
            "autodiag.core.fake (core) imports autodiag.tensor (tensor) at "
            "autodiag/core/fake.py:2 (inside a function)"
        )
        for e in back_edges()
    )


def test_the_gradcheck_diagnosis_reads_only_the_checkers_public_names():
    """The diagnosis and the CLI's analysis build on ``autograd.gradcheck``'s public result
    object (GradcheckRun, GradcheckError.failure, Diagnosis) and its public functions."""
    for module in ("autodiag.autograd._gradcheck_diagnosis", "autodiag.analysis.gradcheck"):
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "autodiag.autograd.gradcheck":
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{module}:{node.lineno} imports {private}"
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "_gc"
            ):
                assert not node.attr.startswith("_"), (
                    f"{module}:{node.lineno} reads _gc.{node.attr}"
                )


@pytest.mark.parametrize(
    "path, names",
    [
        ("autograd.graph", ["Node", "saved_tensors_hooks"]),
        ("autograd.grad_mode", ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode"]),
        ("autograd.function", ["Function", "FunctionCtx", "once_differentiable"]),
        ("autograd.gradcheck", ["gradcheck", "gradgradcheck", "GradcheckError"]),
        ("autograd.anomaly_mode", ["detect_anomaly", "set_detect_anomaly"]),
    ],
)
def test_pytorch_module_paths_still_import(path, names):
    """The modules moved to the core keep the import paths PyTorch users write."""
    import importlib
    import sys

    import autodiag

    torch = pytest.importorskip("torch")
    for lib in (autodiag, torch):
        head, _, last = path.rpartition(".")
        if last == "anomaly_mode":  # an attribute of torch.autograd, not always a submodule
            module = getattr(importlib.import_module(f"{lib.__name__}.{head}"), last)
        else:
            module = importlib.import_module(f"{lib.__name__}.{path}")
        assert module is sys.modules.get(f"{lib.__name__}.{path}", module)
        for name in names:
            assert hasattr(module, name), f"{lib.__name__}.{path}.{name}"
