"""What ``GradHealth`` reports on each script of ``samples/``: its findings and the gradient-flow
series (norms, update ratios), as JSON text. ``tests/test_health_samples.py`` compares it with
``tests/data/health_samples.json``; regenerate that file only for a change of the rules, never
of the measuring machinery (the findings must stay the same):

    PYTHONPATH=. python tests/health_snapshot.py > tests/data/health_samples.json
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p.name for p in (ROOT / "samples").glob("*.py"))


def snapshot(name: str) -> dict:
    """The health findings and gradient flow of ``samples/<name>`` run under ``GradHealth``."""
    from autodiag.analysis.flow import grad_flow
    from autodiag.analysis.health import GradHealth
    from autodiag.target import Target, run

    health = GradHealth()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        result = run(Target(path=str(ROOT / "samples" / name)), [health])
    findings = health.findings(*result.scopes)
    return {
        "findings": [
            {"kind": f.kind, "message": f.message, "location": f.location, "extra": f.extra}
            for f in findings
        ],
        "grad_flow": grad_flow(health, findings, *result.scopes),
    }


def render(doc: dict) -> str:
    """``doc`` as the stored JSON text (paths relative to the repository)."""
    text = json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n"
    return text.replace(str(ROOT) + "/", "")


def main() -> None:
    sys.stdout.write(render({name: snapshot(name) for name in SAMPLES}))


if __name__ == "__main__":
    main()
