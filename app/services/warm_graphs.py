"""Tiny ONNX graphs that `memplan warm` runs so that every compiled kernel loop is compiled once.

The gallery's models and the training demo leave whole families of kernels untouched (the
recurrences, the normalisations, depthwise convs, squeeze-and-excitation, Winograd's larger
tiles), and each of those compiles for seconds on its first model in a new process. Each graph
here reaches a few of those loops at the smallest shapes their routes take (Winograd's tile
sizes are the smallest that pick each variant), so a run costs milliseconds once compiled:

- ``recurrence_routes``: one GRU, LSTM or RNN per float32 example of the recurrences' route table
  (`runtime.kernels.rnn_routes.EXAMPLES`: the compiled loops with and without sequence lengths);
- ``normalisations``: Softmax of a graph input, LayerNormalization, a Softmax written over its
  input, RMSNormalization, and Gemms (a dense layer's matrix product);
- ``convolutions``: Winograd F(2x2) and F(4x4) 3x3 convs, dense 3x3 convs of stride 1 and 2
  with an activation, a 1x1 conv with its residual Add, depthwise convs on a wide map (over
  sub-planes) and a narrow one (channels-last), a squeeze-and-excitation block (fused into one
  SqueezeExcite at load time), with MaxPools and GlobalAveragePools between them;
- ``conv_routes``: one Conv and its ReLU (a ConvAct once fused) per float32 example of the Conv
  route table (`runtime.kernels.conv.routes.EXAMPLES`), so that a new route with its example is
  reached without a graph written here;
- ``pool_routes``: one pool per float32 example of the pools' route table
  (`runtime.kernels.pool_routes.EXAMPLES`), each from its own input;
- ``quantized``: uint8 QOperator ops between QuantizeLinear and DequantizeLinear, each of QLinearConv's
  routes (gemm, in depth chunks, depthwise, the general 1-D one), QLinearAdd (also by its table of pairs),
  QLinearMul, QLinearSigmoid, the quantized pools and QGemm, through their compiled loops;
- ``qlinear_matmul_routes``: one QLinearMatMul per example of its route table
  (`runtime.kernels.quantized.qlinear_matmul.EXAMPLES`: a constant B's rows, batched activations);
- ``tflite_int8``: an int8 `.tflite` model (`app.services.warm_tflite`): PAD, CONV_2D,
  DEPTHWISE_CONV_2D, AVERAGE_POOL_2D and FULLY_CONNECTED through their compiled loops, outputs over their inputs;
- ``tflite_lstm_int8``, ``tflite_lstm_float32``, ``tflite_svdf_int8``: one stateful `.tflite` operator each
  (`app.services.warm_tflite`), through the LSTM's and the SVDF's compiled loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.services.warm_tflite import (
    integer_tflite,
    lstm_float_tflite,
    lstm_int8_tflite,
    lstm_int16_tflite,
    svdf_int8_tflite,
)
from runtime.kernels import pool_routes, rnn_routes
from runtime.kernels.conv.routes import EXAMPLES
from runtime.kernels.quantized import qlinear_matmul

OPSET = 23  # the first with RMSNormalization
FLOAT = TensorProto.FLOAT


class _Builder:
    """Nodes, seeded float32 weights and typed inputs and outputs of one graph."""

    def __init__(self, seed: int) -> None:
        self.random = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []

    def input(self, name: str, shape: list[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, FLOAT, shape))
        return name

    def output(self, name: str) -> None:
        self.outputs.append(helper.make_empty_tensor_value_info(name))  # typed by `model`

    def weight(self, name: str, shape: list[int], scale: float = 0.3) -> str:
        value = (self.random.standard_normal(shape) * scale).astype(np.float32)
        self.weights.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def model(self, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)  # the outputs' types, which ONNX requires


def recurrence_routes() -> onnx.ModelProto:
    """Each float32 example of the recurrences' route table, from its own input; sequence lengths,
    where the example has them, as a constant (every entry a different length)."""
    b = _Builder(1)
    for name, case in rnn_routes.EXAMPLES.items():
        if case.dtype != np.float32:
            continue
        dirs = 2 if case.attrs.get("direction") == "bidirectional" else 1
        gates = rnn_routes.GATES[case.op]
        x = b.input(f"{name}_x", [case.seq, case.batch, case.size])
        w = b.weight(f"{name}_w", [dirs, gates * case.hidden, case.size])
        r = b.weight(f"{name}_r", [dirs, gates * case.hidden, case.hidden])
        inputs = [x, w, r, b.weight(f"{name}_b", [dirs, 2 * gates * case.hidden])]
        if case.lens:
            lens = np.arange(case.batch, dtype=np.int32) % case.seq + 1
            b.weights.append(numpy_helper.from_array(lens, f"{name}_lens"))
            inputs.append(f"{name}_lens")
        b.output(b.node(case.op, inputs, f"{name}_y", hidden_size=case.hidden, **case.attrs))
    return b.model("warm_recurrence_routes")


def normalisations() -> onnx.ModelProto:
    """Softmax and the normalisations over rows of 16, then a Gemm with B as stored and one with
    B transposed (a loop each: a MatMul keeps numpy's)."""
    b = _Builder(2)
    x = b.input("x", [4, 16])
    b.output(b.node("Softmax", [x], "softmax_of_input", axis=-1))  # x stays live: a separate output
    normed = b.node("LayerNormalization", [x, b.weight("ln_scale", [16]), b.weight("ln_bias", [16])], "ln", axis=-1)
    last = b.node("Softmax", [normed], "softmax_in_place", axis=-1)  # ln dies here
    last = b.node("RMSNormalization", [last, b.weight("rms_scale", [16])], "rms", axis=-1)
    b.output(b.node("Gemm", [last, b.weight("gemm_w", [16, 8]), b.weight("gemm_c", [8])], "gemm"))
    b.output(b.node("Gemm", [last, b.weight("gemm_wt", [8, 16])], "gemm_t", transB=1))
    return b.model("warm_normalisations")


def convolutions() -> onnx.ModelProto:
    """The conv routes that have compiled loops, on maps of 16 channels; see the module docstring."""
    b = _Builder(3)
    x = b.input("x", [1, 16, 28, 28])

    def conv(name: str, source: str, k: int, out: int = 16, group: int = 1, stride: int = 1) -> str:
        w = b.weight(f"{name}_w", [out, 16 // group, k, k])
        pads = [k // 2] * 4
        return b.node(
            "Conv", [source, w, b.weight(f"{name}_b", [out])], name, group=group, pads=pads, strides=[stride] * 2
        )

    wide = b.node("Relu", [conv("winograd4", x, 3)], "winograd4_relu")  # 28 x 28 outputs: F(4x4)
    b.output(b.node("Relu", [conv("dense_s2", wide, 3, out=8, stride=2)], "dense_s2_relu"))
    pooled = b.node("MaxPool", [wide], "pool", kernel_shape=[2, 2], strides=[2, 2])
    small = conv("winograd2", pooled, 3)  # 14 x 14 outputs: F(2x2)
    b.output(b.node("Relu", [conv("dense", small, 3, out=8)], "dense_relu"))  # 8 filters: no Winograd
    residual = b.node("Add", [conv("pointwise", small, 1), small], "residual")
    sub_planes = b.node("Relu", [conv("depthwise_wide", residual, 3, group=16)], "depthwise_wide_relu")
    narrow = b.node("MaxPool", [sub_planes], "pool_narrow", kernel_shape=[2, 2], strides=[2, 2])
    channels_last = conv("depthwise_narrow", narrow, 3, group=16)  # 7 wide: channels-last
    b.output(b.node("GlobalAveragePool", [_squeeze_excite(b, channels_last)], "gap"))
    return b.model("warm_convolutions")


def _squeeze_excite(b: _Builder, x: str) -> str:
    """GlobalAveragePool -> 1x1 Conv + Relu -> 1x1 Conv + Sigmoid -> Mul, as MobileNetV3 has it."""
    squeeze = b.node("GlobalAveragePool", [x], "se_pool")
    reduce = b.node("Conv", [squeeze, b.weight("se_w1", [4, 16, 1, 1]), b.weight("se_b1", [4])], "se_reduce")
    gate = b.node("Conv", [b.node("Relu", [reduce], "se_relu"), b.weight("se_w2", [16, 4, 1, 1])], "se_expand")
    return b.node("Mul", [x, b.node("Sigmoid", [gate], "se_gate")], "se_scaled")


def conv_routes() -> onnx.ModelProto:
    """Each float32 example of the Conv route table, with a ReLU after it, each from its own input."""
    b = _Builder(4)
    for name, case in EXAMPLES.items():
        if case.dtype != np.float32:
            continue
        x = b.input(f"{name}_x", list(case.x))
        w, bias = b.weight(f"{name}_w", list(case.w)), b.weight(f"{name}_b", [case.w[0]])
        b.output(b.node("Relu", [b.node("Conv", [x, w, bias], name, **case.attrs)], f"{name}_relu"))
    return b.model("warm_conv_routes")


def pool_routes_graph() -> onnx.ModelProto:
    """Each float32 example of the pools' route table, each from its own input (MaxPool's Indices
    too where the example asks for them)."""
    b = _Builder(6)
    for name, case in pool_routes.EXAMPLES.items():
        if case.dtype != np.float32:
            continue
        x = b.input(f"{name}_x", list(case.x))
        outputs = [f"{name}_y", f"{name}_i"] if case.indices else [f"{name}_y"]
        b.nodes.append(helper.make_node(case.op, [x], outputs, name=name, **case.attrs))
        for output in outputs:
            b.output(output)
    return b.model("warm_pool_routes")


def quantized() -> onnx.ModelProto:
    """x -> QuantizeLinear -> QLinearConvs (3x3 8 -> 32, then 32 -> 8: depth chunks) -> depthwise
    QLinearConvs (3x3, 1x1) -> QLinearAdd -> QLinearSigmoid -> QLinearAveragePool -> QLinearGlobalAveragePool,
    QLinearMul by it -> a 1-D QLinearConv (the general route); the pooled vector -> QGemm (uint8,
    per-tensor scales; com.microsoft's ops)."""
    b = _Builder(5)
    x = b.input("x", [1, 8, 8, 8])
    u8 = lambda *shape: b.random.integers(0, 256, shape).astype(np.uint8)  # noqa: E731
    bias = b.random.integers(-100, 100, 32).astype(np.int32)
    constants = {
        "x_scale": np.float32(0.05), "x_zero": np.uint8(128), "w_scale": np.float32(0.02), "w_zero": np.uint8(128),
        "y_scale": np.float32(0.1), "y_zero": np.uint8(128), "w1": u8(32, 8, 3, 3), "w2": u8(8, 32, 3, 3),
        "bias": bias, "bias8": bias[:8], "dw": u8(8, 1, 3, 3), "w3": u8(8, 8, 3),
        "fc": u8(4, 8), "scales": u8(8, 1, 1, 1), "rows": np.array([1, 8, 64]), "vector": np.array([1, 8]),
    }  # fmt: skip
    b.weights += [numpy_helper.from_array(np.asarray(v), name) for name, v in constants.items()]
    xq = b.node("QuantizeLinear", [x, "x_scale", "x_zero"], "xq")
    q, ms = ["y_scale", "y_zero"], "com.microsoft"
    w = ["w_scale", "w_zero"]
    y = b.node("QLinearConv", [xq, "x_scale", "x_zero", "w1", *w, *q, "bias"], "aq", pads=[1, 1, 1, 1])
    y = b.node("QLinearConv", [y, *q, "w2", *w, *q, "bias8"], "yq", pads=[1, 1, 1, 1])
    y = b.node("QLinearConv", [y, *q, "dw", *w, *q, "bias8"], "dq", pads=[1, 1, 1, 1], group=8)
    y = b.node("QLinearConv", [y, *q, "scales", *w, *q], "kq", group=8)  # 1x1 depthwise: a scale per channel
    y = b.node("QLinearAdd", [y, *q, xq, "x_scale", "x_zero", *q], "sq", domain=ms)
    y = b.node("QLinearSigmoid", [y, *q, *q], "gq", domain=ms)
    y = b.node("QLinearAveragePool", [y, *q, *q], "pq", domain=ms, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    m = b.node("QLinearGlobalAveragePool", [y, *q, *q], "mq", domain=ms)
    y = b.node("QLinearMul", [y, *q, m, *q, *q], "eq", domain=ms)
    y = b.node("Reshape", [y, "rows"], "rq")
    y = b.node("QLinearConv", [y, *q, "w3", *w, *q, "bias8"], "cq", pads=[1, 1])
    b.output(b.node("DequantizeLinear", [y, *q], "y"))
    m = b.node("Reshape", [m, "vector"], "vq")
    b.output(
        b.node("DequantizeLinear", [b.node("QGemm", [m, *q, "fc", *w, "", *q], "fq", domain=ms, transB=1), *q], "z")
    )
    # a map of 64K elements: QLinearAdd by its table of every pair of values (`qlinear_ops.PAIRS_FROM`)
    wide = b.node("QuantizeLinear", [b.input("wide", [1, 1, 256, 256]), "x_scale", "x_zero"], "wq")
    b.output(b.node("DequantizeLinear", [b.node("QLinearAdd", [wide, *q, wide, *q, *q], "wa", domain=ms), *q], "w"))
    graph = helper.make_graph(b.nodes, "warm_quantized", b.inputs, [
        helper.make_tensor_value_info("y", FLOAT, [1, 8, 64]), helper.make_tensor_value_info("z", FLOAT, [1, 4]),
        helper.make_tensor_value_info("w", FLOAT, [1, 1, 256, 256]),
    ], b.weights)  # fmt: skip
    imports = [helper.make_opsetid("", OPSET), helper.make_opsetid(ms, 1)]
    return helper.make_model(graph, opset_imports=imports)  # com.microsoft's ops: no ONNX shape inference


def qlinear_matmul_routes() -> onnx.ModelProto:
    """Each example of QLinearMatMul's route table, A (and B where it is no constant) a graph input."""
    b = _Builder(7)
    types = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}
    outputs = []
    for name, case in qlinear_matmul.EXAMPLES.items():
        values = case.inputs(b.random)
        names = [f"{name}_{i}" for i in range(len(values))]
        for i, (tensor, value) in enumerate(zip(names, values, strict=True)):
            if i == 0 or (i == 3 and not case.b_constant):
                b.inputs.append(helper.make_tensor_value_info(tensor, types[value.dtype], list(value.shape)))
            else:
                b.weights.append(numpy_helper.from_array(np.asarray(value), tensor))
        b.nodes.append(helper.make_node("QLinearMatMul", names, [f"{name}_y"], name=name))
        shape = [*np.broadcast_shapes(case.a[:-2], case.b[:-2]), case.a[-2], case.b[-1]]
        outputs.append(helper.make_tensor_value_info(f"{name}_y", types[np.dtype(case.dtype)], shape))
    graph = helper.make_graph(b.nodes, "warm_qlinear_matmul_routes", b.inputs, outputs, b.weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


GRAPHS = {
    "recurrence_routes": recurrence_routes,
    "normalisations": normalisations,
    "convolutions": convolutions,
    "conv_routes": conv_routes,
    "pool_routes": pool_routes_graph,
    "quantized": quantized,
    "qlinear_matmul_routes": qlinear_matmul_routes,
    "tflite_int8": integer_tflite,
    "tflite_lstm_int8": lstm_int8_tflite,
    "tflite_lstm_int16": lstm_int16_tflite,
    "tflite_lstm_float32": lstm_float_tflite,
    "tflite_svdf_int8": svdf_int8_tflite,
}
