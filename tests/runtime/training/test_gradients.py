"""Training steps: gradients against central finite differences (float64), the loss against
onnx.reference, and the loss falling when steps run inside the arena."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from runtime.training import TrainingSession, build_training_step, models, plan_categories, training_problem
from tests.runtime.training.finite import finite_differences


def _zoo(dtype=np.float64) -> onnx.ModelProto:
    """Conv (strided, padded), Tanh, AveragePool, Reshape, MatMul, Add, Mul, Sigmoid, Gemm(transB)."""
    rng = np.random.default_rng(1)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(dtype), name)

    inits = [init("W1", 4, 2, 3, 3), init("b1", 4), init("W2", 16, 6), init("b2", 6), init("s", 1, 6), init("W3", 5, 6)]
    inits.append(numpy_helper.from_array(np.array([3, 16], np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["x", "W1", "b1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Tanh", ["c"], ["t"]),
        helper.make_node("AveragePool", ["t"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["p", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "W2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["a"]),
        helper.make_node("Mul", ["a", "s"], ["u"]),
        helper.make_node("Sigmoid", ["u"], ["g"]),
        helper.make_node("Gemm", ["g", "W3"], ["y"], transB=1, alpha=0.7),
    ]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes,
        "zoo",
        [helper.make_tensor_value_info("x", elem, [3, 2, 7, 7])],
        [helper.make_tensor_value_info("y", elem, [3, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _tiny_mobilenet():
    blocks = ((1, 8, 1, 1), (2, 8, 2, 1), (2, 16, 1, 2))
    return models.mobilenet_v2_like(batch=3, size=8, classes=4, width=0.25, blocks=blocks, dtype=np.float64)


CASES = {
    "mlp_relu": lambda: models.mlp(batch=4, inputs=6, hidden=(5, 7), classes=3, dtype=np.float64),
    "mlp_tanh": lambda: models.mlp(batch=4, inputs=6, hidden=(5,), classes=3, dtype=np.float64, activation="Tanh"),
    "cnn_bn": lambda: models.small_cnn(batch=3, size=6, channels=(3, 4), classes=4, dtype=np.float64),
    "cnn_plain": lambda: models.small_cnn(
        batch=3, size=6, channels=(3, 4), classes=4, dtype=np.float64, batch_norm=False
    ),
    "zoo": _zoo,
    "mobilenet_tiny": _tiny_mobilenet,
}


def _feeds(step, rng):
    x = step.graph.tensors["x"]
    feeds = {"x": rng.standard_normal(x.shape).astype(x.dtype)}
    lab = step.graph.tensors[step.label]
    if lab.dtype.kind == "i":
        classes = step.graph.tensors[step.graph.node(step.loss_node).inputs[0]].shape[1]
        feeds[step.label] = rng.integers(0, classes, lab.shape)
    else:
        feeds[step.label] = rng.standard_normal(lab.shape).astype(lab.dtype)
    return feeds


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_match_finite_differences(case, recompute):
    loss = "mse" if case == "zoo" else "cross_entropy"
    step = build_training_step(CASES[case](), loss=loss, optimizer="none", recompute=recompute)
    session = TrainingSession(step, plan_categories(training_problem(step)).unified).prepare()
    rng = np.random.default_rng(7)
    feeds = _feeds(step, rng)
    for w, (analytic, numeric) in finite_differences(session, feeds, rng, picks=4).items():
        error = np.linalg.norm(analytic - numeric) / max(np.linalg.norm(numeric), 1e-8)
        assert error < 1e-3 or np.linalg.norm(analytic - numeric) < 1e-7, (w, analytic, numeric)


def test_loss_matches_onnx_reference():
    model = _zoo()
    step = build_training_step(model, loss="mse", optimizer="none")
    session = TrainingSession(step).prepare()
    feeds = _feeds(step, np.random.default_rng(3))
    got = session.run(feeds)
    (y,) = ReferenceEvaluator(model).run(None, {"x": feeds["x"]})
    assert got == pytest.approx(float(np.mean((y - feeds["label"]) ** 2)), rel=1e-9)

    mlp = models.mlp(batch=4, inputs=6, hidden=(5,), classes=3, dtype=np.float64)
    step = build_training_step(mlp, optimizer="none")
    feeds = _feeds(step, np.random.default_rng(4))
    got = TrainingSession(step).prepare().run(feeds)
    (logits,) = ReferenceEvaluator(mlp).run(None, {"x": feeds["x"]})
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert got == pytest.approx(-logp[np.arange(4), feeds["label"]].mean(), rel=1e-9)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_loss_falls_inside_the_arena_and_parameters_stay_put(optimizer):
    step = build_training_step(
        models.small_cnn(batch=8), optimizer=optimizer, hyper={"lr": 0.01 if optimizer == "adam" else 0.05}
    )
    session = TrainingSession(step, "greedy_by_size").prepare()
    feeds = _feeds(step, np.random.default_rng(0))
    before = session.parameters()
    losses = [session.run(feeds) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]
    after = session.parameters()
    assert all(not np.array_equal(before[w], after[w]) for w in step.trainable)
    # Every parameter and optimizer tensor is placed once, for the whole schedule.
    problem = session.problem
    for name in step.state:
        b = problem.buffer(name)
        assert b.first == 0
        assert max(x.last for x in problem.buffers if x.id == name or x.alias_of == name) == problem.steps - 1


def test_sgd_momentum_update_matches_formula():
    step = build_training_step(
        models.mlp(batch=4, inputs=6, hidden=(5,), classes=3, dtype=np.float64),
        optimizer="sgd",
        hyper={"lr": 0.1, "momentum": 0.5},
    )
    grad_step = build_training_step(
        models.mlp(batch=4, inputs=6, hidden=(5,), classes=3, dtype=np.float64), optimizer="none"
    )
    feeds = _feeds(step, np.random.default_rng(5))
    sgd, plain = TrainingSession(step).prepare(), TrainingSession(grad_step).prepare()
    w0 = sgd.parameters()
    plain.run(feeds)
    g0 = plain.gradients()
    sgd.run(feeds)
    w1 = sgd.parameters()
    for w in step.trainable:
        np.testing.assert_allclose(w1[w], w0[w] - 0.1 * g0[w], rtol=1e-12, atol=1e-14)
    plain.set_parameters(w1)
    plain.run(feeds)
    g1 = plain.gradients()
    sgd.run(feeds)
    w2 = sgd.parameters()
    for w in step.trainable:
        np.testing.assert_allclose(w2[w], w1[w] - 0.1 * (0.5 * g0[w] + g1[w]), rtol=1e-12, atol=1e-14)
