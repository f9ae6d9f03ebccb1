"""The greedy orders as data (planner.orders): a piece order named after a strategy places a
problem exactly as that strategy does, and every order breaks ties by block index."""

from __future__ import annotations

import numpy as np
import pytest

from planner.generate import network_like, training_like
from planner.orders import PIECE_ORDERS, by
from planner.placement import Placer
from planner.registry import registered


@pytest.mark.parametrize(
    "problem", [network_like(300, seed=3), training_like(400, seed=1)], ids=["network", "training"]
)
@pytest.mark.parametrize("name", [name for name, _, _ in PIECE_ORDERS if name in registered()])
def test_a_piece_order_named_after_a_strategy_places_as_that_strategy(problem, name):
    order, rule = next((order, rule) for n, order, rule in PIECE_ORDERS if n == name)
    placer = Placer(problem)
    placer.place_all(order.of(placer.blocks), rule=rule)
    ours = placer.plan(name, 0.0)
    theirs = registered()[name](problem)
    assert ours.arena_bytes == theirs.arena_bytes
    assert {k: v.offset for k, v in ours.offsets.items()} == {k: v.offset for k, v in theirs.offsets.items()}


def test_ties_go_to_the_lower_index_whatever_the_keys():
    keys = np.array([2, 1, 2, 1, 0])
    assert by(keys).tolist() == [4, 1, 3, 0, 2]
    assert by(-keys).tolist() == [0, 2, 1, 3, 4]
    with pytest.raises(ValueError, match="at least one key"):
        by()
