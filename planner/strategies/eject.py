"""eject: a greedy plan repaired by ejection chains, aiming at ever lower arena targets.

For problems where many short-lived blocks sit between long-lived small ones (a schedule
computed band by band keeps a few rows of each map alive for many steps between one-step
buffers): a greedy order places the long-lived blocks last, above the short ones' holes.

1. Place the blocks as wic, greedy_by_size and greedy_by_conflicts do; keep the smallest. Stop there at LOAD, or when the problem has
   several pools or a capacity.
2. Pick a target arena halfway between the best plan so far and the highest target known
   to fail (LOAD at first), and repair the current plan towards it:
   a. take a block that ends above the target or is not placed (the largest, or a random
      one in three moves: seeded);
   b. among the offsets where it fits under the target (0 and the aligned ends of the blocks
      live with it), take the one whose overlapping blocks cover the fewest bytes x steps,
      skipping those that hold a block placed in the last few moves (tabu);
   c. put it there, eject the blocks it overlaps and place each of them again, largest
      first, at the lowest offset where it fits under the target; those that fit nowhere
      wait for step a.
3. When every block fits under the target, that plan is the new best; after `max_moves`
   moves without it (20 per block, at most 3,000), the target failed. Bisect until the two
   are one alignment apart, LOAD is reached, or the placements tried (offsets weighed in
   steps b and c) over all targets reach `work` (`DEFAULT_WORK` unless given). With `aim`
   (an arena worth reaching), no target lies above it until a plan reaches it, and the
   search ends when it fails.
4. `time_limit` is a safety cap, not the bound: a search it cuts says so (`stats["capped"]`),
   and its answer then depends on the machine's speed and load.

Where it comes from: ejection chains (Glover, 1996) and the rip-up and re-place loops of
VLSI routing, applied here to offsets in one arena. A local search: never worse than the
greedy plan it starts from, optimal only when it reaches LOAD. Seeded and bounded by the
placements it tries, so its answer does not depend on the machine's speed or load unless the cap cuts it.
On CNNs computed in stripes it places below every greedy order (figures: docs/BENCHMARKS.md,
"Figures behind the code").

Alias groups take part with their profiles: a block overlaps another when any of its
pieces meets a piece of the other in both steps and bytes.
"""

from __future__ import annotations

import time

import numpy as np

from planner.blocks import Blocks
from planner.bounds import load
from planner.orders import CONFLICTED_LARGEST, LARGEST
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register

# Placements tried (an offset weighed for a block) over all targets: the bound of the search, so
# that a busy machine places as a quiet one does (how it was chosen: docs/BENCHMARKS.md,
# "Figures behind the code").
DEFAULT_WORK = 300_000
# Seconds: only a cap against a pathological problem, far above what `DEFAULT_WORK` takes.
DEFAULT_TIME_LIMIT = 60.0
DEFAULT_MAX_MOVES = 3000  # per target
MOVES_PER_BLOCK = 20  # a small problem gives up on a target sooner
ORDERS = ((LARGEST, "first"), (LARGEST, "best"), (CONFLICTED_LARGEST, "first"))  # step 1
TABU = 5  # moves a block just placed stays where it is
RANDOM_PICK = 0.3  # share of moves that repair a random block above the target, not the largest


@register(
    "eject",
    origin="ejection chains (Glover)",
    summary="greedy plan repaired towards lower arena targets by ejecting overlapping blocks; seeded, stops at LOAD",
    slow=True,
    rank=85,
)
def eject(
    problem: Problem,
    *,
    time_limit: float | None = None,
    seed: int = 0,
    max_moves: int | None = None,
    work: int | None = None,
    aim: int | None = None,
    **_: object,
) -> Plan:
    started = time.perf_counter()
    deadline = started + (DEFAULT_TIME_LIMIT if time_limit is None else time_limit)
    placer = Placer(problem)
    b = placer.blocks
    best_off, best = _greedy(placer)
    floor = load(problem)
    moves, tried, start, capped = 0, 0, best, False
    budget = DEFAULT_WORK if work is None else work
    single = len(problem.pools) == 1 and problem.pools[0].capacity is None
    if single and best > floor:
        repair = _Repair(b, best_off, np.random.default_rng(seed))
        limit = min(DEFAULT_MAX_MOVES, MOVES_PER_BLOCK * len(b)) if max_moves is None else max_moves
        low = floor - 1  # the highest target known to fail
        step = int(b.align.max(initial=1))
        while best > floor and best - low > step and repair.tried < budget:
            if time.perf_counter() >= deadline:
                capped = True
                break
            target = max(floor, low + (best - low) // 2)
            if aim is not None and best > aim:
                target = min(target, aim)
                if target <= low:
                    break  # `aim` failed: only arenas at or below it were worth the time
            done = repair.run(target, limit, budget, deadline)
            moves += repair.moves
            capped = repair.capped
            if capped or (done is None and repair.tried >= budget):
                break  # a target cut short has not failed
            if done is None:
                low = target
                repair.reset(best_off)
            else:
                best_off, best = done.copy(), int((done + b.size).max(initial=0))
        tried = repair.tried
    if best < start:
        placer.place_every(best_off)
    stats = {"moves": moves, "tried": tried, "work": budget, "capped": capped, "seed": seed}
    return placer.plan("eject", started, **stats, reached_lower_bound=best <= floor)


def _greedy(placer: Placer) -> tuple[np.ndarray, int]:
    """The smallest of wic's, greedy_by_size's and greedy_by_conflicts' plans (step 1)."""
    found = []
    for rank, (order, rule) in enumerate(ORDERS):
        placer.reset()
        placer.place_all(order.of(placer.blocks), rule)
        found.append((not placer.feasible, placer.arena_bytes, rank, placer.offset.copy()))
    kept = min(found, key=lambda f: f[:3])
    placer.reset()  # the kept plan again, pools and all: it is the answer when nothing is repaired
    placer.place_all(ORDERS[kept[2]][0].of(placer.blocks), ORDERS[kept[2]][1])
    return kept[3], kept[1]


class _Repair:
    """Offsets of every block, moved towards a target by ejection (steps 2a-2c)."""

    def __init__(self, blocks: Blocks, offsets: np.ndarray, rng: np.random.Generator) -> None:
        self.b = blocks
        self.rng = rng
        owner, self.first, self.last, self.height = blocks.pieces()
        self.owner = owner
        self.starts = np.searchsorted(owner, np.arange(len(blocks) + 1))
        self.area = blocks.size * (blocks.last - blocks.first + 1)
        self.reset(offsets)
        self.moves = 0
        self.tried = 0  # placements tried (offsets weighed for a block), all targets together: the work
        self.capped = False  # the last `run` stopped at the time cap

    def reset(self, offsets: np.ndarray) -> None:
        self.off = offsets.astype(np.int64).copy()
        self.placed = np.ones(len(self.b), dtype=bool)
        self.tabu = np.zeros(len(self.b), dtype=np.int64)

    def run(self, target: int, limit: int, budget: int, deadline: float) -> np.ndarray | None:
        """Offsets with every block ending at or below `target`, or None after `limit` moves, once
        `budget` placements have been tried in all, or at `deadline` (the safety cap: `capped`)."""
        b = self.b
        self.moves, self.capped = 0, False
        for move in range(limit):
            ends = np.where(self.placed, self.off + b.size, target + 1)
            over = np.flatnonzero(ends > target)
            if over.size == 0:
                return self.off
            if self.tried >= budget:
                return None
            if move % 64 == 0 and time.perf_counter() > deadline:
                self.capped = True
                return None
            self.moves += 1
            if self.rng.random() < RANDOM_PICK:
                x = int(over[self.rng.integers(over.size)])
            else:
                x = int(over[np.argmax(b.size[over])])
            self.placed[x] = False
            chosen = self._cheapest(x, target, move)
            if chosen is None:
                continue
            offset, hit = chosen
            self.placed[hit] = False
            self.off[x] = offset
            self.placed[x] = True
            self.tabu[x] = move + TABU
            for k in hit[np.argsort(-b.size[hit], kind="stable")]:
                found = self._lowest(int(k), target)
                if found is not None:
                    self.off[k] = found
                    self.placed[k] = True
        return None

    def _neighbours(self, x: int) -> list[tuple[int, np.ndarray]]:
        """(height, pieces of placed blocks live with it) for each piece of block `x`."""
        live = self.placed[self.owner] & (self.height > 0)
        found = []
        for j in range(self.starts[x], self.starts[x + 1]):
            if self.height[j] > 0:
                near = live & (self.first <= self.last[j]) & (self.last >= self.first[j])
                found.append((int(self.height[j]), np.flatnonzero(near)))
        return found

    def _offsets(self, x: int, target: int, near: list[tuple[int, np.ndarray]]) -> list[int]:
        align = int(self.b.align[x])
        ends = np.concatenate(
            [self.off[self.owner[idx]] + self.height[idx] for _, idx in near] + [np.zeros(1, np.int64)]
        )
        aligned = np.unique(-(-ends // align) * align)
        return aligned[aligned + int(self.b.size[x]) <= target].tolist()

    def _cheapest(self, x: int, target: int, move: int) -> tuple[int, np.ndarray] | None:
        """Step 2b: the offset under `target` whose overlapped blocks cover the least area."""
        near = self._neighbours(x)
        best: tuple[int, int, np.ndarray] | None = None
        for offset in self._offsets(x, target, near):
            self.tried += 1
            parts = []
            for height, idx in near:
                start = self.off[self.owner[idx]]
                parts.append(self.owner[idx[(start < offset + height) & (start + self.height[idx] > offset)]])
            hit = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
            if (self.tabu[hit] > move).any():
                continue
            cost = int(self.area[hit].sum())
            if best is None or cost < best[0]:
                best = (cost, offset, hit)
                if cost == 0:
                    break
        return None if best is None else (best[1], best[2])

    def _lowest(self, k: int, target: int) -> int | None:
        """Step 2c: the lowest offset where block `k` overlaps no placed block, under `target`."""
        near = self._neighbours(k)
        for offset in self._offsets(k, target, near):
            self.tried += 1
            clear = True
            for height, idx in near:
                start = self.off[self.owner[idx]]
                if ((start < offset + height) & (start + self.height[idx] > offset)).any():
                    clear = False
                    break
            if clear:
                return offset
        return None
