"""Training steps refuse bad input with errors naming what was wrong, leaving arena state and model as they were."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from app.cli import app
from runtime.errors import FeedError, ModelError, UnsupportedOpError
from runtime.training import NonFiniteLossError, TrainingSession, build_training_step, models


def test_no_trainable_initializers():
    with pytest.raises(ModelError, match="no trainable initializers"):
        build_training_step(models.mlp(), trainable=[])


def test_every_op_without_backward_is_listed_before_starting():
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Exp", ["m"], ["e"]),
        helper.make_node("Softplus", ["e"], ["s"]),
        helper.make_node("Exp", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 4])],
        [helper.make_tensor_value_info("y", 1, [2, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = model.SerializeToString()
    with pytest.raises(UnsupportedOpError) as info:
        build_training_step(model)
    assert set(info.value.ops) == {"Exp", "Softplus"} and len(info.value.ops["Exp"]) == 2
    assert model.SerializeToString() == before


def test_label_of_wrong_shape_or_dtype_leaves_parameters_alone():
    step = build_training_step(models.mlp(batch=4, inputs=6, hidden=(5,), classes=3))
    session = TrainingSession(step).prepare()
    x = np.zeros((4, 6), np.float32)
    before = session.parameters()
    with pytest.raises(FeedError, match="'label' has shape"):
        session.run({"x": x, "label": np.zeros(5, np.int64)})
    with pytest.raises(FeedError, match="'label' has dtype float32"):
        session.run({"x": x, "label": np.zeros(4, np.float32)})
    with pytest.raises(FeedError, match="outside"):
        session.run({"x": x, "label": np.full(4, 3, np.int64)})
    with pytest.raises(ModelError, match="is not a graph output"):
        build_training_step(models.small_cnn(), output="flatten")
    after = session.parameters()
    assert all(np.array_equal(before[w], after[w]) for w in before)


def test_non_finite_loss_applies_no_update():
    step = build_training_step(models.mlp(batch=4, inputs=6, hidden=(5,), classes=3), optimizer="adam")
    session = TrainingSession(step).prepare()
    good = {"x": np.ones((4, 6), np.float32), "label": np.arange(4) % 3}
    session.run(good)
    before = session.parameters()
    arena = session.arena.copy()
    bad = dict(good, x=np.full((4, 6), np.nan, np.float32))
    with pytest.raises(NonFiniteLossError, match="no update was applied"):
        session.run(bad)
    after = session.parameters()
    assert all(np.array_equal(before[w], after[w]) for w in before)
    for name in step.state:  # optimizer state too, byte for byte
        b = session.problem.buffer(name)
        off = session.plan.offsets[name].offset
        assert np.array_equal(arena[off : off + b.size], session.arena[off : off + b.size])


def test_cli_train_plan_and_errors(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(models.small_cnn(batch=4), path)
    runner = CliRunner()
    result = runner.invoke(app, ["train-plan", str(path), "--optimizer", "adam"])
    assert result.exit_code == 0, result.output
    for category in ("non-const", "trainable", "back-prop", "gradient", "optimizer variables", "disposable", "extra"):
        assert f"# {category}" in result.output
    assert "[ALLOC] allocation capacity:" in result.output
    result = runner.invoke(app, ["train-plan", str(path), "--loss", "hinge"])
    assert result.exit_code == 2 and "accepted values" in result.output
    result = runner.invoke(app, ["train", "--steps", "12", "--every", "4", "--model", "mlp"])
    assert result.exit_code == 0, result.output
    assert "loss" in result.output and "arena" in result.output
