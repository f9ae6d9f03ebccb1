"""Room on Python's stack for a search that recurses once per placed block."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_raised = 0  # searches currently running with the limit raised
_saved = 0  # the limit found by the first of them, put back by the last


@contextmanager
def deep_recursion(frames: int) -> Iterator[None]:
    """Let the caller recurse `frames` deeper than it is now; the limit is put back after.

    The limit is process-wide: while any search needs it raised it stays raised, and the
    last search to finish restores the value found by the first.
    """
    global _raised, _saved
    needed = frames + 300 + _depth()
    with _lock:
        if _raised == 0:
            _saved = sys.getrecursionlimit()
        _raised += 1
        if sys.getrecursionlimit() < needed:
            sys.setrecursionlimit(needed)
    try:
        yield
    finally:
        with _lock:
            _raised -= 1
            if _raised == 0:
                sys.setrecursionlimit(_saved)


def _depth() -> int:
    """How many frames are on the caller's stack."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth
