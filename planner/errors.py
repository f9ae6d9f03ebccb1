"""Errors the planner raises. Each message names what was wrong and what is accepted."""


class PlanningError(Exception):
    """Base class of everything the planner raises on purpose."""


class ProblemError(PlanningError, ValueError):
    """A problem (or plan) that is malformed: the message names the field."""


class UnknownStrategyError(PlanningError, KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown strategy {self.name!r}; accepted: {', '.join(self.known)}"


class InfeasibleError(PlanningError):
    """The buffers do not fit in the pools' capacities."""

    def __init__(self, pool: str, needed: int, capacity: int, strategy: str | None = None) -> None:
        self.pool = pool
        self.needed = needed
        self.capacity = capacity
        self.shortfall = needed - capacity
        self.strategy = strategy
        super().__init__(str(self))

    def __str__(self) -> str:
        plan = f"the {self.strategy} plan" if self.strategy else "the plan"
        return (
            f"pool {self.pool!r} is too small for {plan}: it needs {self.needed:,} bytes, "
            f"the capacity is {self.capacity:,}, short by {self.shortfall:,} bytes"
        )
