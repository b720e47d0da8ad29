"""Graph capture and walks: which graph ``autodiag graph`` shows, and in which order.

A ``GraphSnapshot`` is a plain-data copy of a grad_fn graph (names, edges, leaves, saved
tensors, creation sites), taken while the graph is intact — at the start of a backward call,
before buffers are freed — and holding no reference to any node or tensor, so capturing never
keeps a script's graph alive. Node ids are positions in breadth-first discovery order from the
roots. Every walk here is iterative: a 1,000,000-node chain is just a long loop.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import weakref

from autodiag import inspect
from autodiag._look import is_a, look, static_attr, variables
from autodiag.analysis.summary import summarize
from autodiag.trace import Tracer, events

_NO_SAVED: tuple = ()
_ZEROS = itertools.repeat(0)  # the input_nr of every edge of most nodes


class GraphSnapshot:
    """A captured graph. Per node ``i``: ``names[i]``, ``next[i]`` (a tuple of ``(id, input_nr)``
    or None per input), ``seq[i]`` (creation order), ``leaf[i]`` (``(tensor weakref, shape,
    dtype)`` for AccumulateGrad), ``saved[i]`` (tuples ``(name, shape, dtype, bytes, version,
    current version)``; ``saved_dicts(i)`` as dicts), ``sites[i]`` (a Stack or None).

    NOTE: per-node data is kept in tuples of numbers and strings, which the cyclic GC stops
    tracking: a million-node snapshot then costs the collector nothing afterwards."""

    def __init__(self, call: int, kind: str):
        self.call = call  # 1-based backward call number; 0 for module-level roots
        self.kind = kind  # "backward", "grad" or "roots"
        self.roots: list[int] = []
        self.root_tensors: list = []  # weakrefs to the root tensors (for naming)
        self.names: list[str] = []
        self.next: list[tuple] = []
        self.seq: list[int] = []
        self.leaf: list = []
        self.saved: list = []
        self.freed: list[bool] = []
        self.sites: list = []
        self.values: dict = {}  # id -> summary of the forward value (--values)
        self.grads: dict = {}  # id -> summaries of incoming gradients (--grads)
        self.labels: dict = {}  # id -> variable name (leaves and roots), filled by name_nodes
        self.root_labels: list = []
        # id -> (weakref to the outermost module running, the innermost one's path in it, the
        # class names of both) for nodes made inside an nn.Module call; named by name_nodes
        # into ``modules`` (id -> "model.fc1 (Linear)")
        self.module_refs: dict = {}
        self.modules: dict = {}

    def __len__(self) -> int:
        return len(self.names)

    # --- building ---------------------------------------------------------------------------

    @classmethod
    def capture(
        cls, root_nodes, call: int, kind: str, values=None, index_out: dict | None = None
    ) -> GraphSnapshot:
        """Copy the graph reachable from ``root_nodes`` (breadth-first ids)."""
        was_enabled = gc.isenabled()
        gc.disable()  # NOTE: the copy makes no cycles; a collection mid-way would rescan it all
        try:
            return cls._capture(root_nodes, call, kind, values, index_out)
        finally:
            if was_enabled:
                gc.enable()

    def add_modules(self, index: dict, modules) -> None:
        """Record the module each captured node was made in (``modules``: node -> entry, for
        the nodes ops reported). The other nodes an op made (``linear``'s ``AddmmBackward0``
        and ``TBackward0``) were not reported: they are reached from the reported node it
        returned through ``next`` edges without leaving its Stack, and take its entry. (One
        source line can run several modules — ``nn.Sequential`` — so a Stack alone does not
        name the module.)"""
        if not modules:
            return
        refs, sites, nexts = self.module_refs, self.sites, self.next
        reported = []
        for node, k in index.items():
            m = modules.get(node)
            if m is not None:
                refs[k] = m
                if sites[k] is not None:
                    reported.append(k)
        for k in sorted(reported):  # breadth-first order: an op's output before its inputs
            entry, site = refs[k], sites[k]
            todo = [k]
            while todo:
                for edge in nexts[todo.pop()]:
                    if edge is not None:
                        j = edge[0]
                        if j not in refs and sites[j] is site:
                            refs[j] = entry
                            todo.append(j)

    @classmethod
    def _capture(cls, root_nodes, call, kind, values, index_out) -> GraphSnapshot:
        snap = cls(call, kind)
        index: dict = {} if index_out is None else index_out
        order: list = []
        for n in root_nodes:
            if n is not None and n not in index:
                index[n] = len(order)
                order.append(n)
        snap.roots = [index[n] for n in root_nodes if n is not None]
        add_name, add_next, add_seq = snap.names.append, snap.next.append, snap.seq.append
        add_leaf, add_saved, add_freed = snap.leaf.append, snap.saved.append, snap.freed.append
        add_site, add_order = snap.sites.append, order.append
        index_get = index.get
        info = inspect.node_info
        count = len(order)
        # NOTE: this loop is the traversal every format pays for (about 1 µs per node); keep
        # per-node work to one seam call and appends. Iterating a list while appending to it
        # visits the appended items too: a breadth-first walk without a queue.
        for node in order:
            add_name(node.__class__.__name__)  # as torchviz shows it: AccumulateGrad, CopySlices
            seq, kids, nrs, site, v, saved = info(node)
            add_seq(seq)
            edges = []
            for child, nr in zip(kids, nrs or _ZEROS):
                if child is None:
                    edges.append(None)
                    continue
                j = index_get(child)
                if j is None:
                    j = index[child] = count
                    count += 1
                    add_order(child)
                edges.append((j, nr))
            add_next(tuple(edges))
            add_leaf(
                None if v is None else (weakref.ref(v), inspect.shape(v), inspect.dtype_name(v))
            )
            add_saved(saved or _NO_SAVED)
            add_freed(saved is None)
            add_site(site)
        if values is not None:
            for k, node in enumerate(order):
                v = values.get(node)
                if v is not None:
                    snap.values[k] = v
        return snap

    # --- naming -------------------------------------------------------------------------------

    def name_nodes(self, names_by_id: dict, modules: dict | None = None) -> None:
        """Label leaves and roots with the variable names that refer to their tensors, and
        nodes made inside a module with its path (``modules``: id(module) -> variable name)."""
        for i, lf in enumerate(self.leaf):
            if lf is not None:
                t = lf[0]()
                if t is not None and id(t) in names_by_id:
                    self.labels[i] = names_by_id[id(t)]
        self.root_labels = []
        for ref in self.root_tensors:
            t = ref() if ref is not None else None
            self.root_labels.append(names_by_id.get(id(t)) if t is not None else None)
        for i, (ref, path, cls, root_cls) in self.module_refs.items():
            root = ref()
            name = (modules or {}).get(id(root)) if root is not None else None
            if name is None:  # gone with its function's frame, or never named: its class
                name = root_cls
            self.modules[i] = f"{name}.{path} ({cls})" if path else f"{name} ({cls})"

    # --- measures -----------------------------------------------------------------------------

    def depth(self) -> int:
        """The longest root-to-leaf path, in nodes (iterative, over topological order)."""
        if not self.names:
            return 0
        dist = [0] * len(self.names)
        for r in self.roots:
            dist[r] = 1
        for i in self._any_topo_order():
            d = dist[i] + 1
            for e in self.next[i]:
                if e is not None and dist[e[0]] < d:
                    dist[e[0]] = d
        return max(dist)

    def saved_bytes(self) -> int:
        return sum(s[3] for group in self.saved for s in group)

    def saved_dicts(self, i: int) -> list[dict]:
        """Node ``i``'s saved tensors as {'name', 'shape', 'dtype', 'version'} (+ 'bytes', and
        'current_version' when it was modified in place since)."""
        out = []
        for name, shape, dt, nbytes, version, current in self.saved[i]:
            d = {"name": name, "version": version}
            if shape is not None:
                d.update(shape=list(shape), dtype=dt, bytes=nbytes)
            if current != version:
                d["current_version"] = current
            out.append(d)
        return out

    def num_leaves(self) -> int:
        return sum(1 for lf in self.leaf if lf is not None)

    # --- orders -------------------------------------------------------------------------------

    def bfs_order(self) -> list[int]:
        return list(range(len(self.names)))  # ids are breadth-first discovery positions

    def dfs_order(self) -> list[int]:
        """Pre-order depth-first, children in input order, each node once."""
        seen = bytearray(len(self.names))
        out = []
        stack = list(reversed(self.roots))
        while stack:
            i = stack.pop()
            if seen[i]:
                continue
            seen[i] = 1
            out.append(i)
            for e in reversed(self.next[i]):
                if e is not None and not seen[e[0]]:
                    stack.append(e[0])
        return out

    def topo_order(self) -> list[int]:
        """The order backward runs the nodes: dependencies first, then newest node first
        (PyTorch's ready queue; AccumulateGrad before all others when ready)."""
        n = len(self.names)
        deps = [0] * n
        for edges in self.next:
            for e in edges:
                if e is not None:
                    deps[e[0]] += 1
        heap = []
        tick = 0
        for r in dict.fromkeys(self.roots):
            if deps[r] == 0:
                heap.append((-self.seq[r], tick, r))
                tick += 1
        heapq.heapify(heap)
        out = []
        seq = self.seq
        while heap:
            i = heapq.heappop(heap)[2]
            out.append(i)
            for e in self.next[i]:
                if e is None:
                    continue
                j = e[0]
                deps[j] -= 1
                if deps[j] == 0:
                    heapq.heappush(heap, (-seq[j], tick, j))
                    tick += 1
        return out

    def _any_topo_order(self) -> list[int]:
        """A topological order (every node after all nodes with an edge to it), not
        necessarily backward's: Kahn's walk without topo_order's priority queue."""
        deps = [0] * len(self.names)
        nexts = self.next
        for edges in nexts:
            for e in edges:
                if e is not None:
                    deps[e[0]] += 1
        out = [r for r in dict.fromkeys(self.roots) if deps[r] == 0]
        for i in out:  # appending while iterating: a walk without a queue
            for e in nexts[i]:
                if e is not None:
                    j = e[0]
                    deps[j] -= 1
                    if deps[j] == 0:
                        out.append(j)
        return out

    def order(self, name: str) -> list[int]:
        if name == "topo":
            return self.topo_order()
        if name == "bfs":
            return self.bfs_order()
        return self.dfs_order()  # "dfs", and the tree's line order

    @staticmethod
    def guide_list(guides, limit: int) -> list[bool]:
        """The innermost ``limit`` levels of a ``tree_lines`` guides list, outermost first."""
        out = []
        while guides and len(out) < limit:
            out.append(guides[0])
            guides = guides[1]
        out.reverse()
        return out

    def tree_lines(self, max_depth: int | None = None):
        """The indented tree: yields ``(node id, depth, input_nr, first_time, last_child,
        guides)`` in depth-first pre-order. A node reached again (a shared subgraph) is yielded
        with ``first_time`` False and its children are not repeated. ``guides`` says, for each
        enclosing level, whether more siblings follow there (for drawing ``│``), as a linked
        list ``(more, outer guides)`` innermost first — shared by siblings, so a deep chain
        costs O(1) per line, not O(depth); ``guide_list`` reads its innermost levels."""
        seen = bytearray(len(self.names))
        # stack entries: (id, depth, input_nr, is_last_sibling, guides tuple)
        stack = [
            (r, 0, None, k == len(self.roots) - 1, ())
            for k, r in reversed(list(enumerate(self.roots)))
        ]
        while stack:
            i, depth, nr, last, guides = stack.pop()
            first = not seen[i]
            seen[i] = 1
            yield i, depth, nr, first, last, guides
            if not first or (max_depth is not None and depth >= max_depth):
                continue
            edges = [e for e in self.next[i] if e is not None]
            child_guides = (not last, guides) if depth else ()
            for k in range(len(edges) - 1, -1, -1):
                j, jnr = edges[k]
                stack.append((j, depth + 1, jnr, k == len(edges) - 1, child_guides))


def saved_info(node) -> tuple:
    """The node's saved tensors as plain tuples ``(name, shape, dtype name, bytes, version,
    current version)`` (``inspect.SavedEntry`` without its value: a plain tuple of numbers and
    strings, which the cyclic GC stops tracking)."""
    return tuple(e[:6] for e in inspect.saved_entries(node)) or _NO_SAVED


class GraphCapture(Tracer):
    """Captures the graph of backward calls (the last, the ``call``-th, or all) with the sites
    where their nodes were created, and optionally forward values and gradients."""

    # the module that made each node: reported through ``on_op`` by autodiag's engine; under
    # --engine torch recorded on PyTorch's nodes by the module hooks this asks for
    records_modules = True

    def __init__(
        self,
        call: int | None = None,
        keep_all: bool = False,
        values: bool = False,
        grads: bool = False,
    ):
        self.want_call = call
        self.keep_all = keep_all
        self.want_grads = grads
        self.calls = 0
        self.snapshots: list[GraphSnapshot] = []
        self._values = weakref.WeakKeyDictionary() if values else None
        # node -> (weakref to the outermost module, the innermost's path, class names of both)
        self._modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._module_paths: dict = {}  # id(outermost module) -> (weakref, {id(module): path})
        self._index: dict | None = None  # node -> id during a captured backward call
        self._current: GraphSnapshot | None = None
        if grads:
            # an event of this instance alone: without --grads no backward node calls the
            # capture (trace/events.py ``LISTENERS``; a million-node backward pays nothing)
            self.on_node_backward = self._record_grads

    def on_op(self, op, node, inputs, outputs, stack):
        if node is not None and self._values is not None and outputs:
            self._values[node] = summarize(outputs[0])
        if node is not None and events.MODULES.stack:
            self._modules[node] = self._module_of(events.MODULES.stack)

    def _module_of(self, modules: list) -> tuple:
        """(weakref to the outermost module running, the innermost one's path in it, its class
        name, the outermost's class name); a module's submodules' paths are listed once."""
        root, inner = modules[0], modules[-1]
        known = self._module_paths.get(id(root))
        if known is None or known[0]() is not root or id(inner) not in known[1]:
            paths: dict = {}
            try:
                paths = {id(m): name for name, m in root.named_modules()}
            except Exception:  # noqa: BLE001 - a user module with an odd named_modules
                pass
            known = self._module_paths[id(root)] = (weakref.ref(root), paths)
        return (known[0], known[1].get(id(inner), ""), type(inner).__name__, type(root).__name__)

    def on_backward_begin(self, task):
        self.calls += 1
        if self.want_call is not None and self.calls != self.want_call and not self.keep_all:
            return
        roots = [_node_of(t) for t in task.roots]
        index: dict = {}
        snap = GraphSnapshot.capture(
            roots, self.calls, "backward" if task.accumulate else "grad", self._values, index
        )
        snap.add_modules(index, self._modules or inspect.recorded_modules(index))
        snap.root_tensors = [weakref.ref(t) for t in task.roots]
        if self.want_grads:
            self._index, self._current = index, snap
        if self.keep_all:
            self.snapshots.append(snap)
        else:
            self.snapshots = [snap]

    def _record_grads(self, node, grad_outputs, grad_inputs):
        """``on_node_backward`` with --grads: the captured call's incoming gradients."""
        if self._index is not None:
            i = self._index.get(node)
            if i is not None:
                self._current.grads[i] = [summarize(g) for g in grad_outputs]

    def on_backward_end(self, task):
        self._index = self._current = None  # never keep nodes past their backward

    def roots_snapshot(self, tensors) -> GraphSnapshot:
        """The graph of tensors found after the run (module-level roots, --root)."""
        roots = [_node_of(t) for t in tensors]
        index: dict = {}
        snap = GraphSnapshot.capture(roots, 0, "roots", self._values, index)
        snap.add_modules(index, self._modules or inspect.recorded_modules(index))
        snap.root_tensors = [weakref.ref(t) for t in tensors]
        return snap


def _node_of(t):
    """The node gradient reaches ``t`` through (its grad_fn, or a leaf's AccumulateGrad)."""
    e = inspect.gradient_edge(t)
    return None if e is None else e[0]


def module_level_roots(namespace: dict) -> list[tuple[str, object]]:
    """Module-level tensors with a grad_fn that feed no other such tensor, as (name, tensor)."""
    cands = [
        (k, v, look(_grad_fn, v))
        for k, v in variables(namespace)
        if inspect.is_tensor(v) and not k.startswith("_")
    ]
    cands = [c for c in cands if c[2] is not None]
    if not cands:
        return []
    fed = set()  # nodes that feed some candidate
    children = inspect.children  # read now: a foreign engine may have replaced it
    stack = [c for fn in {fn for _, _, fn in cands} for c in children(fn)]
    while stack:
        n = stack.pop()
        if n is not None and n not in fed:
            fed.add(n)
            stack.extend(children(n))
    out, taken = [], set()
    for k, v, fn in cands:
        if fn not in fed and fn not in taken:
            taken.add(fn)
            out.append((k, v))
    return out


def _grad_fn(t):
    return t.grad_fn


def names_by_id(*namespaces: dict) -> dict:
    """id(tensor) -> the name a user knows it by: a variable of the first of ``namespaces``
    that names it (the script's globals, a frame's locals), or ``module.param`` for parameters
    of the nn.Modules they hold. Objects that cannot be looked at are skipped (autodiag._look).
    """
    out: dict = {}
    for namespace in namespaces:
        for k, v in variables(namespace):
            if inspect.is_tensor(v):
                out.setdefault(id(v), k)
            elif not is_a(v, type) and static_attr(v, "named_parameters") is not None:
                for pname, p in look(_named_parameters, v, default=()):
                    out.setdefault(id(p), f"{k}.{pname}")
    return out


def module_names(*namespaces: dict) -> dict:
    """id(module) -> the variable of the first of ``namespaces`` that names it (``model``)."""
    out: dict = {}
    for namespace in namespaces:
        for k, v in variables(namespace):
            if not is_a(v, type) and not inspect.is_tensor(v):
                if static_attr(v, "named_modules") is not None:
                    out.setdefault(id(v), k)
    return out


def _named_parameters(module) -> list:
    return [(n, p) for n, p in module.named_parameters() if type(n) is str]
