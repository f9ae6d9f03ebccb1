"""Sort keys shared by strategies. Every order ends in the block index, a unique tie-breaker,
so that a strategy places the same problem the same way every time."""

from __future__ import annotations

import numpy as np


def by(*keys: np.ndarray) -> np.ndarray:
    """Indices sorted by the given keys, most significant first, then by index."""
    if not keys:
        raise ValueError("by() needs at least one key")
    index = np.arange(len(keys[0]))
    return np.lexsort((index, *reversed(keys)))
