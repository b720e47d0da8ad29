"""``autodiag --help`` without markdown-it and pygments (NOTE [Light help] in
autodiag/cli/_light_help.py): the same bytes as typer's renderer loaded whole, and nothing of
the stand-ins left for a script to import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# typer's renderer loaded whole first: what the help printed before the light import
_FULL = "import rich.markdown, rich.traceback, typer.rich_utils\n"
_RUN = (
    "import sys\n"
    "from autodiag.cli import main\n"
    "sys.argv = ['autodiag'] + {args!r}\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as e:\n"
    "    print('exit', e.code, file=sys.stderr)\n"
)


def _help(args: list, full: bool, color: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "LINES": "50"}
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    if color:
        env["FORCE_COLOR"] = "1"
    code = (_FULL if full else "") + _RUN.format(args=args)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["graph", "--help"], ["check", "--help"], ["trace"], ["graph", "--bogus"]],
)
@pytest.mark.parametrize("color", [False, True])
def test_help_is_byte_identical_to_typers_full_renderer(args, color):
    light, full = _help(args, False, color), _help(args, True, color)
    assert light.stdout == full.stdout and light.stderr == full.stderr
    assert b"Usage:" in light.stdout + light.stderr


def _loaded_after(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_help_loads_neither_markdown_it_nor_pygments_and_leaves_no_stand_in():
    got = _loaded_after(
        "import contextlib, io, json, sys\n"
        "from autodiag.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        app(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('markdown_it', 'pygments', 'rich.markdown', 'rich.traceback',\n"
        "                     'rich.syntax') if m in sys.modules]\n"
        "import rich.markdown, rich.traceback, typer.rich_utils as ru\n"
        "real = [rich.markdown.Markdown.__module__, rich.traceback.Traceback.__module__,\n"
        "        'markdown_it' in sys.modules, 'pygments' in sys.modules]\n"
        "md = ru.Markdown('**x**')\n"
        "tb = ru.Traceback.from_exception(ValueError, ValueError('v'), None)\n"
        "print(json.dumps([heavy, 'graph' in out.getvalue(), real, type(md).__module__,\n"
        "                  type(tb).__module__, isinstance(md, ru.Markdown)]))"
    )
    heavy, printed, real, md_module, tb_module, is_instance = got
    assert heavy == [] and printed
    # a later import (a script the CLI runs) gets rich's real modules
    assert real == ["rich.markdown", "rich.traceback", True, True]
    # and typer's names still reach rich's real classes when typer uses them
    assert (md_module, tb_module, is_instance) == ("rich.markdown", "rich.traceback", True)


def test_help_after_rich_markdown_was_imported_uses_typer_as_is():
    got = _loaded_after(
        "import contextlib, io, json, sys\n"
        "import rich.markdown\n"
        "from autodiag.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        app(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "import typer.rich_utils as ru\n"
        "same = ru.Markdown is rich.markdown.Markdown\n"
        "print(json.dumps([same, 'rich.traceback' in sys.modules]))"
    )
    assert got == [True, True]
