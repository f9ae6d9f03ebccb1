"""The training demo's hooks and the canary through `TrainingSession`: the plans handed over before any
step runs, every node of every step reported on the unified plan's step axis with what it wrote, the
canary checking every node without changing a loss, and catching a plan edited to overlap two live
tensors at the step that corrupts. Oracles: `planner.check_plan`, the step's graph, onnx.reference's
loss of the first batch, the same demo run without hooks."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner import Plan
from runtime.errors import CanaryError, ExecutionError, ModelError
from runtime.training import TrainingSession, build_training_step, models, training_problem
from runtime.training.demo import NodeEvent, train_demo


def test_hooks_see_the_plans_first_then_every_node_of_every_step_in_order():
    seen: list[object] = []
    plans_of = []

    def on_plans(plans) -> None:
        assert not seen, "the plans come before any node runs"
        plans_of.append(plans)
        seen.append("plans")

    result = train_demo("mlp", 3, 8, on_plans=on_plans, on_node=seen.append, canary=True)
    plain = train_demo("mlp", 3, 8)
    assert result.losses == plain.losses  # neither the hooks nor the canary change a loss
    assert result.reference_loss == pytest.approx(result.losses[0], rel=1e-5)  # onnx.reference's own loss
    (plans,) = plans_of
    assert planner.check_plan(plans.problem, plans.unified).ok
    events = seen[1:]
    assert all(isinstance(e, NodeEvent) for e in events)
    total = plans.problem.steps
    assert [(e.train_step, e.index) for e in events] == [(t, i) for t in range(3) for i in range(total)]
    names = list(plans.problem.step_names)
    assert [e.name for e in events[:total]] == names and all(e.total == total for e in events)
    written = {b.id for b in plans.problem.buffers}
    for e in events:
        assert e.seconds >= 0 and e.writes and set(e.writes) <= written
        assert all(plans.problem.buffer(w).first == e.index or plans.problem.buffer(w).alias_of for w in e.writes)
    assert [s["step"] for s in result.step_times] == list(range(total))  # the last step's times, as before


def _overlapping(problem, plan: Plan) -> Plan:
    """`plan` with a tensor a node writes moved onto the largest tensor still live (and read later)."""
    data = plan.to_json()
    placed = {p["id"]: p for p in data["placements"]}
    roots = sorted(
        (b for b in problem.buffers if b.alias_of is None and b.id in placed and b.size > 0),
        key=lambda b: (-b.size, b.id),
    )
    victim, other = next(
        (v, o) for v in roots for o in roots if o.id != v.id and o.first > 0 and v.first < o.first < v.last
    )
    placed[other.id]["offset"] = placed[victim.id]["offset"]
    return Plan.from_json(data)


def test_the_canary_catches_a_training_plan_that_overlaps_live_tensors():
    step = build_training_step(models.mlp(batch=8, inputs=16, hidden=(32,), classes=4, seed=0), optimizer="adam")
    problem = training_problem(step)
    bad = _overlapping(problem, planner.plan(problem, "greedy_by_size"))
    assert not planner.check_plan(problem, bad).ok
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32), step.label: rng.integers(0, 4, 8)}
    with pytest.raises((ModelError, ExecutionError, planner.ProblemError, ValueError)):
        TrainingSession(step, bad).prepare()  # without the canary the checker refuses the plan
    with pytest.raises(CanaryError) as caught:
        TrainingSession(step, bad, canary=True).run(feeds)
    hit = caught.value
    assert hit.clobbered and 0 <= hit.step < problem.steps and problem.step_names[hit.step] == hit.node
    good = TrainingSession(step, planner.plan(problem, "greedy_by_size"), canary=True)
    assert np.isfinite(good.run(feeds)) and np.isfinite(good.run(feeds))  # a checked plan never trips it
