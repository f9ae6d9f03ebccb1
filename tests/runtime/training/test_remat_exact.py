"""The exact recomputation search against placing every subset, on small random training steps: the same
smallest arena at every extra-FLOPs level, and never more placements."""

from __future__ import annotations

import time
from itertools import combinations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import planner
from runtime.errors import ModelError
from runtime.training import build_training_step, training_problem
from runtime.training.remat import candidates, node_flops, recomputed_nodes, rematerialize, step_flops
from runtime.training.remat_exact import canonical_choices
from runtime.training.remat_search import Scorer, search

LEVELS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 1.0)


def random_network(seed: int, layers: int = 6, batch: int = 4, classes: int = 3) -> onnx.ModelProto:
    """A random chain of MatMul, Relu/Tanh/Sigmoid and Add/Mul joins with an earlier map of the same width."""
    rng = np.random.default_rng(seed)
    widths = [int(w) for w in rng.choice([4, 8, 16, 32], size=3)]
    width = int(rng.choice(widths))
    nodes, inits, same_width = [], [], {width: ["x"]}
    current, first = "x", width
    for i in range(layers):
        kind, out = rng.choice(["matmul", "act", "join"], p=[0.4, 0.35, 0.25]), f"t{i}"
        if kind == "matmul":
            w = int(rng.choice(widths))
            weight = (rng.standard_normal((width, w)) * 0.3).astype(np.float32)
            inits.append(numpy_helper.from_array(weight, f"W{i}"))
            nodes.append(helper.make_node("MatMul", [current, f"W{i}"], [out]))
            width = w
        elif kind == "act":
            nodes.append(helper.make_node(str(rng.choice(["Relu", "Tanh", "Sigmoid"])), [current], [out]))
        else:
            peers = same_width.get(width, [current])
            nodes.append(
                helper.make_node(str(rng.choice(["Add", "Mul"])), [current, peers[rng.integers(len(peers))]], [out])
            )
        same_width.setdefault(width, []).append(out)
        current = out
    inits.append(numpy_helper.from_array((rng.standard_normal((width, classes)) * 0.3).astype(np.float32), "Wout"))
    nodes.append(helper.make_node("MatMul", [current, "Wout"], ["y"]))
    graph = helper.make_graph(
        nodes,
        f"random{seed}",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, first])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, classes])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _every_subset(step, strategy="greedy_by_size"):
    """(extra FLOPs, arena) of every subset of the candidates, each rematerialized, counted and placed here."""
    names = [c.name for c in candidates(step)]
    total = step_flops(step)
    out = []
    for k in range(len(names) + 1):
        for subset in combinations(names, k):
            remat = rematerialize(step, subset)
            extra = sum(node_flops(remat.graph, n) for n in recomputed_nodes(remat)) / total
            out.append((extra, planner.plan(training_problem(remat), strategy).arena_bytes))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_exact_curve_equals_placing_every_subset(seed):
    step = build_training_step(random_network(seed), optimizer="sgd", recompute=False)
    assert 3 <= len(candidates(step)) <= 8
    every = _every_subset(step)
    result = search(step, overhead=1.0, method="exact", time_limit=60)
    assert result.method == "exact"
    assert result.evaluated <= len(every)
    for level in LEVELS:
        best = min(arena for extra, arena in every if extra <= level + 1e-12)
        found = min(p.arena_bytes for p in result.curve if p.extra_flops <= level + 1e-12)
        assert found == best, (seed, level)


def test_canonical_choices_leave_out_only_copies_nobody_reads():
    step = build_training_step(random_network(3, layers=8), optimizer="sgd", recompute=False)
    score = Scorer(step, "greedy_by_size", None)
    kept = score.kept
    choices = set(canonical_choices(score, 1.0, time.perf_counter() + 60))
    names = list(score.cands)
    for k in range(len(names) + 1):
        for subset in map(frozenset, combinations(names, k)):
            made = {n[: -len("/remat")] for node in recomputed_nodes(rematerialize(step, subset)) for n in node.outputs}
            if subset not in choices:  # some tensor chosen is never made again: the same step for more FLOPs
                assert not subset <= made
            else:
                assert subset <= made and subset & kept or not subset


def test_unknown_method_is_refused_by_name():
    step = build_training_step(random_network(0), optimizer="sgd", recompute=False)
    with pytest.raises(ModelError, match="method='exhaustive'.*exact"):
        search(step, method="exhaustive")
