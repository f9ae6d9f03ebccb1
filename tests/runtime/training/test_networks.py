"""Training steps of real networks' ops: every gradient against central finite differences in float64,
and the ResNet-18-like, MobileNetV2-like and transformer training steps built, run and learning."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from runtime.training import TrainingSession, build_training_step, models, plan_categories, training_problem


def _graph(nodes, inits, x_shape, y_shape, opset=20, dtype=np.float64) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, list(x_shape))],
        [helper.make_tensor_value_info("y", elem, list(y_shape))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _init(rng, name, *shape, dtype=np.float64):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(dtype), name)


def _joins() -> onnx.ModelProto:
    """Grouped and depthwise Conv, HardSwish, SiLU (Sigmoid * x), Concat, Sum, HardSigmoid, Erf, a
    ConstantOfShape weight, ReduceMean (axes as input), Gemm."""
    rng = np.random.default_rng(2)
    inits = [
        _init(rng, "Wg", 6, 2, 3, 3),
        _init(rng, "Wd", 6, 1, 3, 3),
        _init(rng, "W", 12, 4),
        numpy_helper.from_array(np.array([1, 12, 1, 1], np.int64), "bias_shape"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "spatial"),
    ]
    fill = helper.make_tensor("fill", onnx.TensorProto.DOUBLE, [1], [0.1])
    nodes = [
        helper.make_node("Conv", ["x", "Wg"], ["g"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),
        helper.make_node("HardSwish", ["g"], ["hs"]),
        helper.make_node("Conv", ["hs", "Wd"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=6),
        helper.make_node("Sigmoid", ["d"], ["sg"]),
        helper.make_node("Mul", ["d", "sg"], ["silu"]),
        helper.make_node("Concat", ["silu", "hs"], ["cat"], axis=1),
        helper.make_node("ConstantOfShape", ["bias_shape"], ["cb"], value=fill),
        helper.make_node("Sum", ["cat", "cb", "cat"], ["s"]),
        helper.make_node("HardSigmoid", ["s"], ["hsg"], alpha=0.3, beta=0.4),
        helper.make_node("Erf", ["hsg"], ["e"]),
        helper.make_node("ReduceMean", ["e", "spatial"], ["m"], keepdims=0),
        helper.make_node("Gemm", ["m", "W"], ["y"]),
    ]
    return _graph(nodes, inits, (3, 4, 5, 5), (3, 4))


def _gelu_tanh() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [_init(rng, "W", 6, 5), _init(rng, "V", 5, 4)]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("Gelu", ["a"], ["g"], approximate="tanh"),
        helper.make_node("MatMul", ["g", "V"], ["y"]),
    ]
    return _graph(nodes, inits, (3, 6), (3, 4))


NETWORKS = {
    "joins": _joins,
    "gelu_tanh": _gelu_tanh,
    "transformer": lambda: models.transformer_encoder(
        batch=2, tokens=3, features=8, heads=2, layers=1, classes=3, dtype=np.float64
    ),
    "resnet": lambda: models.resnet18_like(batch=2, size=8, classes=3, width=4, stages=(1, 1), dtype=np.float64),
}


def _feeds(step, rng):
    x = step.graph.tensors["x"]
    classes = step.graph.tensors[step.graph.node(step.loss_node).inputs[0]].shape[1]
    return {"x": rng.standard_normal(x.shape).astype(x.dtype), step.label: rng.integers(0, classes, (x.shape[0],))}


@pytest.mark.parametrize("case", sorted(NETWORKS))
def test_gradients_match_finite_differences(case):
    step = build_training_step(NETWORKS[case](), optimizer="none")
    session = TrainingSession(step, plan_categories(training_problem(step)).unified).prepare()
    rng = np.random.default_rng(11)
    feeds = _feeds(step, rng)
    session.run(feeds)
    grads, base = session.gradients(), session.parameters()
    eps = 1e-6
    for w, value in base.items():
        picks = rng.choice(value.size, size=min(3, value.size), replace=False)
        analytic, numeric = [], []
        for k in picks:
            losses = []
            for sign in (1, -1):
                moved = value.copy()
                moved.flat[k] += sign * eps
                session.set_parameters({w: moved})
                losses.append(session.run(feeds))
            session.set_parameters({w: value})
            numeric.append((losses[0] - losses[1]) / (2 * eps))
            analytic.append(grads[w].flat[k])
        a, n = np.array(analytic), np.array(numeric)
        assert np.linalg.norm(a - n) <= 1e-4 * max(np.linalg.norm(n), 1e-3), (case, w, a, n)


def test_constant_of_shape_weight_is_trained():
    step = build_training_step(_joins(), optimizer="none")
    assert "cb" in step.trainable


@pytest.mark.parametrize(
    "network",
    [
        lambda: models.resnet18_like(batch=8, size=32),
        lambda: models.mobilenet_v2_like(batch=8, size=32, classes=10),
        lambda: models.transformer_encoder(batch=8),
    ],
    ids=["resnet18_like", "mobilenet_v2_like", "transformer"],
)
def test_real_networks_train_inside_the_arena(network):
    step = build_training_step(network(), optimizer="sgd", hyper={"lr": 0.01})
    session = TrainingSession(step, "greedy_by_size").prepare()
    feeds = _feeds(step, np.random.default_rng(0))
    losses = [session.run(feeds) for _ in range(4)]
    assert losses[-1] < losses[0]
