"""Which forward tensors to recompute: a search scored by the placed arena, and its Pareto curve.

Every choice of tensors (`runtime.training.remat.candidates`) is scored by the arena memplan's
planner places for the rematerialized step (`training_problem`, then the strategy) and by its
extra FLOPs (its recomputed ops' over the step's). The search:

1. Scores no recomputation, and sqrt(n) checkpointing (Chen et al., 2016) as a baseline: the
   forward pass's articulation tensors (the only activation crossing a cut) every ceil(sqrt(n))-th
   kept, everything else recomputed.
2. Exact when there are at most `exact_up_to` candidates (`runtime.training.remat_exact`: branch
   and bound over the choices within `overhead`, each placed or proven no better by its LOAD; the
   smallest arena the strategy places at every extra-FLOPs level), unless the time limit stops it
   first (method "partial").
3. Otherwise greedy then local search, until `time_limit`: at each round the moves (add one
   segment between articulation tensors, or one tensor backward reads with the tensors its
   recomputation needs, ranked by bytes freed per FLOP) are placed in that order, and the first
   among the next few that lowers the arena plus the placed problem's lower bound (which moves on
   a plateau of the arena) is kept; then single tensors are dropped or added around that point
   while that improves it, and runs of the tensors live at the peak step are added together,
   which single adds miss; again while that improves it.
4. The curve keeps, over every point placed, the smallest arena at or under each extra-FLOPs
   level (so a larger budget never gives a larger arena); the chosen point is the cheapest one
   whose arena meets the budget within `overhead`, else the smallest arena there (budget not met).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import planner
from planner import Plan, Problem
from runtime.errors import ModelError
from runtime.options import MemoryOptions
from runtime.training.build import TrainingStep
from runtime.training.plans import training_problem
from runtime.training.remat import Rematerializer, backward_reads, candidates, forward_length, step_flops
from runtime.training.remat_exact import exact_curve

FIXED_KINDS = ("trainable", "gradient", "optimizer")  # what no recomputation can remove
METHODS = ("auto", "exact", "heuristic")
PEAK_TENSORS = 8  # at most so many tensors live at the peak are tried together: 36 runs


@dataclass(frozen=True)
class Point:
    recomputed: tuple[str, ...]  # in forward order
    extra_flops: float  # fraction of the step's FLOPs
    arena_bytes: int


@dataclass
class RematResult:
    chosen: Point
    without: Point
    curve: list[Point]
    budget_met: bool
    fixed_bytes: int  # trainable parameters, their gradients and optimizer state at their peak
    method: str  # "exact", "heuristic", or "partial" (the exact search stopped by the time limit)
    seconds: float
    evaluated: int
    sqrt_checkpoints: Point | None = None
    step: TrainingStep | None = field(default=None, repr=False)  # the step with `chosen` recomputed
    plan: Plan | None = field(default=None, repr=False)  # its placed, checked unified plan

    def activation_bytes(self, point: Point) -> int:
        return max(point.arena_bytes - self.fixed_bytes, 0)

    def report(self) -> dict:
        """The fields `train-plan --json` and the REST answer carry under ``remat``."""
        return {
            "recomputed": list(self.chosen.recomputed),
            "extra_flops": round(self.chosen.extra_flops, 6),
            "arena_bytes": self.chosen.arena_bytes,
            "arena_bytes_without": self.without.arena_bytes,
            "activation_bytes": self.activation_bytes(self.chosen),
            "activation_bytes_without": self.activation_bytes(self.without),
            "budget_met": self.budget_met,
            "curve": [{"extra_flops": round(p.extra_flops, 6), "arena_bytes": p.arena_bytes} for p in self.curve],
        }


class Scorer:
    """Places the rematerialized step of each choice once (memoized); counts the placements. Its
    problem's LOAD (`bound`) comes first and alone, without placing: the placed arena is never below it,
    so a choice whose LOAD already loses needs no placement."""

    def __init__(self, step: TrainingStep, strategy: str, options: MemoryOptions | None) -> None:
        self.step, self.strategy, self.options = step, strategy, options
        self.remat = Rematerializer(step)
        self.cands = {c.name: c for c in candidates(step)}
        self.total = max(step_flops(step), 1)
        self.points: dict[frozenset[str], Point] = {}
        self.load: dict[frozenset[str], int] = {}  # each problem's LOAD, placed or not
        self.pending: dict[frozenset[str], Problem] = {}  # problems bounded, not yet placed (the last few)
        self.kept = backward_reads(step)
        self.producer_inputs = {
            n.name: [i for i in n.inputs if i in self.cands] for n in step.graph.nodes[: forward_length(step)]
        }

    def flops(self, chosen: Iterable[str]) -> float:
        producers = {self.cands[n].producer: self.cands[n].flops for n in chosen}
        return sum(producers.values()) / self.total

    def problem(self, chosen: Iterable[str]) -> tuple[TrainingStep, Problem]:
        step = self.remat(chosen)
        return step, training_problem(step, self.options)

    def bound(self, chosen: Iterable[str]) -> int:
        """The LOAD of the choice's problem: a lower bound on its placed arena, found without placing."""
        key = frozenset(chosen)
        if key not in self.load:
            problem = self.problem(key)[1]
            self.load[key] = planner.load(problem)
            self.pending[key] = problem
            while len(self.pending) > 64:
                self.pending.pop(next(iter(self.pending)))
        return self.load[key]

    def dominated(self, chosen: frozenset[str]) -> bool:
        """Whether a point placed already has an arena at most the choice's LOAD for at most its FLOPs:
        then placing the choice cannot lower the curve."""
        flops, load = self.flops(chosen), self.bound(chosen)
        return any(p.extra_flops <= flops + 1e-12 and p.arena_bytes <= load for p in self.points.values())

    def __call__(self, chosen: Iterable[str]) -> Point:
        key = frozenset(chosen)
        if key not in self.points:
            problem = self.pending.pop(key, None) or self.problem(key)[1]
            plan = planner.plan(problem, self.strategy)
            order = tuple(sorted(key, key=lambda n: (self.cands[n].position, n)))
            self.points[key] = Point(order, self.flops(key), plan.arena_bytes)
            self.load[key] = plan.lower_bound
        return self.points[key]

    def closure(self, name: str) -> frozenset[str]:
        """`name` and the forward tensors its recomputation needs that backward does not keep anyway."""
        out, todo = {name}, [name]
        while todo:
            for i in self.producer_inputs[self.cands[todo.pop()].producer]:
                if i not in out and i not in self.kept:
                    out.add(i)
                    todo.append(i)
        return frozenset(out)


def pareto(points: Iterable[Point]) -> list[Point]:
    """The points where the smallest arena at or under each extra-FLOPs level drops; ties by fewer tensors."""
    curve: list[Point] = []
    for p in sorted(points, key=lambda p: (p.extra_flops, p.arena_bytes, len(p.recomputed), p.recomputed)):
        if not curve or p.arena_bytes < curve[-1].arena_bytes:
            curve.append(p)
    return curve


def choose(curve: list[Point], budget: int | None, overhead: float) -> tuple[Point, bool]:
    """The cheapest curve point within `overhead` whose arena meets `budget` (None: the smallest arena
    within `overhead`); when none meets it, the smallest arena within `overhead`, and False."""
    within = [p for p in curve if p.extra_flops <= overhead + 1e-12] or curve[:1]
    smallest = min(within, key=lambda p: (p.arena_bytes, p.extra_flops))
    if budget is None:
        return smallest, True
    meeting = [p for p in within if p.arena_bytes <= budget]
    return (meeting[0], True) if meeting else (smallest, False)


def articulations(step: TrainingStep) -> list[str]:
    """Forward activations that are, right after they are made, the only activation a later forward node reads."""
    graph = step.graph
    fwd = graph.nodes[: forward_length(step)]
    last: dict[str, int] = {}
    for i, node in enumerate(fwd):
        for n in node.inputs:
            if n and n not in graph.constants and n in graph.tensors and graph.tensors[n].kind == "activation":
                last[n] = i
    made: dict[str, int] = {o: i for i, node in enumerate(fwd) for o in node.outputs if o}
    out = []
    for i, node in enumerate(fwd):
        crossing = [n for n, end in last.items() if made.get(n, -1) <= i < end]
        if len(crossing) == 1 and crossing[0] in node.outputs:
            out.append(crossing[0])
    return out


def search(
    step: TrainingStep,
    *,
    budget: int | None = None,
    budget_fraction: float | None = None,
    overhead: float = 0.2,
    strategy: str = planner.DEFAULT_STRATEGY,
    options: MemoryOptions | None = None,
    time_limit: float = 30.0,
    exact_up_to: int = 12,
    method: str = "auto",
) -> RematResult:
    """The recomputation choice for `step` (see the module docstring); `budget` in bytes of arena, or
    `budget_fraction` of the arena without recomputation."""
    started = time.perf_counter()
    score = Scorer(step, strategy, options)
    names = list(score.cands)
    without = score(())
    if method not in METHODS:
        raise ModelError(f"method={method!r}: accepted values are {', '.join(METHODS)}")
    exact = method == "exact" or (method == "auto" and len(names) <= exact_up_to)
    sqrt_point = _sqrt_checkpoints(step, score)
    deadline = started + time_limit
    kind = "heuristic"
    if exact:
        kind = "exact" if exact_curve(score, overhead, deadline) else "partial"
    else:
        best = _greedy(step, score, overhead, deadline)
        tried: set[frozenset[str]] = set()
        while time.perf_counter() < deadline:
            best = _local(score, best, overhead, deadline)
            # From where the local search ended, and from the cheapest smallest arena (often a drop away
            # from it, its peak elsewhere); each start once.
            starts = [c for c in dict.fromkeys((best, _smallest(score, overhead))) if c not in tried]
            tried.update(starts)
            moved = [m for m in (_at_the_peak(score, c, overhead, deadline) for c in starts) if m not in starts]
            if not moved:
                break
            best = moved[0]
    curve = pareto(score.points.values())
    if budget_fraction is not None:
        budget = math.floor(budget_fraction * without.arena_bytes)
    chosen, met = choose(curve, budget, overhead)
    remat_step, problem = score.problem(chosen.recomputed)
    plan = planner.plan(problem, strategy)
    checked = planner.check_plan(problem, plan)
    if not checked.ok:  # the strategies' own tests make this unreachable; never hand on a wrong plan
        raise ModelError(f"the {strategy} plan of the rematerialized step is invalid: {checked.violations[:3]}")
    return RematResult(
        chosen,
        without,
        curve,
        met,
        _fixed_bytes(score.problem(())[1]),
        kind,
        time.perf_counter() - started,
        len(score.points),
        sqrt_point,
        remat_step,
        plan,
    )


def _fixed_bytes(problem: Problem) -> int:
    live = [0] * (problem.steps + 1)
    for b in problem.buffers:
        if b.alias_of is None and b.kind in FIXED_KINDS:
            live[b.first] += b.size
            live[b.last + 1] -= b.size
    peak = running = 0
    for delta in live:
        running += delta
        peak = max(peak, running)
    return peak


def _sqrt_checkpoints(step: TrainingStep, score: Scorer) -> Point | None:
    cuts = [n for n in articulations(step) if n in score.cands]
    if not cuts:
        return None
    every = math.ceil(math.sqrt(len(cuts)))
    kept = set(cuts[every - 1 :: every])
    return score([n for n in score.cands if n not in kept])


def _segments(step: TrainingStep, score: Scorer) -> list[list[str]]:
    """Candidates grouped between consecutive articulation tensors (each segment ends with its articulation)."""
    cuts = set(articulations(step))
    groups: list[list[str]] = [[]]
    for c in sorted(score.cands.values(), key=lambda c: (c.position, c.name)):
        groups[-1].append(c.name)
        if c.name in cuts:
            groups.append([])
    return [g for g in groups if g]


def _moves(step: TrainingStep, score: Scorer, chosen: frozenset[str]) -> list[frozenset[str]]:
    """Additions to `chosen`, by bytes freed per FLOP (most first): each tensor backward reads with what
    its recomputation needs (`Scorer.closure`), and whole segments between articulation tensors."""
    cands = score.cands
    moves = [score.closure(n) - chosen for n in cands if n in score.kept and n not in chosen]
    moves += [frozenset(g) - chosen for g in _segments(step, score)]
    moves = [m for m in dict.fromkeys(moves) if m]

    def density(m: frozenset[str]) -> tuple[float, tuple[str, ...]]:
        freed = sum(cands[n].nbytes for n in m if n in score.kept)
        return (-freed / (1.0 + sum(cands[n].flops for n in m)), tuple(sorted(m)))

    return sorted(moves, key=density)


def _better(score: Scorer, a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether choice `a` beats `b`: a smaller arena plus LOAD (LOAD moves on a plateau of the arena), then
    fewer FLOPs. A side not placed yet whose twice LOAD already decides it against the other's placed
    score, and whose LOAD could not lower the curve either, is not placed (its arena is at least its LOAD)."""
    if a not in score.points and b in score.points and 2 * score.bound(a) > _key(score, b) and score.dominated(a):
        return False
    if b not in score.points and a in score.points and 2 * score.bound(b) > _key(score, a) and score.dominated(b):
        return True
    return (_key(score, a), score(a).extra_flops) < (_key(score, b), score(b).extra_flops)


def _key(score: Scorer, chosen: frozenset[str]) -> int:
    return score(chosen).arena_bytes + score.load[chosen]


def _greedy(step: TrainingStep, score: Scorer, overhead: float, deadline: float, width: int = 6) -> frozenset[str]:
    """Take the first improving move among the next `width` in density order, again and again, until none
    of them improves (scanning every move instead spends the time limit on moves that do not pay: on the
    MobileNetV2-like step it stalls at +0.8% FLOPs, where the local search goes on to +19%)."""
    chosen: frozenset[str] = frozenset()
    score(chosen)
    moved = True
    while moved and time.perf_counter() < deadline:
        moved, tried = False, 0
        for move in _moves(step, score, chosen):
            trial = chosen | move
            if score.flops(trial) > overhead + 1e-12:
                continue
            tried += 1
            if _better(score, trial, chosen):
                chosen, moved = trial, True
                break
            if tried >= width or time.perf_counter() >= deadline:
                break
    return chosen


def _local(score: Scorer, start: frozenset[str], overhead: float, deadline: float) -> frozenset[str]:
    """Rounds, until one changes nothing or the time is up: drop single recomputed tensors (dearest first)
    while that does not make the point worse, then add the largest tensors backward reads, with their
    closures, while that makes it better."""
    current, before = start, None
    while current != before and time.perf_counter() < deadline:
        before = current
        for name in sorted(current, key=lambda n: (-score.cands[n].flops, n)):
            if time.perf_counter() >= deadline:
                return current
            trial = current - {name}
            if trial != current and not _better(score, current, trial):
                current = trial
        for c in sorted(score.cands.values(), key=lambda c: (-c.nbytes, c.name)):
            if time.perf_counter() >= deadline:
                return current
            if c.name in score.kept and c.name not in current:
                trial = current | score.closure(c.name)
                if score.flops(trial) <= overhead + 1e-12 and _better(score, trial, current):
                    current = trial
    return current


def _smallest(score: Scorer, overhead: float) -> frozenset[str]:
    """The placed choice within `overhead` with the smallest arena, then the fewest FLOPs."""
    within = [
        (p.arena_bytes, p.extra_flops, p.recomputed, c)
        for c, p in score.points.items()
        if p.extra_flops <= overhead + 1e-12
    ]
    return min(within)[3]


def _at_the_peak(score: Scorer, current: frozenset[str], overhead: float, deadline: float) -> frozenset[str]:
    """A move single adds miss: tensors backward reads that are live at the current problem's peak step,
    taken together (each alone may leave the peak where it is, as a layer's queries, keys and values do):
    all of them, then every run of them in the order they were made (shortest last; a run of the earliest
    made moves their copies furthest from the peak), the first that lowers the arena plus LOAD. `current`
    when none does."""
    problem = score.problem(current)[1]
    peak = planner.peak_step(problem)
    live = {b.id for b in problem.buffers if b.first <= peak <= b.last}
    names = sorted(
        (n for n in live if n in score.kept and n in score.cands and n not in current),
        key=lambda n: (score.cands[n].position, n),
    )[:PEAK_TENSORS]
    runs = [names[i : i + k] for k in range(len(names), 0, -1) for i in range(len(names) - k + 1)]
    for run in runs:
        if time.perf_counter() >= deadline:
            break
        trial = current.union(*(score.closure(n) for n in run))
        if score.flops(trial) <= overhead + 1e-12 and _better(score, trial, current):
            return trial
    return current
