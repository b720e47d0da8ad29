"""A graph's picture as SVG, drawn from autodiag's own layout (``report/layout.py``): no Graphviz.

``--format svg`` writes it as a static file; ``--format html`` (``report/html.py``) puts the
same SVG in a page with the graph's JSON model and a little JavaScript. The picture is drawn
from the graph's JSON model (``report/graph.py``'s ``to_json``): what the page shows in its
detail panel and what the boxes say come from one document.

Leaves are blue, roots green, nodes with findings red (as ``--format dot`` colours them);
edges go the way data flows in the forward pass, from an input to the node that consumed it.
"""

from __future__ import annotations

import os
from xml.sax.saxutils import escape

from autodiag.report.graph import LEAF_COLOR, ROOT_COLOR
from autodiag.report.layout import Layout, layout

# Box metrics for a 12px monospace font (0.6em a character, as DejaVu Sans Mono and Menlo).
CHAR_W = 7.3
LINE_H = 15.0
PAD_X, PAD_Y = 10.0, 5.0
MIN_W = 56.0
FINDING_COLOR = "#f5b7b1"

# The picture's own style: used by the static SVG, and by the page (which adds to it).
SVG_CSS = f"""
.node rect {{ fill: #eeeeee; stroke: #999; stroke-width: 1; }}
.node.leaf rect {{ fill: {LEAF_COLOR}; stroke: #5499c7; }}
.node.root rect {{ fill: {ROOT_COLOR}; stroke: #52be80; stroke-width: 2; }}
.node.finding rect {{ fill: {FINDING_COLOR}; stroke: #c0392b; stroke-width: 2.5; }}
.node.group rect {{ fill: #e8daef; stroke: #7d3c98; stroke-dasharray: 6 3; }}
.node.repeat rect {{ fill: #fdebd0; stroke: #ca6f1e; stroke-width: 2; stroke-dasharray: 8 3; }}
.node.modified rect {{ stroke: #c0392b; stroke-dasharray: 4 2; stroke-width: 2; }}
.node text {{ font: 12px ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace;
  fill: #111; }}
.node text.sub {{ font-size: 10.5px; fill: #555; }}
.edge {{ fill: none; stroke: #7f8c8d; stroke-width: 1.2; }}
.arrowhead {{ fill: #7f8c8d; }}
"""


def node_lines(node: dict, root_name: str | None) -> list[str]:
    """A box's text: the leaf's variable name (or ``AccumulateGrad``) and its shape and dtype;
    else the node's name (``loss = NllLossBackward0`` for a named root) and where it was
    created (``model.py:38``: the file name only, to keep boxes small)."""
    rep = node.get("repeat")
    if rep is not None:  # a run of repeated blocks folded into one box (report/repeats.py)
        each = f"{rep['size']} nodes each" if rep["size"] > 1 else "1 node each"
        return [node["name"], f"{each} · {rep['size'] * rep['count']:,} in all · click to expand"]
    if "members" in node:  # a module folded into one box
        return [node["name"], f"{node.get('kind') or 'module'} · {len(node['members'])} nodes"]
    var = node.get("variable")
    if var is not None:
        shape = "[" + ", ".join(map(str, var["shape"])) + "]"
        return [var.get("name") or "AccumulateGrad", f"{shape} {var['dtype']}"]
    title = f"{root_name} = {node['name']}" if root_name else node["name"]
    at = node.get("created_at")
    if at:
        return [title, f"{os.path.basename(at['file'])}:{at['line']}"]
    return [title]


def box_size(lines: list[str]) -> tuple[float, float]:
    w = max(MIN_W, max(len(s) for s in lines) * CHAR_W + 2 * PAD_X)
    return round(w, 1), round(len(lines) * LINE_H + 2 * PAD_Y, 1)


def node_classes(node: dict, roots: set, findings: dict) -> str:
    """``node`` plus ``leaf``, ``root``, ``finding`` (a finding points at it) and ``modified``
    (a saved tensor was modified in place since it was saved)."""
    cls = ["node"]
    if node.get("variable") is not None:
        cls.append("leaf")
    if "members" in node:
        cls.append("group")
    if "repeat" in node:
        cls.append("repeat")
    if node["id"] in roots:
        cls.append("root")
    if findings.get(node["id"]):
        cls.append("finding")
    if any("current_version" in s for s in node.get("saved", ())):
        cls.append("modified")
    return " ".join(cls)


def lay_out(graph: dict, direction: str = "TB") -> tuple[Layout, list[list[str]]]:
    """The layout of a graph JSON model's nodes (in the order of ``graph["nodes"]``) and each
    box's lines."""
    nodes = graph["nodes"]
    pos = {n["id"]: k for k, n in enumerate(nodes)}
    names = dict(zip(graph["roots"], graph.get("root_names") or ()))
    lines = [node_lines(n, names.get(n["id"])) for n in nodes]
    edges = []
    for k, n in enumerate(nodes):
        for e in n["next"]:
            if e is not None and e[0] in pos:
                edges.append((k, pos[e[0]]))
    return layout([box_size(x) for x in lines], edges, direction), lines


def _curve(points: list, direction: str) -> str:
    """A smooth path through ``points``: a cubic segment between each pair, with tangents
    along the ranks' axis."""
    x0, y0 = points[0]
    d = [f"M{x0:g},{y0:g}"]
    for x1, y1 in points[1:]:
        if direction == "TB":
            my = (y0 + y1) / 2
            d.append(f"C{x0:g},{my:g} {x1:g},{my:g} {x1:g},{y1:g}")
        else:
            mx = (x0 + x1) / 2
            d.append(f"C{mx:g},{y0:g} {mx:g},{y1:g} {x1:g},{y1:g}")
        x0, y0 = x1, y1
    return "".join(d)


def svg(
    graph: dict,
    lay: Layout,
    lines: list,
    findings: dict | None = None,
    key: str = "g0",
    standalone: bool = True,
) -> str:
    """The picture of ``graph`` (a graph JSON model) as SVG text. ``findings``: node id -> list
    of finding indices (``finding`` class). ``key`` makes the arrowhead's id unique in a page
    holding several pictures. ``standalone``: a file of its own, with its style and a white
    background; else an element for the page (which styles it)."""
    findings = findings or {}
    roots = set(graph["roots"])
    nodes = graph["nodes"]
    w, h = lay.width, lay.height
    out = []
    size = f'width="{w:g}" height="{h:g}" ' if standalone else ""
    out.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" {size}viewBox="0 0 {w:g} {h:g}" '
        f'class="autodiag-graph" data-width="{w:g}" data-height="{h:g}">\n'
    )
    if standalone:
        out.append(f"<style>{SVG_CSS}</style>\n")
        out.append(f'<rect width="{w:g}" height="{h:g}" fill="#fff"/>\n')
    marker = f"arrow-{key}"
    out.append(
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        f'<path class="arrowhead" d="M0,0L10,5L0,10z"/></marker></defs>\n'
    )
    out.append('<g class="viewport">\n<g class="edges">\n')
    for e in lay.edges:
        u, v = nodes[e.u]["id"], nodes[e.v]["id"]
        out.append(
            f'<path class="edge" data-u="{u}" data-v="{v}" d="{_curve(e.points, lay.direction)}" '
            f'marker-end="url(#{marker})"/>\n'
        )
    out.append('</g>\n<g class="nodes">\n')
    for k, n in enumerate(nodes):
        b = lay.boxes[k]
        x, y = b.x - b.w / 2, b.y - b.h / 2
        cls = node_classes(n, roots, findings)
        tip = " — ".join(lines[k])
        at = n.get("created_at")
        if at:
            tip += f"\n{at['file']}:{at['line']}  {at['code']}"
        out.append(
            f'<g class="{cls}" data-id="{n["id"]}" transform="translate({x:g},{y:g})">'
            f"<title>{escape(tip)}</title>"
            f'<rect width="{b.w:g}" height="{b.h:g}" rx="5"/>'
        )
        for j, text in enumerate(lines[k]):
            ty = PAD_Y + LINE_H * j + 11.5
            sub = ' class="sub"' if j else ""
            out.append(
                f'<text x="{b.w / 2:g}" y="{ty:g}" text-anchor="middle"{sub}>{escape(text)}</text>'
            )
        out.append("</g>\n")
    out.append("</g>\n</g>\n</svg>\n")
    return "".join(out)


def graph_report(sink, outcome) -> str | None:
    """The renderer of ``autodiag graph --format svg``: one SVG document per graph (``--all``:
    one after the other, as the pictures of separate files would be)."""
    from autodiag.report.graph import _left_out, to_json, visible

    rep = outcome.data
    view = rep.view
    left = 0
    for k, s in enumerate(rep.snaps):
        left = max(left, visible(s, view)[1])
        model = to_json(s, view)
        lay, lines = lay_out(model, view.direction)
        sink.write_text(svg(model, lay, lines, key=f"g{k}"))
    return _left_out(view, left)
