"""Tables that fit the terminal: the key columns stay readable, numbers are never split.

rich's own Table shrinks every column when the terminal is narrow: it folds node names and
numbers mid-word ("forw/ard", "samples/mo", "-0.0/8333") or collapses the key columns to
nothing. Here the layout is decided before rich sees the table:

- a cell is a list of lines; a line wraps only between *atoms* (a node name, ``min -0.25``, a
  shape such as ``[4, 3]``), so a number or a name is never cut in two;
- a column's minimum width is what its widest atom needs (``wrap`` columns, with at most
  ``max_lines`` lines per line of content), the shortest form of its locations (``path``
  columns, shortened from the left: ``…/model.py:12``), or a few characters (``clip`` columns,
  cut with ``…``: source code, shown only when the key columns need not wrap);
- when even the minimums do not fit, the columns with the lowest ``keep`` go first and a note
  names them; ``keep=ALWAYS`` columns (the node, the location) stay whatever the width.
"""

from __future__ import annotations

import dataclasses
import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

ALWAYS = 1_000  # ``keep`` of the columns that are never left out
GAP = 2  # spaces between columns (rich's padding of 1 on each side, none at the edges)
CLIP_MIN = 12  # a clipped column (source code) is not worth showing narrower than this

# One atom: an arrow with its target node, a short bracketed group with the word it belongs to
# (a shape, a few values, a case name such as ``Cube[script inputs]``), a statistic with its
# number, or any other run of non-spaces.
_ATOM = re.compile(r"→ \S+|\S*\[[^\[\]]{0,24}\]\S*|(?:min|max|mean) \S+|\S+")


@dataclasses.dataclass
class Column:
    header: str
    keep: int = ALWAYS  # higher stays longer when the terminal is narrow
    kind: str = "wrap"  # "wrap" | "path" | "clip"
    max_lines: int = 3  # "wrap": how many lines one line of content may become (0: any)
    justify: str = "left"
    paired: bool = False  # line k of every paired cell in a row starts on the same line


Cell = list[Text]  # lines; a line's leading spaces are its indent, kept on its wrapped lines


def cell(*lines: str | Text) -> Cell:
    """A cell from lines of rich markup (or Text)."""
    return [x if isinstance(x, Text) else Text.from_markup(x) for x in lines]


def plain(*lines: str) -> Cell:
    """A cell from lines of plain text (no markup)."""
    return [Text(x) for x in lines]


def shorten_path(location: str, width: int) -> str:
    """``dir/sub/file.py:12`` in at most ``width`` characters, shortened from the left
    (``…/sub/file.py:12``, ``…/file.py:12``); never shorter than the file name and line."""
    if len(location) <= width:
        return location
    parts = re.split(r"[/\\]", location)
    for k in range(1, len(parts)):
        cand = "…/" + "/".join(parts[k:])
        if len(cand) <= width or k == len(parts) - 1:
            return cand
    return location


def _shortest_path(location: str) -> int:
    return len(shorten_path(location, 0))


def _atoms(line: Text) -> tuple[int, list[Text]]:
    text = line.plain
    indent = len(text) - len(text.lstrip(" "))
    return indent, [line[m.start() : m.end()] for m in _ATOM.finditer(text, indent)]


def _wrap(indent: int, atoms: list[Text], width: int) -> list[Text]:
    """Greedy wrap between atoms; every output line starts with ``indent`` spaces."""
    out: list[Text] = []
    cur: Text | None = None
    for a in atoms:
        if cur is not None and cur.cell_len + 1 + a.cell_len <= width:
            cur.append(" ")
            cur.append_text(a)
            continue
        if cur is not None:
            out.append(cur)
        cur = Text(" " * indent)
        cur.append_text(a)
    if cur is not None:
        out.append(cur)
    return out or [Text("")]


def _natural(line: Text) -> int:
    indent, atoms = _atoms(line)
    return indent + sum(a.cell_len for a in atoms) + max(len(atoms) - 1, 0)


def _min_wrap(line: Text, max_lines: int) -> int:
    """The narrowest width at which ``line`` wraps into at most ``max_lines`` lines."""
    indent, atoms = _atoms(line)
    lo = indent + max((a.cell_len for a in atoms), default=0)
    if max_lines <= 0:
        return lo
    hi = indent + sum(a.cell_len for a in atoms) + max(len(atoms) - 1, 0)
    while lo < hi:  # the greedy line count only falls as the width grows
        mid = (lo + hi) // 2
        if len(_wrap(indent, atoms, mid)) <= max_lines:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _widths(col: Column, cells: list[Cell]) -> tuple[int, int]:
    """(minimum, natural) width of a column."""
    lines = [ln for c in cells for ln in c]
    nat = max(
        [len(col.header)] + [_natural(ln) if col.kind == "wrap" else ln.cell_len for ln in lines]
    )
    if col.kind == "path":
        low = max([0] + [_shortest_path(ln.plain) for ln in lines])
    elif col.kind == "clip":
        low = min(nat, CLIP_MIN)
    else:
        low = max([0] + [_min_wrap(ln, col.max_lines) for ln in lines])
    low = max(low, len(col.header))
    return low, max(low, nat)


def measure(columns: list[Column], rows: list[list[Cell]]) -> dict[int, tuple[int, int]]:
    """Per column with any content in ``rows``: its (minimum, natural) width. The measures of
    a table's parts combine with ``merge`` into the whole table's."""
    shown = [
        k
        for k in range(len(columns))
        if any(r[k] and any(ln.plain.strip() for ln in r[k]) for r in rows)
    ]
    return {k: _widths(columns[k], [r[k] for r in rows]) for k in shown}


def merge(into: dict[int, tuple[int, int]], part: dict[int, tuple[int, int]]) -> None:
    for k, (low, nat) in part.items():
        old = into.get(k)
        into[k] = (low, nat) if old is None else (max(old[0], low), max(old[1], nat))


def layout(
    columns: list[Column], rows: list[list[Cell]], width: int
) -> tuple[list[int], list[int], list[str]]:
    """Which columns to show (indices), their widths, and the headers left out."""
    return decide(columns, measure(columns, rows), width)


def decide(
    columns: list[Column], bounds: dict[int, tuple[int, int]], width: int
) -> tuple[list[int], list[int], list[str]]:
    """``layout`` from the table's ``measure``."""
    shown = sorted(bounds)

    def used(ks, which):
        return sum(bounds[k][which] for k in ks) + GAP * max(len(ks) - 1, 0)

    dropped: list[str] = []
    for k in sorted(shown, key=lambda k: columns[k].keep):  # least important first
        if used(shown, 0) <= width or columns[k].keep >= ALWAYS:
            break
        shown.remove(k)
        dropped.append(columns[k].header)
    # a clipped column (source code) is a luxury: it never squeezes a key column
    keys = [k for k in shown if columns[k].keep >= ALWAYS]
    others = [k for k in shown if columns[k].keep < ALWAYS]
    room = (
        sum(bounds[k][1] for k in keys)
        + sum(bounds[k][0] for k in others)
        + GAP * max(len(shown) - 1, 0)
    )
    for k in [k for k in others if columns[k].kind == "clip"]:
        if room > width:
            shown.remove(k)
            dropped.append(columns[k].header)
            room -= bounds[k][0] + GAP
    widths = {k: bounds[k][0] for k in shown}
    if used(shown, 1) <= width:
        widths = {k: bounds[k][1] for k in shown}
    else:
        spare = width - used(shown, 0)
        # the key columns first get their natural width, then the rest share what is left
        for group in (
            [k for k in shown if columns[k].keep >= ALWAYS],
            [k for k in shown if columns[k].keep < ALWAYS],
        ):
            growing = [k for k in group if widths[k] < bounds[k][1]]
            while spare > 0 and growing:
                for k in list(growing):
                    if spare == 0:
                        break
                    widths[k] += 1
                    spare -= 1
                    if widths[k] >= bounds[k][1]:
                        growing.remove(k)
    return shown, [widths[k] for k in shown], dropped


def _fit(col: Column, line: Text, width: int) -> list[Text]:
    if col.kind == "path":
        return [Text(shorten_path(line.plain, width), style=line.style)]
    if col.kind == "clip":
        if line.cell_len <= width:
            return [line]
        cut = line[: max(width - 1, 0)]
        cut.append("…")
        return [cut]
    return _wrap(*_atoms(line), width)


def render(
    columns: list[Column], rows: list[list[Cell]], width: int, title: str | None = None
) -> tuple[Table, list[str]]:
    """A rich Table laid out for ``width`` columns, and the headers left out."""
    shown, widths, dropped = layout(columns, rows, width)
    return _table(columns, shown, widths, rows, title), dropped


def _table(
    columns: list[Column],
    shown: list[int],
    widths: list[int],
    rows: list[list[Cell]],
    title: str | None = None,
    header: bool = True,
) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=None,
        pad_edge=False,
        show_edge=False,
        show_header=header,
    )
    for k, w in zip(shown, widths, strict=True):
        table.add_column(
            columns[k].header,
            width=w,
            min_width=w,
            max_width=w,
            no_wrap=True,
            overflow="crop",
            justify=columns[k].justify,
        )
    for r in rows:
        fitted = [
            [_fit(columns[k], line, w) for line in r[k]] for k, w in zip(shown, widths, strict=True)
        ]
        paired = [f for k, f in zip(shown, fitted, strict=True) if columns[k].paired]
        if len({len(f) for f in paired}) == 1:  # e.g. a local derivative beside its gradient
            for j in range(len(paired[0])):
                height = max(len(f[j]) for f in paired)
                for f in paired:
                    f[j] = f[j] + [Text("")] * (height - len(f[j]))
        table.add_row(*(Text("\n").join(ln for group in f for ln in group) for f in fitted))
    return table


def print_table(
    console: Console,
    columns: list[Column],
    rows: list[list[Cell]],
    title: str | None = None,
    more: str = "--format json",
) -> None:
    """Print the table laid out for the console's width; a note names columns left out."""
    table, dropped = render(columns, rows, console.width, title)
    console.print(table)
    _note_dropped(console, dropped, more)


CHUNK = 200  # rows laid out and printed at a time by print_table_stream


def print_table_stream(
    console: Console,
    columns: list[Column],
    make_rows,
    title: str | None = None,
    more: str = "--format json",
) -> None:
    """``print_table`` for tables too large to hold: ``make_rows()`` returns a fresh iterator
    of the rows, read twice (once to measure the columns, once to print), each time
    ``CHUNK`` rows at a time. The output is ``print_table``'s."""
    bounds: dict[int, tuple[int, int]] = {}
    for chunk in _chunks(make_rows()):
        merge(bounds, measure(columns, chunk))
    shown, widths, dropped = decide(columns, bounds, console.width)
    first = True
    for chunk in _chunks(make_rows()):
        console.print(_table(columns, shown, widths, chunk, title if first else None, header=first))
        first = False
    if first:  # no rows
        console.print(_table(columns, shown, widths, [], title))
    _note_dropped(console, dropped, more)


def _chunks(rows):
    chunk = []
    for r in rows:
        chunk.append(r)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _note_dropped(console: Console, dropped: list[str], more: str) -> None:
    if dropped:
        console.print(
            f"[dim]({escape(', '.join(dropped))} left out to fit {console.width} "
            f"columns; widen the terminal or use {escape(more)})[/]"
        )
