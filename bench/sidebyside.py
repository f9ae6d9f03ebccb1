"""Timing two callables side by side: the fastest CPU time per call of each, alternating."""

from __future__ import annotations

import time
from collections.abc import Callable


def fastest_per_call(sides: tuple[Callable[[], object], ...], repeat: int, calls: int) -> list[float]:
    """Each side's fastest CPU seconds per call over `repeat` rounds of `calls` calls.

    The sides take turns within every round, so that a busy moment of a shared machine
    falls on both rather than on one; CPU time of this thread, not wall time.
    """
    best = [float("inf")] * len(sides)
    for _ in range(repeat):
        for side, fn in enumerate(sides):
            start = time.process_time()
            for _ in range(calls):
                fn()
            best[side] = min(best[side], (time.process_time() - start) / calls)
    return best
