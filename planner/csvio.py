"""MiniMalloc's CSV format, the interchange format of this field.

One buffer a row: ``id,lower,upper,size[,offset]``, live during the half-open step interval
``[lower, upper)``. Newer MiniMalloc releases name the columns ``buffer,start,end``; both
headers are read. memplan's inclusive ``last`` is ``upper - 1``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from planner.errors import ProblemError
from planner.plan import Plan
from planner.problem import Buffer, Problem

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


def read_csv(text: str, *, source: str = "<csv>", alignment: int = 1) -> tuple[Problem, dict[str, int] | None]:
    """Parse MiniMalloc CSV text into a Problem, and the offsets column when present."""
    rows = csv.reader(io.StringIO(text))
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
        if len(row) != len(columns):
            raise ProblemError(f"{source}: line {line}: {len(row)} fields, expected {len(columns)} ({','.join(names)})")
        cells = dict(zip(columns, (c.strip() for c in row), strict=False))
        values = {key: _integer(cells[key], key, source, line) for key in ("lower", "upper", "size")}
        buffer_id = cells["id"]
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


def load_csv(path: str | Path, *, alignment: int = 1) -> Problem:
    path = Path(path)
    return read_csv(path.read_text(), source=str(path), alignment=alignment)[0]


def write_csv(problem: Problem, plan: Plan | None = None) -> str:
    """MiniMalloc CSV of a problem, with the offset column when a plan is given."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "lower", "upper", "size"] + (["offset"] if plan else []))
    for b in problem.buffers:
        row: list[object] = [b.id, b.first, b.last + 1, b.size]
        if plan:
            row.append(plan.offsets[b.id].offset)
        writer.writerow(row)
    return out.getvalue()


def _integer(cell: str, column: str, source: str, line: int) -> int:
    try:
        return int(cell)
    except ValueError:
        raise ProblemError(f"{source}: line {line}: {column} {cell!r} is not an integer") from None
