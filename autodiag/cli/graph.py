"""``autodiag graph``: the grad_fn graph of a script or an expression."""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from rich.markup import escape

from autodiag._look import is_a, type_name
from autodiag.analysis.graph import GraphCapture, module_level_roots, names_by_id
from autodiag.cli._common import (
    AnnotationsOpt,
    DtypeOpt,
    ExprOpt,
    JunitOpt,
    NoColorOpt,
    QuietOpt,
    OutputOpt,
    ScriptArgs,
    TargetArg,
    TimeoutOpt,
    VarOpt,
    guarded,
    target_failure,
)
from autodiag.report import graph as render
from autodiag.report.output import envelope
from autodiag.report.table import print_table
from autodiag.target.errors import BadInvocation, NothingToShow
from autodiag.tensor import Tensor


class Order(str, enum.Enum):
    tree = "tree"
    bfs = "bfs"
    dfs = "dfs"
    topo = "topo"


class GraphFormat(str, enum.Enum):
    text = "text"
    json = "json"
    dot = "dot"
    mermaid = "mermaid"
    svg = "svg"


# Past these sizes a format stops being useful (Mermaid refuses > 500 edges by default), so
# they truncate unless --max-nodes says otherwise; JSON and DOT are complete by default.
# JSON is indented up to this many nodes, compact beyond (10x faster for huge graphs).
PRETTY_JSON_NODES = 5000
DEFAULT_MAX_NODES = {"text": 500, "mermaid": 400, "svg": 2000, "json": None, "dot": None}


def graph(
    target: TargetArg = None,
    script_args: ScriptArgs = None,
    expr: ExprOpt = None,
    var: VarOpt = None,
    dtype: DtypeOpt = "float64",
    order: Annotated[Order, typer.Option("--order", help="tree (indented DFS, shared "
                                         "subgraphs once), bfs, dfs, or topo (the order "
                                         "backward runs).")] = Order.tree,
    fmt: Annotated[GraphFormat, typer.Option("--format", "-f", help="text, json, dot, mermaid, "
                                             "or svg (needs Graphviz).")] = GraphFormat.text,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    timeout: TimeoutOpt = None,
    junit_xml: JunitOpt = None,
    annotations: AnnotationsOpt = None,
    quiet: QuietOpt = False,
    call: Annotated[int | None, typer.Option("--call", help="Show the graph of the N-th "
                                                "backward/grad call (default: the last).",
                                                min=1, metavar="N", show_default=False)] = None,
    all_calls: Annotated[bool, typer.Option("--all", help="Show the graph of every backward "
                                            "call.")] = False,
    root: Annotated[str | None, typer.Option("--root", help="Show the graph of this "
                                                "module-level variable.",
                                                metavar="NAME", show_default=False)] = None,
    show_saved: Annotated[bool, typer.Option("--show-saved", help="List saved tensors (shape, "
                                             "dtype, version).")] = False,
    values: Annotated[bool, typer.Option("--values", help="Summarise each node's forward "
                                         "value.")] = False,
    grads: Annotated[bool, typer.Option("--grads", help="Summarise the gradients each node "
                                        "received in backward.")] = False,
    max_nodes: Annotated[int | None, typer.Option("--max-nodes", help="Show at most N nodes "
                                                     "(text default 500).", min=1,
                                                     metavar="N", show_default=False)] = None,
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Stop N edges below "
                                                     "the roots.", min=0,
                                                     metavar="N", show_default=False)] = None,
) -> None:
    """Show the grad_fn graph: of the last backward() call, or of the module-level tensors.

    Example: [bold]autodiag graph samples/model.py --order topo[/bold]
    """

    def body(cmd) -> int:
        t = cmd.make_target(target, script_args, expr, var, dtype, timeout)
        if call is not None and all_calls:
            raise BadInvocation("--call and --all exclude each other", "Pick one.")
        if root is not None and (call is not None or all_calls):
            raise BadInvocation("--root shows a variable's graph; it excludes --call and --all",
                                "Pick one.")
        if fmt is GraphFormat.svg and not render.has_dot():
            raise BadInvocation("--format svg needs Graphviz's dot program, which is not on "
                                "PATH", "Install Graphviz, or use --format dot and render the "
                                "file elsewhere.")
        sink = cmd.start()
        cap = GraphCapture(call=call, keep_all=all_calls, values=values, grads=grads)
        result = cmd.run_target(t, [cap])
        snaps = _select(cap, result, call, root)
        if snaps is None:  # the target failed before making any graph
            return target_failure(cmd, result)
        names = names_by_id(*result.scopes)
        for s in snaps:
            s.name_nodes(names)
        limit = max_nodes if max_nodes is not None else DEFAULT_MAX_NODES[fmt.value]
        view = render.View(order.value, limit, max_depth, show_saved, values, grads)
        left = _render(cmd, sink, snaps, view, fmt.value, cap.calls, t.label, result, all_calls)
        if left and fmt is not GraphFormat.json:
            cmd.err.print(f"[yellow]note:[/] {left} nodes not shown (--max-nodes "
                          f"{limit}{'' if max_depth is None else f', --max-depth {max_depth}'})"
                          f"; use --max-nodes N or --format json for everything")
        failed = target_failure(cmd, result)
        return 0 if failed is None else failed

    guarded("graph", output, no_color, body, junit_xml, annotations, quiet, fmt)


def _select(cap: GraphCapture, result, call: int | None, root: str | None):
    ns = result.namespace
    if root is not None:
        if root not in ns:
            cands = ", ".join(k for k, _ in module_level_roots(ns)) or "none"
            raise BadInvocation(f"--root {root}: the target has no module-level variable "
                                f"{root!r}", f"Module-level tensors with a grad_fn: {cands}.")
        v = ns[root]
        if not is_a(v, Tensor):  # its type only: a user object's __class__ may raise
            raise BadInvocation(f"--root {root}: {root!r} is a {type_name(v)}, not a tensor",
                                "Name a tensor variable.")
        if v.grad_fn is None and not v.requires_grad:
            raise BadInvocation(f"--root {root}: {root!r} has no grad_fn and does not require "
                                f"grad, so it has no graph", "Name a tensor computed from "
                                "tensors with requires_grad=True.")
        return [cap.roots_snapshot([v])]
    if call is not None:
        if cap.calls < call:
            raise BadInvocation(f"--call {call}: the target made {cap.calls} backward/grad "
                                f"call{'s' if cap.calls != 1 else ''}",
                                "Pick a call number between 1 and that count.")
        return cap.snapshots
    if cap.snapshots:
        return cap.snapshots
    roots = module_level_roots(ns)
    if roots:
        snap = cap.roots_snapshot([v for _, v in roots])
        return [snap]
    if result.error is not None or result.interrupted:
        return None
    raise NothingToShow(f"{result.target.label} ran, but made no backward() or autograd.grad() "
                        f"call and left no module-level tensor with a grad_fn",
                        "Compute something from a tensor with requires_grad=True (and call "
                        "backward()), or use --root NAME.")


def _render(cmd, sink, snaps, view, fmt: str, calls: int, label: str, result,
            many: bool) -> int:
    """Write the report; returns how many nodes the view left out (largest over graphs)."""
    left = 0
    if fmt == "json":
        graphs = [render.to_json(s, view, stream=True) for s in snaps]
        left = max(g["truncated"] for g in graphs)
        extra = {"calls": calls}
        if not many:
            extra.update(graphs[0])
        else:
            extra["graphs"] = graphs
        total = sum(len(g["order"].items) for g in graphs)
        # node dicts are built as they are written: a huge graph is never one document
        sink.write_json_stream(envelope("graph", label, [], error=result.error,
                                        interrupted=result.interrupted, **extra),
                               pretty=total <= PRETTY_JSON_NODES)
        return left
    if fmt in ("dot", "mermaid"):  # streamed: a 1,000,000-node graph is never held whole
        lines = render.mermaid_lines if fmt == "mermaid" else render.dot_lines
        for s in snaps:
            left = max(left, render.visible(s, view)[1])
            sink.write_lines(lines(s, view))
        return left
    if fmt == "svg":
        parts = []
        for s in snaps:
            left = max(left, render.visible(s, view)[1])
            parts.append(render.dot_to_svg(render.to_dot(s, view)))
        sink.write_text("".join(parts))
        return left
    console = sink.console()
    for s in snaps:
        if view.order == "tree":
            text, n_left = render.tree_text(s, view, console.width)
            console.print(text, end="")
        else:
            rows, n_left = render.table_rows(s, view)
            print_table(console, render.GRAPH_COLUMNS, rows, title=f"{view.order} order")
        left = max(left, n_left)
        line = render.summary_line(s, calls)
        if n_left:
            line += f" — {n_left} nodes not shown"
        console.print(f"[dim]{escape(line)}[/]")
    return left
