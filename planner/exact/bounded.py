"""What every exact search shares: its inputs, and the budget it counts nodes against."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planner.exact.model import Model


class BudgetSpent(Exception):
    """The node limit or the deadline was reached before the search ended."""


@dataclass
class BoundedSearch:
    """One search over `model` under `height`, ordering its choices by `order`.

    Subclasses implement ``run() -> offsets | None`` (None: no packing under the height
    exists) and call `tick` once per node; `tick` raises `BudgetSpent` when the budget ends,
    or, with `pause` set (`planner.exact.resume`), calls it when the node limit is reached
    and goes on under the limit it finds on its return.
    """

    model: Model
    height: int
    order: str
    node_limit: int | None = None
    deadline: float | None = None
    nodes: int = 0
    pause: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def run(self) -> np.ndarray | None:
        raise NotImplementedError

    def tick(self) -> None:
        self.nodes += 1
        if self.node_limit is not None and self.nodes > self.node_limit:
            if self.pause is None:
                raise BudgetSpent
            self.pause()
        # The clock is read every 64 nodes: a node costs far less than a clock read is worth.
        if self.deadline is not None and not self.nodes & 63 and time.perf_counter() >= self.deadline:
            raise BudgetSpent
