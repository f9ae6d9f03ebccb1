"""Whole input shapes (`load_model(shapes=...)`) on Paddle-style declarations: -1, 0, '?' reused for
axes of different sizes, unnamed dims. Planned, checked, run in the arena and judged by onnxruntime
(runtime.oracle); every refusal names the input, the axis and what it takes."""

from __future__ import annotations

import numpy as np
import pytest

import planner
import runtime
from runtime import MemoryOptions, Session, ShapeError, TensorTooLargeError, UnboundDimError, load_model
from runtime.oracle import random_inputs, verify
from tests.runtime.paddle_models import classifier, detector

SHAPES = {"x": [1, 3, 48, 320], "bias": [1, 2, 1, 1]}


def test_paddle_inputs_cannot_load_unbound_and_the_error_names_input_axis_and_both_ways():
    with pytest.raises(UnboundDimError) as caught:
        load_model(detector())
    e = caught.value
    assert [(u.input, u.axis, u.declared) for u in e.unbound] == [
        ("x", 0, -1),
        ("x", 2, "?"),
        ("x", 3, "?"),
        ("bias", 2, None),
    ]
    text = str(e)
    assert "input 'x' [-1, 3, '?', '?']: axis 0 (-1), axis 2 ('?'), axis 3 ('?') unbound" in text
    assert "shapes={'x': [1, 3, 224, 224]}" in text and "dims={'?': size}" in text
    cli = e.describe(lambda name, sizes: f"--shape {name}={'x'.join(map(str, sizes))}", lambda d: f"--dims {d}=value")
    assert "--shape x=1x3x224x224" in cli and "--dims ?=value" in cli and "axis 2 (unnamed)" in cli


@pytest.mark.parametrize("strategy", ["greedy_by_size", "best_fit"])
def test_whole_shapes_bind_paddle_inputs_plan_and_run_like_onnxruntime(strategy, tmp_path):
    model = detector()
    path = tmp_path / "detector.onnx"
    path.write_bytes(model.SerializeToString())
    graph = load_model(path, shapes=SHAPES)
    # '?' is 48 on one axis and 320 on the other: no single size for the name.
    assert graph.tensors["x"].shape == (1, 3, 48, 320) and graph.tensors["y"].shape == (1, 2, 24, 160)
    assert "?" not in graph.dims
    problem = runtime.memory_problem(graph, MemoryOptions())
    plan = planner.plan(problem, strategy)
    assert planner.check_plan(problem, plan).ok
    session = Session(graph, plan).prepare()
    feeds = random_inputs(graph, seed=3)
    outputs = session.run(feeds)
    verdict = verify(path, feeds, outputs, prefer="onnxruntime")
    assert verdict["oracle"] == "onnxruntime" and verdict["passed"] is True, verdict
    # onnxruntime takes bias's declared 0 as a size: the oracle ran with it unknown, and says so.
    assert any("'bias' axis 0 (0)" in note for note in verdict["notes"])


def test_dims_bind_the_inputs_shapes_leave_free():
    graph = load_model(classifier(), dims={"N": 5}, shapes={"x": [5, 8]})
    assert graph.tensors["x"].shape == (5, 8) and graph.tensors["extra"].shape == (5, 4)
    assert graph.dims == {"N": 5}
    feeds = random_inputs(graph, seed=0)
    outputs = Session(graph).run(feeds)
    assert verify(classifier().SerializeToString(), feeds, outputs, prefer="onnxruntime")["passed"] is True


def test_a_whole_shape_overrides_the_names_of_its_input():
    # extra [N, 4] takes a whole shape; N given by dims as well is no error (it names an input's axis).
    graph = load_model(classifier(), dims={"N": 3}, shapes={"x": [3, 8], "extra": [3, 4]})
    assert graph.tensors["extra"].shape == (3, 4)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"z": [1, 3, 8, 8]}, "shape of 'z': the model has no input 'z'; its inputs are 'x' [-1, 3, '?', '?']"),
        ({"x": [1, 3, 8]}, "shape of 'x': 3 size(s) given, but input 'x' [-1, 3, '?', '?'] has rank 4; give 4 sizes"),
        ({"x": [1, 3, 0, 8]}, "shape of 'x': sizes must be positive whole numbers, got 0 at axis 2"),
        ({"x": [-1, 3, 8, 8]}, "shape of 'x': sizes must be positive whole numbers, got -1 at axis 0"),
        ({"x": [1, 4, 8, 8]}, "shape of 'x': axis 1 of input 'x' is fixed at 3 in the model, got 4"),
    ],
)
def test_bad_shapes_are_refused_naming_the_input_and_what_it_takes(shapes, message):
    with pytest.raises(ShapeError) as caught:
        load_model(detector(), shapes={**SHAPES, **shapes})
    assert message in str(caught.value)


def test_a_dims_name_no_input_declares_is_refused():
    with pytest.raises(ShapeError, match=r"dims names \['H'\], which no graph input uses"):
        load_model(detector(), dims={"H": 8}, shapes=SHAPES)


def test_a_shape_too_large_is_refused_before_allocating_naming_the_bytes():
    with pytest.raises(
        TensorTooLargeError, match=r"graph input 'x' of shape \[1, 3, 100000, 100000\].*120,000,000,000 bytes"
    ):
        load_model(detector(), shapes={"x": [1, 3, 100_000, 100_000], "bias": [1, 2, 1, 1]})
    graph = load_model(detector(), shapes={"x": [1, 3, 64, 64], "bias": [1, 2, 1, 1]})
    session = Session(graph, max_arena_bytes=4096)
    with pytest.raises(
        TensorTooLargeError, match=r"arena of plan 'greedy_by_size' is [\d,]+ bytes, more than max_arena_bytes=4,096"
    ):
        session.prepare()
    assert session.arena is None


def test_default_dim_sizes_minus_one_and_named_dims():
    graph = load_model(classifier(), default_dim=4)
    assert graph.tensors["x"].shape == (4, 8) and graph.tensors["extra"].shape == (4, 4)


def test_declared_sizes_stay_when_no_shape_is_given():
    graph = load_model(classifier(), dims={"N": 2}, shapes={"x": [2, 8]})
    x = np.ones((2, 8), np.float32)
    out = Session(graph).run({"x": x, "extra": np.zeros((2, 4), np.float32)})["y"]
    assert out.shape == (2, 4)
