"""Renderers of a GraphSnapshot: JSON (DESIGN §4 schema), DOT, Mermaid, and rich text.

All of them are loops over an order of node ids (no recursion), and all honour a ``View``: which
nodes are shown (``--max-nodes``/``--max-depth``) and which extras (saved, values, grads).
"""

from __future__ import annotations

import dataclasses
import json
import os

from rich.markup import escape
from rich.text import Text

from autodiag.analysis.graph import GraphSnapshot
from autodiag.analysis.summary import fmt_bytes
from autodiag.report import table
from autodiag.report.output import Streamed, _json_default, envelope
from autodiag.report.values import fmt_summary
from autodiag.tensor import _size_str
from autodiag.trace.sites import format_site, short_path


@dataclasses.dataclass
class View:
    order: str = "tree"
    max_nodes: int | None = None
    max_depth: int | None = None
    show_saved: bool = False
    values: bool = False
    grads: bool = False
    direction: str = "TB"  # the pictures' (html, svg): roots at the top, or at the right (LR)


def visible(snap: GraphSnapshot, view: View) -> tuple[list[int], int]:
    """(ids shown in order, number of nodes left out by --max-nodes/--max-depth)."""
    # NOTE: without --max-depth the tree's first visits are the depth-first pre-order, which
    # dfs_order walks without building the tree's lines (a third of a huge graph's JSON time)
    if view.max_depth is not None:
        ids, seen = [], set()
        for i, _depth, _nr, _first, _last, _g in snap.tree_lines(view.max_depth):
            if i not in seen:
                seen.add(i)
                ids.append(i)
        if view.order != "tree":
            keep = set(ids)
            ids = [i for i in snap.order(view.order) if i in keep]
    else:
        ids = snap.order(view.order)
    total_left = len(snap) - len(ids)
    if view.max_nodes is not None and len(ids) > view.max_nodes:
        total_left += len(ids) - view.max_nodes
        ids = ids[: view.max_nodes]
    return ids, total_left


def _created_at(snap: GraphSnapshot, i: int, cache: dict | None = None) -> dict | None:
    """``cache``: id(Stack) -> the result, for a loop over many nodes (the nodes one line
    makes share their Stack)."""
    st = snap.sites[i]
    if st is None:
        return None
    if cache is not None:
        got = cache.get(id(st), cache)
        if got is not cache:
            return got
    loc = st.location()
    out = None if loc is None else {"file": loc["file"], "line": loc["line"], "code": loc["code"]}
    if cache is not None:
        cache[id(st)] = out
    return out


def _variable(snap: GraphSnapshot, i: int) -> dict | None:
    lf = snap.leaf[i]
    if lf is None:
        return None
    return {"name": snap.labels.get(i), "shape": list(lf[1]), "dtype": lf[2]}


# --- JSON -------------------------------------------------------------------------------------


def to_json(snap: GraphSnapshot, view: View, stream: bool = False) -> dict:
    """The graph's JSON document. ``stream``: ``"nodes"`` and ``"order"`` are ``Streamed``,
    each node's dict built as it is written (``Sink.write_json_stream``), so a huge graph is
    never held as one document."""
    ids, left = visible(snap, view)
    shown = set(ids) if left else None
    nodes = _json_nodes(snap, view, ids, shown)
    return {
        "call": snap.call,
        "kind": snap.kind,
        "roots": snap.roots,
        "root_names": snap.root_labels,
        "nodes": Streamed(nodes, _json_node_texts(snap, view, ids, shown))
        if stream
        else list(nodes),
        "order": Streamed(ids) if stream else ids,
        "summary": summary(snap),
        "truncated": left,
    }


def _json_nodes(snap: GraphSnapshot, view: View, ids: list[int], shown: set | None):
    sites: dict = {}  # the Stacks stay alive in the snapshot: their ids are not reused
    for i in sorted(ids) if shown is not None else range(len(snap)):
        node = {
            "id": i,
            "name": snap.names[i],
            "next": [
                None if e is None or (shown is not None and e[0] not in shown) else [e[0], e[1]]
                for e in snap.next[i]
            ],
            "variable": _variable(snap, i),
            "saved": snap.saved_dicts(i),
            "created_at": _created_at(snap, i, sites),
        }
        if snap.freed[i]:
            node["saved_freed"] = True
        if i in snap.modules:
            node["module"] = snap.modules[i]
        if view.values:
            node["value"] = snap.values.get(i)
        if view.grads:
            node["grad"] = snap.grads.get(i)
        yield node


def _json_node_texts(snap: GraphSnapshot, view: View, ids: list[int], shown: set | None):
    """``_json_nodes``, each node as the compact JSON text ``json.dumps`` gives it, written
    directly (most nodes of a huge graph have one edge, no saved tensor and no variable)."""
    names: dict = {}
    sites: dict = {}  # id(Stack) -> JSON text of its location
    for i in sorted(ids) if shown is not None else range(len(snap)):
        name = snap.names[i]
        js_name = names.get(name)
        if js_name is None:
            js_name = names[name] = json.dumps(name)
        nexts = ", ".join(
            [
                "null"
                if e is None or (shown is not None and e[0] not in shown)
                else f"[{e[0]}, {e[1]}]"
                for e in snap.next[i]
            ]
        )
        st = snap.sites[i]
        created = "null" if st is None else sites.get(id(st))
        if created is None:
            created = sites[id(st)] = json.dumps(_created_at(snap, i))
        lf = snap.leaf[i]
        text = (
            f'{{"id": {i}, "name": {js_name}, "next": [{nexts}], "variable": '
            f'{"null" if lf is None else _dumps(_variable(snap, i))}, "saved": '
            f'{_dumps(snap.saved_dicts(i)) if snap.saved[i] else "[]"}, "created_at": '
            f"{created}"
        )
        if snap.freed[i]:
            text += ', "saved_freed": true'
        if i in snap.modules:
            text += f', "module": {json.dumps(snap.modules[i])}'
        if view.values:
            text += f', "value": {_dumps(snap.values.get(i))}'
        if view.grads:
            text += f', "grad": {_dumps(snap.grads.get(i))}'
        yield text + "}"


def _dumps(o) -> str:
    return json.dumps(o, default=_json_default)


def summary(snap: GraphSnapshot) -> dict:
    return {
        "nodes": len(snap),
        "leaves": snap.num_leaves(),
        "depth": snap.depth(),
        "saved_bytes": snap.saved_bytes(),
    }


def summary_line(snap: GraphSnapshot, calls: int) -> str:
    s = summary(snap)
    what = {
        "backward": f"backward call {snap.call} of {calls}",
        "grad": f"autograd.grad call {snap.call} of {calls}",
        "roots": "module-level tensors (no backward call)",
    }[snap.kind]
    leaves = f"{s['leaves']} lea{'f' if s['leaves'] == 1 else 'ves'}"
    return (
        f"{s['nodes']} nodes, {leaves}, depth {s['depth']}, saved tensors "
        f"{fmt_bytes(s['saved_bytes'])} — {what}"
    )


# --- DOT and Mermaid ----------------------------------------------------------------------------


def _root_name(snap: GraphSnapshot, i: int) -> str | None:
    """The variable name of root ``i`` (``loss``), or None."""
    if i in snap.roots:
        k = snap.roots.index(i)
        if k < len(snap.root_labels):
            return snap.root_labels[k]
    return None


def _plain_label(snap: GraphSnapshot, i: int) -> str:
    """A node's label for DOT and Mermaid: its name (leaves: variable name, shape, dtype) and,
    where known, the line that created it (``model.py:38``: the file name only, to keep boxes
    small)."""
    lf = snap.leaf[i]
    if lf is not None:
        name = snap.labels.get(i) or "AccumulateGrad"
        label = f"{name}\n{_size_str(lf[1])} {lf[2]}"
    else:
        root = _root_name(snap, i)
        label = f"{root} = {snap.names[i]}" if root else snap.names[i]
    st = snap.sites[i]
    if st is not None and st.site is not None:
        code, line = st.site
        label += f"\n{os.path.basename(code.co_filename)}:{line}"
    return label


LEAF_COLOR, ROOT_COLOR = "#aed6f1", "#a9dfbf"  # blue leaves, green roots (README)


def to_dot(snap: GraphSnapshot, view: View) -> str:
    return "".join(dot_lines(snap, view))


def dot_lines(snap: GraphSnapshot, view: View):
    """``to_dot``'s text a line at a time (each with its newline), as it is produced: a huge
    graph is written as it goes (``Sink.write_lines``), never held whole."""
    ids, left = visible(snap, view)
    shown = set(ids)
    yield "digraph autodiag {\n"
    yield (
        '  node [shape=box, style="rounded,filled", fillcolor="#eeeeee", fontname="Helvetica"];\n'
    )
    yield "  rankdir=BT;\n"
    roots = set(snap.roots)
    for i in ids:
        label = _plain_label(snap, i).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        color = LEAF_COLOR if snap.leaf[i] is not None else ROOT_COLOR if i in roots else "#eeeeee"
        yield f'  n{i} [label="{label}", fillcolor="{color}"];\n'
    for i in ids:
        for e in snap.next[i]:
            if e is not None and e[0] in shown:
                yield f"  n{e[0]} -> n{i};\n"
    if left:
        yield f'  truncated [shape=note, label="{left} more nodes not shown"];\n'
    yield "}\n"


def to_mermaid(snap: GraphSnapshot, view: View) -> str:
    return "".join(mermaid_lines(snap, view))


def mermaid_lines(snap: GraphSnapshot, view: View):
    """``to_mermaid``'s text a line at a time, as ``dot_lines``."""
    ids, left = visible(snap, view)
    shown = set(ids)
    yield "flowchart BT\n"
    # the colours of to_dot: leaves blue, roots green
    yield f"  classDef leaf fill:{LEAF_COLOR},stroke:#5499c7,color:#000\n"
    yield f"  classDef root fill:{ROOT_COLOR},stroke:#52be80,color:#000\n"
    roots = set(snap.roots)
    for i in ids:
        label = _plain_label(snap, i).replace('"', "#quot;").replace("\n", "<br/>")
        shape = ('(["', '"])') if snap.leaf[i] is not None else ('["', '"]')
        cls = ":::leaf" if snap.leaf[i] is not None else ":::root" if i in roots else ""
        yield f"  n{i}{shape[0]}{label}{shape[1]}{cls}\n"
    for i in ids:
        for e in snap.next[i]:
            if e is not None and e[0] in shown:
                yield f"  n{e[0]} --> n{i}\n"
    if left:
        yield f'  truncated["{left} more nodes not shown"]\n'


# --- text ---------------------------------------------------------------------------------------

CODE_MAX = 48  # a creation line's source is cut here (with …) even when the terminal is wide


def _site(snap: GraphSnapshot, i: int) -> tuple[str, str]:
    """(``path:line``, source code) of the line that created node ``i``; ("", "") if unknown."""
    st = snap.sites[i]
    if st is None or st.site is None:
        return "", ""
    loc = format_site(st.site)
    code = loc["code"] if len(loc["code"]) <= CODE_MAX else loc["code"][: CODE_MAX - 1] + "…"
    return f"{short_path(loc['file'])}:{loc['line']}", code


def _fit_site(where: str, code: str, room: int) -> str:
    """``path:line  code`` in ``room`` characters: the code is cut (or left out) first, then
    the path is shortened from the left; the file name and line always stay."""
    if not where:
        return ""
    full = f"{where}  {code}" if code else where
    if len(full) <= room:
        return full
    if code and room - len(where) - 2 >= table.CLIP_MIN:
        return f"{where}  {code[: room - len(where) - 3]}…"
    return table.shorten_path(where, room)


def _node_atoms(snap: GraphSnapshot, i: int) -> list[str]:
    """The node's label as markup words: ``AccumulateGrad`` and the leaf's name (or ``leaf``),
    shape and dtype; or ``root =`` and the node's name."""
    lf = snap.leaf[i]
    if lf is not None:
        name = snap.labels.get(i)
        who = f"[bold green]{escape(name)}[/]" if name else "[green]leaf[/]"
        return ["[cyan]AccumulateGrad[/]", who, f"[dim]{_size_str(lf[1])} {lf[2]}[/]"]
    text = f"[bold]{escape(snap.names[i])}[/]"
    root = _root_name(snap, i)
    return [f"[bold magenta]{escape(root)}[/] =", text] if root else [text]


def _node_markup(snap: GraphSnapshot, i: int) -> str:
    return " ".join(_node_atoms(snap, i))


def _extras(snap: GraphSnapshot, i: int, view: View) -> list[str]:
    lines = []
    if view.show_saved:
        for s in snap.saved_dicts(i):
            shape = _size_str(s.get("shape", ()))
            ver = f"v{s['version']}"
            if "current_version" in s:
                ver += f" [red](now v{s['current_version']}: modified in place)[/]"
            lines.append(f"[yellow]saved[/] {s['name']} {shape} {s.get('dtype', '?')} {ver}")
        if snap.freed[i]:
            lines.append("[yellow]saved[/] [dim](freed by backward)[/]")
    if view.values and i in snap.values:
        lines.append(f"[blue]value[/] {escape(fmt_summary(snap.values[i]))}")
    if view.grads and i in snap.grads:
        g = snap.grads[i]
        lines.append("[magenta]grad[/] " + escape(", ".join(fmt_summary(x) for x in g)))
    return lines


def _shared(snap: GraphSnapshot) -> bytearray:
    """Nodes the tree reaches more than once (by two edges, or as a root and by an edge)."""
    count = bytearray(len(snap.names))
    for i in snap.roots:
        count[i] = 1
    for nexts in snap.next:
        for e in nexts:
            if e is not None:
                count[e[0]] = min(count[e[0]] + 1, 2)
    return bytearray(c > 1 for c in count)


def tree_text(snap: GraphSnapshot, view: View, width: int | None = None) -> tuple[Text, int]:
    """The indented tree (walk_grad_fn style) and how many nodes were left out.

    With a ``width``, each line fits it: the indentation is capped (deeper lines say their
    depth), then the creation line loses its source code and its path's leading folders; the
    node's label is never cut. A node reached again is a back-reference that repeats its
    label and id (``(id 4, shared, shown above)``); its first line carries the id too."""
    out = Text()
    shown = 0
    indent_cap = 40 if width is None else max(2, min(40, (width - 30) // 3))
    shared = _shared(snap)
    for i, depth, _nr, first, last, guides in snap.tree_lines(view.max_depth):
        if first and view.max_nodes is not None and shown >= view.max_nodes:
            break
        if depth == 0:
            prefix = ""
        else:
            g = GraphSnapshot.guide_list(guides, indent_cap - 1)
            prefix = "".join("│  " if more else "   " for more in g)
            prefix += "└─ " if last else "├─ "
            if depth > indent_cap:
                prefix = f"[{depth}] " + prefix
        if first:
            shown += 1
            line = Text(prefix)
            line.append_text(Text.from_markup(_node_markup(snap, i)))
            if shared[i]:
                line.append(f" (id {i})", style="dim")
            where, code = _site(snap, i)
            room = (width - line.cell_len - 2) if width is not None else 10**9
            site = _fit_site(where, code, room)
            if site:
                line.append(f"  {site}", style="dim")
            out.append_text(line)
            out.append("\n")
            pad = prefix.replace("└─ ", "   ").replace("├─ ", "│  ")
            for extra in _extras(snap, i, view):
                out.append_text(Text.from_markup(f"{escape(pad)}   {extra}\n"))
        else:
            label = Text.from_markup(_node_markup(snap, i))
            line = Text(prefix)
            line.append("↑ ", style="dim")
            line.append_text(label)
            line.append(f" (id {i}, shared, shown above)", style="dim")
            out.append_text(line)
            out.append("\n")
    return out, len(snap) - shown


GRAPH_COLUMNS = [
    table.Column("#", keep=20, justify="right"),
    table.Column("id", keep=40, justify="right"),
    table.Column("node"),
    table.Column("inputs", keep=30, max_lines=0),
    table.Column("created at", kind="path"),
    table.Column("code", keep=10, kind="clip"),
]


def table_rows(snap: GraphSnapshot, view: View) -> tuple[list[list[table.Cell]], int]:
    """Rows for the bfs/dfs/topo table (``GRAPH_COLUMNS``): step, id, node (+ extras),
    inputs, created at, code."""
    ids, left = visible(snap, view)
    rows = []
    for k, i in enumerate(ids, 1):
        inputs = ", ".join(str(e[0]) if e is not None else "-" for e in snap.next[i])
        node = [_node_markup(snap, i)] + ["  " + x for x in _extras(snap, i, view)]
        where, code = _site(snap, i)
        rows.append(
            [
                table.plain(str(k)),
                table.plain(str(i)),
                table.cell(*node),
                table.plain(inputs),
                table.plain(where),
                table.plain(code),
            ]
        )
    return rows, left


# --- the renderers of ``autodiag graph``, one per --format (report/outcome.py) -----------------

# JSON is indented up to this many nodes, compact beyond (10x faster for huge graphs).
PRETTY_JSON_NODES = 5000


@dataclasses.dataclass
class GraphReport:
    """What the renderers show: the graphs, how, and the run's backward/grad call count."""

    snaps: list
    view: View
    calls: int
    many: bool  # --all: a list of graphs


def json_report(sink, outcome) -> None:
    rep, result = outcome.data, outcome.result
    snaps, view, calls, many = rep.snaps, rep.view, rep.calls, rep.many
    graphs = [to_json(s, view, stream=True) for s in snaps]
    extra = {"calls": calls}
    if not many:
        extra.update(graphs[0])
    else:
        extra["graphs"] = graphs
    total = sum(len(g["order"].items) for g in graphs)
    # node dicts are built as they are written: a huge graph is never one document
    sink.write_json_stream(
        envelope(
            "graph", outcome.label, [], error=result.error, interrupted=result.interrupted, **extra
        ),
        pretty=total <= PRETTY_JSON_NODES,
    )


def _diagrams(sink, outcome, fmt: str) -> str | None:
    rep = outcome.data
    snaps, view = rep.snaps, rep.view
    left = 0
    # streamed: a 1,000,000-node graph is never held whole
    lines = mermaid_lines if fmt == "mermaid" else dot_lines
    for s in snaps:
        left = max(left, visible(s, view)[1])
        sink.write_lines(lines(s, view))
    return _left_out(view, left)


def dot_report(sink, outcome) -> str | None:
    return _diagrams(sink, outcome, "dot")


def mermaid_report(sink, outcome) -> str | None:
    return _diagrams(sink, outcome, "mermaid")


def text_report(sink, outcome) -> str | None:
    rep = outcome.data
    snaps, view, calls = rep.snaps, rep.view, rep.calls
    left = 0
    console = sink.console()
    for s in snaps:
        if view.order == "tree":
            text, n_left = tree_text(s, view, console.width)
            console.print(text, end="")
        else:
            rows, n_left = table_rows(s, view)
            table.print_table(console, GRAPH_COLUMNS, rows, title=f"{view.order} order")
        left = max(left, n_left)
        line = summary_line(s, calls)
        if n_left:
            line += f" — {n_left} nodes not shown"
        console.print(f"[dim]{escape(line)}[/]")
    return _left_out(view, left)


def _left_out(view: View, left: int) -> str | None:
    """The note for stderr when the view left nodes out (largest over the graphs)."""
    if not left:
        return None
    depth = "" if view.max_depth is None else f", --max-depth {view.max_depth}"
    return (
        f"[yellow]note:[/] {left} nodes not shown (--max-nodes {view.max_nodes}{depth}); "
        f"use --max-nodes N or --format json for everything"
    )
