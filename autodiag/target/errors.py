"""Failures that are the user's to fix, each with its exit code (DESIGN §4, §6).

Every command maps these, and only these, to a one-paragraph message (cli/_app.py); anything
else escaping autodiag is a bug in autodiag.
"""

from __future__ import annotations


class AutodiagError(Exception):
    """A failure explained to the user: ``message`` says what and where, ``hint`` what to do."""

    exit_code = 2
    title = "error"

    def __init__(self, message: str, hint: str = "", details: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details  # e.g. the offending source line with a caret, or a traceback


class BadInvocation(AutodiagError):
    """Options that cannot work together, an unknown --root, an unwritable --output, ..."""

    title = "bad invocation"


class BadTarget(AutodiagError):
    """The script cannot be loaded: missing, a directory, not UTF-8, not Python, syntax error."""

    title = "cannot load the target"


class NothingToShow(AutodiagError):
    """The target ran (or the expression was evaluated) but left nothing the command reports
    on: no backward() call for ``trace``, no graph at all for ``graph``."""

    title = "nothing to show"


class BadExpression(AutodiagError):
    """An expression that is malformed or uses something outside the allow-list."""

    title = "expression refused"


class NothingAnalysed(AutodiagError):
    """The target ran to its end, but autodiag's engine recorded no op: there is nothing a
    verdict could be about (DESIGN §4: a run in which the engine recorded nothing is never a
    pass)."""

    title = "nothing analysed"


class TargetFailed(AutodiagError):
    """The target ran but failed for a reason that is not itself a finding: ``exception`` is
    what it raised, ``exit_status`` the status of a non-zero ``sys.exit`` (else None)."""

    exit_code = 3
    title = "the target failed"

    def __init__(self, message: str, hint: str = "", details: str = "",
                 exception: BaseException | None = None, exit_status=None):
        super().__init__(message, hint, details)
        self.exception = exception
        self.exit_status = exit_status


class NotProvidedByEngine(AutodiagError):
    """A PyTorch script uses a ``torch`` name that autodiag's engine does not provide (exit 2:
    the script is outside what the engine can run, which is no finding about it)."""

    title = "outside autodiag's engine"
