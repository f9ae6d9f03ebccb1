"""What one `Session.run` cost: the arena, bytes allocated beside it, time per step, copies."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepRecord:
    index: int
    node: str
    op_type: str
    seconds: float


@dataclass
class RunStats:
    """What one `run` cost: the arena, bytes allocated beside it, time per step, copies."""

    arena_bytes: int
    outside_arena_bytes: int | None  # tracemalloc peak during the loop; None when not measured
    seconds: float
    trace: list[StepRecord] = field(default_factory=list)
    copies: int = 0  # arrays copied into or out of the arena (inputs, outputs, non-aliased views)
    copied_bytes: int = 0
    constant_bytes: int = 0  # parameters, kept outside the arena
    fallbacks: dict[str, str] = field(default_factory=dict)  # bound tensor -> why it was copied

    @property
    def step_seconds(self) -> list[float]:
        return [r.seconds for r in self.trace]

    @property
    def outside_ratio(self) -> float | None:
        if self.outside_arena_bytes is None:
            return None
        return self.outside_arena_bytes / self.arena_bytes if self.arena_bytes else 0.0

    def count_copy(self, nbytes: int) -> None:
        self.copies += 1
        self.copied_bytes += nbytes
