"""``autodiag graph``: the grad_fn graph of a script or an expression."""

from __future__ import annotations

import enum
import os
import pathlib
import tempfile
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from autodiag._look import type_name
from autodiag.cli._common import Command, Spec, lazy, target_failure
from autodiag.report.outcome import Outcome
from autodiag.target.errors import BadInvocation, NothingToShow

if TYPE_CHECKING:
    from autodiag.analysis.graph import GraphCapture


class Direction(str, enum.Enum):
    tb = "tb"
    lr = "lr"


class Order(str, enum.Enum):
    tree = "tree"
    bfs = "bfs"
    dfs = "dfs"
    topo = "topo"


# Past these sizes a format stops being useful (Mermaid refuses > 500 edges by default), so
# they truncate unless --max-nodes says otherwise; JSON and DOT are complete by default.
DEFAULT_MAX_NODES = {
    "text": 500,
    "mermaid": 400,
    "svg": 2000,
    "json": None,
    "dot": None,
    "html": 2000,
}


def graph(
    cmd: Command,
    order: Annotated[
        Order,
        typer.Option(
            "--order",
            help="tree (indented DFS, shared "
            "subgraphs once), bfs, dfs, or topo (the order "
            "backward runs).",
        ),
    ] = Order.tree,
    call: Annotated[
        int | None,
        typer.Option(
            "--call",
            help="Show the graph of the N-th backward/grad call (default: the last).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    all_calls: Annotated[
        bool, typer.Option("--all", help="Show the graph of every backward call.")
    ] = False,
    root: Annotated[
        str | None,
        typer.Option(
            "--root",
            help="Show the graph of this module-level variable.",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    show_saved: Annotated[
        bool, typer.Option("--show-saved", help="List saved tensors (shape, dtype, version).")
    ] = False,
    values: Annotated[
        bool, typer.Option("--values", help="Summarise each node's forward value.")
    ] = False,
    grads: Annotated[
        bool,
        typer.Option("--grads", help="Summarise the gradients each node received in backward."),
    ] = False,
    max_nodes: Annotated[
        int | None,
        typer.Option(
            "--max-nodes",
            help="Show at most N nodes (text default 500).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option(
            "--max-depth",
            help="Stop N edges below the roots.",
            min=0,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    direction: Annotated[
        Direction,
        typer.Option(
            "--direction",
            help="html/svg: tb (roots at the top) or lr (inputs left, roots right).",
        ),
    ] = Direction.tb,
    open_page: Annotated[
        bool,
        typer.Option(
            "--open",
            help="html: open the page in the browser (written to a temporary file without -o).",
        ),
    ] = False,
) -> Outcome | int:
    """Show the grad_fn graph: of the last backward() call, or of the module-level tensors.

    Example: [bold]autodiag graph samples/model.py --order topo[/bold]
    """

    t = cmd.make_target()
    if call is not None and all_calls:
        raise BadInvocation("--call and --all exclude each other", "Pick one.")
    if root is not None and (call is not None or all_calls):
        raise BadInvocation(
            "--root shows a variable's graph; it excludes --call and --all", "Pick one."
        )
    if t.engine == "torch" and (values or grads):
        raise BadInvocation(
            f"--{'values' if values else 'grads'} is not available with --engine torch yet",
            "Drop it to see the graph of the PyTorch run, or run on autodiag's engine.",
        )
    # imported here, not at the top: ``autodiag --help`` builds every command (start-up)
    from autodiag.analysis.graph import GraphCapture, module_names, names_by_id
    from autodiag.report import graph as render

    if open_page:
        _open_when_written(cmd)
    cmd.start()
    cap = GraphCapture(call=call, keep_all=all_calls, values=values, grads=grads)
    result = cmd.run_target(t, [cap])
    snaps = _select(cap, result, call, root)
    if snaps is None:  # the target failed before making any graph
        return target_failure(cmd, result)
    names, modules = names_by_id(*result.scopes), module_names(*result.scopes)
    for s in snaps:
        s.name_nodes(names, modules)
    limit = max_nodes if max_nodes is not None else DEFAULT_MAX_NODES[cmd.format]
    view = render.View(
        order.value, limit, max_depth, show_saved, values, grads, direction.value.upper()
    )
    return Outcome(result, data=render.GraphReport(snaps, view, cap.calls, all_calls))


COMMAND = Spec(
    "graph",
    graph,
    {
        "text": lazy("autodiag.report.graph", "text_report"),
        "json": lazy("autodiag.report.graph", "json_report"),
        "dot": lazy("autodiag.report.graph", "dot_report"),
        "mermaid": lazy("autodiag.report.graph", "mermaid_report"),
        "svg": lazy("autodiag.report.picture", "graph_report"),
        "html": lazy("autodiag.report.html", "graph_report"),
    },
    format_help="text, json, dot, mermaid, svg, or html (an interactive page; no Graphviz).",
    placed={"order": "dtype"},
)


def _open_when_written(cmd: Command) -> None:
    """--open: show the page in the browser once it is written (to -o's file, else to a new
    temporary file, whose path goes to stderr)."""
    if cmd.format != "html":
        raise BadInvocation(
            f"--open shows an HTML page; --format {cmd.format} makes none",
            "Add --format html.",
        )
    if cmd.output is None:
        fd, path = tempfile.mkstemp(prefix="autodiag-graph-", suffix=".html")
        os.close(fd)
        cmd.output = path
        cmd.temporary.append(path)
        cmd.err.print(f"[dim]page: {escape(path)}[/]")

    def show() -> None:
        import webbrowser

        url = pathlib.Path(os.path.abspath(cmd.output)).as_uri()
        if not webbrowser.open(url):
            cmd.err.print(f"[yellow]note:[/] no browser could be started; open {escape(url)}")

    cmd.after_close.append(show)


def _select(cap: GraphCapture, result, call: int | None, root: str | None):
    from autodiag.analysis.graph import module_level_roots

    ns = result.namespace
    if root is not None:
        if root not in ns:
            cands = ", ".join(k for k, _ in module_level_roots(ns)) or "none"
            raise BadInvocation(
                f"--root {root}: the target has no module-level variable {root!r}",
                f"Module-level tensors with a grad_fn: {cands}.",
            )
        v = ns[root]
        from autodiag import inspect  # the engine's: not at --help

        if not inspect.is_tensor(v):  # its type only: a user object's __class__ may raise
            raise BadInvocation(
                f"--root {root}: {root!r} is a {type_name(v)}, not a tensor",
                "Name a tensor variable.",
            )
        if v.grad_fn is None and not v.requires_grad:
            raise BadInvocation(
                f"--root {root}: {root!r} has no grad_fn and does not require "
                f"grad, so it has no graph",
                "Name a tensor computed from tensors with requires_grad=True.",
            )
        return [cap.roots_snapshot([v])]
    if call is not None:
        if cap.calls < call:
            raise BadInvocation(
                f"--call {call}: the target made {cap.calls} backward/grad "
                f"call{'s' if cap.calls != 1 else ''}",
                "Pick a call number between 1 and that count.",
            )
        return cap.snapshots
    if cap.snapshots:
        return cap.snapshots
    roots = module_level_roots(ns)
    if roots:
        snap = cap.roots_snapshot([v for _, v in roots])
        return [snap]
    if result.error is not None or result.interrupted:
        return None
    raise NothingToShow(
        f"{result.target.label} ran, but made no backward() or autograd.grad() "
        f"call and left no module-level tensor with a grad_fn",
        "Compute something from a tensor with requires_grad=True (and call "
        "backward()), or use --root NAME.",
    )
