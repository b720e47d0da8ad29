"""Failures that are the user's to fix, each with its exit code (DESIGN §4, §6).

Every command maps these, and only these, to a one-paragraph message (cli/_common.py); anything
else escaping autodiag is a bug in autodiag (InternalError, exit 4). ``kind`` names the failure
in the JSON envelope's ``error`` object.
"""

from __future__ import annotations


class AutodiagError(Exception):
    """A failure explained to the user: ``message`` says what and where, ``hint`` what to do."""

    exit_code = 2
    title = "error"
    kind = "error"  # the JSON envelope's error.kind (README, "JSON")

    def __init__(
        self, message: str, hint: str = "", details: str = "", location: dict | None = None
    ):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details  # e.g. the offending source line with a caret, or a traceback
        self.location = location  # {"file", "line", "function", "code"} when one is known


class BadInvocation(AutodiagError):
    """Options that cannot work together, an unknown --root, an unwritable --output, ..."""

    title = "bad invocation"
    kind = "bad_invocation"


class BadTarget(AutodiagError):
    """The script cannot be loaded: missing, a directory, not UTF-8, not Python, syntax error."""

    title = "cannot load the target"
    kind = "bad_target"


class NothingToShow(AutodiagError):
    """The target ran (or the expression was evaluated) but left nothing the command reports
    on: no backward() call for ``trace``, no graph at all for ``graph``."""

    title = "nothing to show"
    kind = "nothing_to_show"


class BadExpression(AutodiagError):
    """An expression that is malformed or uses something outside the allow-list."""

    title = "expression refused"
    kind = "bad_expression"


class NothingAnalysed(AutodiagError):
    """The target ran to its end, but autodiag's engine recorded no op: there is nothing a
    verdict could be about (DESIGN §4: a run in which the engine recorded nothing is never a
    pass)."""

    title = "nothing analysed"
    kind = "nothing_analysed"


class TargetFailed(AutodiagError):
    """The target ran but failed for a reason that is not itself a finding: ``exception`` is
    what it raised, ``exit_status`` the status of a non-zero ``sys.exit`` (else None)."""

    exit_code = 3
    title = "the target failed"
    kind = "target_failed"

    def __init__(
        self,
        message: str,
        hint: str = "",
        details: str = "",
        exception: BaseException | None = None,
        exit_status=None,
        kind: str = "target_failed",
        location: dict | None = None,
    ):
        super().__init__(message, hint, details, location)
        self.exception = exception
        self.exit_status = exit_status
        self.kind = kind  # "timeout" when --timeout stopped it
        self.thread: str | None = None  # the name of the script's thread that raised, if not
        # its main one


class Interrupted(AutodiagError):
    """Ctrl-C: the report (if any) covers what ran before."""

    exit_code = 130
    title = "interrupted"
    kind = "interrupted"


class InternalError(AutodiagError):
    """A bug in autodiag itself (exit 4): ``exception`` is what escaped."""

    exit_code = 4
    title = "internal error"
    kind = "internal"

    def __init__(self, exception: BaseException):
        super().__init__(
            f"{type(exception).__name__}: {exception}",
            "This is a bug in autodiag. Run again with AUTODIAG_DEBUG=1 to see its "
            "traceback, and report it.",
        )
        self.exception = exception


class NotProvidedByEngine(AutodiagError):
    """A PyTorch script uses a ``torch`` name that autodiag's engine does not provide (exit 2:
    the script is outside what the engine can run, which is no finding about it)."""

    title = "outside autodiag's engine"
    kind = "not_provided"
