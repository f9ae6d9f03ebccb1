"""Training steps of real networks' ops: every gradient against central finite differences in float64,
and the ResNet-18-like, MobileNetV2-like and transformer training steps built, run and learning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import planner
from runtime.training import TrainingSession, build_training_step, models, plan_categories, training_problem
from tests.runtime.training.finite import finite_differences


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


def _exported_for_inference() -> onnx.ModelProto:
    """As older classifiers are exported (opset 11): LRN, Dropout as the identity, a 1x1 Conv to the
    classes, global pooling, Softmax over the flattened (N, C, 1, 1) logits."""
    rng = np.random.default_rng(4)
    inits = [_init(rng, "W", 6, 3, 3, 3), _init(rng, "C", 4, 6, 1, 1), _init(rng, "cb", 4)]
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["c"], ["n"], size=3, alpha=0.5, beta=0.75, bias=1.5),
        helper.make_node("Dropout", ["n"], ["d"], ratio=0.5),
        helper.make_node("Conv", ["d", "C", "cb"], ["k"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["k"], ["p"]),
        helper.make_node("Softmax", ["p"], ["y"], axis=1),
    ]
    return _graph(nodes, inits, (3, 3, 5, 5), (3, 4, 1, 1), opset=11)


NETWORKS = {
    "exported_for_inference": _exported_for_inference,
    "joins": _joins,
    "gelu_tanh": _gelu_tanh,
    "transformer": lambda: models.transformer_encoder(
        batch=2, tokens=3, features=8, heads=2, layers=1, classes=3, dtype=np.float64
    ),
    "resnet": lambda: models.resnet18_like(batch=2, size=8, classes=3, width=4, stages=(1, 1), dtype=np.float64),
}


def _feeds(step, rng):
    name = step.data_inputs[0]
    x = step.graph.tensors[name]
    classes = step.graph.tensors[step.graph.node(step.loss_node).inputs[0]].shape[1]
    return {name: rng.standard_normal(x.shape).astype(x.dtype), step.label: rng.integers(0, classes, (x.shape[0],))}


@pytest.mark.parametrize("case", sorted(NETWORKS))
def test_gradients_match_finite_differences(case):
    step = build_training_step(NETWORKS[case](), optimizer="none")
    session = TrainingSession(step, plan_categories(training_problem(step)).unified).prepare()
    rng = np.random.default_rng(11)
    feeds = _feeds(step, rng)
    for w, (a, n) in finite_differences(session, feeds, rng, picks=3).items():
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


GALLERY = sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


@pytest.mark.parametrize("path", GALLERY, ids=[p.stem for p in GALLERY])
def test_every_gallery_model_gets_a_training_step_planned_and_checked(path):
    step = build_training_step(path, optimizer="sgd")
    problem = training_problem(step)
    plan = planner.plan(problem, "greedy_by_size")
    assert planner.check_plan(problem, plan).ok and plan.arena_bytes >= plan.lower_bound > 0


def test_a_gallery_model_trains_and_its_first_loss_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    path = next(p for p in GALLERY if "squeezenet" in p.stem)
    step = build_training_step(path, optimizer="sgd", hyper={"lr": 0.001})
    session = TrainingSession(step, "greedy_by_size").prepare()
    feeds = _feeds(step, np.random.default_rng(5))
    first = session.run(feeds)
    (probabilities,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {step.data_inputs[0]: feeds[step.data_inputs[0]]}
    )
    z = np.asarray(probabilities, np.float64).reshape(len(feeds[step.label]), -1)
    log_p = z - z.max(axis=1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    assert first == pytest.approx(-log_p[np.arange(len(z)), feeds[step.label]].mean(), rel=1e-5)
    assert session.run(feeds) < first
