"""Gradient flow: each parameter's gradient norm and update/weight ratio over the steps of a run,
in bounded memory (``autodiag check``'s ``"grad_flow"``, its sparklines and ``--plot``). Data
only, never prints.

``Flow`` keeps one series. It holds at most ``MAX_POINTS`` points: once full, neighbouring
points merge in pairs and the stride (steps per point) doubles, so a run of any length is
sampled evenly. A merged point keeps its first step's value (even downsampling) and the
smallest and largest norm of its steps, so a spike or a collapse between samples still shows.
A NaN or infinite norm is kept as None (JSON has no NaN), and counted (``nonfinite``).

>>> f = Flow(max_points=4)
>>> for step in range(1, 11):
...     f.add(step, float(step))
>>> f.stride, f.x, f.norm, f.hi
(4, [1, 5, 9], [1.0, 5.0, 9.0], [4.0, 8.0, 10.0])
>>> f.n, f.first, f.last
(10, 1.0, 10.0)
"""

from __future__ import annotations

import math

MAX_POINTS = 256  # points kept per parameter (even): past that, each stands for several steps


class Flow:
    """One parameter's series: ``x`` (the step of each point's first sample), ``norm`` (the
    gradient norm then), ``lo``/``hi`` (the smallest/largest norm of the point's steps) and
    ``ratio`` (the largest update/weight ratio measured among them, or None)."""

    __slots__ = (
        "x",
        "norm",
        "lo",
        "hi",
        "ratio",
        "stride",
        "n",
        "first",
        "last",
        "max_points",
        "nonfinite",
        "nonfinite_at",
    )

    def __init__(self, max_points: int = MAX_POINTS):
        if max_points < 2 or max_points % 2:
            raise ValueError(f"max_points must be an even number >= 2, not {max_points}")
        self.max_points = max_points
        self.x: list = []
        self.norm: list = []
        self.lo: list = []
        self.hi: list = []
        self.ratio: list = []
        self.stride = 1  # samples per point
        self.n = 0  # samples seen
        self.first = None  # the first and the last norm of the run
        self.last = None
        self.nonfinite = 0  # NaN or infinite norms (kept as None), and the first one's step
        self.nonfinite_at = None

    def add(self, x: int, norm: float) -> None:
        """The gradient norm at step ``x``."""
        if not math.isfinite(norm):
            self.nonfinite += 1
            if self.nonfinite_at is None:
                self.nonfinite_at = x
            norm = None
        if self.n % self.stride == 0:  # a new point
            if len(self.x) == self.max_points:
                self._halve()
            self.x.append(x)
            self.norm.append(norm)
            self.lo.append(norm)
            self.hi.append(norm)
            self.ratio.append(None)
        else:  # one more sample of the last point
            self.lo[-1] = _min_known(self.lo[-1], norm)
            self.hi[-1] = _max_known(self.hi[-1], norm)
        if self.n == 0:
            self.first = norm
        self.n += 1
        self.last = norm

    def add_ratio(self, x: int, ratio: float) -> None:
        """The update/weight ratio of the update made after step ``x``: it belongs to the last
        point (its norm came first); an update before any norm is dropped."""
        if self.x and self.x[-1] <= x and math.isfinite(ratio):
            r = self.ratio[-1]
            self.ratio[-1] = ratio if r is None else max(r, ratio)

    def _halve(self) -> None:
        # NOTE: n is a multiple of max_points * stride here, so after doubling the stride the
        # next sample still starts a new point: every point covers exactly `stride` steps
        def pairs(a, f):
            return [f(a[i], a[i + 1]) for i in range(0, len(a), 2)]

        self.x = self.x[::2]
        self.norm = self.norm[::2]
        self.lo = pairs(self.lo, _min_known)
        self.hi = pairs(self.hi, _max_known)
        self.ratio = pairs(self.ratio, _max_known)
        self.stride *= 2

    def to_json(self) -> dict:
        """The series as ``"grad_flow"`` holds it (numbers to 4 significant digits).
        ``norm_min``/``norm_max`` only when a point stands for several steps (at stride 1 they
        would repeat ``norm``)."""
        out = {
            "steps": self.n,
            "stride": self.stride,
            "first": _short(self.first),
            "last": _short(self.last),
            "max": _short(max((v for v in self.hi if v is not None), default=None)),
            "nonfinite": self.nonfinite,
            "first_nonfinite": self.nonfinite_at,
            "x": list(self.x),
            "norm": [_short(v) for v in self.norm],
            "update_ratio": [_short(v) for v in self.ratio],
        }
        if self.stride > 1:
            out["norm_min"] = [_short(v) for v in self.lo]
            out["norm_max"] = [_short(v) for v in self.hi]
        return out


def _min_known(a, b):
    if a is None:
        return b
    return a if b is None else min(a, b)


def _max_known(a, b):
    if a is None:
        return b
    return a if b is None else max(a, b)


def _short(v):
    return None if v is None else float(f"{v:.4g}")


def module_of(name: str) -> str | None:
    """The module path of a parameter's name: ``model.0`` of ``model.0.weight``; None for a
    name that is not ``path.attribute`` (``w``, ``opt.param_groups[0]['params'][1]``).

    >>> module_of("model.0.weight"), module_of("w"), module_of("opt.param_groups[0]['params'][1]")
    ('model.0', None, None)
    """
    head, dot, attr = name.rpartition(".")
    return head if dot and head and attr.isidentifier() and "[" not in head else None


def _module_order(namespaces) -> dict:
    """id(parameter) -> its rank in the ``named_parameters()`` of the modules the namespaces
    hold (the order of the forum recipe's ``for name, p in model.named_parameters()``)."""
    from autodiag._look import is_a, look, static_attr, variables
    from autodiag.analysis.graph import _named_parameters

    rank: dict = {}
    for namespace in namespaces:
        for _, v in variables(namespace or {}):
            if not is_a(v, type) and static_attr(v, "named_parameters") is not None:
                for _, p in look(_named_parameters, v, default=()):
                    rank.setdefault(id(p), len(rank))
    return rank


def grad_flow(health, findings: list, *namespaces: dict) -> dict:
    """The ``"grad_flow"`` of a ``GradHealth`` run: each trained parameter's series, with the
    kinds of the ``findings`` (Finding objects) about it. ``namespaces`` name the parameters as
    the findings do (``Run.scopes``); parameters of the modules they hold come in the modules'
    ``named_parameters()`` order, the others after them in the order ops first used them."""
    from autodiag.analysis.health import GradNorms

    try:
        norms = health.detector(GradNorms)
    except KeyError:
        return {"max_points": MAX_POINTS, "parameters": []}
    marks: dict = {}
    for f in findings:
        p = f.extra.get("parameter") if f.extra else None
        if isinstance(p, str) and f.kind not in marks.setdefault(p, []):
            marks[p].append(f.kind)
    rank = _module_order(namespaces)
    named = health.parameters(*namespaces)
    order = [rank.get(id(rec.ref()), len(rank) + k) for k, (rec, _) in enumerate(named)]
    out = []
    for _, (rec, name) in sorted(zip(order, named), key=lambda t: t[0]):
        s = rec.state.get(norms)
        series = (s.step_norms or s.bwd_norms) if s is not None else None
        if series is None or series.flow.n == 0:
            continue
        entry = {
            "name": name,
            "module": module_of(name),
            "shape": list(rec.shape),
            "per": "optimizer step" if s.step_norms is not None else "backward call",
        }
        entry.update(series.flow.to_json())
        entry["marks"] = marks.get(name, [])
        out.append(entry)
    return {"max_points": MAX_POINTS, "parameters": out}
