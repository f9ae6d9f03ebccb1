"""The training demo: an MLP or a small CNN learns 8x8 digits inside one planned arena."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime.errors import ModelError
from runtime.options import MemoryOptions
from runtime.training import data, models
from runtime.training.build import build_training_step
from runtime.training.plans import CategoryPlans, plan_categories, training_problem
from runtime.training.remat_spec import parse_overhead, parse_remat, rematerialized
from runtime.training.session import TrainingSession

DEMO_MODELS = ("mlp", "cnn")


@dataclass(frozen=True)
class NodeEvent:
    """One node of one training step, just run: its place on the unified plan's step axis (`index`,
    of `total`), its measured time and the tensors it wrote."""

    train_step: int
    index: int
    total: int
    name: str
    op_type: str
    seconds: float
    writes: tuple[str, ...]


@dataclass
class DemoResult:
    model: str
    source: str  # which data set was used
    losses: list[float] = field(default_factory=list)  # one per step
    accuracy: float = 0.0  # on the training images, after the last step
    plans: CategoryPlans | None = None
    # Each node of the last training step: {step, name, op_type, seconds}, on the unified plan's step axis.
    step_times: list[dict[str, Any]] = field(default_factory=list)
    # The first step's loss as onnx.reference computes it from the initial weights and the same batch.
    reference_loss: float | None = None
    seconds: float = 0.0  # the training steps' own time, planning and the checks left out
    remat: dict[str, Any] | None = None  # what recomputation chose (`RematResult.report`), when asked for


def train_demo(
    model: str = "mlp",
    steps: int = 200,
    batch: int = 32,
    optimizer: str = "adam",
    lr: float | None = None,
    strategy: str = "greedy_by_size",
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
    *,
    on_plans: Callable[[CategoryPlans], None] | None = None,
    on_node: Callable[[NodeEvent], None] | None = None,
    canary: bool = False,
    options: MemoryOptions | None = None,
    remat: str | None = None,
    remat_overhead: float | str | None = None,
) -> DemoResult:
    """Train `model` ("mlp" or "cnn") for `steps` steps of `batch` digits; the step runs in its unified arena.

    Hooks: `on_plans` once the plans are made (before any step runs), `on_step(i, loss)` after
    each training step, `on_node` after each node of every step. `canary` checks every node of
    every step (`runtime.CanaryError` on a write over a live tensor). Of `options` a training step
    takes ``alignment``, ``workspace`` and ``prepared_weights`` (`training_problem`). `remat`
    (``off``, ``auto`` or a budget, `parse_remat`) runs the step with the tensors the search chose
    recomputed, within `remat_overhead` extra FLOPs."""
    if model not in DEMO_MODELS:
        raise ModelError(f"model={model!r}: the demo trains one of {DEMO_MODELS}")
    if steps < 1 or batch < 1:
        raise ModelError(f"steps={steps} and batch={batch} must both be at least 1")
    images, labels, source = data.digits(seed=seed)
    if model == "mlp":
        images = images.reshape(len(images), 64)
        proto = models.mlp(batch=batch, inputs=64, hidden=(64,), classes=10, seed=seed)
    else:
        proto = models.small_cnn(batch=batch, size=8, channels=(8, 16), classes=10, seed=seed)
    hyper = {"lr": lr if lr is not None else (0.01 if optimizer == "adam" else 0.05)}
    spec, overhead = parse_remat(remat), parse_overhead(remat_overhead)
    step = build_training_step(proto, optimizer=optimizer, hyper=hyper, recompute=not spec.on)
    found = rematerialized(step, spec, overhead, strategy=strategy, options=options)
    if found is not None and found.step is not None:
        step = found.step
    plans = plan_categories(training_problem(step, options), strategy)
    if on_plans is not None:
        on_plans(plans)
    session = TrainingSession(step, plans.unified, options, canary=canary).prepare()
    result = DemoResult(model, source, plans=plans, remat=found.report() if found is not None else None)
    feed = data.batches(images, labels, batch, seed)
    nodes = step.graph.nodes
    current = 0  # the training step under way, for `timed`

    def timed(index: int, total: int, name: str, seconds: float) -> None:
        op_type = nodes[index].op_type if index < len(nodes) else ""
        if current == steps - 1:
            result.step_times.append({"step": index, "name": name, "op_type": op_type, "seconds": seconds})
        if on_node is not None:
            writes = tuple(nodes[index].outputs) if index < len(nodes) else ()
            on_node(NodeEvent(current, index, total, name, op_type, seconds, writes))

    for i in range(steps):
        current = i
        x, y = next(feed)
        if i == 0:
            result.reference_loss = _reference_loss(proto, x, y)
        started = time.perf_counter()
        follow = on_node is not None or i == steps - 1
        result.losses.append(session.run({"x": x, step.label: y}, on_step=timed if follow else None))
        result.seconds += time.perf_counter() - started
        if on_step is not None:
            on_step(i, result.losses[-1])
    result.accuracy = _accuracy(proto, session.parameters(), images, labels, batch)
    return result


def _reference_loss(proto, x: np.ndarray, y: np.ndarray) -> float:
    """The mean cross entropy of the initial network on one batch: logits by onnx.reference, the
    loss in float64 numpy (no runtime kernel involved)."""
    from onnx.reference import ReferenceEvaluator

    (logits,) = ReferenceEvaluator(_with_batch_statistics(proto)).run(None, {"x": x})
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


def _accuracy(proto, params, images, labels, batch) -> float:
    """Share of the images the trained network classifies right, by onnx.reference on the trained weights
    (in batches of `batch`, batch normalisation in training mode since running statistics are not trained)."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    trained = _with_batch_statistics(proto)
    for init in trained.graph.initializer:
        if init.name in params:
            init.CopyFrom(numpy_helper.from_array(params[init.name], init.name))
    evaluator = ReferenceEvaluator(trained)
    right = total = 0
    for start in range(0, len(labels) - batch + 1, batch):
        (logits,) = evaluator.run(None, {"x": images[start : start + batch]})
        right += int((np.asarray(logits).argmax(axis=1) == labels[start : start + batch]).sum())
        total += batch
    return right / total if total else 0.0


def _with_batch_statistics(proto):
    """A copy of `proto` whose batch normalisations use the batch's statistics, as the training step does."""
    from onnx import helper

    copy = proto.__class__()
    copy.CopyFrom(proto)
    for node in copy.graph.node:
        if node.op_type == "BatchNormalization":
            node.attribute.append(helper.make_attribute("training_mode", 1))
    return copy
