"""``autodiag graph``: the grad_fn graph of a script or an expression."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from autodiag import inspect
from autodiag._look import type_name
from autodiag.analysis.graph import GraphCapture, module_level_roots, names_by_id
from autodiag.cli._common import Command, Spec, target_failure
from autodiag.report import graph as render
from autodiag.report.outcome import Outcome
from autodiag.target.errors import BadInvocation, NothingToShow


class Order(str, enum.Enum):
    tree = "tree"
    bfs = "bfs"
    dfs = "dfs"
    topo = "topo"


# Past these sizes a format stops being useful (Mermaid refuses > 500 edges by default), so
# they truncate unless --max-nodes says otherwise; JSON and DOT are complete by default.
DEFAULT_MAX_NODES = {"text": 500, "mermaid": 400, "svg": 2000, "json": None, "dot": None}


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
    if cmd.format == "svg" and not render.has_dot():
        raise BadInvocation(
            "--format svg needs Graphviz's dot program, which is not on PATH",
            "Install Graphviz, or use --format dot and render the file elsewhere.",
        )
    if t.engine == "torch" and (values or grads):
        raise BadInvocation(
            f"--{'values' if values else 'grads'} is not available with --engine torch yet",
            "Drop it to see the graph of the PyTorch run, or run on autodiag's engine.",
        )
    cmd.start()
    cap = GraphCapture(call=call, keep_all=all_calls, values=values, grads=grads)
    result = cmd.run_target(t, [cap])
    snaps = _select(cap, result, call, root)
    if snaps is None:  # the target failed before making any graph
        return target_failure(cmd, result)
    names = names_by_id(*result.scopes)
    for s in snaps:
        s.name_nodes(names)
    limit = max_nodes if max_nodes is not None else DEFAULT_MAX_NODES[cmd.format]
    view = render.View(order.value, limit, max_depth, show_saved, values, grads)
    return Outcome(result, data=render.GraphReport(snaps, view, cap.calls, all_calls))


COMMAND = Spec(
    "graph",
    graph,
    {
        "text": render.text_report,
        "json": render.json_report,
        "dot": render.dot_report,
        "mermaid": render.mermaid_report,
        "svg": render.svg_report,
    },
    format_help="text, json, dot, mermaid, or svg (needs Graphviz).",
    placed={"order": "dtype"},
)


def _select(cap: GraphCapture, result, call: int | None, root: str | None):
    ns = result.namespace
    if root is not None:
        if root not in ns:
            cands = ", ".join(k for k, _ in module_level_roots(ns)) or "none"
            raise BadInvocation(
                f"--root {root}: the target has no module-level variable {root!r}",
                f"Module-level tensors with a grad_fn: {cands}.",
            )
        v = ns[root]
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
