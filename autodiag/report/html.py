"""``--format html``: one self-contained page (no network, no CDN: it opens from disk) with the
graph drawn by autodiag's own layout (``report/picture.py``) and a little JavaScript of our own:
pan and zoom, a click on a node shows its details, search by name or line, the path from a node
to the roots highlighted.

The page's data is the command's JSON report (the same document as ``--format json``), with
each graph's box positions added under ``"layout"``; it is embedded as a JSON literal in a
``<script type="application/json">`` element, escaped so that no text of the user's (a source
line holding ``</script>``) can end it. The JavaScript builds the detail panel with
``textContent`` only: no data is ever parsed as HTML.
"""

from __future__ import annotations

import dataclasses
import json
from xml.sax.saxutils import escape

from autodiag.report import picture
from autodiag.report.output import _json_default

# NOTE: "<" escaped everywhere covers "</script>" and "<!--"; U+2028/9 are valid in JSON but not
# in older JavaScript string literals; "&" keeps the text inert if a page ever parses it as HTML.
_SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def script_json(data) -> str:
    """``data`` as JSON text safe inside a ``<script>`` element.

    >>> script_json({"code": "</script><b>"})
    '{"code": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e"}'
    """
    return json.dumps(data, default=_json_default).translate(_SCRIPT_ESCAPES)


def page(
    doc: dict,
    graphs: list,
    pictures: list,
    title: str,
    note: str | None = None,
    intro: str = "",
    extra: tuple[str, str, str] | None = None,
) -> str:
    """The page: ``doc`` is the JSON report, ``graphs`` its graph models (each with its
    ``"layout"`` added), ``pictures`` their SVG elements (``picture.svg(standalone=False)``).
    ``intro``: HTML (escaped already) shown in the panel before a node is clicked. ``extra``:
    (HTML, CSS, JavaScript) of a section shown after the graphs (check's gradient flow)."""
    more_html, more_css, more_js = extra or ("", "", "")
    sections = []
    for k, (g, svg) in enumerate(zip(graphs, pictures)):
        heading = _heading(g, len(graphs))
        sections.append(
            f'<section class="graph" data-index="{k}">\n'
            f'<div class="canvas">{svg}</div>\n'
            f'<aside class="panel"><h2 class="caption">{escape(heading)}</h2>'
            f'<div class="details">{intro}<p class="hint">Click a node to see its details. '
            f"Drag to pan, scroll to zoom, <kbd>f</kbd> to fit, <kbd>/</kbd> to search, "
            f"<kbd>Esc</kbd> to clear.</p></div></aside>\n"
            f"</section>\n"
        )
    banner = f'<div class="note">{escape(note)}</div>' if note else ""
    if not graphs and intro:  # findings but no graph: the list alone
        sections.append(f'<section class="nograph"><div class="panel">{intro}</div></section>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n"
        f"<style>{picture.SVG_CSS}{PAGE_CSS}{more_css}</style>\n</head>\n<body>\n"
        '<header><span class="brand">autodiag</span> '
        f'<span class="title">{escape(title)}</span>'
        '<input type="search" class="search" placeholder="search: name, variable, module or line" '
        'aria-label="search">'
        '<span class="matches"></span>'
        '<button type="button" class="fit" title="fit the graph (f)">fit</button>'
        '<button type="button" class="modules" hidden title="fold each module into one box">'
        "modules</button>"
        '<button type="button" class="repeats" hidden '
        'title="fold each run of repeated blocks into one box">repeats</button>'
        '<span class="legend"><i class="k leaf"></i>leaf <i class="k root"></i>root '
        '<i class="k finding"></i>finding <i class="k plain"></i>op</span>'
        f"</header>\n{banner}\n{''.join(sections)}{more_html}"
        f'<script type="application/json" id="autodiag-data">{script_json(doc)}</script>\n'
        f"<script>{PAGE_JS}</script>\n"
        + (f"<script>{more_js}</script>\n" if more_js else "")
        + "</body>\n</html>\n"
    )


def _heading(g: dict, count: int) -> str:
    s = g.get("summary", {})
    what = {"backward": "backward call", "grad": "autograd.grad call"}.get(g.get("kind"))
    call = f"{what} {g.get('call')}" if what else "module-level tensors"
    text = f"{s.get('nodes', len(g['nodes']))} nodes, {s.get('leaves', 0)} leaves — {call}"
    if g.get("truncated"):
        text += f" ({g['truncated']} nodes not shown)"
    return text


def graph_section(
    graph: dict,
    direction: str,
    key: str,
    findings: dict | None = None,
    draw: list | None = None,
    folds: list | None = None,
    fold_first: bool = False,
):
    """Lay out a graph model: (the model with ``"layout"`` added, its SVG elements). ``draw``:
    the ids the full picture draws (default: all; a graph folded first holds more nodes than
    it draws). A graph with modules gets a picture with each module folded into one box (the
    page's "modules" button): the model's ``"collapsed"``. A graph with repeated blocks
    (``folds``: ``repeats.find_repeats``, found here when None) gets a picture with each run
    folded into one box, and one picture per run expanded: the model's ``"repeats"``, shown
    first with ``fold_first``."""
    from autodiag.report import repeats

    drawn = graph if draw is None else _subgraph(graph, draw)
    out, svg = _laid_out(drawn, direction, key, findings, "full")
    if draw is not None:
        layout, out = out["layout"], dict(graph)
        out["layout"] = layout
        if findings:
            out["node_findings"] = findings
    folded = collapse_modules(drawn)
    if folded is not None:
        out["collapsed"], svg2 = _laid_out(
            folded, direction, key + "m", _marks(folded, findings, "members"), "modules"
        )
        svg += svg2
    folds = repeats.find_repeats(graph) if folds is None else folds
    if folds:
        model = repeats.fold_graph(graph, folds)
        marks = _marks(model, findings, "repeat")
        out["repeats"], svg2 = _laid_out(model, direction, key + "r", marks, "repeats")
        svg += svg2
        by_id = {n["id"]: n for n in graph["nodes"]}
        for box, fold in zip((n for n in model["nodes"] if "repeat" in n), folds):
            ids = repeats.expansion(by_id, fold)
            inside = set(ids)
            part = {
                "roots": [r for r in graph["roots"] if r in inside],
                "nodes": [by_id[i] for i in ids],
            }
            mine = {i: ks for i, ks in (findings or {}).items() if i in inside}
            got, svg2 = _laid_out(part, direction, f"{key}x{box['id']}", mine, "expand")
            box["repeat"]["expanded"] = {"ids": ids, "layout": got["layout"]}
            svg += svg2.replace("<svg ", f'<svg data-fold="{box["id"]}" ', 1)
        out["repeats"]["nodes"] = model["nodes"]
        if fold_first:
            out["start"] = "repeats"
    return out, svg


def _subgraph(graph: dict, ids: list) -> dict:
    """The part of a graph model that a picture draws: the nodes ``ids`` (edges to the others
    are not drawn)."""
    keep = set(ids)
    names = dict(zip(graph["roots"], graph.get("root_names") or ()))
    roots = [r for r in graph["roots"] if r in keep]
    return {
        "roots": roots,
        "root_names": [names.get(r) for r in roots],
        "nodes": [n for n in graph["nodes"] if n["id"] in keep],
    }


def _marks(folded: dict, findings: dict | None, how: str) -> dict:
    """node id -> findings of a folded picture: a box has its nodes' findings."""
    marks: dict = {}
    for gnode in folded["nodes"]:
        if how == "repeat" and "repeat" in gnode:
            members = [i for inst in gnode["repeat"]["instances"] for i in inst]
        else:
            members = gnode.get("members", (gnode["id"],))
        for m in members:
            for k in (findings or {}).get(m, ()):
                if k not in marks.setdefault(gnode["id"], []):
                    marks[gnode["id"]].append(k)
    return marks


def _laid_out(graph: dict, direction: str, key: str, findings: dict | None, role: str):
    lay, lines = picture.lay_out(graph, direction)
    out = dict(graph)
    out["layout"] = {
        "direction": direction,
        "width": lay.width,
        "height": lay.height,
        "boxes": {n["id"]: [b.x, b.y, b.w, b.h] for n, b in zip(graph["nodes"], lay.boxes)},
    }
    if findings:
        out["node_findings"] = findings
    svg = picture.svg(graph, lay, lines, findings, key=key, standalone=False)
    return out, svg.replace("<svg ", f'<svg data-role="{role}" ', 1)


def folded_first(snap, view) -> tuple[dict, list | None, list, str | None]:
    """A page's graph: (its model, the ids its full picture draws (None: all), its runs of
    repeated blocks, the page's note about it). A graph beyond the page's limit whose repeated
    blocks fold it within the limit is shown folded first, every node in the page's data; any
    other graph beyond the limit is cut there, as ``--max-nodes`` says."""
    from autodiag.report import repeats
    from autodiag.report.graph import to_json, visible

    ids, left = visible(snap, view)
    n = len(snap)
    if (
        left
        and view.max_depth is None
        and view.max_nodes
        and repeats.FOLD_FROM <= n <= repeats.FOLD_MAX_NODES
    ):
        full = to_json(snap, dataclasses.replace(view, max_nodes=None))
        folds = repeats.find_repeats(full)
        if folds and repeats.folded_size(n, folds) <= view.max_nodes:
            return full, ids, folds, repeats.note(n, folds)
    model = to_json(snap, view)
    return model, None, repeats.find_repeats(model), None


# --- modules folded into one box each ------------------------------------------------------------


def _path(node: dict) -> str | None:
    m = node.get("module")
    return m.rsplit(" (", 1)[0] if m else None


def block_of(path: str) -> str | None:
    """The box a module path folds into: the outermost module's child (``model.fc1``), or its
    numbered child for a list of blocks (``model.layers.0``); None for the outermost module
    itself (its own forward's ops stay visible: they connect the blocks).

    >>> block_of("model.fc1"), block_of("model.layers.3.attn"), block_of("model")
    ('model.fc1', 'model.layers.3', None)
    """
    parts = path.split(".")
    if len(parts) < 2:
        return None
    if len(parts) >= 3 and not parts[1].isdigit() and parts[2].isdigit():
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def collapse_modules(graph: dict) -> dict | None:
    """``graph`` with the nodes of each block (``block_of``) — its ops, and its parameters'
    leaves — folded into one node ``{"id", "name": block, "members": [ids], "kind": class,
    "next"}``; None when no block has two nodes or more. Edges between blocks are kept once."""
    nodes = graph["nodes"]
    block: dict = {}
    kinds: dict = {}
    for n in nodes:
        path = _path(n)
        b = block_of(path) if path else None
        if b is not None:
            block[n["id"]] = b
            if path == b:
                kinds.setdefault(b, n["module"].rsplit(" (", 1)[1].rstrip(")"))
    blocks = set(block.values())
    for n in nodes:  # a parameter's leaf (model.fc1.weight) folds into its module's block
        var = n.get("variable")
        if var and var.get("name") and n["id"] not in block:
            owner = block_of(var["name"].rsplit(".", 1)[0])
            if owner in blocks:
                block[n["id"]] = owner
    members: dict = {}
    for n in nodes:
        b = block.get(n["id"])
        if b is not None:
            members.setdefault(b, []).append(n["id"])
    members = {b: ids for b, ids in members.items() if len(ids) > 1}
    if not members:
        return None
    base = max(n["id"] for n in nodes) + 1
    gid = {b: base + k for k, b in enumerate(members)}
    where = {i: gid[b] for i, b in block.items() if b in gid}
    out_nodes = []
    folded: dict = {}
    for n in nodes:
        g = where.get(n["id"])
        if g is None:
            m = dict(n)
            m["next"] = _remap(n["next"], where, None)
            out_nodes.append(m)
            continue
        if g not in folded:
            b = block[n["id"]]
            folded[g] = {
                "id": g,
                "name": b,
                "members": members[b],
                "kind": kinds.get(b),
                "next": [],
                "variable": None,
                "saved": [],
                "created_at": None,
            }
            out_nodes.append(folded[g])
        folded[g]["next"] += _remap(n["next"], where, g)
    for f in folded.values():  # each outside input once
        seen, keep = set(), []
        for e in f["next"]:
            if e is not None and e[0] not in seen:
                seen.add(e[0])
                keep.append(e)
        f["next"] = keep
    roots = []
    for r in graph["roots"]:
        if where.get(r, r) not in roots:
            roots.append(where.get(r, r))
    names = dict(zip(graph["roots"], graph.get("root_names") or ()))
    return {
        "roots": roots,
        "root_names": [names.get(r) if r not in folded else None for r in roots],
        "nodes": out_nodes,
    }


def _remap(nexts: list, where: dict, inside) -> list:
    """Edges with folded ends pointing at their block; an edge inside ``inside``'s block
    goes, and one block's edges to the same node are kept once."""
    out, seen = [], set()
    for e in nexts:
        if e is None:
            out.append(None)
            continue
        t = where.get(e[0], e[0])
        if t == inside:
            continue
        if inside is None or t not in seen:
            seen.add(t)
            out.append([t, e[1]])
    return out


# --- the renderer of ``autodiag graph --format html`` (report/outcome.py) -----------------------


def graph_report(sink, outcome) -> str | None:
    """The page of ``autodiag graph``: each graph's picture, its JSON model, the script."""
    from autodiag.report.graph import _left_out, visible
    from autodiag.report.output import envelope

    rep, result = outcome.data, outcome.result
    view = rep.view
    laid, notes, left = [], [], 0
    for k, s in enumerate(rep.snaps):
        model, draw, folds, note = folded_first(s, view)
        laid.append(graph_section(model, view.direction, f"g{k}", None, draw, folds, bool(note)))
        if note:
            notes.append(note)
        else:
            left = max(left, visible(s, view)[1])
    extra: dict = {"calls": rep.calls}
    if rep.many:
        extra["graphs"] = [m for m, _ in laid]
    else:
        extra.update(laid[0][0])
    doc = envelope(
        "graph", outcome.label, [], error=result.error, interrupted=result.interrupted, **extra
    )
    if left:
        notes.append(
            f"{left} nodes not shown (--max-nodes {view.max_nodes}); use --max-nodes N to draw more"
        )
    title = f"autodiag graph {outcome.label}"
    note = "; ".join(notes) or None
    sink.write_text(page(doc, [m for m, _ in laid], [svg for _, svg in laid], title, note))
    return _left_out(view, left)


# --- the renderer of ``autodiag check --format html`` -----------------------------------------

CHECK_MAX_NODES = 2000  # the page draws at most this many nodes of the graph (and says so)


# finding kinds about one op whose finding does not name it
_KIND_OPS = {"dead_relu": "relu"}


def _op_prefix(f: dict) -> str | None:
    """The node-name prefix of the op a finding is about: ``log`` -> ``logbackward``."""
    op = f.get("op") if isinstance(f.get("op"), str) else _KIND_OPS.get(f.get("kind"))
    return None if not op else op.rstrip("_").replace("_", "").lower() + "backward"


def finding_sites(f: dict) -> list[tuple]:
    """Where a finding points in the code, as ``(file, line, node name, node-name prefix)``
    (None when unknown): its location (and the op it is about), the node that saved the tensor
    it is about, the node it names."""
    out = []
    loc = f.get("location")
    if loc:
        out.append((loc["file"], loc["line"], None, _op_prefix(f)))
    by = f.get("saved_by")
    if isinstance(by, dict) and by.get("location"):
        out.append((by["location"]["file"], by["location"]["line"], by.get("node"), None))
    at = f.get("created_at")
    if isinstance(at, dict) and at.get("file"):
        out.append((at["file"], at["line"], f.get("node"), None))
    return out


def mark_findings(graph: dict, findings: list) -> dict:
    """node id -> indices of the findings that point at it: a node made by the line a finding
    is at — of the node type it names, or of the op it is about when the line made one, else
    every node of the line. A training loop's findings of any step mark the nodes the same line
    made in the graph shown."""
    by_line: dict = {}
    for n in graph["nodes"]:
        at = n.get("created_at")
        if at:
            by_line.setdefault((at["file"], at["line"]), []).append(n)
    marks: dict = {}
    for k, f in enumerate(findings):
        for file, line, name, prefix in finding_sites(f):
            nodes = by_line.get((file, line), [])
            if name is not None:
                nodes = [n for n in nodes if n["name"] == name]
            elif prefix is not None:
                nodes = [n for n in nodes if n["name"].lower().startswith(prefix)] or nodes
            module = f.get("module")
            if isinstance(module, str) and module:  # dead_relu: the nn.ReLU's path (model.3)
                nodes = [n for n in nodes if _module_path(n) == module] or nodes
            for n in nodes:
                got = marks.setdefault(n["id"], [])
                if k not in got:
                    got.append(k)
    return marks


def _module_path(node: dict) -> str | None:
    """``model.3`` of a node's ``"module": "model.3 (ReLU)"``."""
    m = node.get("module")
    return m.rsplit(" (", 1)[0] if m else None


def check_report(sink, outcome) -> None:
    """The page of ``autodiag check``: the graph of the last backward call (or the module-level
    tensors) with the nodes the findings point at marked, and the findings."""
    from autodiag.report.graph import View, visible
    from autodiag.report.output import envelope

    result = outcome.result
    snaps = outcome.data or []
    view = View(max_nodes=CHECK_MAX_NODES)
    doc = envelope(
        outcome.command,
        outcome.label,
        outcome.findings or [],
        error=result.error,
        interrupted=result.interrupted,
        **outcome.info,
    )
    findings = doc["findings"]
    graphs, svgs, notes = [], [], []
    for k, snap in enumerate(snaps):
        model, draw, folds, note = folded_first(snap, view)
        marks = mark_findings(model, findings)
        g, svg = graph_section(model, "TB", f"g{k}", marks, draw, folds, bool(note))
        graphs.append(g)
        svgs.append(svg)
        left = visible(snap, view)[1]
        if note:
            notes.append(note)
        elif left:
            notes.append(f"{left} nodes not shown (the page draws at most {CHECK_MAX_NODES})")
    doc["graphs"] = graphs
    if not graphs:
        notes.append("the target made no graph to draw")
    marked = {i for g in graphs for ids in g.get("node_findings", {}).values() for i in ids}
    title = f"autodiag check {outcome.label}"
    from autodiag.report import flow

    extra = None
    if flow.worth_plotting(doc.get("grad_flow")):  # below the graph: the gradient-flow plot
        extra = (flow.section(doc), flow.CSS, flow.JS)
    sink.write_text(
        page(
            doc,
            graphs,
            svgs,
            title,
            "; ".join(notes) or None,
            _findings_html(findings, marked),
            extra,
        )
    )


def _findings_html(findings: list, marked: set) -> str:
    """The findings, listed in the panel before a node is clicked (escaped text only)."""
    if not findings:
        return '<p class="ok">No findings.</p>'
    items = []
    for k, f in enumerate(findings):
        loc = f.get("location")
        where = f" at {loc['file']}:{loc['line']}" if loc else ""
        drawn = "" if k in marked else " (no node of the graph shown)"
        items.append(
            f'<div class="finding-item"><b>{escape(f["kind"])} ({escape(f["severity"])})</b>'
            f"<div>{escape(f['message'])}</div>"
            f'<div class="hint">{escape(where.strip())}{escape(drawn)}</div></div>'
        )
    n = len(findings)
    return f"<h3>{n} finding{'s' if n != 1 else ''}</h3>{''.join(items)}"


PAGE_CSS = """
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; font: 14px system-ui, -apple-system, 'Segoe UI',
  sans-serif; color: #222; background: #fafafa; }
header { display: flex; align-items: center; gap: 10px; padding: 6px 12px;
  border-bottom: 1px solid #ddd; background: #fff; height: 44px; }
header .brand { font-weight: 700; color: #1f618d; }
header .title { font-family: ui-monospace, monospace; overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap; max-width: 30%; line-height: 1.6; }
header .search { flex: 0 1 260px; padding: 4px 8px; border: 1px solid #bbb; border-radius: 4px; }
header .matches { color: #666; min-width: 6em; font-size: 12px; }
header button { padding: 3px 10px; border: 1px solid #bbb; border-radius: 4px; background: #fff;
  cursor: pointer; }
header button.on { background: #e8daef; border-color: #7d3c98; }
header button[hidden] { display: none; }
header .legend { margin-left: auto; font-size: 12px; color: #555; white-space: nowrap; }
.legend .k { display: inline-block; width: 12px; height: 12px; border-radius: 3px;
  vertical-align: -2px; margin: 0 3px 0 8px; border: 1px solid #888; }
.legend .k.leaf { background: #aed6f1; } .legend .k.root { background: #a9dfbf; }
.legend .k.finding { background: #f5b7b1; border-color: #c0392b; }
.legend .k.plain { background: #eee; }
.note { padding: 6px 12px; background: #fef5e7; border-bottom: 1px solid #f0d9a8; }
section.graph { display: flex; height: calc(100vh - 44px); border-bottom: 1px solid #ddd; }
.canvas { flex: 1; position: relative; overflow: hidden; cursor: grab; background: #fff; }
.canvas.dragging { cursor: grabbing; }
.canvas svg { width: 100%; height: 100%; display: block; user-select: none; }
.panel { width: 380px; overflow: auto; border-left: 1px solid #ddd; padding: 10px 14px;
  background: #fcfcfc; }
.panel h2 { font-size: 13px; font-weight: 600; color: #555; margin: 0 0 10px; }
.panel h3 { font-size: 16px; margin: 4px 0 8px; word-break: break-all; }
.panel .hint { color: #777; }
.panel dl { margin: 0; display: grid; grid-template-columns: max-content 1fr; gap: 4px 10px; }
.panel dt { color: #666; } .panel dd { margin: 0; word-break: break-word; }
.panel pre { margin: 4px 0 0; padding: 6px; background: #f1f1f1; border-radius: 4px;
  white-space: pre-wrap; word-break: break-all; font-size: 12px; }
.panel table { border-collapse: collapse; font-size: 12px; margin-top: 4px; }
.panel td, .panel th { border-bottom: 1px solid #e3e3e3; padding: 2px 6px 2px 0;
  text-align: left; }
section.nograph .panel { width: auto; border: 0; }
.panel .ok { color: #1e8449; font-weight: 600; }
.panel .bad { color: #c0392b; font-weight: 600; }
.panel .finding-item { border-left: 3px solid #c0392b; padding: 2px 8px; margin: 6px 0;
  background: #fdf2f1; }
.panel a { color: #1f618d; cursor: pointer; text-decoration: underline; }
.node { cursor: pointer; }
.node.match rect { stroke: #d35400; stroke-width: 3; }
.node.selected rect { stroke: #1a5276; stroke-width: 3.5; }
.node.onpath rect { stroke: #2874a6; stroke-width: 2.5; }
.edge.onpath { stroke: #2874a6; stroke-width: 2.8; }
.dim .node:not(.onpath):not(.selected) { opacity: 0.35; }
.dim .edge:not(.onpath) { opacity: 0.25; }
kbd { border: 1px solid #ccc; border-radius: 3px; padding: 0 3px; font-size: 11px; }
"""

# Our own JavaScript: no library, no network. Every walk over the graph is a loop.
PAGE_JS = r"""
(function () {
  "use strict";
  var doc = JSON.parse(document.getElementById("autodiag-data").textContent);
  var graphs = doc.graphs || [doc];
  var findings = doc.findings || [];
  var views = [], folded = [], repeated = [];
  var sections = document.querySelectorAll("section.graph");
  for (var k = 0; k < sections.length; k++) {
    var sec = sections[k], g0 = graphs[k];
    var pic = function (role) {
      return sec.querySelector('.canvas svg[data-role="' + role + '"]');
    };
    // every node of the section's data, drawn or not, and who uses it
    var ctx = { all: {}, users: {}, foldOf: {}, views: [] };
    g0.nodes.forEach(function (n) { ctx.all[n.id] = n; ctx.users[n.id] = []; });
    g0.nodes.forEach(function (n) {
      n.next.forEach(function (e) { if (e && ctx.users[e[0]]) ctx.users[e[0]].push(n.id); });
    });
    var full = setup(sec, pic("full"), g0, ctx);
    ctx.full = full;
    views.push(full);
    if (pic("modules") && g0.collapsed) {
      var mod = setup(sec, pic("modules"), g0.collapsed, ctx);
      full.other = mod; mod.other = full;
      folded.push(full);
    }
    if (pic("repeats") && g0.repeats) {
      // the runs of repeated blocks folded, and each run expanded (report/repeats.py)
      var rep = setup(sec, pic("repeats"), g0.repeats, ctx);
      full.repeats = rep; ctx.repeats = rep;
      repeated.push(full);
      g0.repeats.nodes.forEach(function (n) {
        if (!n.repeat) return;
        var x = n.repeat.expanded, inside = {};
        x.ids.forEach(function (id) { inside[id] = true; });
        var part = { nodes: x.ids.map(function (id) { return ctx.all[id]; }), layout: x.layout,
          roots: (g0.roots || []).filter(function (r) { return inside[r]; }),
          node_findings: g0.node_findings };
        var xv = setup(sec, sec.querySelector('.canvas svg[data-fold="' + n.id + '"]'), part,
          ctx);
        xv.box = n;
        n.repeat.instances.forEach(function (inst, i) {
          inst.forEach(function (id) { ctx.foldOf[id] = { box: n, view: xv, instance: i }; });
        });
      });
    }
    var first = g0.start === "repeats" && ctx.repeats ? ctx.repeats : full;
    ctx.views.forEach(function (v) { if (v !== first) v.hide(); });
    ctx.shown = first;
  }
  var active = views[0].ctx.shown;
  // the modules button: each graph's picture with its modules folded, or in full
  var modulesButton = document.querySelector("header .modules");
  if (folded.length) {
    modulesButton.hidden = false;
    modulesButton.addEventListener("click", function () {
      var on = modulesButton.classList.toggle("on");
      folded.forEach(function (v) { (on ? v.other : v).swap(); });
    });
  }
  // the repeats button: each graph with its runs of repeated blocks folded, or in full
  var repeatsButton = document.querySelector("header .repeats");
  if (repeated.length) {
    repeatsButton.hidden = false;
    repeatsButton.classList.toggle("on", views.some(function (v) {
      return v.ctx.shown !== v && v.ctx.shown !== v.other;
    }));
    repeatsButton.addEventListener("click", function () {
      var on = repeatsButton.classList.toggle("on");
      repeated.forEach(function (v) { (on ? v.repeats : v).swap(); });
    });
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function num(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toPrecision(4)));
  }
  function nested(v) {
    if (Array.isArray(v)) return "[" + v.map(nested).join(", ") + "]";
    return num(v);
  }
  function shape(s) { return "[" + (s || []).join(", ") + "]"; }
  function bytes(n) {
    if (n === undefined || n === null) return "-";
    var u = ["B", "KiB", "MiB", "GiB"], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }
  function summary(s) {
    if (!s) return "-";
    var head = shape(s.shape) + " " + (s.dtype || "");
    if ("values" in s) return head + "  " + nested(s.values);
    if (!("min" in s)) return head;
    var t = head + "  min " + num(s.min) + "  max " + num(s.max) + "  mean " + num(s.mean);
    if (s.nan) t += "  (" + s.nan + " NaN)";
    if (s.inf) t += "  (" + s.inf + " Inf)";
    return t;
  }

  function setup(sec, svg, g, ctx) {
    var vp = svg.querySelector("g.viewport");
    var canvas = sec.querySelector(".canvas");
    var details = sec.querySelector(".details");
    svg.removeAttribute("viewBox");
    var byId = {}, consumers = {}, nodeEl = {}, rootName = {};
    g.nodes.forEach(function (n) { byId[n.id] = n; consumers[n.id] = []; });
    g.nodes.forEach(function (n) {
      n.next.forEach(function (e) { if (e && consumers[e[0]]) consumers[e[0]].push(n.id); });
    });
    (g.roots || []).forEach(function (r, i) { rootName[r] = (g.root_names || [])[i]; });
    var nodeFindings = g.node_findings || {};
    svg.querySelectorAll("g.node").forEach(function (e) { nodeEl[e.dataset.id] = e; });
    // a node of the data: this picture's own (a folded box), else any node of the section
    function nodeOf(id) { return byId[id] || ctx.all[id]; }
    var edges = svg.querySelectorAll("path.edge");
    var W = Number(svg.dataset.width), H = Number(svg.dataset.height);
    var s = 1, tx = 0, ty = 0;
    function apply() {
      vp.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + s + ")");
    }
    function fit() {
      var r = canvas.getBoundingClientRect();
      s = Math.min(r.width / W, r.height / H, 1.5) * 0.96;
      tx = (r.width - W * s) / 2; ty = Math.max(8, (r.height - H * s) / 2);
      apply();
    }
    function centerOn(id) {
      var b = g.layout.boxes[id];
      if (!b) return;
      var r = canvas.getBoundingClientRect();
      s = Math.max(s, 0.9);
      tx = r.width / 2 - b[0] * s; ty = r.height / 2 - b[1] * s;
      apply();
    }
    function shown() { return svg.style.display !== "none"; }
    canvas.addEventListener("wheel", function (ev) {
      if (!shown()) return;
      ev.preventDefault();
      var r = canvas.getBoundingClientRect();
      var mx = ev.clientX - r.left, my = ev.clientY - r.top;
      var f = Math.exp(-ev.deltaY * 0.0015);
      var ns = Math.min(8, Math.max(0.02, s * f));
      tx = mx - (mx - tx) * ns / s; ty = my - (my - ty) * ns / s; s = ns;
      apply();
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("pointerdown", function (ev) {
      if (ev.button !== 0 || !shown()) return;
      drag = { x: ev.clientX, y: ev.clientY, tx: tx, ty: ty, moved: false };
    });
    window.addEventListener("pointermove", function (ev) {
      if (!drag) return;
      var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true;
      canvas.classList.add("dragging");
      tx = drag.tx + dx; ty = drag.ty + dy;
      apply();
    });
    window.addEventListener("pointerup", function (ev) {
      var d = drag;
      drag = null;
      canvas.classList.remove("dragging");
      if (d && d.moved) return;
      var t = ev.target && ev.target.closest ? ev.target.closest("g.node") : null;
      if (t && svg.contains(t)) select(Number(t.dataset.id));  // this picture's own box
    });
    canvas.addEventListener("pointerenter", function () { if (shown()) active = view; });

    function clearMarks() {
      svg.classList.remove("dim");
      svg.querySelectorAll(".onpath, .selected").forEach(function (e) {
        e.classList.remove("onpath"); e.classList.remove("selected");
      });
    }
    // the nodes on a path from ``id`` up to a root: consumers of consumers (a loop, no recursion)
    function pathUp(id) {
      var seen = {}, queue = [id];
      seen[id] = true;
      for (var i = 0; i < queue.length; i++) {
        var c = consumers[queue[i]] || [];
        for (var j = 0; j < c.length; j++) {
          if (!seen[c[j]]) { seen[c[j]] = true; queue.push(c[j]); }
        }
      }
      return seen;
    }
    function select(id) {
      var n = byId[id];
      if (n && n.repeat) { ctx.foldOf[n.repeat.instances[0][0]].view.swap(); return; }
      if (!n || !nodeEl[id]) { ctx.reveal(id, view); return; }
      clearMarks();
      var on = pathUp(id);
      svg.classList.add("dim");
      Object.keys(on).forEach(function (k) { if (nodeEl[k]) nodeEl[k].classList.add("onpath"); });
      edges.forEach(function (e) {
        if (on[e.dataset.u] && on[e.dataset.v]) e.classList.add("onpath");
      });
      nodeEl[id].classList.add("selected");
      show(n);
      sec.dataset.selected = String(id);
    }
    function link(id) {
      var n = nodeOf(id);
      var a = el("a", null, (n ? label(n) : "node") + " #" + id);
      a.addEventListener("click", function () { ctx.reveal(id, view); });
      return a;
    }
    function label(n) {
      if (n.variable) return n.variable.name || "AccumulateGrad";
      return rootName[n.id] ? rootName[n.id] + " = " + n.name : n.name;
    }
    function row(dl, k, v) {
      dl.appendChild(el("dt", null, k));
      var dd = el("dd");
      if (v instanceof Node) dd.appendChild(v); else dd.textContent = v;
      dl.appendChild(dd);
      return dd;
    }
    function show(n, where) {
      details.textContent = "";
      details.appendChild(el("h3", "name", label(n)));
      if (where) details.appendChild(el("p", "hint", where));
      var dl = el("dl");
      details.appendChild(dl);
      row(dl, "node", n.name + "  (id " + n.id + ")");
      if (rootName[n.id] !== undefined || (g.roots || []).indexOf(n.id) >= 0)
        row(dl, "root", rootName[n.id] || "yes");
      if (n.variable) row(dl, "leaf", (n.variable.name || "unnamed") + "  " +
        shape(n.variable.shape) + " " + n.variable.dtype);
      if (n.module) row(dl, "module", n.module);
      if (n.members) {
        row(dl, "module", n.name + (n.kind ? " (" + n.kind + ")" : ""));
        var ms = el("div");
        n.members.forEach(function (m, i) {
          if (i) ms.appendChild(document.createTextNode(", "));
          var a = el("a", null, view.other.labelOf(m) + " #" + m);
          a.addEventListener("click", function () { view.other.swap(m); });
          ms.appendChild(a);
        });
        row(dl, "nodes", ms);
        details.appendChild(el("p", "hint", "A click on a node opens it in the full picture."));
      }
      if (n.created_at) {
        var dd = row(dl, "created at", n.created_at.file + ":" + n.created_at.line);
        dd.className = "created";
        if (n.created_at.code) dd.appendChild(el("pre", "code", n.created_at.code));
      } else if (!n.variable && !n.members) row(dl, "created at", "unknown");
      var ins = el("div");
      n.next.forEach(function (e, i) {
        if (i) ins.appendChild(document.createTextNode(", "));
        ins.appendChild(e && nodeOf(e[0]) ? link(e[0]) : el("span", null, "-"));
      });
      if (n.next.length) row(dl, "inputs", ins);
      var outs = el("div");
      var users = byId[n.id] && !ctx.all[n.id] ? consumers[n.id] : ctx.users[n.id];
      (users || []).forEach(function (c, i) {
        if (i) outs.appendChild(document.createTextNode(", "));
        outs.appendChild(link(c));
      });
      if ((users || []).length) row(dl, "used by", outs);
      if (n.value) row(dl, "value", summary(n.value));
      if ("grad" in n) {
        var gs = n.grad ? n.grad.map(summary).join("; ") : "-";
        row(dl, "grad", gs);
      }
      if (doc.command === "graph" && !("value" in n) && !("grad" in n) && !n.variable &&
          !n.members)
        row(dl, "values", "run with --values --grads to record them");
      if (n.saved && n.saved.length) {
        var t = el("table");
        var hr = el("tr");
        ["saved", "shape", "dtype", "version", "bytes"].forEach(function (h) {
          hr.appendChild(el("th", null, h));
        });
        t.appendChild(hr);
        n.saved.forEach(function (sv) {
          var tr = el("tr");
          tr.appendChild(el("td", null, sv.name));
          tr.appendChild(el("td", null, sv.shape ? shape(sv.shape) : "-"));
          tr.appendChild(el("td", null, sv.dtype || "-"));
          var ver = el("td", null, "v" + sv.version);
          if ("current_version" in sv) {
            ver.appendChild(el("span", "bad", " now v" + sv.current_version +
              ": modified in place"));
          }
          tr.appendChild(ver);
          tr.appendChild(el("td", null, bytes(sv.bytes)));
          t.appendChild(tr);
        });
        var box = el("div");
        box.appendChild(t);
        row(dl, "saved", box);
      } else if (n.saved_freed) {
        row(dl, "saved", "freed by backward");
      }
      (nodeFindings[n.id] || []).forEach(function (fi) {
        var f = findings[fi];
        if (!f) return;
        var d = el("div", "finding-item");
        d.appendChild(el("b", null, f.kind + " (" + f.severity + ")"));
        d.appendChild(el("div", null, f.message));
        if (f.hint) d.appendChild(el("div", "hint", "hint: " + f.hint));
        details.appendChild(d);
      });
    }
    var matches = [], cursor = -1;
    function search(q) {
      svg.querySelectorAll(".match").forEach(function (e) { e.classList.remove("match"); });
      matches = [];
      cursor = -1;
      q = q.trim().toLowerCase();
      if (!q) return 0;
      var line = /^(?:(.*):)?(\d+)$/.exec(q);
      // every node of the data (a node inside a folded run marks its box), and this picture's
      // own boxes
      var pool = g.nodes.filter(function (n) { return !ctx.all[n.id]; });
      Object.keys(ctx.all).forEach(function (k) { pool.push(ctx.all[k]); });
      pool.forEach(function (n) {
        var hit;
        if (line) {
          var at = n.created_at;
          hit = at && String(at.line) === line[2] &&
            (!line[1] || at.file.toLowerCase().indexOf(line[1]) >= 0);
        } else {
          hit = label(n).toLowerCase().indexOf(q) >= 0 || n.name.toLowerCase().indexOf(q) >= 0 ||
            (n.module || "").toLowerCase().indexOf(q) >= 0;
        }
        if (!hit) return;
        matches.push(n.id);
        var f = ctx.foldOf[n.id];
        var e = nodeEl[n.id] || (f && nodeEl[f.box.id]);
        if (e) e.classList.add("match");
      });
      matches.sort(function (a, b) { return a - b; });
      return matches.length;
    }
    function next() {
      if (!matches.length) return;
      cursor = (cursor + 1) % matches.length;
      ctx.reveal(matches[cursor], view);
    }
    var view = { fit: fit, search: search, next: next, clear: function () {
      clearMarks(); delete sec.dataset.selected;
    }, select: select, shown: shown, ctx: ctx };
    // show this picture instead of the others (and select node ``id`` in it)
    view.swap = function (id) {
      ctx.views.forEach(function (v) { if (v !== view) v.hide(); });
      svg.style.display = "";
      active = view;
      ctx.shown = view;
      fit();
      if (id !== undefined) { select(id); centerOn(id); }
      else if (view.box) {  // readable at once: zoomed on the block that ran first
        if (s < 0.6) { s = 0.6; centerOn(view.box.repeat.expanded.ids[0]); }
        foldPanel();
      }
      if (modulesButton) modulesButton.classList.toggle("on", !!g.members_view);
      if (repeatsButton) repeatsButton.classList.toggle("on", view === ctx.repeats || !!view.box);
    };
    view.draws = function (id) { return !!nodeEl[id]; };
    // a node this picture does not draw: its details, and where it is
    view.detail = function (id, where) {
      var n = nodeOf(id);
      if (!n) return;
      clearMarks();
      show(n, where);
      sec.dataset.selected = String(id);
    };
    // an expanded run: what it repeats, which instances are drawn, the way back
    function foldPanel() {
      var r = view.box.repeat, drawn = r.expanded.ids.length / r.size;
      details.textContent = "";
      details.appendChild(el("h3", "name", view.box.name));
      var dl = el("dl");
      details.appendChild(dl);
      row(dl, "repeats", r.count + " blocks of " + r.size + " node" + (r.size > 1 ? "s" : "") +
        " (" + r.ranks + " rank" + (r.ranks > 1 ? "s" : "") + " each)");
      row(dl, "drawn", drawn >= r.count ? "all " + r.count : "the first " + drawn +
        " (search finds a node of any block)");
      var back = el("a", "back", "fold the run back");
      back.addEventListener("click", function () { ctx.repeats.swap(); });
      details.appendChild(back);
    }
    view.hide = function () { svg.style.display = "none"; };
    ctx.views.push(view);
    view.labelOf = function (id) { return byId[id] ? label(byId[id]) : "node"; };
    view.centerOn = centerOn;
    ctx.reveal = function (id, from) { reveal(ctx, id, from || view); };
    g.members_view = g.nodes.some(function (n) { return n.members; });
    fit();
    window.addEventListener("resize", function () { if (shown()) fit(); });
    return view;
  }

  // node ``id`` of a section: selected in the picture shown if it draws it, else in the full
  // picture or in its run expanded; a node no picture draws gets its details and where it is
  function reveal(ctx, id, from) {
    var f = ctx.foldOf[id];
    if (from.draws(id)) { if (!from.shown()) from.swap(); from.select(id); from.centerOn(id); }
    else if (f && f.view.draws(id)) f.view.swap(id);
    else if (ctx.full.draws(id)) ctx.full.swap(id);
    else if (f) {
      f.view.swap();
      var r = f.box.repeat;
      f.view.detail(id, "in " + f.box.name + ": block " + (f.instance + 1) + " of " + r.count +
        " (not drawn: the picture shows the first " + r.expanded.ids.length / r.size + ")");
    } else from.detail(id, "not drawn in this page's pictures");
  }

  var box = document.querySelector("header .search");
  var count = document.querySelector("header .matches");
  box.addEventListener("input", function () {
    var n = 0;
    views.forEach(function (v) {
      n += v.search(box.value);  // each node of the data once: the full picture's count
      v.ctx.views.forEach(function (w) { if (w !== v) w.search(box.value); });
    });
    count.textContent = box.value.trim() ? n + " match" + (n === 1 ? "" : "es") : "";
  });
  box.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter") { ev.preventDefault(); active.next(); }
  });
  document.querySelector("header .fit").addEventListener("click", function () {
    views.forEach(function (v) { v.ctx.shown.fit(); });
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.target === box) { if (ev.key === "Escape") box.blur(); return; }
    if (ev.key === "f") views.forEach(function (v) { v.ctx.shown.fit(); });
    else if (ev.key === "/") { ev.preventDefault(); box.focus(); }
    else if (ev.key === "Escape") {
      views.forEach(function (v) { v.ctx.views.forEach(function (w) { w.clear(); }); });
    }
  });
  window.autodiagViews = views;
})();
"""
