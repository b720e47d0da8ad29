"""A backward through a graph that an earlier backward freed (``autodiag check``).

The engine's error already knows everything (NOTE [Freed graphs] in core/graph.py): the
node whose saved tensors were gone, the line that recorded it, the backward call that freed
them, and the tensor made before that call through which the failing backward got there. It
keeps that on the exception as ``autodiag_freed`` (an ``errors.FreedInfo``); this detector turns
a run that died of it into one finding:

* ``freed_graph``: ``node``, ``created_at``, ``freed_by`` ``{call, location}``, ``through``
  ``{name, node, location}`` (``name`` None when no variable of the script names the tensor).
"""

from __future__ import annotations

from autodiag.analysis.findings import Finding
from autodiag.analysis.inplace import _user_location
from autodiag.trace import Tracer
from autodiag.trace.sites import format_site

FREED_ERROR = "backward through the graph a second time"


class FreedGraphWatcher(Tracer):
    """Listens to no event (the engine's error carries the finding's data); reads the run's
    error at the end."""

    def findings(self, error=None) -> list[Finding]:
        """The ``freed_graph`` finding when the run's error (a TargetFailed) is that error."""
        exc = error.exception if error is not None else None
        if not isinstance(exc, RuntimeError) or FREED_ERROR not in str(exc):
            return []
        return [freed_finding(exc)]


def freed_finding(exc: RuntimeError) -> Finding:
    loc, frames = _user_location(exc)
    info = getattr(exc, "autodiag_freed", None)
    if info is None:  # not the engine's own error (raised by the script, or by PyTorch)
        return Finding(
            kind="freed_graph",
            severity="error",
            message="backward failed: " + FREED_ERROR,
            location=loc,
            stack=frames,
            hint=_HINT.format(
                what="the tensor made before the first backward", call="the first backward"
            ),
            extra={"node": None, "created_at": None, "freed_by": None, "through": None},
        )
    k = info.freed_call
    if info.call is None:
        msg = f"the saved tensors of {info.node} were read after backward call {k} freed them"
        hint = (
            f"Pass retain_graph=True to backward call {k} to read {info.node}'s saved "
            f"tensors after it."
        )
    else:
        via = (
            f"`{info.through}`"
            if info.through is not None
            else f"the output of {info.through_node}"
        )
        msg = (
            f"backward call {info.call} reached {info.node}, whose saved tensors backward "
            f"call {k} had freed, through {via}, made before call {k}"
        )
        what = f"`{info.through}`" if info.through is not None else "that tensor"
        hint = _HINT.format(what=what, call=f"backward call {k}")
    call_loc = format_site(info.call_at)
    return Finding(
        kind="freed_graph",
        severity="error",
        message=msg,
        location=call_loc if call_loc is not None else loc,
        stack=frames,
        hint=hint,
        extra={
            "node": info.node,
            "created_at": format_site(info.created_at),
            "freed_by": {"call": k, "location": format_site(info.freed_at)},
            "through": None
            if info.call is None
            else {
                "name": info.through,
                "node": info.through_node,
                "location": format_site(info.through_at),
            },
        },
    )


_HINT = (
    "Recompute {what} for each backward (inside the loop), detach() it if no gradient "
    "should flow back through it, or pass retain_graph=True to {call} if backpropagating "
    "through it twice is intended."
)
