"""What the exact planner refuses and how it says it cannot fit: shared by the strategies
built on it (`optimal`, `best`), kept here so that importing them registers nothing."""

from __future__ import annotations

import math

from planner.errors import InfeasibleError, ProblemError


class ExactInfeasibleError(InfeasibleError):
    """No plan within the capacity: proven (`proven` True) or none found in the budget."""

    def __init__(
        self, pool: str, needed: int, capacity: int, *, proven: bool, lower_bound: int, nodes: int = 0
    ) -> None:
        self.proven = proven
        self.lower_bound = lower_bound
        self.nodes = nodes  # search nodes spent before giving up (0: refused without search)
        super().__init__(pool, needed, capacity, "optimal")

    def __str__(self) -> str:
        if self.proven:
            why = f"proven: no plan fits in fewer than {self.lower_bound:,} bytes"
        else:
            why = (
                f"not proven: no plan within the capacity was found before the time limit; "
                f"the proven lower bound is {self.lower_bound:,} bytes"
            )
        return f"{super().__str__()} ({why})"


def check_time_limit(time_limit: object, default: float) -> float:
    """The time limit in seconds; refuses zero, negative and non-numbers with `ProblemError`."""
    if time_limit is None:
        return default
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or math.isnan(time_limit):
        raise ProblemError(f"time_limit: must be a number of seconds > 0, got {time_limit!r}")
    if time_limit <= 0:
        raise ProblemError(f"time_limit: must be > 0 seconds, got {time_limit}")
    return float(time_limit)
