"""MiniMalloc's CSV format, the interchange format of this field.

One buffer a row: ``id,lower,upper,size[,offset]``, live during the half-open step interval
``[lower, upper)``. Newer MiniMalloc releases name the columns ``buffer,start,end``; both
headers are read. memplan's inclusive ``last`` is ``upper - 1``.

Rows are read one at a time, so a file with more than `max_buffers` rows is refused at the
first row past the limit. MiniMalloc knows no aliases: a buffer aliasing another is
written as part of its alias group, a row per stretch of its profile (see `write_csv`).

MiniMalloc's reader splits each line at every comma and knows no quoting, so an id holding
a comma, a double quote or a line break is written percent-escaped: those characters and
``%`` become ``%2C``, ``%22``, ``%0A``, ``%0D`` and ``%25`` (``a,b`` is written ``a%2Cb``).
`read_csv` strips spaces around every cell (hand-written files put them after commas), so
the spaces at either end of an id are escaped too, as their UTF-8 bytes (``" a b "`` is
written ``%20a b%20``, a tab ``%09``, a no-break space ``%C2%A0``); spaces inside an id stay
as they are. Every other id is written as it is (unless it holds one of those sequences
already: then its ``%`` is escaped too), and `read_csv` turns the sequences back into their
characters, so every id reads back exactly. MiniMalloc has no pools either: a plan placing
buffers in more than one pool is refused (its Plan JSON keeps every buffer's pool).
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from planner.aliases import group_profiles, groups
from planner.errors import ProblemError
from planner.plan import Plan
from planner.problem import MAX_BUFFERS, Buffer, Problem, check_buffer_count

_COLUMNS = {
    "id": "id",
    "buffer": "id",
    "lower": "lower",
    "start": "lower",
    "upper": "upper",
    "end": "upper",
    "size": "size",
    "offset": "offset",
}
ACCEPTED_HEADER = "id,lower,upper,size[,offset] (or buffer,start,end,size[,offset])"
# Characters MiniMalloc's reader (a split at every comma and line break, no quoting) or
# memplan's cannot carry in an id, and "%" itself: each is written as "%" and its hex code.
_ESCAPES = {"%": "%25", ",": "%2C", '"': "%22", "\n": "%0A", "\r": "%0D"}
_UNSAFE = re.compile('[,"\n\r]')
# What str.strip() takes off a cell (U+3000 is the last): escaped at an id's ends, as "%" and the hex of each UTF-8 byte.
_SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
_EDGE_ESCAPES = {c: "".join(f"%{byte:02X}" for byte in c.encode()) for c in _SPACES}
_UNESCAPES = {code: char for char, code in (_EDGE_ESCAPES | _ESCAPES).items()}
_ESCAPED = re.compile("|".join(_UNESCAPES))


def read_csv(
    text: str, *, source: str = "<csv>", alignment: int = 1, max_buffers: int | None = MAX_BUFFERS
) -> tuple[Problem, dict[str, int] | None]:
    """Parse MiniMalloc CSV text into a Problem, and the offsets column when present.
    More than `max_buffers` rows are refused at the first row past the limit."""
    return _read_rows(io.StringIO(text), source=source, alignment=alignment, max_buffers=max_buffers)


def _read_rows(
    lines: Iterable[str], *, source: str, alignment: int, max_buffers: int | None
) -> tuple[Problem, dict[str, int] | None]:
    rows = csv.reader(lines)
    header = next(rows, None)
    if not header:
        raise ProblemError(f"{source}: empty file; expected a header {ACCEPTED_HEADER}")
    names = [h.strip().lower() for h in header]
    columns = [_COLUMNS.get(n) for n in names]
    if None in columns or not {"id", "lower", "upper", "size"} <= set(columns):
        raise ProblemError(f"{source}: line 1: header {','.join(header)!r} not understood; expected {ACCEPTED_HEADER}")
    buffers: list[Buffer] = []
    offsets: dict[str, int] = {}
    seen: dict[str, int] = {}
    for line, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if max_buffers is not None and len(buffers) >= max_buffers:
            check_buffer_count(len(buffers) + 1, max_buffers, f"{source}: line {line}")
        if len(row) != len(columns):
            raise ProblemError(f"{source}: line {line}: {len(row)} fields, expected {len(columns)} ({','.join(names)})")
        cells = dict(zip(columns, (c.strip() for c in row), strict=False))
        values = {key: _integer(cells[key], key, source, line) for key in ("lower", "upper", "size")}
        buffer_id = _unescape(cells["id"])
        if buffer_id in seen:
            raise ProblemError(f"{source}: line {line}: duplicate id {buffer_id!r} (first on line {seen[buffer_id]})")
        seen[buffer_id] = line
        if values["size"] < 0:
            raise ProblemError(f"{source}: line {line}: size must be >= 0, got {values['size']}")
        if values["lower"] < 0 or values["upper"] <= values["lower"]:
            raise ProblemError(
                f"{source}: line {line}: interval [{values['lower']}, {values['upper']}) is empty or negative; "
                "need 0 <= lower < upper"
            )
        buffers.append(Buffer(id=buffer_id, size=values["size"], first=values["lower"], last=values["upper"] - 1))
        if "offset" in cells:
            offsets[buffer_id] = _integer(cells["offset"], "offset", source, line)
    steps = max((b.last for b in buffers), default=-1) + 1
    problem = Problem(buffers=tuple(buffers), steps=steps, alignment=alignment, name=Path(source).stem)
    return problem, (offsets if "offset" in columns else None)


def load_csv(path: str | Path, *, alignment: int = 1, max_buffers: int | None = MAX_BUFFERS) -> Problem:
    """Read a MiniMalloc CSV file row by row (never all of a file over the limit)."""
    path = Path(path)
    with path.open(newline="") as lines:
        return _read_rows(lines, source=str(path), alignment=alignment, max_buffers=max_buffers)[0]


def write_csv(problem: Problem, plan: Plan | None = None) -> str:
    """MiniMalloc CSV of a problem, with the offset column when a plan is given.

    MiniMalloc has no aliases, and its validator wants no two rows to overlap in time and
    bytes. So buffers that alias one another are written as their group, the block the
    planner placed at the root's offset: one row per stretch of its profile (its height
    above the root while its live members stay the same), the first named after the root. The plan's `alias_groups`
    (or the problem's ``alias_of``) say which buffers a row stands for. Ids MiniMalloc's
    reader cannot carry are escaped (see the module's docstring).

    Raises ProblemError, naming the pools, when the plan uses more than one pool (or, with
    no plan, when the problem has more than one): MiniMalloc's rows share one address space.
    """
    _check_one_pool(problem, plan)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "lower", "upper", "size"] + (["offset"] if plan else []))
    for row_id, buffer, first, last, size in _rows(problem):
        row: list[object] = [_escape(row_id), first, last + 1, size]
        if plan:
            row.append(plan.offsets[buffer.id].offset)
        writer.writerow(row)
    return out.getvalue()


def _check_one_pool(problem: Problem, plan: Plan | None) -> None:
    """MiniMalloc's rows share one address space: refuse offsets of several pools in it."""
    if plan is None:
        if len(problem.pools) > 1:
            names = ", ".join(repr(p.name) for p in problem.pools)
            raise ProblemError(
                f"MiniMalloc CSV has no pools, and this problem has {len(problem.pools)} ({names}); "
                "accepted: a problem with one pool; write the Problem JSON to keep them"
            )
        return
    used = Counter(p.pool for p in plan.offsets.values())
    if len(used) > 1:
        counts = ", ".join(f"{name!r}: {n:,} buffer{'s' if n > 1 else ''}" for name, n in sorted(used.items()))
        raise ProblemError(
            f"MiniMalloc CSV has one address space, and this plan places buffers in {len(used)} pools ({counts}); "
            "accepted: a plan using one pool; export the Plan JSON (.json), which keeps each buffer's pool"
        )


def _rows(problem: Problem) -> list[tuple[str, Buffer, int, int, int]]:
    """(row id, root buffer, first step, last step, height) of each piece of each alias
    group's profile (`planner.aliases.profile`), in the problem's order of the roots: a
    group's bytes change over time, so it is one row per stretch of equal height, the first
    named after the root, the next ``root#1``, ``root#2``... (see `_piece_names`); every
    buffer alone when nothing aliases."""
    bufs = problem.buffers
    if all(b.alias_of is None for b in bufs):
        return [(b.id, b, b.first, b.last, b.size) for b in bufs]
    roots = groups(problem)[0]
    taken = {b.id for b in bufs}
    rows = []
    for root, pieces in zip(roots, group_profiles(problem), strict=True):
        pieces = [p for p in pieces if p[2]] or [(pieces[0][0], pieces[-1][1], 0)]
        names = _piece_names(bufs[root].id, len(pieces), taken)
        rows += [
            (name, bufs[root], first, last, height) for name, (first, last, height) in zip(names, pieces, strict=True)
        ]
    return rows


def _piece_names(root: str, count: int, taken: set[str]) -> list[str]:
    """Unique row ids of a group's `count` pieces: the root's id, then ``root#1``,
    ``root#2``...; when one of those is already taken (the id of a buffer, or of an earlier
    row), the group's pieces get one more ``#`` (``root##1``...) until none is. Adds them
    to `taken`."""
    marks = "#"
    while True:
        names = [f"{root}{marks}{k}" for k in range(1, count)]
        if taken.isdisjoint(names):
            taken.update(names)
            return [root, *names]
        marks += "#"


def _escape(row_id: str) -> str:
    """The id as MiniMalloc's reader can carry it and `read_csv` reads it back: unchanged
    unless it holds a character MiniMalloc's reader cannot, a space at either end (which
    `read_csv` strips), or something `_unescape` would read as one of those."""
    body = row_id.strip()
    if body == row_id and not _UNSAFE.search(row_id) and not _ESCAPED.search(row_id):
        return row_id
    start = len(row_id) - len(row_id.lstrip())
    lead = [_EDGE_ESCAPES[char] for char in row_id[:start]]
    trail = [_EDGE_ESCAPES[char] for char in row_id[start + len(body) :]]
    return "".join(lead + [_ESCAPES.get(char, char) for char in body] + trail)


def _unescape(cell: str) -> str:
    return _ESCAPED.sub(lambda m: _UNESCAPES[m.group(0)], cell)


def _integer(cell: str, column: str, source: str, line: int) -> int:
    try:
        return int(cell)
    except ValueError:
        raise ProblemError(f"{source}: line {line}: {column} {cell!r} is not an integer") from None
