"""Run a PyTorch script on autodiag's engine, without any analysis:

    python -m autodiag.run train.py [ARGS...]

The script runs as ``python train.py ARGS`` would run it (``__main__``, ``sys.argv``, its folder
first on ``sys.path``, standard input and output untouched), except that ``import torch`` and
every ``torch.*`` import resolve to autodiag (``autodiag.torch_alias``). A ``torch`` name
autodiag does not provide stops it with exit status 2 and one paragraph naming the name and
its line; any other exception prints the script's traceback and exits with status 1, as
python does.
"""

from __future__ import annotations

import os
import sys
import traceback
import types

USAGE = "usage: python -m autodiag.run SCRIPT.py [ARGS...]"


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[0]`` with ``argv[1:]`` as its arguments; the exit status."""
    from autodiag.target.errors import AutodiagError
    from autodiag.target.script import load
    from autodiag.torch_alias import missing_name, torch_alias

    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__.strip().split("\n\n", 2)[2], file=sys.stderr)
        return 0 if argv else 2
    path = argv[0]
    try:
        code = load(path)
    except AutodiagError as e:
        _print_error(e)
        return e.exit_code
    module = types.ModuleType("__main__")
    module.__file__ = os.path.abspath(path)
    module.__builtins__ = __builtins__
    sys.argv = [path, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    sys.modules["__main__"] = module
    try:
        with torch_alias():
            exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001
        name = missing_name(e)
        if name is not None:
            from autodiag.target.alias import not_provided

            _print_error(not_provided(e, name, cli=False))
            return 2
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # this runner's frame is not the script's
        traceback.print_exception(type(e), e, tb)
        return 1
    return 0


def _print_error(e) -> None:
    print(f"autodiag.run: {e.title}: {e.message}", file=sys.stderr)
    if e.details:
        print(e.details, file=sys.stderr)
    if e.hint:
        print(f"  {e.hint}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
