"""Huge graphs (issue 18): trace's --max-nodes, streamed JSON reports, no recursion anywhere.

Time and memory on a 1,000,000-op chain are measured by tests/perf/bench_chain_cli.py; here,
the behaviour: truncation with a note, one valid JSON document written piece by piece (its
peak memory while written stays far below its size), every command through a deep chain.
"""

from __future__ import annotations

import io
import json
import os
import re
import textwrap
import tracemalloc

import pytest
from cli_helpers import check_envelope, check_graph, cli

import autodiag as torch
from autodiag.analysis.backward_trace import BackwardTrace
from autodiag.analysis.graph import GraphSnapshot
from autodiag.report import graph as graph_render
from autodiag.report.output import Sink, Streamed, _dump_streaming, envelope
from autodiag.trace import tracing

CHAIN = """\
import autodiag as torch
x = torch.ones(1, requires_grad=True)
y = x
for i in range({n}):
    y = y * 1.0000001 if i % 2 else y + 1e-7
y.sum().backward()
"""


@pytest.fixture
def chain(tmp_path):
    def make(n: int) -> str:
        p = tmp_path / f"chain{n}.py"
        p.write_text(CHAIN.format(n=n))
        return str(p)

    return make


# --- trace --max-nodes --------------------------------------------------------------------------


def test_trace_max_nodes_truncates_text_with_a_note(chain):
    path = chain(40)  # 40 ops + SumBackward0 + AccumulateGrad: 42 steps
    r = cli("trace", path, "--max-nodes", "5", "--no-color")
    assert r.exit_code == 0, r.stderr
    steps = [ln.split()[0] for ln in r.stdout.splitlines()[2:] if ln.strip()]
    assert steps == ["1", "2", "3", "4", "5"]
    assert "the first 5 of 42 nodes" in r.stdout
    assert "note:" in r.stderr and "37 nodes not shown (--max-nodes 5)" in r.stderr
    full = cli("trace", path, "--no-color")
    assert full.exit_code == 0 and "not shown" not in full.stderr
    assert full.stdout.splitlines()[-1].split()[0] == "42"


def test_trace_text_stops_at_500_nodes_by_default(chain):
    r = cli("trace", chain(600), "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "102 nodes not shown (--max-nodes 500)" in r.stderr
    assert r.stdout.splitlines()[-1].split()[0] == "500"


def test_trace_max_nodes_truncates_json(chain):
    path = chain(40)
    full = json.loads(cli("trace", path, "-f", "json").stdout)
    check_envelope(full, "trace")
    assert len(full["steps"]) == 42 and full["truncated"] == 0  # JSON is complete by default
    r = cli("trace", path, "-f", "json", "--max-nodes", "5")
    assert r.exit_code == 0 and "not shown" not in r.stderr  # JSON says it in "truncated"
    doc = json.loads(r.stdout)
    check_envelope(doc, "trace")
    assert doc["steps"] == full["steps"][:5] and doc["truncated"] == 37
    assert list(doc)[:5] == ["autodiag", "command", "target", "status", "findings"]


def test_trace_max_nodes_with_call(script_two_calls):
    doc = json.loads(
        cli("trace", script_two_calls, "-f", "json", "--call", "1", "--max-nodes", "2").stdout
    )
    assert doc["call"] == 1 and len(doc["steps"]) == 2 and doc["truncated"] == 3
    assert [s["node"] for s in doc["steps"]] == ["SumBackward0", "MulBackward0"]
    assert doc["steps"][0]["value"]["values"] == pytest.approx(3 * 2.718281828**2)


@pytest.fixture
def script_two_calls(tmp_path):
    p = tmp_path / "two.py"
    p.write_text(
        textwrap.dedent("""\
        import autodiag as torch
        x = torch.ones(1, requires_grad=True)
        ((x * 2).exp() * 3).sum().backward()
        (x + 1).sum().backward()
        """)
    )
    return str(p)


# --- streamed JSON ------------------------------------------------------------------------------


def _materialised(o):
    if isinstance(o, Streamed):
        return [_materialised(x) for x in o.items]
    if isinstance(o, dict):
        return {k: _materialised(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_materialised(v) for v in o]
    return o


@pytest.mark.parametrize("pretty", [True, False])
def test_streamed_json_is_the_same_text_as_json_dumps(pretty):
    def doc():
        return {
            "a": 1,
            "empty": Streamed([]),
            "graphs": [
                {
                    "nodes": Streamed({"id": i, "next": [[i + 1, 0], None]} for i in range(2500)),
                    "order": Streamed(iter(range(2500))),
                    "e": {},
                },
                {"nodes": Streamed([]), "x": [Streamed([{"k": []}]), 2, []]},
            ],
            "s": 'é\n"',
            "n": None,
        }

    out = io.StringIO()
    _dump_streaming(out.write, doc(), pretty)
    assert out.getvalue() == json.dumps(_materialised(doc()), indent=2 if pretty else None)


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _chain_run(n: int, tracer):
    src = CHAIN.format(n=n)
    with tracing(tracer):
        ns: dict = {}
        exec(compile(src, "<chain>", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def traced_10k():
    """A 10,000-op chain run once under a BackwardTrace: (the trace, the script's globals)."""
    rec = BackwardTrace()
    ns = _chain_run(10_000, rec)
    rec.name_leaves({})
    return rec, ns


def test_trace_json_of_a_10k_chain_streams(tmp_path, traced_10k):
    rec = traced_10k[0]
    out = str(tmp_path / "trace.json")
    sink = Sink(out, color=False)
    doc = envelope(
        "trace",
        "chain",
        [],
        call=1,
        calls=1,
        kind=rec.kind,
        steps=Streamed(rec.rows(), rec.rows_json()),
        truncated=rec.truncated,
    )
    peak = _peak_while(lambda: sink.write_json_stream(doc, pretty=False))
    sink.close()
    size = os.path.getsize(out)
    data = json.load(open(out))
    assert len(data["steps"]) == 10_002 and data["steps"][-1]["node"] == "AccumulateGrad"
    assert data["steps"] == list(rec.rows())  # the direct JSON text says what rows() say
    assert size > 5_000_000 and peak < size / 4, (peak, size)  # never the whole document


def test_graph_json_of_a_10k_chain_streams(tmp_path, traced_10k):
    ns = traced_10k[1]
    snap = GraphSnapshot.capture([ns["y"].grad_fn], 1, "backward")
    view = graph_render.View(order="topo")
    out = str(tmp_path / "graph.json")
    sink = Sink(out, color=False)
    doc = envelope("graph", "chain", [], calls=1, **graph_render.to_json(snap, view, True))
    peak = _peak_while(lambda: sink.write_json_stream(doc, pretty=False))
    sink.close()
    size = os.path.getsize(out)
    text = open(out).read()
    assert (
        text
        == json.dumps(envelope("graph", "chain", [], calls=1, **graph_render.to_json(snap, view)))
        + "\n"
    )
    assert len(json.loads(text)["nodes"]) == 10_001
    # held whole, the text alone would be ``size``, its node dicts several times more
    assert peak < size / 2, (peak, size)


def test_streamed_output_file_is_atomic(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    sink = Sink(str(out), color=False)
    sink.write_json_stream({"a": Streamed(range(3))})
    assert out.read_text() == "old"  # written beside it, renamed by close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".autodiag-")]
    sink.close()
    assert json.loads(out.read_text()) == {"a": [0, 1, 2]}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".autodiag-")]


def test_a_failed_stream_leaves_no_temporary_file(tmp_path):
    def fail():
        yield 1
        raise ValueError("boom")

    sink = Sink(str(tmp_path / "r.json"), color=False)
    with pytest.raises(ValueError):
        sink.write_json_stream({"a": Streamed(fail())})
    del sink
    assert list(tmp_path.iterdir()) == []


# --- every command through a deep chain -----------------------------------------------------


def test_every_command_on_a_deep_chain(chain, tmp_path):
    """Five times the recursion limit (1,000): a recursive walk anywhere fails here."""
    path = chain(5000)
    out = str(tmp_path / "out")
    for args in (["graph"], ["graph", "--order", "topo"], ["trace"]):
        r = cli(*args, path, "-o", out)
        assert r.exit_code == 0, (args, r.stderr)
    for command in ("graph", "trace", "anomaly", "inplace", "leaks", "check"):
        r = cli(command, path, "-f", "json", "-o", out)
        assert r.exit_code == 0, (command, r.stderr)
        doc = json.load(open(out))
        check_envelope(doc, command)
        if command == "graph":
            check_graph(doc)
            assert len(doc["nodes"]) == 5002
        if command == "trace":
            assert len(doc["steps"]) == 5002 and doc["truncated"] == 0


def test_graph_json_max_nodes_all_streams_from_the_default(chain):
    """JSON is complete by default (graph and trace): there is no limit to lift."""
    r = cli("graph", chain(30), "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["truncated"] == 0
    assert cli("graph", chain(30), "-f", "json", "--max-nodes", "0").exit_code == 2


# --- compact trace rows -----------------------------------------------------------------------


def test_compact_summaries_are_summarize_exactly():
    """One-element float arrays are kept by value (9 bytes): the dict and its JSON text are
    those of ``summarize``, for every dtype, shape and special value."""
    import numpy as np

    from autodiag.analysis.summary import Summaries, summarize

    col = Summaries()
    arrays = [
        np.full(shape, v, dtype=dt)
        for dt in (np.float16, np.float32, np.float64)
        for shape in ((), (1,), (1, 1), (1, 1, 1))
        for v in (0.0, -0.0, 1.5, -3.25e-5, np.nan, np.inf, -np.inf, 1e300, 7e-45)
    ]
    arrays += [np.zeros(3), np.arange(10.0), np.array([1, 2]), np.zeros((0,)), None, np.array(True)]
    keys = [col.add(a) for a in arrays]
    texts: dict = {}
    for k, a in zip(keys, arrays, strict=True):
        assert json.dumps(col.get(k)) == json.dumps(summarize(a)), a
        assert col.json(k, texts) == json.dumps(summarize(a)), a
    assert len(col.dicts) == 5  # only the arrays that are not one-element floats


@pytest.mark.parametrize(
    "sample", ["model.py", "myop.py", "nan_log.py", "train.py", "leaky_loop.py"]
)
def test_trace_rows_json_text_is_json_dumps_of_rows(sample):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "samples", sample)
    src = open(path).read()
    rec = BackwardTrace()
    with tracing(rec):
        exec(compile(src, path, "exec"), {"__name__": "__main__", "__file__": path})
    rec.name_leaves({})
    rows = list(rec.rows())
    assert rows and json.dumps(rows) == "[" + ", ".join(rec.rows_json()) + "]"


def test_trace_local_derivative_is_numpys_quotient():
    """The one-element shortcut for ``sent / received`` (float64 arithmetic, rounded to float32
    by hand) gives numpy's own quotient in the arrays' dtype: every float dtype, subnormal,
    huge, overflowing and negative values."""
    import numpy as np

    from autodiag.analysis.backward_trace import _local

    rng = np.random.default_rng(0)
    for dt in (np.float16, np.float32, np.float64):
        info = np.finfo(dt)
        pairs = [
            (
                rng.standard_normal() * 10.0 ** rng.integers(-8, 8),
                rng.standard_normal() * 10.0 ** rng.integers(-8, 8),
            )
            for _ in range(300)
        ]
        pairs += [
            (float(info.tiny), 3.0),
            (float(info.max), 0.5),
            (float(info.max), -0.25),
            (float(info.smallest_subnormal), 7.0),
            (1.0, float(info.smallest_subnormal)),
            (-0.0, 2.0),
            (1.0, 3.0),
            (2.0, 3.0),
        ]
        for shape in ((), (1,), (1, 1)):
            rec = BackwardTrace()
            for num, den in pairs:
                g_in = np.full(shape, den, dtype=dt)
                g_out = np.full(shape, num, dtype=dt)
                with np.errstate(over="ignore"):
                    want = _local(g_in, g_out)
                    rec._add_local(g_in, g_out, rec._codec.encode(g_in), rec._codec.encode(g_out))
                got = rec._out_local.get(len(rec._out_local) - 1)
                if want is None:
                    assert got is None
                else:
                    assert got["values"] == want.tolist() and got["dtype"] == dt.__name__, (
                        dt,
                        num,
                        den,
                    )


def test_trace_rows_json_special_values_chain():
    """Zeros (-0.0 too), infinities, NaN and multi-edge rows in one trace: the direct JSON text
    is ``json.dumps`` of ``rows()``."""
    src = textwrap.dedent("""\
        import autodiag as torch
        x = torch.tensor([0.0], requires_grad=True)
        w = torch.tensor(-0.0, requires_grad=True)
        y = x * 2.0
        for i in range(6):
            y = y * 1.5 + w if i % 2 else y - 0.0
        z = (y * x).sum() + (x / x).sum() + (w * 1e38 * 1e38).sum()
        # 0.0 received, -0.0 sent on (equal, but not the same text), then passed on by an add
        z = z + ((x + 1.0) * -1.0).sum() * 0.0
        z.backward()
        """)
    rec = BackwardTrace()
    with tracing(rec):
        exec(compile(src, "<special>", "exec"), {})
    rec.name_leaves({})
    rows = list(rec.rows())
    assert len(rows) > 10
    assert json.dumps(rows) == "[" + ", ".join(rec.rows_json()) + "]"


# --- streamed DOT and Mermaid ----------------------------------------------------------------

DOT_3 = r"""digraph autodiag {
  node [shape=box, style="rounded,filled", fillcolor="#eeeeee", fontname="Helvetica"];
  rankdir=BT;
  n0 [label="SumBackward0\nchain3.py:6", fillcolor="#a9dfbf"];
  n1 [label="AddBackward0\nchain3.py:5", fillcolor="#eeeeee"];
  n2 [label="MulBackward0\nchain3.py:5", fillcolor="#eeeeee"];
  n3 [label="AddBackward0\nchain3.py:5", fillcolor="#eeeeee"];
  n4 [label="x\n[1] float32", fillcolor="#aed6f1"];
  n1 -> n0;
  n2 -> n1;
  n3 -> n2;
  n4 -> n3;
}
"""

MERMAID_3_TRUNCATED = """\
flowchart BT
  classDef leaf fill:#aed6f1,stroke:#5499c7,color:#000
  classDef root fill:#a9dfbf,stroke:#52be80,color:#000
  n0["SumBackward0<br/>chain3.py:6"]:::root
  n1["AddBackward0<br/>chain3.py:5"]
  n1 --> n0
  truncated["3 more nodes not shown"]
"""


@pytest.mark.parametrize("to_file", [False, True])
def test_graph_dot_and_mermaid_stream_the_same_text(chain, tmp_path, to_file):
    """Streamed line by line (stdout, or -o's file), the text is what the whole-string
    renderers give, byte for byte; truncated by --max-nodes it is still complete."""
    path = chain(3)
    cases = [(["-f", "dot"], DOT_3), (["-f", "mermaid", "--max-nodes", "2"], MERMAID_3_TRUNCATED)]
    for args, want in cases:
        if to_file:
            out = tmp_path / "g.out"
            r = cli("graph", path, *args, "-o", str(out))
            text = out.read_text()
        else:
            r = cli("graph", path, *args)
            text = r.stdout
        assert r.exit_code == 0, r.stderr
        assert text == want.replace("chain3.py", os.path.basename(path)), text


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_graph_dot_and_mermaid_of_a_10k_chain_stream(tmp_path, traced_10k, fmt):
    ns = traced_10k[1]
    snap = GraphSnapshot.capture([ns["y"].grad_fn], 1, "backward")
    view = graph_render.View(order="topo")
    out = str(tmp_path / f"graph.{fmt}")
    sink = Sink(out, color=False)
    lines = graph_render.dot_lines if fmt == "dot" else graph_render.mermaid_lines
    peak = _peak_while(lambda: sink.write_lines(lines(snap, view)))
    sink.close()
    size = os.path.getsize(out)
    text = open(out).read()
    whole = graph_render.to_dot(snap, view) if fmt == "dot" else graph_render.to_mermaid(snap, view)
    assert text == whole
    assert text.count(" -> " if fmt == "dot" else " --> ") == 10_000  # 10,001 nodes
    # the walk's own sets and lists grow with the graph either way; the text never is whole
    # (the whole-string renderer holds its lines and their join: twice the text more)
    whole_peak = _peak_while(
        lambda: (
            graph_render.to_dot(snap, view) if fmt == "dot" else graph_render.to_mermaid(snap, view)
        )
    )
    assert size > 500_000 and peak < whole_peak - size, (peak, whole_peak, size)


def test_graph_dot_truncated_is_valid(chain):
    r = cli("graph", chain(40), "-f", "dot", "--max-nodes", "5")
    assert r.exit_code == 0, r.stderr
    dot = r.stdout
    assert dot.startswith("digraph autodiag {\n") and dot.endswith("}\n")
    nodes = re.findall(r"^  (n\d+) \[", dot, re.M)
    assert len(nodes) == 5
    for a, b in re.findall(r"^  (n\d+) -> (n\d+);$", dot, re.M):
        assert a in nodes and b in nodes
    assert 'truncated [shape=note, label="37 more nodes not shown"];' in dot


def test_trace_forward_values_of_a_chain_take_the_common_path(monkeypatch):
    """A chain of one-element ops records each forward value in ``on_op`` itself: traced ops
    number their nodes two apart (the op's own mark, then its node), and that gap must not send
    every op through the general ``put``. The values read back are the ops' own."""
    from autodiag.analysis import backward_trace

    calls = []
    put = backward_trace._ForwardValues.put
    monkeypatch.setattr(
        backward_trace._ForwardValues,
        "put",
        lambda self, node, out: calls.append(1) or put(self, node, out),
    )
    rec = BackwardTrace()
    ns = _chain_run(1000, rec)
    assert len(calls) <= 2, len(calls)
    rows = list(rec.rows())
    assert rows[1]["node"] == "MulBackward0"  # y * 1.0000001, the chain's last op
    assert rows[1]["value"]["values"] == ns["y"].tolist()


def test_trace_rows_json_writes_a_passed_on_gradient_once(traced_10k, monkeypatch):
    """An add passes its incoming gradient on unchanged: the row reuses the incoming text for
    its outgoing gradient (one ``scalar_json`` for the value and one for each new gradient)."""
    from autodiag.analysis.summary import Summaries

    rec = traced_10k[0]
    calls = []
    scalar = Summaries.scalar_json
    monkeypatch.setattr(
        Summaries, "scalar_json", lambda self, code, v: calls.append(1) or scalar(self, code, v)
    )
    texts = list(rec.rows_json())
    assert len(texts) == 10_002
    assert len(calls) <= 1.6 * len(texts), len(calls)  # 2 per row before


def test_trace_chain_rows_take_the_common_path(monkeypatch):
    """A chain's backward nodes (one gradient in, one sent on: ``y + c`` has a second, empty
    edge) are written by ``_chain_row`` without ``encode``: two encodes per node before."""
    from autodiag.analysis.summary import Summaries

    calls = []
    encode = Summaries.encode
    rec = BackwardTrace()
    with tracing(rec):
        x = torch.ones(1, requires_grad=True)
        y = x
        for i in range(1000):
            y = y * 1.0000001 if i % 2 else y + 1e-7
        monkeypatch.setattr(Summaries, "encode", lambda self, a: calls.append(1) or encode(self, a))
        y.sum().backward()
    assert len(rec) == 1002 and len(calls) <= 10, len(calls)


def _trace_texts(build, general: bool, monkeypatch) -> tuple[list, list]:
    from autodiag.analysis import backward_trace

    with monkeypatch.context() as m:
        if general:
            m.setattr(backward_trace.BackwardTrace, "_chain_row", lambda *a: False)
        rec = BackwardTrace()
        with tracing(rec):
            build()
    rec.name_leaves({})
    return list(rec.rows()), list(rec.rows_json())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trace_chain_rows_equal_the_general_way(dtype, monkeypatch):
    """Rows of chains through ``_chain_row`` are those of the general way, text for text:
    zero and huge gradients, float32 quotients that overflow, a NaN, reflected and binary ops,
    a node with two inputs that need gradients, a 0-d and a (1, 1) chain."""

    def build():
        dt = getattr(torch, dtype)
        loss = 0.0
        for shape in ((), (1,), (1, 1)):
            x = torch.full(shape, 0.5, dtype=dt, requires_grad=True)
            w = torch.full(shape, 3.0, dtype=dt, requires_grad=True)
            y = x
            for i in range(40):
                k = i % 8
                if k == 0:
                    y = y * 1e30
                elif k == 1:
                    y = 2.0 * y
                elif k == 2:
                    y = y * w
                elif k == 3:
                    y = y - 1e-3
                elif k == 4:
                    y = y * 0.0 + y
                elif k == 5:
                    y = y / 1e-30
                elif k == 6:
                    y = y.exp() if i > 30 else y + 1.0
                else:
                    y = 1.0 - y
            loss = loss + (y.sum() * float("nan") if shape == (1, 1) else y.sum())
        loss.backward()  # the trace keeps the last backward call: one for the three chains

    fast_rows, fast_texts = _trace_texts(build, False, monkeypatch)
    slow_rows, slow_texts = _trace_texts(build, True, monkeypatch)
    assert len(fast_texts) > 100
    assert fast_texts == slow_texts
    assert json.dumps(fast_rows) == json.dumps(slow_rows)
    assert [json.loads(t) for t in fast_texts] == json.loads(json.dumps(fast_rows))
