"""load_model and memory_problem on onnx's nine light models and on small hand-built graphs."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from runtime import MemoryOptions, Session, ShapeError, load_model, memory_problem, workspace_id
from runtime.kernels import get_kernel

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT = sorted(f[len("light_") : -len(".onnx")] for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))


def light_path(name: str) -> str:
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


def test_the_wheel_ships_nine_light_models():
    assert len(LIGHT) == 9


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_weights_fold_into_constants(name):
    model = onnx.load(light_path(name))
    made = {o for n in model.graph.node if n.op_type == "ConstantOfShape" for o in n.output}
    graph = load_model(light_path(name))
    assert not [n for n in graph.nodes if n.op_type == "ConstantOfShape"]
    # Every weight made by ConstantOfShape that a remaining node reads is a constant, not an activation.
    read = {i for n in graph.nodes for i in n.inputs}
    assert made & read, "the model's weights should be read by its remaining nodes"
    for tensor in made & read:
        assert graph.tensors[tensor].kind == "constant"
    # No activation is computed from constants alone: folding left nothing behind.
    for node in graph.nodes:
        assert any(i in graph.tensors and graph.tensors[i].kind != "constant" for i in node.inputs if i), node.name
    assert [graph.tensors[i].kind for i in graph.inputs] == ["input"]
    assert all(t.nbytes == int(np.prod(t.shape)) * t.dtype.itemsize for t in graph.tensors.values())
    # Planning reads no weight: the large folded ones are still lazy.
    assert any(not c.loaded for c in graph.constants.values())


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_problem_plans_validly_with_several_strategies(name):
    graph = load_model(light_path(name))
    problem = memory_problem(graph)
    assert problem.step_names == tuple(n.name for n in graph.nodes)
    kinds = {b.kind for b in problem.buffers}
    assert kinds <= {"input", "output", "activation", "workspace"}
    assert not any(b.id in graph.constants for b in problem.buffers)
    lower = planner.load(problem)
    for strategy in ("naive", "greedy_by_size", "best_fit", "first_fit"):
        plan = planner.plan(problem, strategy)
        assert planner.check_plan(problem, plan).ok, strategy
        assert plan.arena_bytes >= _load_merging_aliases(problem), strategy
        assert plan.arena_bytes <= planner.naive(problem) + problem.alignment * len(problem.buffers)
    assert lower > 0


def _load_merging_aliases(problem: planner.Problem) -> int:
    """LOAD where a view and the tensor it aliases count once (they share their bytes)."""
    aliased = {b.id for b in problem.buffers if b.alias_of is not None}
    return planner.load(problem.replace(buffers=tuple(b for b in problem.buffers if b.id not in aliased)))


def test_view_ops_alias_their_input_and_workspace_is_planned():
    graph = load_model(light_path("bvlc_alexnet"))
    problem = memory_problem(graph)
    reshape = next(n for n in graph.nodes if n.op_type == "Reshape")
    assert get_kernel("Reshape").view
    assert problem.buffer(reshape.outputs[0]).alias_of == reshape.inputs[0]
    conv = next(n for n in graph.nodes if n.op_type in ("Conv", "ConvAct"))  # ConvAct: fused with its Relu
    if get_kernel(conv.op_type, conv.domain).workspace is not None:
        ws = problem.buffer(workspace_id(conv))
        assert ws.kind == "workspace" and ws.first == ws.last and ws.name == conv.name
    without = memory_problem(graph, MemoryOptions(workspace=False))
    assert not any(b.kind == "workspace" for b in without.buffers)


def test_external_io_leaves_inputs_and_outputs_out_of_the_arena():
    graph = load_model(light_path("squeezenet"))
    inside = {b.id for b in memory_problem(graph).buffers}
    outside = {b.id for b in memory_problem(graph, MemoryOptions(io="external")).buffers}
    assert set(graph.inputs) | set(graph.outputs) <= inside
    assert not (set(graph.inputs) | set(graph.outputs)) & outside
    assert memory_problem(graph, constants="arena").buffer(next(iter(graph.constants))).kind == "constant"


def _symbolic_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "L"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "L"])
    w = numpy_helper.from_array(np.ones((3, 1), np.float32), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["t"], name="scale"),
        helper.make_node("Relu", ["t"], ["y"], name="relu"),
    ]
    return helper.make_model(
        helper.make_graph(nodes, "sym", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )


def test_symbolic_dims_bound_by_the_caller():
    graph = load_model(_symbolic_model().SerializeToString(), dims={"N": 8, "L": 5})
    assert graph.tensors["x"].shape == (8, 3, 5)
    assert graph.tensors["t"].shape == (8, 3, 5) and graph.tensors["t"].dtype == np.float32
    assert graph.tensors["y"].kind == "output" and graph.tensors["t"].consumers == ("relu",)
    assert graph.tensors["t"].producer == "scale"
    assert load_model(_symbolic_model(), default_dim=2).tensors["y"].shape == (2, 3, 2)


def test_unbound_dims_are_named_with_the_inputs_using_them():
    with pytest.raises(ShapeError) as e:
        load_model(_symbolic_model(), dims={"N": 1})
    # Only the unbound axis is listed (N is bound); the example shape takes N's size.
    assert "input 'x' ['N', 3, 'L']: axis 2 ('L') unbound" in str(e.value) and "axis 0" not in str(e.value)
    assert "shapes={'x': [1, 3, 224]} or dims={'L': size}" in str(e.value)
    with pytest.raises(ShapeError, match="'Q'"):
        load_model(_symbolic_model(), dims={"N": 1, "L": 1, "Q": 3})


def test_shape_chains_fold_once_shapes_are_static():
    # Shape -> Gather -> Concat -> Reshape: a typical exporter pattern, folded away.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"]),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    model = helper.make_model(
        helper.make_graph(nodes, "chain", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    graph = load_model(model, dims={"N": 2})
    assert [n.op_type for n in graph.nodes] == ["Reshape"]
    assert graph.tensors["y"].shape == (2, 24)
    assert graph.nodes[0].name  # synthesised when the model leaves it empty


def test_a_declared_output_shape_flows_back_through_shape_preserving_ops():
    # The reduction's axes arrive at run time, so onnx cannot size 's'; the model promises y's shape.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2, 2])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 1])
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
        helper.make_node("Sqrt", ["s"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "back", [x, axes], [y]), opset_imports=[helper.make_opsetid("", 18)]
    )
    graph = load_model(model)
    assert graph.tensors["s"].shape == (3, 2, 1) and graph.tensors["s"].dtype == np.float32
    data = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    out = Session(graph).run({"x": data, "axes": np.array([2], np.int64)})["y"]
    np.testing.assert_allclose(out, np.sqrt(data.sum(axis=2, keepdims=True)), rtol=1e-6)
