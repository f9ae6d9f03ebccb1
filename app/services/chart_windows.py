"""The offset chart of big plans: an aggregate at coarse zoom, the rectangles of a window on demand.

A plan page of more than `AGGREGATE_ABOVE` tensors does not carry every rectangle: it carries,
for each plan, the largest `PAGE_RECTS` rectangles and an occupancy raster of the others, and
the page asks `GET /api/v1/plans/{id}/chart` for the rectangles of the window in view as the
user zooms in. Both come from `window()`, over numpy columns of the plan built once and kept
(`plan_columns`): a request never parses a stored plan again while its columns are cached. The
columns are built when the plan is made and written under the data folder (`column_store`), so
another app process reads them on its first open instead of building them again; a request for a
plan asks the database first, so that columns at hand never answer for a deleted plan.

The raster cuts the window into `RASTER_STEPS` x `RASTER_BYTES` cells; a cell's value is the
share of its area that tensors cover (0-255, any use at least 1), each tensor's area spread
evenly over the cells it touches (exact for tensors that cover whole cells, approximate at a
tensor's edges).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.errors import AppError, not_found
from app.services import column_store, plan_heads
from app.services.cache import LRU
from app.services.plans import needs_plan, problem_of
from app.storage import Storage
from planner import Problem, live_bytes
from planner.bounds import live_sum, peak_step

AGGREGATE_ABOVE = 50_000  # tensors: above this the page shows an aggregate and fetches windows
PAGE_RECTS = 5_000  # rectangles of each plan in the page itself, largest first
WINDOW_RECTS = 10_000  # a window's rectangles when the request names no `max`
MAX_WINDOW_RECTS = 100_000  # the most rectangles one window answer may carry
PAGE_TENSORS = 5_000  # tensors listed in the page (table, histogram, search), largest first
LIVE_POINTS = 4_000  # the live curve's points in the page: each the maximum over its steps
RASTER_STEPS, RASTER_BYTES = 480, 240  # the raster's cells across and up


@dataclass(frozen=True)
class ProblemColumns:
    """A problem's buffers as arrays in problem order, and its live curve."""

    ids: np.ndarray  # of str
    first: np.ndarray
    last: np.ndarray
    size: np.ndarray
    kind: np.ndarray
    kinds: list[str]
    steps: int
    live: np.ndarray
    peak_step: int
    by_size: np.ndarray  # positions, largest first (ties in problem order)


@dataclass(frozen=True)
class PlanColumns:
    """A plan's rectangles, largest first (ties by problem order): ``index`` is each one's
    position in the problem; only placed tensors of more than 0 bytes are here."""

    problem: ProblemColumns
    index: np.ndarray
    first: np.ndarray
    stop: np.ndarray  # last + 1
    bottom: np.ndarray
    top: np.ndarray
    offsets: np.ndarray  # every buffer's offset in problem order, -1 where the plan has none
    extent: int  # the highest byte any tensor reaches
    overview: dict[str, Any] = field(default_factory=dict)  # the page's window of the whole plan, once made
    pool_sizes: dict[str, int] | None = None  # the plan's pool sizes (None: a file written without them)


_problems: LRU[str, ProblemColumns] = LRU(4)
_plans: LRU[str, PlanColumns] = LRU(4)  # about 50 MB each at 10^6 tensors


def is_big(problem: Problem) -> bool:
    return len(problem.buffers) > AGGREGATE_ABOVE


def problem_columns(problem_id: str, problem: Problem, storage: Storage | None = None) -> ProblemColumns:
    """A problem's columns: kept in this process, else read from the data folder, else built (and
    written there for the other processes) ; without `storage` only kept or built."""
    found = _problems.get(problem_id)
    if found is not None:
        return found
    stored = column_store.load(storage, problem_id, column_store.PROBLEM) if storage is not None else None
    if stored is not None:
        return _problems.put(problem_id, _problem_from(stored))
    made = _problems.put(problem_id, _build_problem(problem))
    if storage is not None:
        column_store.save(storage, problem_id, column_store.PROBLEM, _problem_arrays(made))
    return made


def _problem_arrays(cols: ProblemColumns) -> dict[str, np.ndarray]:
    scalars = {"steps": np.int64(cols.steps), "peak_step": np.int64(cols.peak_step)}
    arrays = {k: getattr(cols, k) for k in ("ids", "first", "last", "size", "kind", "live", "by_size")}
    return {**arrays, "kinds": np.array(cols.kinds, dtype=str), **{k: np.asarray(v) for k, v in scalars.items()}}


def _problem_from(arrays: dict[str, np.ndarray]) -> ProblemColumns:
    return ProblemColumns(
        ids=arrays["ids"],
        first=arrays["first"],
        last=arrays["last"],
        size=arrays["size"],
        kind=arrays["kind"],
        kinds=[str(k) for k in arrays["kinds"].tolist()],
        steps=int(arrays["steps"]),
        live=arrays["live"],
        peak_step=int(arrays["peak_step"]),
        by_size=arrays["by_size"],
    )


def _build_problem(problem: Problem) -> ProblemColumns:
    buffers = problem.buffers
    kinds = sorted({b.kind for b in buffers})
    code = {k: i for i, k in enumerate(kinds)}
    sizes = np.fromiter((b.size for b in buffers), np.int64, len(buffers))
    first = np.fromiter((b.first for b in buffers), np.int64, len(buffers))
    last = np.fromiter((b.last for b in buffers), np.int64, len(buffers))
    if any(b.alias_of is not None for b in buffers):  # alias groups count once: the planner's own pass
        live, peak = live_bytes(problem), peak_step(problem)
    else:  # the same curve from the columns at hand (bounds.live_bytes without aliases)
        live = live_sum(problem.steps, first, last + 1, sizes)
        peak = int(live.argmax()) if live.size else 0  # the first step at the peak, as bounds.peak_step
    return ProblemColumns(
        ids=np.array([b.id for b in buffers], dtype=str),
        first=first,
        last=last,
        size=sizes,
        kind=np.fromiter((code[b.kind] for b in buffers), np.int16, len(buffers)),
        kinds=kinds,
        steps=problem.steps,
        live=live,
        peak_step=peak,
        by_size=np.argsort(-sizes, kind="stable"),  # stable: ties stay in problem order
    )


def cached(plan_id: str) -> PlanColumns | None:
    """A plan's columns if they are at hand (stored plans never change)."""
    return _plans.get(plan_id)


def plan_columns(
    plan_id: str, problem_id: str, problem: Problem, plan_json: dict[str, Any], storage: Storage | None = None
) -> PlanColumns:
    """A plan's columns, built once: pools stacked in problem order, as `charts.offsets_of` does.
    Kept in this process, else read from the data folder, else built (and written there)."""
    found = _plans.get(plan_id)
    if found is not None:
        return found
    cols = problem_columns(problem_id, problem, storage)
    stored = column_store.load(storage, problem_id, plan_id) if storage is not None else None
    if stored is not None and stored["offsets"].shape == cols.size.shape:
        return _plans.put(plan_id, _stored_plan(cols, stored))
    offsets = _offsets(cols.ids.tolist(), problem, plan_json)
    made = _plans.put(plan_id, _plan_from(cols, offsets, dict(plan_json.get("pool_sizes", {}))))
    if storage is not None:
        # The page's first window too (its raster is most of a page's work at 10^6 tensors), made once here.
        extra = {"limit": PAGE_RECTS, "window": overview(made)}
        column_store.save(
            storage,
            problem_id,
            plan_id,
            {
                "offsets": made.offsets,
                "pool_sizes": np.array(json.dumps(made.pool_sizes, sort_keys=True)),
                "overview": np.array(json.dumps(extra, separators=(",", ":"))),
            },
        )
    return made


def _stored_plan(cols: ProblemColumns, stored: dict[str, np.ndarray]) -> PlanColumns:
    """A plan's columns from its file: offsets, pool sizes and (when made with this `PAGE_RECTS`) its overview."""
    sizes = json.loads(str(stored["pool_sizes"])) if "pool_sizes" in stored else None
    made = _plan_from(cols, stored["offsets"], sizes)
    extra = json.loads(str(stored["overview"])) if "overview" in stored else {}
    if extra.get("limit") == PAGE_RECTS:
        made.overview.update(extra["window"])
    return made


def store_columns(storage: Storage, problem_id: str, problem: Problem, records: list[Any]) -> None:
    """Build and write the columns of a big problem's plans just made (`PlanRecord`s), so that its
    page opens on them in this process and in any other."""
    if not is_big(problem):
        return
    for record in records:
        if record.plan:
            plan_columns(record.id, problem_id, problem, record.plan, storage)
    if plan_heads.stored(storage, problem_id) is None:  # what the page reads besides the columns
        plan_heads.save(storage, problem_id, problem)


def _plan_from(cols: ProblemColumns, offsets: np.ndarray, pool_sizes: dict[str, int] | None) -> PlanColumns:
    order = cols.by_size[(offsets[cols.by_size] >= 0) & (cols.size[cols.by_size] > 0)]
    bottom = offsets[order]
    top = bottom + cols.size[order]
    return PlanColumns(
        problem=cols,
        index=order,
        first=cols.first[order],
        stop=cols.last[order] + 1,
        bottom=bottom,
        top=top,
        offsets=offsets,
        extent=int(top.max()) if top.size else 0,
        pool_sizes=pool_sizes,
    )


def forget_deleted(storage: Storage) -> None:
    """Drop the columns kept in this process of plans the database no longer has (a model deleted),
    and the column files of their problems (`column_store.prune`)."""
    _plans.forget(lambda plan_id: storage.get_plan(plan_id, placements=False) is not None)
    column_store.prune(storage)


def stored_columns(storage: Storage, problem_id: str, plan_id: str) -> PlanColumns | None:
    """A plan's columns kept in this process or written under the data folder, without reading the
    problem or the plan from the database (at 10^6 buffers each read is most of a second); else None."""
    found = _plans.get(plan_id)
    if found is not None:
        return found
    cols = _problems.get(problem_id)
    if cols is None:
        arrays = column_store.load(storage, problem_id, column_store.PROBLEM)
        if arrays is None:
            return None
        cols = _problems.put(problem_id, _problem_from(arrays))
    stored = column_store.load(storage, problem_id, plan_id)
    if stored is None or stored["offsets"].shape != cols.size.shape:
        return None
    return _plans.put(plan_id, _stored_plan(cols, stored))


def positions(columns: PlanColumns, wanted: set[str]) -> dict[str, list[int]]:
    """[offset, size] in the plan of each tensor in `wanted` that it places (as `notes` gives them)."""
    ids = columns.problem.ids
    found = np.flatnonzero(np.isin(ids, sorted(wanted))) if wanted else np.array([], np.int64)
    return {
        str(ids[k]): [int(columns.offsets[k]), int(columns.problem.size[k])] for k in found if columns.offsets[k] >= 0
    }


def _offsets(ids: list[str], problem: Problem, plan_json: dict[str, Any]) -> np.ndarray:
    base, below = {}, 0
    sizes = plan_json.get("pool_sizes", {})
    for pool in problem.pools:
        base[pool.name] = below
        below += sizes.get(pool.name, 0)
    placements = plan_json.get("placements", [])
    out = np.full(len(ids), -1, dtype=np.int64)
    if not placements:
        return out
    values = np.fromiter((base.get(p["pool"], 0) + p["offset"] for p in placements), np.int64, len(placements))
    # Plans list their placements in problem order: check that and skip the name lookup.
    named = [p["id"] for p in placements]
    if named == ids:
        return values
    where = {i: k for k, i in enumerate(ids)}
    out[[where[i] for i in named]] = values
    return out


def default_window(columns: PlanColumns) -> tuple[float, float, float, float]:
    """The whole plan, with the headroom the page's chart gives above the arena."""
    return 0.0, float(max(columns.problem.steps, 1)), 0.0, max(columns.extent, 1) * 1.05


def check_window(x0: float, x1: float, y0: float, y1: float) -> None:
    """A window must be finite and not empty: 422 naming the bound otherwise."""
    for name, value in (("x0", x0), ("x1", x1), ("y0", y0), ("y1", y1)):
        if not math.isfinite(value):
            raise AppError(422, f"{name}: {value} is not a finite number; give steps (x0, x1) and bytes (y0, y1)")
    if x1 <= x0:
        raise AppError(422, f"x1 ({x1:g}) must be greater than x0 ({x0:g}): the window's steps run from x0 to x1")
    if y1 <= y0:
        raise AppError(422, f"y1 ({y1:g}) must be greater than y0 ({y0:g}): the window's bytes run from y0 to y1")


def window(columns: PlanColumns, x0: float, x1: float, y0: float, y1: float, limit: int) -> dict[str, Any]:
    """The rectangles meeting the window [x0, x1) x [y0, y1), at most `limit`, largest first.

    ``total`` counts every rectangle in the window; when there are more than `limit`,
    ``truncated`` is true and ``raster`` pictures the others (base64 bytes, row 0 at y0).
    """
    check_window(x0, x1, y0, y1)
    inside = (columns.first < x1) & (columns.stop > x0) & (columns.bottom < y1) & (columns.top > y0)
    hits = np.flatnonzero(inside)
    chosen, rest = hits[:limit], hits[limit:]
    cols = columns.problem
    index = columns.index[chosen]
    answer: dict[str, Any] = {
        "window": {"x0": x0, "x1": x1, "y0": y0, "y1": y1},
        "total": int(hits.size),
        "count": int(chosen.size),
        "truncated": bool(rest.size),
        "kinds": cols.kinds,
        "rects": {
            "index": index.tolist(),
            "id": cols.ids[index].tolist(),
            "first": columns.first[chosen].tolist(),
            "last": (columns.stop[chosen] - 1).tolist(),
            "size": cols.size[index].tolist(),
            "offset": columns.bottom[chosen].tolist(),
            "kind": cols.kind[index].tolist(),
        },
        "raster": None,
    }
    if rest.size:
        answer["raster"] = raster(columns, rest, x0, x1, y0, y1)
    return answer


def overview(columns: PlanColumns) -> dict[str, Any]:
    """The whole plan at `PAGE_RECTS` rectangles: what its page starts from (made once a plan)."""
    if not columns.overview:
        columns.overview.update(window(columns, *default_window(columns), PAGE_RECTS))
    return columns.overview


def raster(columns: PlanColumns, rows: np.ndarray, x0: float, x1: float, y0: float, y1: float) -> dict[str, Any]:
    """How much of each cell the rectangles `rows` cover, 0-255, as a 2D difference array:
    each rectangle adds its area, spread over the block of cells it touches, at four corners."""
    nx, ny = RASTER_STEPS, RASTER_BYTES
    dx, dy = (x1 - x0) / nx, (y1 - y0) / ny
    left = np.clip(np.floor((columns.first[rows] - x0) / dx), 0, nx - 1).astype(np.int64)
    right = np.clip(np.ceil((columns.stop[rows] - x0) / dx), left + 1, nx).astype(np.int64)
    low = np.clip(np.floor((columns.bottom[rows] - y0) / dy), 0, ny - 1).astype(np.int64)
    high = np.clip(np.ceil((columns.top[rows] - y0) / dy), low + 1, ny).astype(np.int64)
    width = np.minimum(columns.stop[rows], x1) - np.maximum(columns.first[rows], x0)
    height = np.minimum(columns.top[rows], y1) - np.maximum(columns.bottom[rows], y0)
    share = width * height / ((right - left) * (high - low) * dx * dy)  # of each cell touched
    delta = np.zeros((ny + 1) * (nx + 1))
    for rows_at, cols_at, sign in ((low, left, 1), (low, right, -1), (high, left, -1), (high, right, 1)):
        delta += sign * np.bincount(rows_at * (nx + 1) + cols_at, weights=share, minlength=delta.size)
    cover = delta.reshape(ny + 1, nx + 1).cumsum(axis=0).cumsum(axis=1)[:ny, :nx]
    # Any use shows (at least 1); sums that cancel leave crumbs of about 1e-15, not use.
    cells = np.where(cover > 1e-12, np.clip(np.ceil(cover * 255), 1, 255), 0).astype(np.uint8)
    return {"nx": nx, "ny": ny, "cells": base64.b64encode(cells.tobytes()).decode("ascii")}


def page_view(
    problem_id: str,
    problem: Problem,
    records: dict[str, dict[str, Any]],
    shown: list[str],
    storage: Storage | None = None,
) -> dict[str, Any]:
    """The plan page's chart data for a big problem, in the shape `charts.plan_view` gives small ones.

    `records` maps each plan id with a plan to its Plan JSON; `shown` lists the plans
    whose charts are drawn first (an aggregate window each). ``buffers`` and ``offsets`` hold
    only the `PAGE_TENSORS` largest tensors, for the table and the search.
    """
    cols = problem_columns(problem_id, problem, storage)
    plan_cols = {pid: plan_columns(pid, problem_id, problem, plan, storage) for pid, plan in records.items()}
    keep = np.sort(cols.by_size[:PAGE_TENSORS])  # in problem order, as small pages list them
    windows = {pid: overview(plan_cols[pid]) for pid in shown if pid in plan_cols}
    starts, peaks = _envelope(cols.live)
    return {
        "live": peaks.tolist(),
        "live_steps": starts.tolist(),
        "peak_step": cols.peak_step,
        "peak_live": int(cols.live[cols.peak_step]) if cols.live.size else 0,
        "kinds": cols.kinds,
        "buffers": {
            "id": cols.ids[keep].tolist(),
            "size": cols.size[keep].tolist(),
            "first": cols.first[keep].tolist(),
            "last": cols.last[keep].tolist(),
            "kind": cols.kind[keep].tolist(),
            **{key: None for key in ("shape", "dtype", "producer", "consumers")},
        },
        "offsets": {pid: [None if v < 0 else v for v in c.offsets[keep].tolist()] for pid, c in plan_cols.items()},
        "aggregate": {
            "tensors": len(cols.ids),
            "listed": int(keep.size),
            "above": AGGREGATE_ABOVE,
            "limit": WINDOW_RECTS,
            "windows": windows,
        },
    }


def _envelope(live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most `LIVE_POINTS` points: the first step of each run of steps and their maximum."""
    if live.size <= LIVE_POINTS:
        return np.arange(live.size), live
    starts = np.linspace(0, live.size, LIVE_POINTS, endpoint=False).astype(np.int64)
    return starts, np.maximum.reduceat(live, starts)


def peak_table(
    problem_id: str, problem: Problem, step: int, rows: int, storage: Storage | None = None
) -> list[dict[str, Any]]:
    """`charts.peak_table` for a big problem, found with numpy (a trace has no tensor facts)."""
    cols = problem_columns(problem_id, problem, storage)
    live = np.flatnonzero((cols.first <= step) & (cols.last >= step)).tolist()
    live.sort(key=lambda i: (-int(cols.size[i]), str(cols.ids[i])))
    names = problem.step_names
    return [
        {
            "id": str(cols.ids[i]),
            "size": int(cols.size[i]),
            "kind": cols.kinds[cols.kind[i]],
            "shape": None,
            "dtype": None,
            "producer": None,
            "first": int(cols.first[i]),
            "last": int(cols.last[i]),
            "first_op": names[cols.first[i]] if names else None,
            "last_op": names[cols.last[i]] if names else None,
        }
        for i in live[:rows]
    ]


def plan_window(
    storage: Storage,
    plan_id: str,
    x0: float | None,
    x1: float | None,
    y0: float | None,
    y1: float | None,
    limit: int,
) -> dict[str, Any]:
    """`GET /api/v1/plans/{id}/chart`: a window of a plan (bounds left out: the whole plan's).
    The database is asked first, whatever is at hand: a deleted plan is a 404 in every process."""
    head = storage.get_plan(plan_id, placements=False)
    if head is None:
        raise not_found("plan", plan_id)
    columns = stored_columns(storage, head.problem_id, plan_id)
    if columns is None:
        record = storage.get_plan(plan_id)
        if record is None:
            raise not_found("plan", plan_id)
        needs_plan(record)
        problem, _ = problem_of(storage, record)
        columns = plan_columns(plan_id, record.problem_id, problem, record.plan, storage)
    whole = default_window(columns)
    lo_x, hi_x, lo_y, hi_y = (whole[k] if given is None else given for k, given in enumerate((x0, x1, y0, y1)))
    return {"plan_id": plan_id, **window(columns, lo_x, hi_x, lo_y, hi_y, limit)}
