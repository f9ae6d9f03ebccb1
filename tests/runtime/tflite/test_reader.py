"""The `.tflite` reader against TensorFlow Lite's own interpreters, on the real models of TensorFlow Lite Micro.

Oracles: LiteRT's interpreter (`ai-edge-litert`) lists every tensor with its name, shape, dtype and
quantization, every operator with its inputs and outputs, and hands back constant data; TensorFlow
Lite Micro's interpreter (`tflite-micro`) gives the inputs and outputs of person_detect, which LiteRT
refuses (its biases carry their filter's quantized_dimension).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import runtime
from planner import check_plan, plan
from runtime.tflite.model import parse
from tests.runtime.tflite.shared import NAMES, model_bytes, model_path

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert (the test extra) is not installed")
LITERT_READS = [n for n in NAMES if n != "person_detect"]


def names_by_index(data: bytes) -> list[str]:
    return [t.name for t in parse(data, 1 << 40).tensors]


@pytest.mark.parametrize("name", LITERT_READS)
def test_every_tensor_matches_litert(name):
    data = model_bytes(name)
    graph = runtime.load_model(data)
    interpreter = litert.Interpreter(model_content=data)
    details = interpreter.get_tensor_details()  # before its kernels' prepare widens some per-tensor scales
    interpreter.allocate_tensors()
    names = names_by_index(data)
    seen = 0
    for detail in details:
        ours = graph.tensors.get(names[detail["index"]])
        if ours is None:
            continue  # a tensor no operator reads or writes
        seen += 1
        assert ours.shape == tuple(detail["shape"]), ours.name
        assert ours.dtype == np.dtype(detail["dtype"]), ours.name
        q = detail["quantization_parameters"]
        if len(q["scales"]):
            assert ours.quant is not None, ours.name
            assert np.array_equal(ours.quant.scale, q["scales"]), ours.name
            assert np.array_equal(ours.quant.zero_point, q["zero_points"]), ours.name
            if len(q["scales"]) > 1:
                assert ours.quant.axis == q["quantized_dimension"], ours.name
        else:
            assert ours.quant is None, ours.name
        if ours.kind == "constant":
            assert np.array_equal(graph.constants[ours.name].value(), interpreter.get_tensor(detail["index"])), (
                ours.name
            )
    assert seen == len(graph.tensors)


@pytest.mark.parametrize("name", LITERT_READS)
def test_operators_in_file_order_match_litert(name):
    data = model_bytes(name)
    graph = runtime.load_model(data)
    names = names_by_index(data)
    interpreter = litert.Interpreter(model_content=data)
    ops = interpreter._get_ops_details()  # the interpreter's own list of its nodes, in execution order
    assert [n.op_type for n in graph.nodes] == [op["op_name"] for op in ops]
    for node, op in zip(graph.nodes, ops, strict=True):
        assert node.domain == "tflite" and node.proto is None
        assert node.inputs == tuple(names[i] if i >= 0 else "" for i in op["inputs"])
        assert node.outputs == tuple(names[i] for i in op["outputs"])
        assert len(node.attributes["q_inputs"]) == len(node.inputs)
        assert node.attributes["q_outputs"] == tuple(graph.tensors[t].quant for t in node.outputs)


def test_person_detect_inputs_and_outputs_match_tflite_micro():
    tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime", reason="tflite-micro is not installed")
    data = model_bytes("person_detect")
    graph = runtime.load_model(model_path("person_detect"))
    interpreter = tflm.Interpreter.from_bytes(data, arena_size=200_000)
    for detail, name in [
        (interpreter.get_input_details(0), graph.inputs[0]),
        (interpreter.get_output_details(0), graph.outputs[0]),
    ]:
        ours = graph.tensors[name]
        assert ours.shape == tuple(detail["shape"]) and ours.dtype == np.dtype(detail["dtype"])
        scale, zero = detail["quantization_parameters"]["scales"], detail["quantization_parameters"]["zero_points"]
        assert np.array_equal(ours.quant.scale, scale) and np.array_equal(ours.quant.zero_point, zero)
    conv = graph.nodes[0]
    assert (conv.op_type, conv.attributes["padding"], conv.attributes["stride_w"]) == ("DEPTHWISE_CONV_2D", "SAME", 2)
    assert conv.attributes["fused_activation_function"] == "RELU6" and conv.attributes["depth_multiplier"] == 8
    bias = graph.tensors[conv.inputs[2]]
    assert bias.quant.axis == 0 and bias.quant.scale.size == 8  # its file says axis 3: the one axis that fits


@pytest.mark.parametrize("name", NAMES)
def test_every_shared_model_plans_with_constants_outside_the_arena(name):
    graph = runtime.load_model(model_path(name))
    problem = runtime.memory_problem(graph, runtime.MemoryOptions(inplace=False, alignment=16))
    ids = {b.id for b in problem.buffers}
    assert not ids & set(graph.constants)
    assert set(graph.inputs) | set(graph.outputs) <= ids
    made = plan(problem, "greedy_by_size")
    assert check_plan(problem, made).ok
    assert made.lower_bound <= made.pool_sizes["arena"]


def test_the_format_is_picked_by_content_not_by_the_name(tmp_path):
    source = model_path("hello_world_int8")
    disguised = tmp_path / "model.onnx"
    shutil.copyfile(source, disguised)
    graph = runtime.load_model(disguised)
    assert [n.op_type for n in graph.nodes] == ["FULLY_CONNECTED"] * 3
    assert graph.name == "model" and graph.tensors[graph.inputs[0]].dtype == np.int8
    with pytest.raises(runtime.ShapeError, match="fixed shape"):
        runtime.load_model(source, shapes={graph.inputs[0]: [4, 1]})
    assert runtime.load_model(source, shapes={graph.inputs[0]: [1, 1]}).inputs == graph.inputs


def test_constants_of_a_file_are_mapped_from_it_not_copied():
    from runtime.params import ParameterStore

    path = model_path("person_detect")
    graph = runtime.load_model(path)
    store = ParameterStore()
    shared = store.share(graph, model_path=path)
    # Every constant's bytes come from the file's pages (deduplicated by content), none decoded on the heap.
    assert store.bytes_by_origin()["decoded"] == 0 and store.bytes_by_origin()["mapped"] > 0
    assert store.requested_bytes == sum(c.nbytes for c in graph.constants.values())
    for name, constant in graph.constants.items():
        assert np.array_equal(shared.constants[name].value(), constant.value())
    assert graph.name == "person_detect"
