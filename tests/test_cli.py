"""The CLI through its real entry point: typer's CliRunner in-process, and subprocesses.

Covers the frame every command shares (target loading, bad input of DESIGN §6, exit codes,
the JSON envelope, --output) and the graph and trace commands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from cli_helpers import ROOT, check_envelope, check_graph, cli

QUICKSTART = os.path.join(ROOT, "samples", "quickstart.py")

MODEL = """\
import autodiag as torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
w = torch.tensor(3.0, requires_grad=True)
h = (x * w).sigmoid()
loss = (h ** 2).sum()
loss.backward()
"""


# --- basics -------------------------------------------------------------------------------------


def test_version_and_help():
    r = cli("--version")
    assert r.exit_code == 0 and r.output.startswith("autodiag ")
    r = cli("--help")
    assert r.exit_code == 0 and "graph" in r.output and "trace" in r.output


def test_python_dash_m_and_console_script_agree():
    a = subprocess.run(
        [sys.executable, "-m", "autodiag", "--version"], capture_output=True, text=True
    )
    assert a.returncode == 0 and a.stdout.startswith("autodiag ")


# --- graph --------------------------------------------------------------------------------------


def test_graph_tree_names_leaves_and_lines(script):
    path = script(MODEL)
    r = cli("graph", path, "--no-color")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("loss = SumBackward0") and "s.py:6" in lines[0]
    assert any("AccumulateGrad x [2] float32" in ln for ln in lines)
    assert any("AccumulateGrad w [] float32" in ln for ln in lines)
    # loss = Sum <- Pow <- Sigmoid <- Mul <- AccumulateGrad x, w: six nodes, five levels
    assert "6 nodes, 2 leaves, depth 5, saved tensors 28 B — backward call 1 of 1" in r.stdout


@pytest.mark.parametrize("order", ["tree", "bfs", "dfs", "topo"])
def test_graph_json_orders(script, order):
    r = cli("graph", script(MODEL), "--order", order, "-f", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    check_envelope(doc, "graph")
    check_graph(doc)
    names = {n["id"]: n["name"] for n in doc["nodes"]}
    seq = [names[i] for i in doc["order"]]
    if order == "topo":  # the order backward runs
        assert seq == [
            "SumBackward0",
            "PowBackward0",
            "SigmoidBackward0",
            "MulBackward0",
            "AccumulateGrad",
            "AccumulateGrad",
        ]
    assert seq[0] == "SumBackward0" and len(seq) == 6
    leaves = {n["variable"]["name"] for n in doc["nodes"] if n["variable"]}
    assert leaves == {"x", "w"}
    assert doc["root_names"] == ["loss"]


def test_graph_json_matches_the_live_graph(script):
    r = cli("graph", script(MODEL), "-f", "json", "--show-saved")
    doc = json.loads(r.stdout)
    by_id = {n["id"]: n for n in doc["nodes"]}
    mul = next(n for n in doc["nodes"] if n["name"] == "MulBackward0")
    assert [by_id[e[0]]["variable"]["name"] for e in mul["next"]] == ["x", "w"]
    assert {s["name"] for s in mul["saved"]} == {"self", "other"}
    sig = next(n for n in doc["nodes"] if n["name"] == "SigmoidBackward0")
    assert sig["saved"][0]["name"] == "result" and sig["saved"][0]["shape"] == [2]
    assert sig["created_at"]["line"] == 5 and "sigmoid" in sig["created_at"]["code"]


def test_graph_dot_and_mermaid(script):
    path = script(MODEL)
    dot = cli("graph", path, "-f", "dot").stdout
    assert dot.startswith("digraph autodiag {") and dot.rstrip().endswith("}")
    node_ids = set(re.findall(r"^\s+(n\d+) \[", dot, re.M))
    for a, b in re.findall(r"^\s+(n\d+) -> (n\d+);", dot, re.M):
        assert a in node_ids and b in node_ids
    assert len(node_ids) == 6
    mm = cli("graph", path, "-f", "mermaid").stdout
    assert mm.startswith("flowchart BT") and mm.count("-->") == 5


def test_graph_extras(script):
    r = cli("graph", script(MODEL), "--show-saved", "--values", "--grads", "--no-color")
    assert r.exit_code == 0
    assert "saved result [2] float32 v0" in r.stdout
    assert "value" in r.stdout and "grad" in r.stdout


def test_graph_call_and_all(script):
    path = script("""\
        import autodiag as torch
        x = torch.ones(2, requires_grad=True)
        for i in range(3):
            y = (x * (i + 1)).sum() if i < 2 else x.exp().sum()
            y.backward()
        """)
    r = cli("graph", path, "-f", "json")
    doc = json.loads(r.stdout)
    assert doc["calls"] == 3 and doc["call"] == 3
    assert "ExpBackward0" in {n["name"] for n in doc["nodes"]}
    doc = json.loads(cli("graph", path, "-f", "json", "--call", "1").stdout)
    assert doc["call"] == 1 and "MulBackward0" in {n["name"] for n in doc["nodes"]}
    doc = json.loads(cli("graph", path, "-f", "json", "--all").stdout)
    assert [g["call"] for g in doc["graphs"]] == [1, 2, 3]
    r = cli("graph", path, "--call", "7")
    assert r.exit_code == 2 and "3 backward" in r.stderr


def test_graph_module_level_roots_and_root(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        b = a * 2
        c = b.exp()
        d = a.sin()
        n = 3
        """)
    doc = json.loads(cli("graph", path, "-f", "json").stdout)
    assert doc["kind"] == "roots" and sorted(doc["root_names"]) == ["c", "d"]
    doc = json.loads(cli("graph", path, "-f", "json", "--root", "b").stdout)
    assert doc["root_names"] == ["b"] and len(doc["nodes"]) == 2
    r = cli("graph", path, "--root", "zz")
    assert r.exit_code == 2 and "no module-level variable 'zz'" in r.stderr
    assert cli("graph", path, "--root", "n").exit_code == 2


def test_graph_truncation_is_visible(script):
    path = script("""\
        import autodiag as torch
        x = torch.ones(1, requires_grad=True)
        y = x
        for _ in range(50):
            y = y * 1.0
        y.sum().backward()
        """)
    r = cli("graph", path, "--max-nodes", "10", "--no-color")
    assert r.exit_code == 0
    assert "42 nodes not shown" in r.stdout and "--max-nodes" in r.stderr
    doc = json.loads(cli("graph", path, "-f", "json", "--max-nodes", "10").stdout)
    assert len(doc["nodes"]) == 10 and doc["truncated"] == 42
    check_graph(doc)
    doc = json.loads(cli("graph", path, "-f", "json", "--max-depth", "3").stdout)
    assert len(doc["nodes"]) == 4


def test_graph_deep_chain_beyond_the_recursion_limit(script):
    path = script("""\
        import autodiag as torch
        x = torch.ones(2, requires_grad=True)
        y = x
        for _ in range(5000):
            y = y * 1.0
        y.sum().backward()
        """)
    for fmt in ("json", "dot", "mermaid", "text"):
        r = cli("graph", path, "-f", fmt, "--order", "topo")
        assert r.exit_code == 0, (fmt, r.stderr)
    r = cli("graph", path, "--no-color")  # the tree, indented 5,000 levels deep
    assert r.exit_code == 0 and "500" in r.stderr


def test_graph_expression_mode():
    r = cli(
        "graph", "-e", "(3*x+2)**2 + sin(x)*y", "--var", "x=1", "--var", "y=[1, 2]", "-f", "json"
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    leaves = {n["variable"]["name"]: n["variable"] for n in doc["nodes"] if n["variable"]}
    assert leaves["x"] == {"name": "x", "shape": [], "dtype": "float64"}
    assert leaves["y"]["shape"] == [2]
    r = cli("graph", "-e", "x*2", "--var", "x=1", "--dtype", "float32", "-f", "json")
    assert json.loads(r.stdout)["nodes"][1]["variable"]["dtype"] == "float32"


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('touch PWNED')",
        "x.__class__",
        "x.real",
        "(lambda: 1)()",
        "[i for i in range(3)]",
        "open('PWNED', 'w')",
        "__builtins__",
        "'a' * 3",
        "sum(x, **{'dim': 0})",
        "y[x]",
        "exp",
    ],
)
def test_expression_refusals_run_nothing(expr, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli("graph", "-e", expr, "--var", "x=1", "--var", "y=[1, 2]")
    assert r.exit_code == 2, r.output
    assert "expression refused" in r.stderr and "Nothing was run" in r.stderr
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    "args,phrase",
    [
        (["-e", "x + z", "--var", "x=1"], "unknown variable 'z'"),
        (["-e", "x", "--var", "x"], "expected NAME=VALUE"),
        (["-e", "x", "--var", "x=abc"], "not a number"),
        (["-e", "x", "--var", "__x=1"], "not a valid variable name"),
        (["-e", "x +", "--var", "x=1"], "malformed expression"),
        (["-e", "x", "--var", "x=1", "--dtype", "int64"], "float32 or float64"),
        ([], "no target"),
    ],
)
def test_bad_expression_input(args, phrase):
    r = cli("graph", *args) if args else cli("graph", "--no-color")
    assert r.exit_code == 2
    assert phrase in r.stderr


# --- trace --------------------------------------------------------------------------------------


def test_trace_makes_the_chain_rule_visible():
    r = cli("trace", "-e", "(3*x+2)**2", "--var", "x=1", "-f", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    check_envelope(doc, "trace")
    steps = doc["steps"]
    assert [s["node"] for s in steps] == [
        "PowBackward0",
        "AddBackward0",
        "MulBackward0",
        "AccumulateGrad",
    ]
    assert [s["incoming"][0]["values"] for s in steps] == [1.0, 10.0, 10.0, 30.0]
    assert [s["value"]["values"] for s in steps] == [25.0, 5.0, 3.0, 1.0]
    assert steps[0]["outgoing"][0]["local"]["values"] == 10.0
    assert steps[2]["outgoing"][0]["local"]["values"] == 3.0
    assert steps[3]["variable"] == "x"
    text = cli("trace", "-e", "(3*x+2)**2", "--var", "x=1", "--no-color").stdout
    assert "→ AddBackward0: 10" in text and "accumulated into .grad" in text


def test_trace_script_and_call(script):
    path = script(MODEL)
    r = cli("trace", path, "--no-color")
    assert r.exit_code == 0 and "backward of loss" in r.stdout and "s.py:5" in r.stdout
    assert cli("trace", path, "--call", "2").exit_code == 2


def test_trace_needs_a_backward(script):
    r = cli("trace", script("import autodiag as torch\nx = torch.ones(2)\n"))
    assert r.exit_code == 2 and "nothing to trace" in r.stderr


# --- loading scripts: DESIGN §6 -----------------------------------------------------------------


def test_missing_file_and_directory(tmp_path):
    r = cli("graph", str(tmp_path / "nope.py"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = cli("graph", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in r.stderr


def test_non_utf8_and_non_python(tmp_path):
    p = tmp_path / "latin.py"
    p.write_bytes(b"x = '\xe9'\n")
    r = cli("graph", str(p))
    assert r.exit_code == 2 and "not UTF-8" in r.stderr
    p = tmp_path / "data.csv"
    p.write_text("a,b\n1,2\n")
    r = cli("graph", str(p))
    assert r.exit_code == 2 and "not a Python script" in r.stderr
    p = tmp_path / "blob.bin"
    p.write_bytes(b"\x00\x01\x02")
    assert cli("graph", str(p)).exit_code == 2


def test_syntax_error_names_file_and_line(script):
    path = script("import autodiag\nx = (1,\ny = 2 +\n")
    r = cli("graph", path)
    assert r.exit_code == 2
    assert re.search(r"s\.py:\d+: syntax error", r.stderr)
    assert "Traceback" not in r.stderr


def test_script_that_raises_shows_only_user_frames(script):
    path = script("""\
        import autodiag as torch

        def f(t):
            return t.view(3, 3)

        x = torch.ones(4, requires_grad=True)
        y = f(x * 2)
        """)
    r = cli("graph", path)
    assert r.exit_code == 3
    assert "RuntimeError" in r.stderr and 's.py", line 4' in r.stderr
    assert "autodiag/ops" not in r.stderr and "typer" not in r.stderr


def test_inplace_error_of_the_script_is_exit_3_with_the_write_site(script):
    path = script("""\
        import autodiag as torch
        a = torch.ones(2, requires_grad=True)
        b = a.exp()
        b.add_(1)
        b.sum().backward()
        """)
    r = cli("graph", path)
    assert r.exit_code == 3
    assert "modified by an inplace operation" in r.stderr and "s.py:4" in r.stderr


@pytest.mark.parametrize("code,status", [(0, 0), (None, 0), (4, 3), ("'bye'", 3)])
def test_sys_exit(script, code, status):
    path = script(f"""\
        import sys
        import autodiag as torch
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        sys.exit({code})
        """)
    r = cli("graph", path)
    assert r.exit_code == status, r.stderr
    if status == 0:
        assert "MulBackward0" in r.stdout
    else:
        assert "exited with status" in r.stderr


def test_script_reading_stdin_fails_clearly(script):
    path = script("x = input()\n")
    r = cli("graph", path, input="data\n")
    assert r.exit_code == 3 and "reads standard input" in r.stderr


def test_timeout(script):
    path = script("while True:\n    pass\n")
    r = cli("graph", path, "--timeout", "0.3")
    assert r.exit_code == 3 and "--timeout" in r.stderr


def test_script_output_does_not_corrupt_json(script):
    path = script(MODEL + "for i in range(2000):\n    print('noise', i)\n")
    r = cli("graph", path, "-f", "json")
    assert r.exit_code == 0
    json.loads(r.stdout)  # the script's prints went to stderr
    assert "noise 1999" in r.stderr


def test_script_without_tensors(script):
    r = cli("graph", script("print('hello')\n"))
    assert r.exit_code == 2 and "recorded no op" in r.stderr  # nothing analysed, not a pass


def test_script_args_and_state_restored(script, tmp_path):
    helper = tmp_path / "helper_mod_xyz.py"
    helper.write_text("K = 2\n")
    path = script("""\
        import os
        import sys
        import helper_mod_xyz
        import autodiag as torch
        assert __name__ == "__main__"
        assert sys.argv[1:] == ["--lr", "0.5"], sys.argv
        os.chdir("/")
        torch.set_grad_enabled(False)
        with torch.enable_grad():
            x = torch.ones(2, requires_grad=True)
            (x * float(sys.argv[2]) * helper_mod_xyz.K).sum().backward()
        """)
    argv, path_, cwd = sys.argv[:], sys.path[:], os.getcwd()
    r = cli("graph", path, "--", "--lr", "0.5")
    assert r.exit_code == 0, r.stderr
    assert sys.argv == argv and sys.path == path_ and os.getcwd() == cwd
    assert "helper_mod_xyz" not in sys.modules
    import autodiag

    assert autodiag.is_grad_enabled()


def test_output_file_is_written_and_unwritable_output_is_refused(script, tmp_path):
    path = script(MODEL)
    out = tmp_path / "g.json"
    r = cli("graph", path, "-f", "json", "-o", str(out))
    assert r.exit_code == 0 and r.stdout == ""
    check_graph(json.loads(out.read_text()))
    r = cli("graph", path, "-o", str(tmp_path / "missing" / "g.json"))
    assert r.exit_code == 2 and "does not exist" in r.stderr
    r = cli("graph", path, "-o", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in r.stderr


def test_target_and_expression_together_is_refused(script):
    r = cli("graph", script(MODEL), "-e", "x", "--var", "x=1")
    assert r.exit_code == 2 and "not both" in r.stderr


def test_autodiag_never_modifies_the_script(script):
    path = script(MODEL)
    before = open(path, "rb").read()
    cli("graph", path)
    cli("trace", path)
    assert open(path, "rb").read() == before


def test_subprocess_entry_point_on_a_sample():
    r = subprocess.run(
        [sys.executable, "-m", "autodiag", "graph", QUICKSTART, "-f", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    check_graph(doc)
    assert "Traceback" not in r.stderr


def test_debug_variable_shows_autodiag_traceback(script, monkeypatch):
    monkeypatch.setenv("AUTODIAG_DEBUG", "1")
    r = cli("graph", script("x = (\n"))
    assert r.exit_code == 2 and "Traceback" in r.stderr


# --- the samples ------------------------------------------------------------------------------

SAMPLES = sorted(f for f in os.listdir(os.path.join(ROOT, "samples")) if f.endswith(".py"))


@pytest.mark.parametrize("name", SAMPLES)
def test_graph_and_trace_on_every_sample(name):
    path = os.path.join(ROOT, "samples", name)
    # those scripts die of the in-place error and of the second backward through a freed graph
    expected = 3 if name in ("inplace_saved.py", "reused_graph.py") else 0
    for cmd in (["graph", path, "-f", "json"], ["trace", path, "-f", "json"]):
        r = cli(*cmd)
        assert r.exit_code == expected, (cmd, r.stderr[-2000:])
        doc = json.loads(r.stdout)
        check_envelope(doc, cmd[0])
        if cmd[0] == "graph":
            if "graphs" not in doc:
                check_graph(doc)
            assert doc["status"] == ("error" if expected else "ok")


def test_graph_of_the_model_sample_names_its_parameters():
    r = cli("graph", os.path.join(ROOT, "samples", "model.py"), "-f", "json")
    doc = json.loads(r.stdout)
    names = {n["variable"]["name"] for n in doc["nodes"] if n["variable"]}
    assert {"model.fc1.weight", "model.head.bias"} <= names
    assert doc["root_names"] == ["loss"]


def test_anomaly_and_inplace_on_their_samples():
    r = cli("anomaly", os.path.join(ROOT, "samples", "nan_log.py"), "-f", "json")
    assert r.exit_code == 1
    kinds = {f["kind"] for f in json.loads(r.stdout)["findings"]}
    assert {"inf_forward", "nan_forward"} <= kinds
    r = cli("inplace", os.path.join(ROOT, "samples", "inplace_saved.py"), "-f", "json")
    assert r.exit_code == 1
    (f,) = json.loads(r.stdout)["findings"]
    assert f["kind"] == "inplace_saved_tensor" and f["location"]["line"] == 16
    r = cli("anomaly", os.path.join(ROOT, "samples", "train.py"))
    assert r.exit_code == 0  # a clean training script: no false positives
