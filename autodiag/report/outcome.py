"""What a command's run hands on: to its renderers (one per --format) and to the rules that turn
it into CI outputs and an exit code (``cli/_common.py``).

A renderer is ``render(sink, outcome) -> note | None``: it writes the report through the sink
and may return a note (rich markup) for stderr. A command registers its renderers by format
name; the option's choices are those names, so adding a format is one renderer and one
registration."""

from __future__ import annotations

import dataclasses
from typing import Any

from autodiag.report.output import envelope


@dataclasses.dataclass
class Outcome:
    """One run of a command, analysed.

    ``findings`` None: the command has no findings (graph, trace); CI outputs are then one
    passing case, or an error case for the failure that ended the command. ``failing`` (default:
    any finding): the findings decide the exit code (1) unless the run was interrupted.
    ``explained``: the target's failure is accounted for by the findings, so CI shows no error
    case for it. ``show_error``: print that failure anyway when the findings decide the exit
    code. ``failure``: the command's own failure when nothing else decides the exit code."""

    result: Any  # target.Run
    findings: list | None = None
    info: dict = dataclasses.field(default_factory=dict)  # the JSON envelope's own fields
    data: Any = None  # what the command's renderers need beyond the findings and info
    failing: bool | None = None
    explained: bool = False
    show_error: bool = True
    cases: list | None = None  # JUnit test cases instead of one per finding
    notes: list = dataclasses.field(default_factory=list)  # for stderr, after the report
    failure: Any = None  # an AutodiagError, or None
    command: str = ""  # set by the pipeline

    def __post_init__(self):
        if self.failing is None:
            self.failing = bool(self.findings)

    @property
    def label(self) -> str:
        return self.result.target.label

    @property
    def failed(self) -> bool:
        """The target failed or was interrupted (the report covers what ran before)."""
        return self.result.error is not None or self.result.interrupted


def json_envelope(sink, outcome: Outcome, inline_lists: bool = False) -> None:
    """The JSON renderer of a command whose report is its findings and ``info``.
    ``inline_lists``: each list of scalars on one line (``output.dumps_readable``)."""
    result = outcome.result
    sink.write_json(
        envelope(
            outcome.command,
            outcome.label,
            outcome.findings or [],
            error=result.error,
            interrupted=result.interrupted,
            **outcome.info,
        ),
        inline_lists=inline_lists,
    )
