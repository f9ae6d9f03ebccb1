"""Training memory: a training step (forward, loss, backward, update) planned and run inside one arena.

::

    from runtime.training import build_training_step, training_problem, plan_categories, TrainingSession
    step = build_training_step("model.onnx", loss="cross_entropy", optimizer="sgd", dims={"N": 32})
    plans = plan_categories(training_problem(step))     # per ONE category, and unified
    print(plans.one_style())
    session = TrainingSession(step, plans.unified).prepare()
    loss = session.run({"x": batch, "label": labels})

Below its floor, recomputation chosen by the placed arena (`runtime.training.remat_search`)::

    found = search(step, overhead=0.2)                  # a Pareto curve of placed arenas, and its choice
    session = TrainingSession(found.step, found.plan).prepare()   # same loss and gradients, bit for bit
"""

from __future__ import annotations

from runtime.training.build import LOSSES, OPTIMIZERS, TrainingStep, backward_ops, build_training_step
from runtime.training.plans import CATEGORIES, CategoryPlans, category_of, plan_categories, training_problem
from runtime.training.remat import rematerialize
from runtime.training.remat_search import RematResult, search
from runtime.training.session import NonFiniteLossError, TrainingSession

__all__ = [
    "CATEGORIES",
    "LOSSES",
    "OPTIMIZERS",
    "CategoryPlans",
    "NonFiniteLossError",
    "RematResult",
    "TrainingSession",
    "TrainingStep",
    "backward_ops",
    "build_training_step",
    "category_of",
    "plan_categories",
    "rematerialize",
    "search",
    "training_problem",
]
