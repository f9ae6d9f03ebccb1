"""A vendor's custom operator: read with its custom code as op_type (domain "tflite.custom") and its
options' bytes, planned from the sizes in the file, and named by the Session as having no kernel.

The model is written here with the `flatbuffers` builder and the `tflite` package's generated functions:
an int8 input, a custom operator, an int8 output of another shape, both quantized per tensor.
"""

from __future__ import annotations

import importlib

import flatbuffers
import numpy as np
import pytest
import tflite

import runtime
from planner import check_plan, plan

OPTIONS = b"\x01\x02vendor"


def custom_model() -> bytes:
    m = {
        n: importlib.import_module(f"tflite.{n}")
        for n in ("Model", "SubGraph", "Tensor", "Buffer", "Operator", "OperatorCode", "QuantizationParameters")
    }
    b = flatbuffers.Builder(512)
    m["Buffer"].BufferStart(b)
    empty = m["Buffer"].BufferEnd(b)

    def ints(start, values, prepend):
        start(b, len(values))
        for v in reversed(values):
            prepend(v)
        return b.EndVector()

    def tensor(name: str, shape: list[int], scale: float, zero: int) -> int:
        text = b.CreateString(name)
        dims = ints(m["Tensor"].TensorStartShapeVector, shape, b.PrependInt32)
        scales = ints(m["QuantizationParameters"].QuantizationParametersStartScaleVector, [scale], b.PrependFloat32)
        zeros = ints(m["QuantizationParameters"].QuantizationParametersStartZeroPointVector, [zero], b.PrependInt64)
        m["QuantizationParameters"].QuantizationParametersStart(b)
        m["QuantizationParameters"].QuantizationParametersAddScale(b, scales)
        m["QuantizationParameters"].QuantizationParametersAddZeroPoint(b, zeros)
        quant = m["QuantizationParameters"].QuantizationParametersEnd(b)
        m["Tensor"].TensorStart(b)
        m["Tensor"].TensorAddShape(b, dims)
        m["Tensor"].TensorAddType(b, tflite.TensorType.INT8)
        m["Tensor"].TensorAddName(b, text)
        m["Tensor"].TensorAddQuantization(b, quant)
        return m["Tensor"].TensorEnd(b)

    tensors = [tensor("x", [1, 8, 8, 3], 0.5, -3), tensor("y", [1, 16], 0.25, 7)]
    code_name = b.CreateString("MyVendorOp")
    m["OperatorCode"].OperatorCodeStart(b)
    m["OperatorCode"].OperatorCodeAddDeprecatedBuiltinCode(b, tflite.BuiltinOperator.CUSTOM)
    m["OperatorCode"].OperatorCodeAddBuiltinCode(b, tflite.BuiltinOperator.CUSTOM)
    m["OperatorCode"].OperatorCodeAddCustomCode(b, code_name)
    m["OperatorCode"].OperatorCodeAddVersion(b, 2)
    code = m["OperatorCode"].OperatorCodeEnd(b)
    custom = b.CreateByteVector(OPTIONS)
    op_in = ints(m["Operator"].OperatorStartInputsVector, [0], b.PrependInt32)
    op_out = ints(m["Operator"].OperatorStartOutputsVector, [1], b.PrependInt32)
    m["Operator"].OperatorStart(b)
    m["Operator"].OperatorAddOpcodeIndex(b, 0)
    m["Operator"].OperatorAddInputs(b, op_in)
    m["Operator"].OperatorAddOutputs(b, op_out)
    m["Operator"].OperatorAddCustomOptions(b, custom)
    op = m["Operator"].OperatorEnd(b)
    tensor_vector = ints(m["SubGraph"].SubGraphStartTensorsVector, tensors, b.PrependUOffsetTRelative)
    op_vector = ints(m["SubGraph"].SubGraphStartOperatorsVector, [op], b.PrependUOffsetTRelative)
    sub_in = ints(m["SubGraph"].SubGraphStartInputsVector, [0], b.PrependInt32)
    sub_out = ints(m["SubGraph"].SubGraphStartOutputsVector, [1], b.PrependInt32)
    m["SubGraph"].SubGraphStart(b)
    m["SubGraph"].SubGraphAddTensors(b, tensor_vector)
    m["SubGraph"].SubGraphAddOperators(b, op_vector)
    m["SubGraph"].SubGraphAddInputs(b, sub_in)
    m["SubGraph"].SubGraphAddOutputs(b, sub_out)
    subgraph = m["SubGraph"].SubGraphEnd(b)
    subgraphs = ints(m["Model"].ModelStartSubgraphsVector, [subgraph], b.PrependUOffsetTRelative)
    codes = ints(m["Model"].ModelStartOperatorCodesVector, [code], b.PrependUOffsetTRelative)
    buffers = ints(m["Model"].ModelStartBuffersVector, [empty], b.PrependUOffsetTRelative)
    m["Model"].ModelStart(b)
    m["Model"].ModelAddVersion(b, 3)
    m["Model"].ModelAddOperatorCodes(b, codes)
    m["Model"].ModelAddSubgraphs(b, subgraphs)
    m["Model"].ModelAddBuffers(b, buffers)
    b.Finish(m["Model"].ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_a_custom_operator_keeps_its_code_and_options_and_plans_from_the_file():
    graph = runtime.load_model(custom_model())
    (node,) = graph.nodes
    assert (node.op_type, node.domain, node.opset) == ("MyVendorOp", "tflite.custom", 2)
    assert node.inputs == ("x",) and node.outputs == ("y",)
    assert node.attributes["custom_options"] == OPTIONS
    (q_in,), (q_out,) = node.attributes["q_inputs"], node.attributes["q_outputs"]
    assert (float(q_in.scale[0]), int(q_in.zero_point[0])) == (0.5, -3)
    assert (float(q_out.scale[0]), int(q_out.zero_point[0])) == (0.25, 7)
    assert graph.tensors["x"].nbytes == 8 * 8 * 3 and graph.tensors["y"].dtype == np.int8
    problem = runtime.memory_problem(graph, runtime.MemoryOptions(alignment=16))
    made = plan(problem, "greedy_by_size")
    assert check_plan(problem, made).ok and made.arena_bytes == 192 + 16  # both live at the one step


def test_running_it_names_the_operator_without_a_kernel():
    graph = runtime.load_model(custom_model())
    with pytest.raises(runtime.UnsupportedOpError, match="MyVendorOp"):
        runtime.Session(graph, "greedy_by_size").prepare()
