"""Small things a reader of autodiag's output trips on (issue 15, item 10): help and exit codes,
error titles and hints in both formats, DOT/Mermaid labels and colours, tree back-references."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import cli

TWO_LOCAL_LEAVES = """\
import autodiag as torch


def make():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    return (a * b + a * b * b).sum()


make().backward()
"""


def test_tree_back_references_say_which_node(script):
    path = script(TWO_LOCAL_LEAVES)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    leaves = {n["id"]: n for n in doc["nodes"] if n["variable"] is not None}
    assert len(leaves) == 2 and all(n["variable"]["name"] is None for n in leaves.values())
    text = cli("graph", path, "--no-color").stdout
    refs = [ln for ln in text.splitlines() if "shown above" in ln]
    assert len(refs) == 3
    seen = set()
    for ln in refs:
        m = re.search(r"\(id (\d+), shared, shown above\)", ln)
        assert m, ln
        i = int(m.group(1))
        assert i in leaves, ln
        seen.add(i)
        shape = "[" + ", ".join(map(str, leaves[i]["variable"]["shape"])) + "]"
        assert f"AccumulateGrad leaf {shape}" in ln
        # the node's first appearance carries the same id
        assert sum(f"(id {i})" in x for x in text.splitlines()) == 1
    assert seen == set(leaves)


# --- help ----------------------------------------------------------------------------------------

COMMANDS = ["graph", "trace", "gradcheck", "anomaly", "inplace", "leaks", "check"]
WIDE = {"COLUMNS": "250"}


def test_bare_autodiag_shows_the_help_and_exits_0():
    r = cli()
    assert r.exit_code == 0
    assert "Usage: autodiag" in r.stdout and "trace" in r.stdout


def test_top_level_help_lists_the_exit_codes():
    text = cli("--help", env=WIDE).stdout
    for code in (
        "0 nothing found",
        "1 findings",
        "2 bad invocation or target",
        "3 the target failed",
        "130 interrupted",
    ):
        assert code in text, text


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_shows_no_type_labels(command):
    text = cli(*([command] if command else []), "--help", env=WIDE).stdout
    assert not re.search(r"<(bool|str|int|float|list|path)", text), text
    if command == "graph":  # options that take a value say what it is
        for opt, metavar in (
            ("--output", "FILE"),
            ("--max-nodes", "N"),
            ("--root", "NAME"),
            ("--var", "NAME=VALUE"),
            ("--timeout", "SECONDS"),
        ):
            assert re.search(rf"{opt}\s.*{re.escape(metavar)}", text), opt


def test_help_descriptions_do_not_break_mid_sentence():
    text = cli("--help", env=WIDE).stdout
    for command in COMMANDS:
        row = next(ln for ln in text.splitlines() if re.match(rf"│ {command}\s", ln))
        assert row.rstrip(" │").endswith("."), row  # the whole first paragraph on one line
    trace = cli("trace", "--help", env=WIDE).stdout
    assert "its forward value, the gradient it received" in trace


# --- errors ------------------------------------------------------------------------------------


def test_a_failing_script_has_a_true_hint_in_text_and_json(script):
    path = script(
        "import autodiag as torch\nx = torch.ones(2, requires_grad=True)\n"
        "(x * 2).sum().backward()\nraise ValueError('boom')\n"
    )
    r = cli("graph", path, "-f", "json")
    assert r.exit_code == 3
    err = json.loads(r.stdout)["error"]
    assert "above" not in err["hint"] and "traceback" in err["hint"]
    assert "line 4" in err["traceback"]
    r = cli("graph", path, "--no-color")
    assert r.exit_code == 3
    assert r.stderr.index("Traceback") < r.stderr.index("The traceback shows")


@pytest.mark.parametrize("command", ["graph", "trace"])
def test_nothing_to_show_is_not_a_load_failure(script, command):
    r = cli(command, script("import autodiag as torch\nx = torch.ones(2)\n"))
    assert r.exit_code == 2
    assert "cannot load the target" not in r.stderr
    assert "autodiag: nothing to show:" in r.stderr and "ran, but" in r.stderr


# --- DOT and Mermaid ---------------------------------------------------------------------------

LOCAL = """\
import autodiag as torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
h = (x * 3).exp()
loss = h.sum()
loss.backward()
"""


def test_mermaid_colours_leaves_and_roots_like_dot(script):
    path = script(LOCAL)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    mm = cli("graph", path, "-f", "mermaid").stdout
    dot = cli("graph", path, "-f", "dot").stdout
    fills = dict(re.findall(r"classDef (\w+) fill:(#[0-9a-f]{6})", mm))
    for n in doc["nodes"]:
        line = next(ln for ln in mm.splitlines() if re.match(rf"\s*n{n['id']}[\[(]", ln))
        color = re.search(rf'n{n["id"]} \[.*fillcolor="(#[0-9a-f]{{6}})"', dot).group(1)
        if n["variable"] is not None:
            assert line.endswith(":::leaf") and fills["leaf"] == color
        elif n["id"] in doc["roots"]:
            assert line.endswith(":::root") and fills["root"] == color
        else:
            assert ":::" not in line


def test_dot_and_mermaid_labels_carry_the_creation_line(script):
    path = script(LOCAL)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    mm = cli("graph", path, "-f", "mermaid").stdout
    dot = cli("graph", path, "-f", "dot").stdout
    with_site = [n for n in doc["nodes"] if n["created_at"]]
    assert len(with_site) == 3
    for n in with_site:
        site = f"s.py:{n['created_at']['line']}"
        assert re.search(rf'n{n["id"]} \[label="[^"]*\\n{re.escape(site)}"', dot), dot
        assert re.search(rf'n{n["id"]}\[".*<br/>{re.escape(site)}"\]', mm), mm
