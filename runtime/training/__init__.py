"""Training memory: a training step (forward, loss, backward, update) planned and run inside one arena.

::

    from runtime.training import build_training_step, training_problem, plan_categories, TrainingSession
    step = build_training_step("model.onnx", loss="cross_entropy", optimizer="sgd", dims={"N": 32})
    plans = plan_categories(training_problem(step))     # per ONE category, and unified
    print(plans.one_style())
    session = TrainingSession(step, plans.unified).prepare()
    loss = session.run({"x": batch, "label": labels})
"""

from __future__ import annotations

from runtime.training.build import LOSSES, OPTIMIZERS, TrainingStep, backward_ops, build_training_step
from runtime.training.plans import CATEGORIES, CategoryPlans, category_of, plan_categories, training_problem
from runtime.training.session import NonFiniteLossError, TrainingSession

__all__ = [
    "CATEGORIES",
    "LOSSES",
    "OPTIMIZERS",
    "CategoryPlans",
    "NonFiniteLossError",
    "TrainingSession",
    "TrainingStep",
    "backward_ops",
    "build_training_step",
    "category_of",
    "plan_categories",
    "training_problem",
]
