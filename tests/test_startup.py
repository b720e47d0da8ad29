"""Start-up: ``import autodiag`` loads the engine and the ops, not the submodules a program
may never use (NOTE [Lazy submodules] in autodiag/__init__.py); they load on first use."""

from __future__ import annotations

import json
import subprocess
import sys

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


# What ``autodiag --help`` must not import: each command's analysis and renderers load when
# that command runs (``lazy`` renderers in cli/_common.py), not when the CLI is built.
CLI_LAZY_MODULES = (
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
