"""Lifetime analysis: from a neutral schedule to a `Problem`.

A schedule is a list of steps, each naming the buffers it reads, writes and uses as
scratch. The rules, the same as TensorFlow Lite Micro's and ONE's:

1. A buffer is live from the step that first writes it to the step that last reads it.
2. Graph inputs are live from step 0 (the caller fills them before the first step).
3. Graph outputs are live until the last step (the caller reads them after it).
4. Scratch is live for exactly the one step that uses it.
5. A buffer written but never read lives for the step that writes it.

This module only computes ranges; placing them is the strategies' business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.errors import ProblemError
from planner.problem import DEFAULT_POOL, Buffer, Pool, Problem


@dataclass(frozen=True)
class Step:
    name: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schedule:
    steps: Sequence[Step]
    sizes: Mapping[str, int]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    kinds: Mapping[str, str] = field(default_factory=dict)
    aliases: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # id -> (aliased id, byte offset)
    # Buffers that never enter the arena (e.g. constants a runtime keeps elsewhere).
    excluded: frozenset[str] = frozenset()


def live_ranges(schedule: Schedule) -> dict[str, tuple[int, int]]:
    """Inclusive (first, last) step of every buffer the schedule touches."""
    last_step = max(len(schedule.steps) - 1, 0)
    first: dict[str, int] = {name: 0 for name in schedule.inputs}
    last: dict[str, int] = {name: 0 for name in schedule.inputs}
    for t, step in enumerate(schedule.steps):
        for name in step.writes:
            first.setdefault(name, t)
            last[name] = max(last.get(name, t), t)
        for name in step.reads:
            if name not in first:
                raise ProblemError(
                    f"step {t} ({step.name}) reads {name!r} before any step writes it and it is not a graph input"
                )
            last[name] = max(last[name], t)
        for name in step.scratch:
            if name in first:
                raise ProblemError(f"scratch buffer {name!r} of step {t} ({step.name}) is used by another step too")
            first[name] = last[name] = t
    for name in schedule.outputs:
        if name not in first:
            raise ProblemError(f"graph output {name!r} is never written by any step")
        last[name] = last_step
    return {name: (first[name], last[name]) for name in first}


def problem_from_schedule(
    schedule: Schedule,
    *,
    alignment: int = 1,
    pools: Iterable[Pool] | None = None,
    name: str | None = None,
) -> Problem:
    """The planning problem of a schedule: one buffer per tensor, in order of first use."""
    ranges = live_ranges(schedule)
    inputs, outputs = set(schedule.inputs), set(schedule.outputs)
    buffers = []
    for buffer_id, (first, last) in sorted(ranges.items(), key=lambda kv: (kv[1][0], kv[0])):
        if buffer_id in schedule.excluded:
            continue
        if buffer_id not in schedule.sizes:
            raise ProblemError(f"buffer {buffer_id!r} has no size")
        kind = schedule.kinds.get(buffer_id) or (
            "output" if buffer_id in outputs else "input" if buffer_id in inputs else "activation"
        )
        alias = schedule.aliases.get(buffer_id)
        buffers.append(
            Buffer(
                id=buffer_id,
                size=int(schedule.sizes[buffer_id]),
                first=first,
                last=last,
                kind=kind,
                alias_of=alias[0] if alias else None,
                alias_offset=alias[1] if alias else 0,
            )
        )
    return Problem(
        buffers=tuple(buffers),
        steps=len(schedule.steps),
        alignment=alignment,
        pools=tuple(pools) if pools else (Pool(DEFAULT_POOL),),
        step_names=tuple(s.name for s in schedule.steps),
        name=name,
    )
