"""The services' one LRU map, against a plain model of least-recently-used eviction."""

from __future__ import annotations

import random
import threading

import pytest

from app.services.cache import LRU


def test_random_operations_match_a_list_model_of_recency():
    rng = random.Random(0)
    cache: LRU[int, int] = LRU(4)
    recency: list[int] = []  # least recent first
    values: dict[int, int] = {}
    for step in range(2000):
        key = rng.randrange(8)
        if rng.random() < 0.5:
            cache.put(key, step)
            values[key] = step
            recency = [k for k in recency if k != key] + [key]
            if len(recency) > 4:
                values.pop(recency.pop(0))
        else:
            expected = values.get(key)
            assert cache.get(key) == expected
            if expected is not None:
                recency = [k for k in recency if k != key] + [key]
        assert len(cache) == len(recency)


def test_forget_drops_only_the_rejected_keys_and_get_or_make_makes_once():
    cache: LRU[tuple[str, int], str] = LRU(8)
    for i in range(3):
        cache.put(("a", i), f"a{i}")
        cache.put(("b", i), f"b{i}")
    cache.forget(lambda key: key[0] != "a")
    assert [cache.get(("a", i)) for i in range(3)] == [None, None, None]
    assert [cache.get(("b", i)) for i in range(3)] == ["b0", "b1", "b2"]
    made = []
    assert cache.get_or_make(("c", 0), lambda: made.append(1) or "c0") == "c0"
    assert cache.get_or_make(("c", 0), lambda: made.append(1) or "other") == "c0"
    assert made == [1]


def test_concurrent_writers_never_exceed_the_size():
    cache: LRU[int, int] = LRU(16)

    def write(offset: int) -> None:
        for i in range(2000):
            cache.put(offset * 10_000 + i, i)
            cache.get(offset * 10_000 + i // 2)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 16


def test_a_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        LRU(0)
