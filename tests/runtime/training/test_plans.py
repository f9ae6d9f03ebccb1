"""Plans of a training step by ONE's categories: every buffer in one category, every plan valid,
and the unified arena well below the per-category sum on a MobileNetV2-like network."""

from __future__ import annotations

import planner
from runtime.kernels import MEMPLAN_DOMAIN, get_kernel, kernel_of, supported_ops
from runtime.training import CATEGORIES, build_training_step, models, plan_categories, training_problem


def test_categories_cover_every_buffer_and_plans_are_valid():
    step = build_training_step(models.small_cnn(batch=4), optimizer="adam")
    problem = training_problem(step)
    assert {b.kind for b in problem.buffers} <= set(CATEGORIES)
    plans = plan_categories(problem)
    assert planner.check_plan(problem, plans.unified).ok
    for name, plan in plans.per_category.items():
        kind = next(k for k, c in CATEGORIES.items() if c == name)
        sub = problem.replace(buffers=tuple(b for b in problem.buffers if b.kind == kind))
        assert planner.check_plan(sub, plan).ok
    assert plans.unified.arena_bytes <= plans.per_category_total
    text = plans.one_style()
    assert text.count("[ALLOC] allocation capacity:") == len(CATEGORIES) + 1


def test_mobilenet_like_unified_is_at_most_three_quarters_of_the_per_category_sum():
    step = build_training_step(models.mobilenet_v2_like(batch=4, size=224), optimizer="sgd")
    plans = plan_categories(training_problem(step))
    assert plans.ratio <= 0.75, plans.one_style()
    # Recomputation keeps no Conv output that only batch norm's backward read: those die in the forward pass.
    problem = plans.problem
    loss_step = problem.step_names.index(step.loss_node)
    for node in step.graph.nodes[:loss_step]:
        if node.op_type == "BatchNormTrain":
            conv_out = problem.buffer(node.inputs[0])
            assert conv_out.last < loss_step or conv_out.alias_of is not None


def test_training_ops_are_memplans_own_not_onnx_ops():
    step = build_training_step(models.small_cnn(batch=2), optimizer="adam")
    onnx_ops = set(supported_ops())
    for node in step.graph.nodes:
        assert kernel_of(node) is not None, node
        if node.domain == MEMPLAN_DOMAIN:
            assert node.op_type not in onnx_ops and get_kernel(node.op_type) is None
    own = {n.op_type for n in step.graph.nodes if n.domain == MEMPLAN_DOMAIN}
    assert {"ConvGradInput", "BatchNormTrain", "SoftmaxCrossEntropy", "AdamUpdate"} <= own
    assert "ConvGradInput" not in onnx_ops and get_kernel("ConvGradInput", MEMPLAN_DOMAIN) is not None
