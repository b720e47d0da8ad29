"""Gradient flow (``analysis/flow.py``'s ``"grad_flow"``), drawn two ways: a sparkline per
parameter in ``check``'s text report, and the page of ``check --plot FILE`` (also a section of
``check --format html``): each parameter's gradient norm and update/weight ratio over the steps,
on log scales, grouped by module, with the parameters and ReLUs that findings are about marked.

The page follows ``report/html.py``: one self-contained file (no network), the data embedded
with ``script_json`` and shown with ``textContent`` only, our own small JavaScript.
"""

from __future__ import annotations

import math
import re
from xml.sax.saxutils import escape

from rich.text import Text

from autodiag.report.html import script_json

SPARKS = "▁▂▃▄▅▆▇█"
MIN_STEPS = 4  # the text report shows sparklines once a parameter has this many steps
MAX_ROWS = 40  # parameters listed in the text report (the JSON and the plot have all)
# what the text report and the page call the findings they mark
MARKS = {
    "exploding_grad": "exploding",
    "vanishing_grad": "vanishing",
    "none_grad": "no gradient",
}


# --- what is marked ----------------------------------------------------------------------------


def dead_relus(findings: list[dict]) -> list[dict]:
    """The ``dead_relu`` findings about an ``nn.ReLU`` module: ``{"module", "dead", "width"}``."""
    out = []
    for f in findings:
        if f.get("kind") == "dead_relu" and isinstance(f.get("module"), str) and f["module"]:
            out.append(
                {"module": f["module"], "dead": len(f.get("units") or ()), "width": f.get("width")}
            )
    return out


def _key(path: str) -> list:
    """Natural order of module paths: ``model.2`` before ``model.10``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.]", path)]


def rows(flow: dict, findings: list[dict]) -> list[tuple[str, dict]]:
    """The rows of the table and the page's legend, in the parameters' order: ``("param",
    entry)`` and, right after the last parameter of the module before it, ``("relu", relu)``
    for each dead ReLU module (``model.1`` after ``model.0.bias``)."""
    params = [("param", p) for p in flow.get("parameters", [])]
    out = list(params)
    for relu in dead_relus(findings):
        at = 0
        for i, (_, r) in enumerate(out):
            m = r.get("module")
            if m is not None and _key(m) <= _key(relu["module"]):
                at = i + 1
        out.insert(at, ("relu", relu))
    return out


# --- the text report: a sparkline per parameter -----------------------------------------------


def sparkline(values: list, width: int) -> str:
    """``values`` (norms; 0 or None: no gradient) as at most ``width`` characters on a log
    scale of their own; several values per character are averaged in log space.

    >>> sparkline([1, 10, 100, 1000], 8), sparkline([1e-3, 0, 1e-3], 3), sparkline([5, 5], 2)
    ('▁▃▆█', '▄ ▄', '▄▄')
    """
    logs = [math.log10(v) if v else None for v in values]
    n = len(logs)
    if n > width:
        bins = []
        for b in range(width):
            chunk = [v for v in logs[b * n // width : (b + 1) * n // width] if v is not None]
            bins.append(sum(chunk) / len(chunk) if chunk else None)
        logs = bins
    known = [v for v in logs if v is not None]
    if not known:
        return " " * len(logs)
    lo, hi = min(known), max(known)
    top = len(SPARKS) - 1
    out = []
    for v in logs:
        if v is None:
            out.append(" ")
        elif hi - lo < 1e-9:
            out.append(SPARKS[top // 2])
        else:
            out.append(SPARKS[round((v - lo) / (hi - lo) * top)])
    return "".join(out)


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def worth_plotting(flow: dict | None) -> bool:
    """Whether some parameter has ``MIN_STEPS`` steps or more: a series worth a picture."""
    return any(p["steps"] >= MIN_STEPS for p in (flow or {}).get("parameters", ()))


def table_lines(flow: dict, findings: list[dict], width: int) -> list[Text]:
    """The text report's gradient-flow table (no lines when no parameter has ``MIN_STEPS``
    steps): a heading, then per parameter its name, sparkline, first and last norm and what
    the findings say about it; fits ``width`` columns (names longer than their column are
    shortened from the left, ``…0.weight``)."""
    params = flow.get("parameters") or []
    if not worth_plotting(flow):
        return []
    table = rows(flow, findings)
    shown, left = table[:MAX_ROWS], max(0, len(table) - MAX_ROWS)
    notes, names = [], []
    for kind, r in shown:
        if kind == "param":
            names.append(r["name"])
            marks = [MARKS.get(k, k) for k in r["marks"]]
            if r.get("nonfinite"):
                marks.append(f"nan/inf from {r['first_nonfinite']}")
            notes.append(", ".join(marks))
        else:
            names.append(f"{r['module']} (ReLU)")
            notes.append(f"{r['dead']} of {r['width']} dead")
    note_w = max(len(x) for x in notes)
    num_w = 8  # "1.23e-05"
    gap = 2
    fixed = 2 * (num_w + gap) + (note_w + gap if note_w else 0)
    # names first (down to 12 columns), then the sparkline (8 to 48 columns)
    name_w = max(12, min(max(len(x) for x in names), width - fixed - gap - 8))
    spark_w = max(8, min(48, width - fixed - name_w - gap))
    pers = {p["per"] for p in params}
    steps = max(p["steps"] for p in params)
    per = pers.pop() if len(pers) == 1 else "step"
    heading = f"gradient flow: norm over {steps} {per}s"
    scale = " (log scale, each row its own)"
    out = [
        Text.assemble(
            ("gradient flow", "bold"),
            heading[13:] + (scale if len(heading) + len(scale) <= width else ""),
        ),
        Text(
            "parameter".ljust(name_w)
            + " " * gap
            + "norm".ljust(spark_w)
            + " " * gap
            + "first".rjust(num_w)
            + " " * gap
            + "last".rjust(num_w),
            style="dim",
        ),
    ]
    for (kind, r), name, note in zip(shown, names, notes):
        line = Text(_fit(name, name_w).ljust(name_w) + " " * gap)
        if kind == "param":
            spark = sparkline(r["norm"], spark_w)
            line.append(spark.ljust(spark_w), style="cyan")
            line.append(" " * gap + _num(r["first"]).rjust(num_w))
            line.append(" " * gap + _num(r["last"]).rjust(num_w))
        else:
            line.append(" " * (spark_w + 2 * (gap + num_w)))
        if note:
            line.append(" " * gap + note, style="yellow")
        line.rstrip()
        out.append(line)
    if left:
        out.append(Text(f"… {left} more (the JSON's grad_flow and --plot have them all)", "dim"))
    return out


def _fit(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[len(name) - width + 1 :]


def render_table(console, flow: dict | None, findings: list[dict]) -> None:
    """Print the gradient-flow table (if the run has enough steps) and a blank line."""
    lines = table_lines(flow or {}, findings, console.width)
    for line in lines:
        console.print(line, no_wrap=True, overflow="ignore", crop=False)
    if lines:
        console.print()


# --- the page: ``check --plot FILE`` ------------------------------------------------------------

# Colours of the module groups (a parameter's line has its module's colour; within a module
# the lines differ by dash).
PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
]
DASHES = ["", "6 3", "2 3", "8 3 2 3"]


def _styles(table: list) -> list[dict]:
    """Colour and dash of each row: one colour per module (a parameter without one is its own
    group), dashes in order within it."""
    groups: dict = {}
    out = []
    for kind, r in table:
        key = r.get("module") or r.get("name")
        if key not in groups:
            groups[key] = [len(groups), 0]
        g = groups[key]
        out.append({"color": PALETTE[g[0] % len(PALETTE)], "dash": DASHES[g[1] % len(DASHES)]})
        if kind == "param":
            g[1] += 1
    return out


def section(doc: dict) -> str:
    """The gradient-flow section of a page (``doc``: check's JSON report): two charts, the
    legend grouped by module, the note on downsampling, and the data the script reads."""
    flow = doc.get("grad_flow") or {"max_points": 0, "parameters": []}
    findings = doc.get("findings") or []
    table = rows(flow, findings)
    styles = _styles(table)
    params = flow["parameters"]
    pers = {p["per"] for p in params}
    per = pers.pop() if len(pers) == 1 else "step"
    legend, series, module = [], [], object()
    for (kind, r), style in zip(table, styles):
        if kind == "param" and r.get("module") != module:
            module = r.get("module")
            if module is not None:
                legend.append(f'<div class="group">{escape(module)}</div>')
        swatch = (
            f'<svg class="swatch" width="26" height="10"><line x1="1" y1="5" x2="25" y2="5" '
            f'stroke="{style["color"]}" stroke-width="2.5" stroke-dasharray="{style["dash"]}"/>'
            "</svg>"
        )
        if kind == "relu":
            legend.append(
                f'<div class="row relu marked"><span class="swatch"></span>'
                f'<span class="name">{escape(r["module"])} (ReLU)</span>'
                f'<span class="badge">dead_relu: {r["dead"]} of {r["width"]} units</span></div>'
            )
            continue
        k = len(series)
        series.append(dict(r, color=style["color"], dash=style["dash"]))
        label = r["name"]
        if r.get("module"):
            label = "." + r["name"][len(r["module"]) + 1 :]
        marks = list(r["marks"])
        if r.get("nonfinite"):
            marks.append(f"nan/inf norm at {r['nonfinite']} {per}s from {r['first_nonfinite']}")
        badges = "".join(f'<span class="badge">{escape(m)}</span>' for m in marks)
        shape = "×".join(map(str, r["shape"])) or "scalar"
        legend.append(
            f'<div class="row{" marked" if marks else ""}" data-index="{k}" '
            f'title="{escape(r["name"])}">{swatch}<span class="name">{escape(label)}</span>'
            f'<span class="shape">{escape(shape)}</span>'
            f'<span class="vals">{_num(r["first"])} → {_num(r["last"])}</span>{badges}</div>'
        )
    stride = max((p["stride"] for p in params), default=1)
    steps = max((p["steps"] for p in params), default=0)
    cap = flow.get("max_points") or 0
    if not params:
        note = "No parameter received a gradient in this run: there is no gradient flow to plot."
    elif stride > 1:
        note = (
            f"{steps} {per}s: each parameter keeps at most {cap} points, so past {cap} steps "
            f"they are sampled evenly — each point here stands for {stride} consecutive "
            f"{per}s (the norm at its first one; the shaded band spans the smallest and "
            f"largest norm among them, the ratio is the largest)."
        )
    else:
        note = (
            f"Every one of the {steps} {per}s is shown (each parameter keeps at most {cap} "
            f"points; a longer run is sampled evenly)."
        )
    data = {"per": per, "series": series}
    return (
        '<section class="flow">\n<div class="flow-charts">'
        f'<figure class="chart" data-key="norm"><figcaption>gradient norm ‖grad‖ per '
        f"{escape(per)} (log scale)</figcaption><svg></svg></figure>"
        '<figure class="chart" data-key="update_ratio"><figcaption>update/weight ratio '
        "‖Δw‖ / ‖w‖ of each update (log scale; the forum rule of thumb is about 1e-3)"
        "</figcaption><svg></svg></figure>"
        f'<p class="flow-note">{escape(note)}</p></div>\n'
        f'<aside class="flow-legend"><h2>parameters by module</h2>{"".join(legend)}'
        '<p class="hint">Hover a chart to read the values at a step; hover a parameter to '
        "pick out its line, click it to hide or show it.</p></aside>\n"
        '<div class="flow-tip" hidden></div>\n'
        f'<script type="application/json" class="flow-data">{script_json(data)}</script>\n'
        "</section>\n"
    )


def page(doc: dict, title: str) -> str:
    """The page of ``check --plot FILE``: the gradient-flow section and the findings' summary
    (``doc``: check's JSON report, embedded whole)."""
    n = len(doc.get("findings") or [])
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)} — gradient flow</title>\n"
        f"<style>{PAGE_CSS}{CSS}</style>\n</head>\n<body>\n"
        '<header><span class="brand">autodiag</span> '
        f'<span class="title">{escape(title)}</span> <span class="what">gradient flow · '
        f"{n} finding{'s' if n != 1 else ''}</span></header>\n"
        f"{section(doc)}"
        f'<script type="application/json" id="autodiag-data">{script_json(doc)}</script>\n'
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


PAGE_CSS = """
* { box-sizing: border-box; }
html, body { margin: 0; font: 14px system-ui, -apple-system, 'Segoe UI', sans-serif;
  color: #222; background: #fafafa; }
header { display: flex; align-items: center; gap: 10px; padding: 6px 12px;
  border-bottom: 1px solid #ddd; background: #fff; height: 44px; }
header .brand { font-weight: 700; color: #1f618d; }
header .title { font-family: ui-monospace, monospace; }
header .what { color: #666; }
"""

CSS = """
section.flow { display: flex; position: relative; border-top: 1px solid #ddd; background: #fff; }
.flow-charts { flex: 1; min-width: 0; padding: 8px 12px; }
.flow figure { margin: 0 0 10px; }
.flow figcaption { font-size: 13px; color: #444; margin: 4px 0; }
.flow figure svg { width: 100%; height: 300px; display: block; background: #fff;
  border: 1px solid #eee; }
.flow .axis text { font-size: 11px; fill: #555; }
.flow .grid { stroke: #eee; }
.flow .domain { stroke: #999; }
.flow .line { fill: none; stroke-width: 1.6; }
.flow .line.marked { stroke-width: 2.8; }
.flow .band { stroke: none; opacity: 0.15; }
.flow .dot { stroke: none; }
.flow.focus .line:not(.hot), .flow.focus .dot:not(.hot) { opacity: 0.12; }
.flow.focus .band:not(.hot) { opacity: 0.04; }
.flow .line.hot { stroke-width: 3.2; }
.flow .off { display: none; }
.flow .guide { stroke: #555; stroke-dasharray: 3 3; }
.flow .empty { font-size: 13px; fill: #888; }
.flow-note { color: #666; font-size: 12px; margin: 4px 0; }
.flow-legend { width: 380px; border-left: 1px solid #ddd; padding: 10px 14px;
  background: #fcfcfc; font-size: 13px; }
.flow-legend h2 { font-size: 13px; color: #555; margin: 0 0 8px; }
.flow-legend .group { font-family: ui-monospace, monospace; font-weight: 600; margin: 8px 0 2px; }
.flow-legend .row { display: flex; align-items: center; gap: 6px; padding: 1px 2px;
  cursor: pointer; font-family: ui-monospace, monospace; font-size: 12px; flex-wrap: wrap; }
.flow-legend .row.relu { cursor: default; }
.flow-legend .row:hover { background: #eef3f8; }
.flow-legend .row.hidden { opacity: 0.4; text-decoration: line-through; }
.flow-legend .swatch { display: inline-block; width: 26px; height: 10px; flex: none; }
.flow-legend .shape, .flow-legend .vals { color: #777; }
.flow-legend .badge { background: #fdecea; color: #c0392b; border: 1px solid #e6b0aa;
  border-radius: 3px; padding: 0 4px; font-size: 11px; }
.flow-legend .hint { color: #777; }
.flow-tip { position: absolute; pointer-events: none; background: rgba(255,255,255,0.96);
  border: 1px solid #bbb; border-radius: 4px; padding: 4px 8px; font-size: 12px;
  font-family: ui-monospace, monospace; box-shadow: 0 2px 6px rgba(0,0,0,0.15);
  white-space: nowrap; z-index: 5; }
.flow-tip b { font-weight: 700; }
.flow-tip .k { display: inline-block; width: 10px; height: 3px; vertical-align: 3px;
  margin-right: 4px; }
"""

# Our own JavaScript: no library, no network; the data is read as JSON, shown with textContent.
JS = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var M = { l: 62, r: 14, t: 10, b: 36 };
  var MAX_TIP = 12;  // rows in the tooltip: the lines nearest the pointer
  document.querySelectorAll("section.flow").forEach(function (sec) {
    var data = JSON.parse(sec.querySelector("script.flow-data").textContent);
    var tip = sec.querySelector(".flow-tip");
    var charts = [];
    sec.querySelectorAll("figure.chart").forEach(function (fig) {
      charts.push(chart(fig, fig.dataset.key));
    });
    function svgEl(tag, attrs, parent) {
      var e = document.createElementNS(NS, tag);
      Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
      if (parent) parent.appendChild(e);
      return e;
    }
    function fmt(v) {
      if (v === null || v === undefined) return "-";
      if (v === 0) return "0";
      var a = Math.abs(v);
      return (a >= 1e4 || a < 1e-3) ? v.toExponential(2) : String(Number(v.toPrecision(3)));
    }
    // the values a chart draws: [x, y] pairs of one series (y > 0: log scale), and its band
    function points(s, key) {
      var out = [], ys = s[key];
      for (var i = 0; i < s.x.length; i++) out.push([s.x[i], ys[i]]);
      return out;
    }
    function chart(fig, key) {
      var svg = fig.querySelector("svg");
      var c = { key: key, svg: svg, series: data.series, paths: [] };
      function draw() {
        while (svg.firstChild) svg.removeChild(svg.firstChild);
        c.paths = [];
        var W = svg.clientWidth || 800, H = svg.clientHeight || 300;
        var xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
        data.series.forEach(function (s) {
          // norm_min/norm_max: only when a point stands for several steps (stride > 1)
          var lo = key === "norm" ? s.norm_min || s.norm : s[key];
          var hi = key === "norm" ? s.norm_max || s.norm : s[key];
          for (var i = 0; i < s.x.length; i++) {
            xmin = Math.min(xmin, s.x[i]); xmax = Math.max(xmax, s.x[i]);
            if (lo[i] > 0) ymin = Math.min(ymin, lo[i]);
            if (hi[i] > 0) ymax = Math.max(ymax, hi[i]);
          }
        });
        if (!(ymax > 0)) {
          var t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "class": "empty" },
            svg);
          t.textContent = key === "norm" ? "no gradient norms recorded" :
            "no update measured (no optimizer step or in-place update seen)";
          c.scale = null;
          return;
        }
        if (xmax === xmin) { xmin -= 1; xmax += 1; }
        var d0 = Math.floor(Math.log10(ymin)), d1 = Math.ceil(Math.log10(ymax));
        if (d1 === d0) { d0 -= 1; d1 += 1; }
        var pw = W - M.l - M.r, ph = H - M.t - M.b;
        function X(x) { return M.l + (x - xmin) / (xmax - xmin) * pw; }
        function Y(y) { return M.t + (d1 - Math.log10(y)) / (d1 - d0) * ph; }
        c.scale = { X: X, Y: Y, xmin: xmin, xmax: xmax, pw: pw, W: W, H: H };
        var axis = svgEl("g", { "class": "axis" }, svg);
        var every = Math.max(1, Math.ceil((d1 - d0) / 8));
        for (var d = d0; d <= d1; d += every) {
          var y = Y(Math.pow(10, d));
          svgEl("line", { x1: M.l, x2: W - M.r, y1: y, y2: y, "class": "grid" }, axis);
          var lab = svgEl("text", { x: M.l - 6, y: y + 4, "text-anchor": "end" }, axis);
          lab.textContent = "1e" + d;
        }
        var span = xmax - xmin, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
        if (span / step > 14) step *= 5; else if (span / step > 7) step *= 2;
        for (var x = Math.ceil(xmin / step) * step; x <= xmax; x += step) {
          var xl = svgEl("text", { x: X(x), y: H - M.b + 16, "text-anchor": "middle" }, axis);
          xl.textContent = String(Math.round(x));
        }
        svgEl("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "domain" },
          axis);
        var unit = svgEl("text", { x: M.l + pw / 2, y: H - 3, "text-anchor": "middle" }, axis);
        unit.textContent = data.per;
        svgEl("line", { x1: M.l, x2: M.l, y1: M.t, y2: H - M.b, "class": "domain" }, axis);
        data.series.forEach(function (s, k) {
          var g = svgEl("g", { "data-index": k }, svg);
          var cls = (s.marks.length ? " marked" : "");
          if (key === "norm" && s.stride > 1) {  // min-max band of the merged steps
            var top = [], bottom = [];
            for (var i = 0; i < s.x.length; i++) {
              if (s.norm_max[i] > 0) {
                top.push(X(s.x[i]) + "," + Y(s.norm_max[i]));
                bottom.unshift(X(s.x[i]) + "," + Y(Math.max(s.norm_min[i], Math.pow(10, d0))));
              }
            }
            if (top.length) svgEl("polygon", { points: top.concat(bottom).join(" "),
              fill: s.color, "class": "band" }, g);
          }
          var dpath = "", pen = false, n = 0, pts = points(s, key);
          pts.forEach(function (p) {
            if (!(p[1] > 0)) { pen = false; return; }
            dpath += (pen ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1);
            pen = true; n++;
          });
          if (n === 1 || (key !== "norm" && n <= 40)) {
            pts.forEach(function (p) {
              if (p[1] > 0) svgEl("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: s.color,
                "class": "dot" + cls }, g);
            });
          }
          svgEl("path", { d: dpath, stroke: s.color, "stroke-dasharray": s.dash,
            "class": "line" + cls }, g);
          c.paths.push(g);
        });
        c.guide = svgEl("line", { y1: M.t, y2: H - M.b, "class": "guide", visibility: "hidden" },
          svg);
        apply();
      }
      c.draw = draw;
      svg.addEventListener("mousemove", function (ev) { hover(c, ev); });
      svg.addEventListener("mouseleave", function () {
        tip.hidden = true;
        if (c.guide) c.guide.setAttribute("visibility", "hidden");
      });
      return c;
    }
    // the point of series ``s`` nearest step ``x`` (its x values are sorted)
    function nearest(s, x) {
      var lo = 0, hi = s.x.length - 1;
      while (lo < hi) {
        var mid = (lo + hi) >> 1;
        if (s.x[mid] < x) lo = mid + 1; else hi = mid;
      }
      if (lo > 0 && Math.abs(s.x[lo - 1] - x) <= Math.abs(s.x[lo] - x)) lo--;
      return lo;
    }
    function hover(c, ev) {
      var sc = c.scale;
      if (!sc) return;
      var r = c.svg.getBoundingClientRect();
      var px = ev.clientX - r.left, py = ev.clientY - r.top;
      var x = sc.xmin + (px - M.l) / sc.pw * (sc.xmax - sc.xmin);
      var rowsAt = [], stepAt = null;
      data.series.forEach(function (s, k) {
        if (hidden[k] || !s.x.length) return;
        var i = nearest(s, x), v = s[c.key][i];
        if (stepAt === null || Math.abs(s.x[i] - x) < Math.abs(stepAt - x)) stepAt = s.x[i];
        rowsAt.push({ s: s, k: k, i: i, v: v,
          dist: v > 0 ? Math.abs(sc.Y(v) - py) : Infinity });
      });
      if (stepAt === null) return;
      rowsAt.sort(function (a, b) { return a.dist - b.dist; });
      var near = rowsAt.slice(0, MAX_TIP);
      tip.textContent = "";
      var head = document.createElement("div");
      var per = data.per, first = near.length ? near[0] : null;
      var stride = first ? first.s.stride : 1;
      head.textContent = per + " " + stepAt + (stride > 1 ? " (… " + (stepAt + stride - 1) +
        ")" : "") + (c.key === "norm" ? " · gradient norm" : " · update/weight ratio");
      tip.appendChild(head);
      near.forEach(function (row, j) {
        var line = document.createElement("div");
        var key = document.createElement("span");
        key.className = "k";
        key.style.background = row.s.color;
        line.appendChild(key);
        var name = document.createElement(j === 0 ? "b" : "span");
        name.textContent = row.s.name + "  " + fmt(row.v);
        line.appendChild(name);
        if (c.key === "norm" && row.s.stride > 1) {
          var band = document.createElement("span");
          band.textContent = "  (" + fmt(row.s.norm_min[row.i]) + " … " +
            fmt(row.s.norm_max[row.i]) + ")";
          line.appendChild(band);
        }
        if (row.s.marks.length) {
          var m = document.createElement("span");
          m.textContent = "  ! " + row.s.marks.join(", ");
          m.style.color = "#c0392b";
          line.appendChild(m);
        }
        tip.appendChild(line);
      });
      if (rowsAt.length > near.length) {
        var more = document.createElement("div");
        more.textContent = "… " + (rowsAt.length - near.length) + " more";
        tip.appendChild(more);
      }
      tip.hidden = false;
      var sr = sec.getBoundingClientRect();
      var left = ev.clientX - sr.left + 14, topPx = ev.clientY - sr.top + 14;
      if (left + tip.offsetWidth > sr.width - 4) left = ev.clientX - sr.left - tip.offsetWidth - 14;
      tip.style.left = Math.max(0, left) + "px";
      tip.style.top = topPx + "px";
      var gx = sc.X(stepAt);
      c.guide.setAttribute("x1", gx); c.guide.setAttribute("x2", gx);
      c.guide.setAttribute("visibility", "visible");
      focus(first && first.dist < 12 ? first.k : null);
    }
    var hidden = {};
    function apply() {
      charts.forEach(function (c) {
        c.paths.forEach(function (g, k) { g.classList.toggle("off", !!hidden[k]); });
      });
    }
    function focus(k) {
      sec.classList.toggle("focus", k !== null && k !== undefined);
      charts.forEach(function (c) {
        c.paths.forEach(function (g, j) {
          g.querySelectorAll(".line, .band, .dot").forEach(function (e) {
            e.classList.toggle("hot", j === k);
          });
        });
      });
    }
    sec.querySelectorAll(".flow-legend .row[data-index]").forEach(function (row) {
      var k = Number(row.dataset.index);
      row.addEventListener("mouseenter", function () { focus(k); });
      row.addEventListener("mouseleave", function () { focus(null); });
      row.addEventListener("click", function () {
        hidden[k] = !hidden[k];
        row.classList.toggle("hidden", hidden[k]);
        apply();
      });
    });
    function drawAll() { charts.forEach(function (c) { c.draw(); }); }
    drawAll();
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(drawAll, 100);
    });
    (window.autodiagFlow = window.autodiagFlow || []).push({ charts: charts, redraw: drawAll });
  });
})();
"""
