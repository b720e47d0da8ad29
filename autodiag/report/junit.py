"""JUnit XML for CI (GitHub Actions, GitLab, Jenkins test reports): any command's checks as
test cases, or its Findings as failing ones.

The format is the common denominator the CI reporters read: ``<testsuites>`` with one
``<testsuite>`` (counts of tests, failures, errors, skipped; total time) of ``<testcase
name classname time file line>`` elements, each with at most one ``<failure message type>``,
``<error message type>`` or ``<skipped message>`` child whose text holds the details.

>>> from autodiag.report.junit import TestCase, render
>>> xml = render("autodiag gradcheck", [TestCase("Cubic", "s.py"), TestCase(
...     "Wrong", "s.py", status="failure", message="off by a factor of 1.5")])
>>> 'failures="1"' in xml and 'tests="2"' in xml
True
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET

STATUSES = ("passed", "failure", "error", "skipped")
# XML 1.0 forbids most control characters, even escaped; a message may carry them
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclasses.dataclass
class TestCase:
    """One test case: ``status`` is one of ``STATUSES``; ``message`` one line for the CI's
    summary, ``text`` the details; ``file``/``line`` let reporters annotate the source."""

    __test__ = False  # not a pytest test class

    name: str
    classname: str
    status: str = "passed"
    message: str = ""
    text: str = ""
    type: str = ""
    time: float = 0.0
    file: str | None = None
    line: int | None = None


def _clean(text: str) -> str:
    return _INVALID_XML.sub("?", text)


def render(suite: str, cases: list[TestCase], time: float | None = None) -> str:
    """The XML document (UTF-8 declaration, indented) for ``cases`` in one suite."""
    counts = {s: sum(c.status == s for c in cases) for s in STATUSES}
    total_time = sum(c.time for c in cases) if time is None else time
    root = ET.Element(
        "testsuites",
        name=_clean(suite),
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{total_time:.6f}",
    )
    ts = ET.SubElement(
        root,
        "testsuite",
        name=_clean(suite),
        tests=str(len(cases)),
        failures=str(counts["failure"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{total_time:.6f}",
    )
    for c in cases:
        if c.status not in STATUSES:
            raise ValueError(
                f"unknown test case status {c.status!r}; expected one of {', '.join(STATUSES)}"
            )
        attrs = {"name": _clean(c.name), "classname": _clean(c.classname), "time": f"{c.time:.6f}"}
        if c.file:
            attrs["file"] = _clean(c.file)
        if c.line is not None:
            attrs["line"] = str(c.line)
        tc = ET.SubElement(ts, "testcase", attrs)
        if c.status == "passed":
            continue
        child = ET.SubElement(tc, c.status, {"message": _clean(c.message)})
        if c.type and c.status != "skipped":
            child.set("type", _clean(c.type))
        if c.text:
            child.text = _clean(c.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def from_findings(
    findings: list, classname: str, passed_name: str = "no findings", warnings_fail: bool = True
) -> list:
    """One failing test case per Finding, or one passing case named ``passed_name`` when there
    are none — for commands whose checks are not enumerable cases. A ``warning`` Finding fails
    too unless ``warnings_fail`` is False (``check``, whose exit code ignores warnings): then it
    is a passing case marked "(warning)", so the report agrees with the exit code."""
    if not findings:
        return [TestCase(passed_name, classname)]
    from autodiag.trace.sites import short_path  # trace/ is the engine's: not at --help

    cases = []
    for f in findings:
        loc = f.location or {}
        where = f"{short_path(loc['file'])}:{loc['line']}" if loc.get("file") else ""
        text = f.message + (f"\n{f.hint}" if f.hint else "")
        fails = warnings_fail or f.severity == "error"
        name = f"{f.kind} at {where}" if where else f.kind
        cases.append(
            TestCase(
                name if fails else f"{name} (warning)",
                classname,
                status="failure" if fails else "passed",
                message=f.message.splitlines()[0] if f.message else f.kind,
                text=text,
                type=f.kind,
                file=short_path(loc["file"]) if loc.get("file") else None,
                line=loc.get("line"),
            )
        )
    return cases
