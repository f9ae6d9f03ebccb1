"""Rematerialization: the step with recomputation gives bit-identical losses and gradients (canary on),
the exhaustive search equals a brute force written here, and the curve never inverts."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

import planner
from runtime.errors import ModelError
from runtime.training import TrainingSession, build_training_step, models, training_problem
from runtime.training.remat import candidates, node_flops, recomputed_nodes, rematerialize, step_flops
from runtime.training.remat_search import Point, choose, pareto, search


def _feeds(step, seed=0):
    rng = np.random.default_rng(seed)
    x = step.graph.tensors["x"]
    classes = step.graph.tensors[step.graph.node(step.loss_node).inputs[0]].shape[1]
    return {"x": rng.standard_normal(x.shape).astype(x.dtype), step.label: rng.integers(0, classes, (x.shape[0],))}


def _tiny_mobilenet(dtype=np.float32):
    blocks = ((1, 8, 1, 1), (2, 8, 2, 1), (2, 16, 1, 2))
    return models.mobilenet_v2_like(batch=4, size=8, classes=4, width=0.25, blocks=blocks, dtype=dtype)


NETWORKS = {
    "mobilenet": _tiny_mobilenet,
    "transformer": lambda: models.transformer_encoder(batch=2, tokens=4, features=8, heads=2, layers=2, classes=3),
    "resnet": lambda: models.resnet18_like(batch=4, size=32, classes=3, width=4, stages=(1, 2)),
}


@pytest.mark.parametrize("case", sorted(NETWORKS))
def test_recomputed_step_is_bit_identical_and_canary_clean(case):
    step = build_training_step(NETWORKS[case](), optimizer="none", recompute=False)
    result = search(step, overhead=0.3, strategy="greedy_by_size", time_limit=5)
    if case != "resnet":  # the small ResNet's peak is its stem convolution's scratch: nothing to recompute
        assert result.chosen.recomputed and result.chosen.arena_bytes < result.without.arena_bytes
    plan = result.plan
    if result.chosen.recomputed:
        remat = result.step
    else:
        remat = rematerialize(step, [c.name for c in candidates(step)][1::2])
        plan = planner.plan(training_problem(remat), "greedy_by_size")
    assert remat is not None and recomputed_nodes(remat)
    feeds = _feeds(step)
    plain = TrainingSession(step, "greedy_by_size").prepare()
    again = TrainingSession(remat, plan, canary=True).prepare()
    assert again.run(feeds) == plain.run(feeds)
    ours, theirs = again.gradients(), plain.gradients()
    assert all(np.array_equal(ours[w], theirs[w]) for w in step.trainable)
    # The planned arena the session runs in is the one the search reported.
    assert again.plan.arena_bytes == plan.arena_bytes


def test_training_with_recomputation_takes_the_same_steps():
    step = build_training_step(_tiny_mobilenet(), optimizer="sgd", recompute=False)
    everything = [c.name for c in candidates(step)][::2]
    remat = rematerialize(step, everything)
    feeds = _feeds(step, 1)
    a, b = TrainingSession(step).prepare(), TrainingSession(remat, canary=True).prepare()
    losses = [(a.run(feeds), b.run(feeds)) for _ in range(5)]
    assert all(x == y for x, y in losses)
    assert losses[-1][0] < losses[0][0]
    pa, pb = a.parameters(), b.parameters()
    assert all(np.array_equal(pa[w], pb[w]) for w in step.trainable)


def _brute_force(step, overhead, strategy="greedy_by_size"):
    """Every subset of the candidates within `overhead`, placed: the smallest arena (an oracle written
    from the public pieces, not from the search)."""
    names = [c.name for c in candidates(step)]
    total = step_flops(step)
    best = None
    for k in range(len(names) + 1):
        for subset in combinations(names, k):
            remat = rematerialize(step, subset)
            extra = sum(node_flops(remat.graph, n) for n in recomputed_nodes(remat)) / total
            if extra > overhead + 1e-12:
                continue
            arena = planner.plan(training_problem(remat), strategy).arena_bytes
            if best is None or (arena, extra) < best:
                best = (arena, extra)
    return best


def _mlp():
    return models.mlp(batch=4, inputs=16, hidden=(32, 24), classes=3)


def _cnn():
    return models.small_cnn(batch=2, size=6, channels=(3, 4), classes=3)


# The CNN's 10 candidates at 50% would place all 1,024 subsets here (16 s): tests/runtime/training/
# test_remat_exact.py compares every level on random steps instead.
@pytest.mark.parametrize(
    ("network", "overhead"), [(_mlp, 0.05), (_mlp, 0.5), (_cnn, 0.05)], ids=["mlp-5%", "mlp-50%", "cnn-5%"]
)
def test_exact_search_equals_brute_force(network, overhead):
    step = build_training_step(network(), optimizer="sgd", recompute=False)
    assert 2 <= len(candidates(step)) <= 10
    result = search(step, overhead=overhead, strategy="greedy_by_size")
    assert result.method == "exact"
    arena, extra = _brute_force(step, overhead)
    assert result.chosen.arena_bytes == arena
    assert result.chosen.extra_flops == pytest.approx(extra)
    heuristic = search(step, overhead=overhead, strategy="greedy_by_size", method="heuristic", time_limit=10)
    assert heuristic.chosen.arena_bytes >= arena  # never below the optimum: both are placed the same way


def test_curve_never_inverts_and_budgets_below_reach_get_the_closest_point():
    step = build_training_step(NETWORKS["transformer"](), optimizer="sgd", recompute=False)
    result = search(step, overhead=0.3, strategy="greedy_by_size", time_limit=5)
    curve = result.curve
    assert all(
        a.extra_flops <= b.extra_flops and a.arena_bytes > b.arena_bytes for a, b in zip(curve, curve[1:], strict=False)
    )
    budgets = sorted({p.arena_bytes for p in curve} | {p.arena_bytes + 1 for p in curve}, reverse=True)
    arenas = [choose(curve, b, 0.3)[0].arena_bytes for b in budgets]
    assert all(a >= b for a, b in zip(arenas, arenas[1:], strict=False))
    point, met = choose(curve, 1, 0.3)
    assert not met and point.arena_bytes == min(p.arena_bytes for p in curve if p.extra_flops <= 0.3)
    overheads = [0.0, 0.01, 0.05, 0.1, 0.2, 0.3]
    by_overhead = [choose(curve, None, f)[0].arena_bytes for f in overheads]
    assert all(a >= b for a, b in zip(by_overhead, by_overhead[1:], strict=False))


def test_pareto_keeps_the_best_arena_at_each_level():
    points = [Point(("a",), 0.1, 90), Point(("b",), 0.2, 95), Point(("c",), 0.05, 100), Point((), 0.0, 120)]
    assert [p.arena_bytes for p in pareto(points)] == [120, 100, 90]


def test_unknown_tensor_is_refused_by_name():
    step = build_training_step(NETWORKS["transformer"](), optimizer="none")
    with pytest.raises(ModelError, match="nope"):
        rematerialize(step, ["nope"])


def test_the_exhaustive_search_keeps_to_its_time_limit():
    step = build_training_step(models.small_cnn(batch=2, size=6, channels=(3, 4), classes=3), recompute=False)
    result = search(step, overhead=0.5, time_limit=0.0)
    assert result.method == "partial" and result.evaluated <= 3  # no remat, sqrt(n), and nothing more
    assert result.chosen.arena_bytes <= result.without.arena_bytes
