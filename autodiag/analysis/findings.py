"""The Finding type every analysis returns (DESIGN §4): plain data, rendered by report/."""

from __future__ import annotations

import dataclasses

KINDS = (
    "nan_forward",
    "inf_forward",
    "nan_backward",
    "inf_backward",
    "inplace_saved_tensor",
    "inplace_leaf",
    "freed_graph",
    "graph_leak",
    "retained_graph",
    "gradcheck_failed",
    "none_grad",
    "unplanned_accumulation",
    "exploding_grad",
    "vanishing_grad",
    "dead_relu",
)


@dataclasses.dataclass
class Finding:
    """One problem found in a run: what (``kind``, ``message``), where (``location``, ``stack``,
    innermost last) and what to do (``hint``); kind-specific data in ``extra``."""

    kind: str
    severity: str  # "error" or "warning"
    message: str
    location: dict | None = None  # {"file", "line", "function", "code"}
    stack: list = dataclasses.field(default_factory=list)
    hint: str = ""
    extra: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        d = {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "location": self.location,
            "stack": self.stack,
            "hint": self.hint,
        }
        d.update(self.extra)
        return d
