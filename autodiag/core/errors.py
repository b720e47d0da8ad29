"""PyTorch's autograd error messages, plus the locations autodiag adds to them."""

from __future__ import annotations

import re
import weakref

from autodiag import dtypes
from autodiag.core import bindings
from autodiag.core.grad_mode import is_anomaly_enabled
from autodiag.trace.sites import code_site, saver_site, short_path, site_text

_BACKWARD_SUFFIX = re.compile(r"Backward(\d*)$")
# PyTorch's hint in anomaly mode (in place of the hint to enable it)
INPLACE_HINT = (
    "Hint: the backtrace further above shows the operation that failed to compute "
    "its gradient. The variable in question was changed in there or anywhere later. "
    "Good luck!"
)
ENABLE_ANOMALY_HINT = (  # outside anomaly mode
    "Hint: enable anomaly detection to find the operation that failed to compute its "
    "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
)


def forward_op_name(node) -> str:
    """PyTorch 2.13's name for a node in error messages: ``MulBackward0`` -> ``Mul``.

    A non-zero overload digit is kept (``AddBackward1`` -> ``Add1``), as ``forward_op_name()``.
    """
    return forward_name(node.name())


def forward_name(name: str) -> str:
    """``forward_op_name`` of a node's ``name()``."""
    m = _BACKWARD_SUFFIX.search(name)
    if m is None:
        return name
    digits = m.group(1)
    return name[: m.start()] + (digits if digits not in ("", "0") else "")


def _type_str(t) -> str:
    return t.dtype.legacy_type_name


def inplace_modified_message(saved, node) -> str:
    """PyTorch's "modified by an inplace operation" text, then where it was written."""
    if saved.tensor is not None:
        t = saved.tensor
        shape = t._data.shape
        dt = _type_str(t)
        owner = t.grad_fn
        out_nr = t._output_nr
    else:
        shape = saved.data.shape
        dt = dtypes.from_numpy_dtype(saved.data.dtype).legacy_type_name
        owner, out_nr = node, saved.output_nr
    which = f", which is output {out_nr} of {forward_op_name(owner)}," if owner is not None else ""
    msg = (
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{dt} [{', '.join(map(str, shape))}]]{which} is at version "
        f"{saved.vc[0]}; expected version {saved.version} instead."
    )
    trace = getattr(node, "_trace", None)  # (checkpoint's placeholder owner is not a Node)
    # recorded in anomaly mode or under a tracer, else NOTE [Saving sites]
    saved_at = trace.site if trace is not None else saver_site(node)
    by = f"autodiag: the tensor was saved by {node.name()}"
    if saved_at is not None:
        by += f" at {site_text(saved_at)}"
    details = [by]
    if len(saved.vc) > 1:
        op, site = saved.vc[1]
        details.append(f"last modified in place by {op} at {site_text(site)}")
    msg += " " + "; ".join(details) + "."
    if is_anomaly_enabled():
        msg += " " + INPLACE_HINT
    else:
        msg += " " + ENABLE_ANOMALY_HINT
    msg += " Fix: clone() the tensor before modifying it, or use the out-of-place op."
    return msg


# ---------------------------------------------------------------------------------------------
# "Trying to backward through the graph a second time" (NOTE [Freed graphs] in graph.py)
# ---------------------------------------------------------------------------------------------


class FreedInfo:
    """What autodiag adds to the "backward through the graph a second time" error, kept on the
    exception as ``autodiag_freed`` (the ``freed_graph`` finding reads it). Sites are
    ``(code, line)``; names and numbers are plain data (no tensors, no nodes once explained)."""

    __slots__ = (
        "node",
        "created_at",
        "freed_call",
        "freed_at",
        "call",
        "call_at",
        "through",
        "through_node",
        "through_at",
        "_node",
        "_last_seq",
    )

    def __init__(self, node):
        freed = node._saved
        self.node = node.name()
        self.created_at = node_site(node)
        self.freed_call = freed.call
        self.freed_at = code_site(freed.code, freed.lasti)
        self.call = None  # the backward call that reached the node (None: a direct access)
        self.call_at = None
        self.through = None  # the name of the tensor it got there through, if frames name it
        self.through_node = None  # that tensor's grad_fn name (the frontier of the freed part)
        self.through_at = None
        self._node = weakref.ref(node)  # until the engine has explained the error
        self._last_seq = freed.last_seq


def node_site(node):
    """``(code, line)`` where ``node`` was recorded: its traced stack (tracing, anomaly mode),
    else NOTE [Saving sites]; None when unknown (an untraced node that saves nothing)."""
    trace = getattr(node, "_trace", None)
    if trace is not None and trace.site is not None:
        return trace.site
    return saver_site(node)


def freed_error(node) -> RuntimeError:
    """PyTorch's error for reading the saved tensors of ``node`` after a backward freed them,
    with which node, made where, freed by which call (completed by ``explain_freed`` when a
    backward reached the node)."""
    info = FreedInfo(node)
    err = RuntimeError(freed_message(info))
    err.autodiag_freed = info
    err.__suppress_context__ = True  # raised while handling the marker's TypeError (graph.py)
    return err


def _at(site) -> str:
    return f"at {site_text(site)}" if site is not None else "at an unknown line"


def freed_message(info: FreedInfo) -> str:
    from autodiag.core.graph import ERR_BACKWARD_TWICE

    k = info.freed_call
    freed_by = f"backward call {k} {_at(info.freed_at)}"
    created = (
        f"created {_at(info.created_at)}"
        if info.created_at is not None
        else "created before that call"
    )
    if info.call is None:
        return (
            f"{ERR_BACKWARD_TWICE} autodiag: the saved tensors of {info.node} ({created}) "
            f"were freed by {freed_by}. Fix: pass retain_graph=True to backward call {k} to "
            f"read them after it."
        )
    if info.freed_at is not None and info.freed_at == info.call_at:
        freed_by = f"backward call {k}, made by the same line"  # a loop, most often
    msg = (
        f"{ERR_BACKWARD_TWICE} autodiag: backward call {info.call} {_at(info.call_at)} "
        f"reached {info.node}, {created}, whose saved tensors were freed by {freed_by}. It "
        f"got there through "
    )
    if info.through is not None:
        what = f"`{info.through}`"
        msg += f"{what} (grad_fn {info.through_node})"
    else:
        what = "that tensor"
        msg += f"the output of {info.through_node}"
    if info.through_at is not None:
        # the line's code only once: the node's own line is already quoted above
        msg += (
            f", computed at {short_path(info.through_at[0].co_filename)}:{info.through_at[1]}"
            if info.through_at == info.created_at
            else f", computed {_at(info.through_at)}"
        )
    msg += (
        f" before backward call {k}. Fix: recompute {what} for each backward (inside the "
        f"loop), detach() it if no gradient should flow back through it, or pass "
        f"retain_graph=True to backward call {k} if backpropagating through it twice is "
        f"intended."
    )
    return msg


def explain_freed(err: RuntimeError, call: int, root_nodes) -> None:
    """Complete a freed-node error raised inside backward call ``call`` (engine.execute): the
    call's line, and the tensor made before the freeing call through which this one reached the
    node, named as the script's live frames name it."""
    from autodiag.trace.sites import live_user_frames

    info = err.autodiag_freed
    node, info._node = info._node(), None
    if node is None:  # pragma: no cover - the engine holds the node it runs
        return
    frames = live_user_frames(1)  # innermost first: the frame that called backward/grad first
    info.call = call
    if frames:
        info.call_at = (frames[0].f_code, frames[0].f_lineno)
    name, through, code = _through(node, info._last_seq, root_nodes, frames)
    info.through, info.through_node = name, through.name()
    info.through_at = node_site(through)
    if info.through_at is None and code is not None:
        info.through_at = _assigned_at(code, name)
    err.args = (freed_message(info),)


def _through(node, last_seq: int, root_nodes, frames):
    """(name or None, its grad_fn, the code of the frame that names it or None): the tensor,
    made before the freeing call, through which a backward from ``root_nodes`` reaches
    ``node``. Of the nodes on a path from a root to ``node`` those
    numbered up to ``last_seq`` existed before the freeing call; the frontier of that old part
    (old nodes that are roots or children of new ones) is where the new graph entered the old
    one. Prefer a named tensor whose grad_fn is on the frontier, then the newest old one."""
    from autodiag.core.graph import children, mark_needed

    needed = mark_needed(root_nodes, {node})
    old = {n for n in needed if n._seq <= last_seq}
    frontier = {n for n in root_nodes if n in old}
    for n in needed:
        if n._seq > last_seq:
            frontier.update(c for c in children(n) if c in old)
    best, best_rank = None, None
    for name, t, code in _named_tensors(frames):
        g = t.grad_fn
        if g is None or g not in old:
            continue
        rank = (g in frontier, g._seq)
        if best_rank is None or rank > best_rank:
            best, best_rank = (name, g, code), rank
    if best is not None:
        return best
    front = max(frontier or old or {node}, key=lambda n: n._seq)
    return None, front, None


def _named_tensors(frames):
    """(name, tensor, code) for the tensors the frames' variables name, innermost frame first:
    locals, the attributes of a method's ``self``, then each module's globals. ``code``: the
    code of the frame that binds the name (None for ``self.`` attributes and for the globals of a
    module whose own frame is not on the stack)."""
    from autodiag._look import attributes, is_a, variables

    Tensor = bindings.Tensor
    module_code = {id(f.f_globals): f.f_code for f in frames if f.f_locals is f.f_globals}
    for f in frames:
        f_locals = f.f_locals
        if f_locals is f.f_globals:
            continue  # a module's frame: its globals come last
        for name, v in variables(f_locals):
            if is_a(v, Tensor):
                yield name, v, f.f_code
            elif name == "self":
                for a, w in variables(attributes(v)):
                    if is_a(w, Tensor):
                        yield f"self.{a}", w, None
    seen: set = set()
    for f in frames:
        g = f.f_globals
        if id(g) in seen:
            continue
        seen.add(id(g))
        for name, v in variables(g):
            if is_a(v, Tensor):
                yield name, v, module_code.get(id(g))


_STORES = ("STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF")


def _assigned_at(code, name: str):
    """``(code, line)`` of the one statement of ``code`` that assigns ``name``, or None (no
    such statement, or several): where a tensor whose node records no line was made."""
    import dis

    lines = {
        ins.positions.lineno
        for ins in dis.get_instructions(code)
        if ins.opname in _STORES and ins.argval == name and ins.positions is not None
    }
    return (code, lines.pop()) if len(lines) == 1 else None
