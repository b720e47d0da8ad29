"""Text reports in narrow and wide terminals: node names, locations and numbers stay whole.

Each report is rendered at 60, 80 and 120 columns (COLUMNS through the real CLI, and once
through a real pseudo-terminal with its window size set) and compared with what the JSON report
says: every node name appears intact, in order, with its creation line (``model.py:38``, its
folders possibly shortened to ``…/``), and every number of the table is a number of the wide
rendering — none is cut in two.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from cli_helpers import ROOT, pty_output
from typer.testing import CliRunner

from autodiag.cli import app

MODEL = os.path.join(ROOT, "samples", "model.py")
BAD_BACKWARD = os.path.join(ROOT, "samples", "bad_backward.py")
WIDTHS = [60, 80, 120]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?")
runner = CliRunner()


def cli(width: int, *args: str) -> str:
    r = runner.invoke(
        app, [*args, "--no-color"], env={"COLUMNS": str(width)}, catch_exceptions=False
    )
    assert r.exit_code in (0, 1), r.output
    return r.stdout


def json_report(*args: str) -> dict:
    r = runner.invoke(app, [*args, "-f", "json"], catch_exceptions=False)
    return json.loads(r.stdout)


def assert_in_order(text: str, rows: list[tuple[str, str | None]]) -> None:
    """Each (node name, creation ``file:line`` or None) appears as whole words, row after row:
    the name, then — before the next row's name — its location (leading folders may be
    shortened to ``…/``)."""
    tokens = text.split()
    pos = 0
    for k, (name, loc) in enumerate(rows):
        assert name in tokens[pos:], f"row {k}: node {name!r} missing or cut:\n{text}"
        pos = tokens.index(name, pos) + 1
        if loc is None:
            continue
        base = loc.split("/")[-1]
        nxt = rows[k + 1][0] if k + 1 < len(rows) else None
        end = tokens.index(nxt, pos) if nxt in tokens[pos:] else len(tokens)
        found = [
            t for t in tokens[pos:end] if t == loc or (t.startswith("…/") and loc.endswith(t[2:]))
        ]
        assert found and found[0].endswith(base), (
            f"row {k} ({name}): location {loc} missing or cut:\n{text}"
        )


def graph_rows(doc: dict) -> list[tuple[str, str | None]]:
    nodes = {n["id"]: n for n in doc["nodes"]}
    out = []
    for i in doc["order"]:
        n, at = nodes[i], nodes[i]["created_at"]
        out.append((n["name"], f"{os.path.relpath(at['file'])}:{at['line']}" if at else None))
    return out


def table_lines(text: str) -> list[str]:
    """The lines of the table itself (not its title, notes or summary)."""
    return [ln for ln in text.splitlines()[1:] if ln and not ln.startswith(("(", "20 nodes"))]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("order", ["bfs", "dfs", "topo"])
def test_graph_tables_keep_names_and_locations(width, order):
    rows = graph_rows(json_report("graph", MODEL, "--order", order))
    text = cli(width, "graph", MODEL, "--order", order)
    assert_in_order(text, rows)
    lines = table_lines(text)
    assert "node" in lines[0].split() and "created at" in lines[0]
    assert max(len(ln) for ln in lines) <= width


@pytest.mark.parametrize("width", WIDTHS)
def test_graph_tree_keeps_names_and_locations(width):
    rows = graph_rows(json_report("graph", MODEL))
    text = cli(width, "graph", MODEL)
    assert_in_order(text, rows)
    for line in text.splitlines():  # a line with a location fits the terminal
        if "model.py:" in line:
            assert len(line) <= width, line


def trace_rows(doc: dict) -> list[tuple[str, str | None]]:
    out = []
    for s in doc["steps"]:
        at = s.get("created_at")
        out.append((s["node"], f"{os.path.relpath(at['file'])}:{at['line']}" if at else None))
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_trace_keeps_names_locations_and_numbers(width):
    rows = trace_rows(json_report("trace", MODEL))
    text = cli(width, "trace", MODEL)
    assert_in_order(text, rows)
    lines = table_lines(text)
    header = lines[0]
    assert "node" in header.split() and "created at" in header
    assert all(len(ln) <= width for ln in lines)
    wide = set(NUMBER.findall(cli(400, "trace", MODEL)))
    cut = set(NUMBER.findall("\n".join(lines[1:]))) - wide
    assert not cut, f"numbers cut in two: {sorted(cut)}\n{text}"


def test_trace_at_160_columns_shows_every_column_and_wraps_little():
    doc = json_report("trace", MODEL)
    text = cli(160, "trace", MODEL)
    lines = table_lines(text)
    for col in ("#", "node", "forward value", "grad in", "local grad", "grad out", "created at"):
        assert col in lines[0]
    assert_in_order(text, [(n, loc) for n, loc in trace_rows(doc)])
    assert "samples/model.py:38" in text.split()  # the location is whole, not shortened
    # each row: at most three lines per gradient it passes on (a statistic never spans 4-5)
    starts = [k for k, ln in enumerate(lines) if re.match(r"\s*\d+\s", ln)] + [len(lines)]
    assert len(starts) - 1 == len(doc["steps"])
    for step, a, b in zip(doc["steps"], starts, starts[1:]):
        assert b - a <= 3 * max(1, len(step["outgoing"])), "\n".join(lines[a:b])


@pytest.mark.parametrize("width", WIDTHS)
def test_gradcheck_table_keeps_cases_and_errors(width):
    doc = json_report("gradcheck", BAD_BACKWARD)
    text = cli(width, "gradcheck", BAD_BACKWARD).split("\n\n")[0]  # the table, no details
    tokens = text.split()
    for case in doc["cases"]:
        # whole on one line (a name may hold a space: ``Cube[script inputs]``)
        assert any(case["name"] in ln for ln in text.splitlines()), (
            f"case {case['name']!r} cut:\n{text}"
        )
        if case.get("max_error") is not None:
            assert f"{case['max_error']:.2e}" in tokens
    lines = [ln for ln in text.splitlines()[1:] if ln and not ln.startswith("(")]
    assert all(len(ln) <= width for ln in lines[: len(doc["cases"]) + 1])


def test_narrow_tables_say_which_columns_they_left_out():
    text = cli(60, "trace", MODEL)
    assert "forward value" not in text.splitlines()[1]
    assert "forward value" in text and "left out to fit 60 columns" in text


# --- a real terminal ------------------------------------------------------------------------


def run_in_pty(args: list[str], columns: int, rows: int = 50) -> str:
    """``pty_output`` of stdout as text, without escape sequences."""
    text = pty_output(args, columns, rows).decode("utf-8", "replace").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)


@pytest.mark.skipif(
    not hasattr(os, "openpty") or sys.platform == "win32", reason="needs a POSIX pseudo-terminal"
)
@pytest.mark.parametrize(("command", "width"), [("graph", 80), ("trace", 60)])
def test_in_a_real_terminal(command, width):
    extra = ["--order", "topo"] if command == "graph" else []
    doc = json_report(command, MODEL, *extra)
    rows = graph_rows(doc) if command == "graph" else trace_rows(doc)
    text = run_in_pty([command, "samples/model.py", *extra], width)
    assert_in_order(text, rows)
    lines = table_lines(text)
    assert all(len(ln) <= width for ln in lines), text
