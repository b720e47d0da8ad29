"""GitHub Actions workflow commands: one ``::error`` / ``::warning`` line per finding, which
GitHub turns into an annotation on the file and line (in the run's summary and the PR's diff).

The runner reads workflow commands from stdout *and* stderr; autodiag prints them on stderr so
that ``--format json`` keeps stdout pure JSON. Escaping follows GitHub's runner
(``escapeData``/``escapeProperty``): in the message ``%``, ``\\r`` and ``\\n``; in properties
(``file``, ``title``) also ``:`` and ``,``.

>>> from autodiag.report.annotations import annotation
>>> print(annotation("error", "log produced NaN\\nclamp the input", file="train.py", line=7,
...                  title="nan_forward"))
::error file=train.py,line=7,title=nan_forward::log produced NaN%0Aclamp the input
>>> print(annotation("warning", "100% sure", title="a: b, c"))
::warning title=a%3A b%2C c::100%25 sure
"""

from __future__ import annotations

import os

LEVELS = ("error", "warning", "notice")


def escape_data(text: str) -> str:
    """A workflow command's message: ``%`` first, so the escapes themselves survive."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (``file=``, ``title=``): ``:`` and ``,`` would end the property."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def relative_path(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it (GitHub matches
    annotation paths against the repository checkout, which is the job's working directory);
    otherwise unchanged."""
    cwd = os.getcwd()
    full = os.path.abspath(path)
    if full == cwd or not full.startswith(cwd.rstrip(os.sep) + os.sep):
        return path
    return os.path.relpath(full, cwd)


def annotation(
    level: str,
    message: str,
    *,
    file: str | None = None,
    line: int | None = None,
    title: str | None = None,
) -> str:
    """One workflow command line (without the newline)."""
    if level not in LEVELS:
        raise ValueError(f"unknown annotation level {level!r}; expected one of {', '.join(LEVELS)}")
    props = []
    if file and not file.startswith("<"):  # <string>, <stdin>: no file GitHub could show
        props.append(f"file={escape_property(relative_path(file))}")
        if line is not None:
            props.append(f"line={int(line)}")
    if title:
        props.append(f"title={escape_property(title)}")
    head = f"::{level} {','.join(props)}" if props else f"::{level}"
    return f"{head}::{escape_data(message)}"


def from_findings(findings: list) -> list[str]:
    """One annotation per Finding: its severity, ``file``/``line`` from its location, the kind
    as the title, the message and the hint (on a second line) as the text."""
    out = []
    for f in findings:
        loc = f.location or {}
        level = "warning" if f.severity == "warning" else "error"
        text = f.message + (f"\n{f.hint}" if f.hint else "")
        out.append(
            annotation(level, text, file=loc.get("file"), line=loc.get("line"), title=f.kind)
        )
    return out
