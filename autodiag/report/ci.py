"""The CI outputs of a run: the JUnit report (--junit-xml) and the GitHub Actions annotations
(--annotations), from its findings and the failure that is not one of them."""

from __future__ import annotations

from autodiag.report import annotations as gh
from autodiag.report import junit


def junit_report(
    command: str, label: str, findings: list, error, cases: list | None, site: tuple
) -> str:
    """The JUnit XML of a run of ``command`` on ``label``: ``cases`` if given, else a failing
    case per finding (one passing case when there is neither a finding nor an ``error``), and
    an error case for ``error`` (an AutodiagError or None) at ``site`` (file, line)."""
    if cases is not None:
        tests = list(cases)
    elif findings or error is None:
        tests = junit.from_findings(
            findings, f"autodiag.{command}", passed_name=f"{command} {label}"
        )
    else:
        tests = []
    if error is not None:
        from autodiag.trace.sites import short_path  # trace/ is the engine's: not at --help

        file, line = site
        tests.append(
            junit.TestCase(
                f"run of {label}",
                f"autodiag.{command}",
                status="error",
                message=error.message,
                text=error.details or error.message,
                type=type(error).__name__,
                file=short_path(file) if file else None,
                line=line,
            )
        )
    return junit.render(f"autodiag {command} {label}", tests)


def annotation_lines(command: str, findings: list, error, site: tuple) -> list[str]:
    """A workflow command per finding, and an error one for ``error`` at ``site``."""
    lines = gh.from_findings(findings)
    if error is not None:
        file, line = site
        text = error.message + (f"\n{error.hint}" if error.hint else "")
        lines.append(
            gh.annotation(
                "error", text, file=file, line=line, title=f"autodiag {command}: {error.title}"
            )
        )
    return lines
