"""Start-up: ``import autodiag`` loads the engine and the ops, not the submodules a program
may never use (NOTE [Lazy submodules] in autodiag/__init__.py); they load on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LAZY_MODULES = (
    "autodiag.nn",
    "autodiag.optim",
    "autodiag.utils",
    "autodiag.serialization",
    "autodiag.func",
    "autodiag.distributions",
)


def _run(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_import_autodiag_leaves_heavy_submodules_unloaded():
    loaded = _run(
        "import sys, json, autodiag\n"
        f"print(json.dumps([m for m in {LAZY_MODULES!r} if m in sys.modules]))"
    )
    assert loaded == []


def test_lazy_names_resolve_on_first_use():
    got = _run(
        "import json, autodiag as torch\n"
        "from autodiag import nn, optim, utils, save, load, func, distributions\n"
        "import autodiag.nn.functional as F\n"
        "m = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "print(json.dumps([nn is torch.nn, optim is torch.optim, utils is torch.utils,\n"
        "    save is torch.save, load is torch.load, F is torch.nn.functional,\n"
        "    callable(torch.utils.data.DataLoader), func is torch.func,\n"
        "    distributions is torch.distributions, callable(torch.func.vmap),\n"
        "    all(n in dir(torch) for n in ('nn', 'optim', 'utils', 'save', 'load'))]))"
    )
    assert got == [True] * 11


def test_unknown_attribute_is_a_plain_attribute_error():
    got = _run(
        "import json, autodiag\n"
        "try:\n"
        "    autodiag.no_such_thing\n"
        "except AttributeError as e:\n"
        "    print(json.dumps(str(e)))"
    )
    assert got == "module 'autodiag' has no attribute 'no_such_thing'"


def test_the_default_engine_never_loads_pytorch_or_its_backend():
    """PyTorch is optional: only ``--engine torch`` imports ``autodiag.engines.torch`` (whose
    modules import torch at their top); a command on autodiag's engine loads neither."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    loaded = _run(
        "import contextlib, io, json, sys\n"
        "from autodiag.cli import main\n"
        "sys.argv = ['autodiag', 'graph', "
        + repr(os.path.join(root, "samples", "model.py"))
        + "]\n"
        "quiet = io.StringIO()\n"
        "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit:\n"
        "        pass\n"
        "seen = [m for m in sys.modules if m == 'torch' or m.startswith('autodiag.engines')]\n"
        "print(json.dumps(seen))"
    )
    assert loaded == []


def test_a_session_on_autodiags_engine_never_loads_pytorch_or_its_backend():
    """``pytest --autodiag`` on autodiag's engine runs each test in a ``Session``: starting and
    stopping one loads neither PyTorch nor ``autodiag.engines.torch``."""
    loaded = _run(
        "import json, sys\n"
        "from autodiag.torch._session import Session, claim, release\n"
        "from autodiag.pytest_plugin import CHECKS\n"
        "import autodiag\n"
        "claim('t', 'test')\n"
        "s = Session('autodiag', CHECKS, label='t')\n"
        "s.start()\n"
        "x = autodiag.ones(2, requires_grad=True)\n"
        "(x * 2).sum().backward()\n"
        "s.findings(s.stop(None, [globals()]))\n"
        "release()\n"
        "seen = [m for m in sys.modules if m == 'torch' or m.startswith('autodiag.engines')]\n"
        "print(json.dumps(seen))"
    )
    assert loaded == []


# What ``autodiag --help`` must not import: each command's analysis and renderers load when
# that command runs (``lazy`` renderers in cli/_common.py), not when the CLI is built.
CLI_LAZY_MODULES = (
    "numpy",  # the engine (NOTE [Lazy engine] in autodiag/__init__.py)
    "autodiag.tensor",
    "autodiag.ops",
    "autodiag.autograd",
    "autodiag.trace",
    "autodiag.analysis",
    "autodiag.nn",
    "autodiag.optim",
    "autodiag.report.check",
    "autodiag.report.graph",
    "autodiag.report.html",
    "autodiag.report.flow",
    "autodiag.report.picture",
    "autodiag.report.gradcheck",
    "xml.sax",
    "urllib.request",
    "webbrowser",
)


def test_cli_help_leaves_each_commands_analysis_unloaded():
    loaded = _run(
        "import contextlib, io, json, sys\n"
        "from autodiag.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        app(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'graph' in out.getvalue()\n"
        f"print(json.dumps([m for m in {CLI_LAZY_MODULES!r} if m in sys.modules]))"
    )
    assert loaded == []


def test_lazy_renderer_imports_its_module_on_first_call():
    got = _run(
        "import json, sys\n"
        "from autodiag.cli._common import lazy\n"
        "r = lazy('cmath', 'sqrt')\n"
        "before = 'cmath' in sys.modules\n"
        "print(json.dumps([before, r(-4).imag, 'cmath' in sys.modules, repr(r)]))"
    )
    assert got == [False, 2.0, True, "<renderer cmath.sqrt>"]


# NOTE [Lazy engine]: ``import autodiag`` binds the engine's names on first use; what a user
# sees of the namespace is what the eager ``__init__`` gave.


def test_import_autodiag_alone_loads_no_engine():
    loaded = _run(
        "import sys, json, autodiag\n"
        "print(json.dumps([m for m in ('numpy', 'autodiag.tensor', 'autodiag.ops') "
        "if m in sys.modules]))"
    )
    assert loaded == []


def test_star_import_and_dir_give_the_whole_namespace_first_thing():
    got = _run(
        "import json, types, autodiag\n"
        "ns = {}\n"
        "exec('from autodiag import *', ns)\n"
        "star = sorted(k for k in ns if k != '__builtins__')\n"
        "d = dir(autodiag)\n"
        "public = sorted(n for n in d if not n.startswith('_') and n not in autodiag._LAZY)\n"
        "print(json.dumps([star == public, hasattr(autodiag, '__all__'),\n"
        "    [n in d for n in ('tensor', 'Tensor', 'float32', 'matmul', 'no_grad', 'nn')],\n"
        "    callable(ns['tensor']), ns['Tensor'] is autodiag.Tensor, len(public) > 200]))"
    )
    assert got == [True, False, [True] * 6, True, True, True]


@pytest.mark.parametrize(
    "first",
    [
        "from autodiag.tensor import Tensor",
        "import autodiag.nn",
        "import autodiag.autograd",
        "from autodiag.ops import OPS",
        "from autodiag.torch_alias import torch_alias",
    ],
)
def test_engine_submodule_imported_first_leaves_the_namespace_whole(first):
    """``autodiag.tensor`` stays the function (not the submodule of that name), every name
    resolves, and numpy's errors are silenced, however the engine is first imported."""
    got = _run(
        f"{first}\n"
        "import json, numpy as np, autodiag\n"
        "t = autodiag.tensor([1.0, 0.0], requires_grad=True)\n"
        "y = (autodiag.log(t) * 2).sum()\n"
        "y.backward()\n"
        "print(json.dumps([type(t) is autodiag.Tensor, type(y.grad_fn).__name__,\n"
        "    t.grad.tolist(), np.geterr()['divide'], callable(autodiag.autograd.grad)]))"
    )
    assert got == [True, "SumBackward0", [2.0, float("inf")], "ignore", True]


def test_every_engine_name_that_is_also_a_submodule_is_kept_over_it():
    """The import system binds a submodule on its package: the names ``autodiag/__init__.py``
    keeps over that binding must be every engine name a submodule shares."""
    got = _run(
        "import json, pkgutil, types, autodiag\n"
        "dir(autodiag)\n"
        "subs = {m.name for m in pkgutil.iter_modules(autodiag.__path__)}\n"
        "shared = sorted(n for n in subs\n"
        "    if n in vars(autodiag) and not isinstance(vars(autodiag)[n], types.ModuleType))\n"
        "print(json.dumps([shared, sorted(autodiag._NAMES_OVER_SUBMODULES)]))"
    )
    assert got[0] == got[1] == ["tensor"]


def test_torch_alias_and_pickling_in_a_fresh_process(tmp_path):
    path = str(tmp_path / "t.pt")
    got = _run(
        "import json, pickle\n"
        "from autodiag.torch_alias import torch_alias\n"
        "with torch_alias():\n"
        "    import torch\n"
        "    from torch import nn\n"
        "    x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
        f"    torch.save({{'x': x.detach(), 'dt': torch.float32}}, {path!r})\n"
        "    back = torch.load(" + repr(path) + ")\n"
        "    kinds = [type((x * x).sum().grad_fn).__name__, isinstance(nn.Linear(2, 1), "
        "nn.Module), back['x'].tolist(), back['dt'] is torch.float32,\n"
        "        pickle.loads(pickle.dumps(torch.float64)) is torch.float64]\n"
        "print(json.dumps(kinds))"
    )
    assert got == ["SumBackward0", True, [1.0, 2.0], True, True]


def test_threads_asking_for_the_first_name_together_all_get_it():
    got = _run(
        "import json, threading, autodiag\n"
        "n = 8\n"
        "barrier, out = threading.Barrier(n), []\n"
        "def first():\n"
        "    barrier.wait()\n"
        "    try:\n"
        "        out.append(float(autodiag.tensor(2.0) * autodiag.float32.itemsize))\n"
        "    except Exception as e:\n"
        "        out.append(repr(e))\n"
        "ts = [threading.Thread(target=first) for _ in range(n)]\n"
        "[t.start() for t in ts]\n"
        "[t.join() for t in ts]\n"
        "print(json.dumps(out))"
    )
    assert got == [8.0] * 8
