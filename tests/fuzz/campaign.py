"""A fuzzing campaign: programs run, differences shrunk and classified, refusals counted."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import fuzzer as fz
from .known_issues import KNOWN_ISSUES, known_issue_for


@dataclass
class Class:
    label: str
    count: int = 0
    repro: fz.Program | None = None
    diff: fz.Diff | None = None
    known: object = None  # the KnownIssue it matches, if any
    seeds: list = field(default_factory=list)

    def size(self) -> tuple:
        p = self.repro
        return (len(p.steps), len(p.inputs), sum(i.values.size for i in p.inputs))


class Campaign:
    def __init__(
        self, torch, ad, seed=0, max_steps=8, op_names=None, use_known=True, shrink_budget=200
    ):
        self.torch, self.ad = torch, ad
        self.seed = seed
        self.max_steps = max_steps
        self.op_names = op_names
        self.use_known = use_known
        self.shrink_budget = shrink_budget
        self.programs = 0
        self.failing = 0
        self.unknown_failing = 0
        self.classes: dict[str, Class] = {}
        self.refusals: Counter = Counter()
        # (difference key, ops of the unshrunk program) -> class label: skips re-shrinking
        # programs that are the same case again
        self._label_cache: dict = {}

    def program(self, i) -> fz.Program:
        return fz.generate(self.torch, (self.seed, i), self.max_steps, self.op_names)

    def step(self) -> Class | None:
        """Generate, run and (on a difference) shrink and classify the next program."""
        i = self.programs
        self.programs += 1
        p = self.program(i)
        out = fz.run_program(p, self.torch, self.ad)
        self.refusals.update(out.refusals)
        if out.diff is None:
            return None
        self.failing += 1
        return self._record(p, out.diff, (self.seed, i))

    def _record(self, p, diff, seed) -> Class:
        cache_key = (diff.key(), tuple(sorted(set(p.ops()))))
        label = self._label_cache.get(cache_key)
        small, sdiff = p, diff
        if label is None or label not in self.classes:
            small, sdiff = fz.shrink(p, diff, self.torch, self.ad, budget=self.shrink_budget)
            label = fz.classify(small, sdiff)
            self._label_cache[cache_key] = label
        c = self.classes.get(label)
        if c is None:
            c = self.classes[label] = Class(label, repro=small, diff=sdiff)
            c.known = known_issue_for(label) if self.use_known else None
        elif small is not p:
            candidate = Class(label, repro=small)
            if candidate.size() < c.size():
                c.repro, c.diff = small, sdiff
        c.count += 1
        c.seeds.append(seed)
        if c.known is None:
            self.unknown_failing += 1
        return c

    def replay(self, i) -> str:
        p = self.program(i)
        out = fz.run_program(p, self.torch, self.ad)
        lines = [fz.repro(p, out.diff), "", f"# verdict: {out.diff}", f"# refusals: {out.refusals}"]
        if out.diff is not None:
            small, sdiff = fz.shrink(p, out.diff, self.torch, self.ad, self.shrink_budget)
            lines += ["", f"# shrunk: {fz.classify(small, sdiff)}", fz.repro(small, sdiff)]
        return "\n".join(lines)

    def stale_known(self) -> list:
        """The known-issue entries that matched no class of this run (FUZZ_STALE=1 lists them
        in the CI test; ``run.py --known`` in its report): fixed, or not reached by the run."""
        hit = {id(c.known) for c in self.classes.values() if c.known is not None}
        return [k for k in KNOWN_ISSUES if id(k) not in hit]

    # ---- the report ------------------------------------------------------------------------
    def report(self, max_repros=40, markdown=False) -> str:
        classes = sorted(self.classes.values(), key=lambda c: (-c.count, c.label))
        known = [c for c in classes if c.known is not None]
        unknown = [c for c in classes if c.known is None]
        pct = 100.0 * self.failing / max(self.programs, 1)
        out = [
            f"programs run: {self.programs}; with a difference: {self.failing} ({pct:.1f}%),"
            f" of which in known-issue classes: {self.failing - self.unknown_failing}; "
            f"classes: {len(classes)} ({len(unknown)} not known); "
            f"refusals: {sum(self.refusals.values())}"
        ]
        bar = "|" if markdown else " "
        for title, group in (
            ("Difference classes", unknown),
            ("Known-issue classes (tests/fuzz/known_issues.py)", known),
        ):
            if not group:
                continue
            out += ["", f"## {title}" if markdown else f"{title}:", ""]
            if markdown:
                out += ["| count | class | known issue |", "|---:|---|---|"]
            for c in group:
                issue = f"{c.known.branch}: {c.known.issue}" if c.known else ""
                if markdown:
                    out.append(f"{bar} {c.count} {bar} `{c.label}` {bar} {issue} {bar}")
                else:
                    out.append(f"  {c.count:6d}  {c.label}" + (f"   [{issue}]" if issue else ""))
        if self.use_known:
            stale = self.stale_known()
            if stale:
                out += [
                    "",
                    "## Known-issue entries that matched nothing"
                    if markdown
                    else "Known-issue entries that matched nothing:",
                    "",
                ]
                out += [f"  - {k.branch}: `{k.ops}` / `{k.diff}`: {k.issue}" for k in stale]
        if self.refusals:
            out += ["", "## Refusals by op" if markdown else "Refusals by op:", ""]
            for op, n in self.refusals.most_common():
                out.append(f"  {n:6d}  {op}" if not markdown else f"- {op}: {n}")
        shown = [c for c in unknown + known][:max_repros]
        if shown:
            out += ["", "## Minimal repros" if markdown else "Minimal repros:"]
            for c in shown:
                head = (
                    f"### `{c.label}` ({c.count})"
                    if markdown
                    else f"---- {c.label} ({c.count}; first seen as program {c.seeds[0]})"
                )
                out += ["", head]
                code = fz.repro(c.repro, c.diff)
                out += ["```python", code, "```"] if markdown else [code]
        return "\n".join(out)
