"""A tiny int8 `.tflite` model for `memplan warm`: PAD -> CONV_2D (3x3) -> DEPTHWISE_CONV_2D ->
CONV_2D (1x1, channels grow) -> AVERAGE_POOL_2D -> FULLY_CONNECTED, so that the integer kernels'
compiled loops (`runtime.kernels.quantized.jit_conv_int`, `jit_pad`, `jit_pool_int`) are compiled once, with their outputs both
beside and over their inputs. Written with the `tflite` package's generated builder functions.
The stateful operators' loops (`jit_tflite_lstm`, `jit_svdf`) are reached by one-operator models of
`runtime.tflite.writer`: an int8 and a float32 UNIDIRECTIONAL_SEQUENCE_LSTM and an int8 SVDF."""

from __future__ import annotations

from typing import Any

import flatbuffers
import numpy as np
import tflite

from runtime.tflite.writer import Tensor, lstm_tensors, one_op_model, q

INT8, INT32 = 9, 2
RELU6 = 3


def _vector(b: Any, start: Any, values: list[Any], prepend: str) -> int:
    start(b, len(values))
    for v in reversed(values):
        getattr(b, prepend)(v)
    return b.EndVector()


class _Model:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(4096)
        self.random = np.random.default_rng(3)
        self.buffers: list[bytes] = [b""]
        self.tensors: list[int] = []
        self.operators: list[int] = []
        self.codes: list[int] = []

    def tensor(self, shape: tuple[int, ...], kind: int, scale: list[float], data: np.ndarray | None = None) -> int:
        b = self.b
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data).tobytes())
            buffer = len(self.buffers) - 1
        name = b.CreateString(f"t{len(self.tensors)}")
        dims = _vector(b, tflite.TensorStartShapeVector, list(shape), "PrependInt32")
        scales = _vector(b, tflite.QuantizationParametersStartScaleVector, scale, "PrependFloat32")
        zeros = _vector(b, tflite.QuantizationParametersStartZeroPointVector, [0] * len(scale), "PrependInt64")
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zeros)
        tflite.QuantizationParametersAddQuantizedDimension(b, 0 if len(scale) == 1 or shape[0] > 1 else 3)
        quant = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, dims)
        tflite.TensorAddType(b, kind)
        tflite.TensorAddBuffer(b, buffer)
        tflite.TensorAddName(b, name)
        tflite.TensorAddQuantization(b, quant)
        self.tensors.append(tflite.TensorEnd(b))
        return len(self.tensors) - 1

    def weights(self, shape: tuple[int, ...], channels: int, scale: float) -> tuple[int, int]:
        w = self.tensor(shape, INT8, [0.02] * channels, self.random.integers(-127, 128, shape).astype(np.int8))
        bias = self.tensor((channels,), INT32, [0.02 * scale] * channels, np.zeros(channels, np.int32))
        return w, bias

    def op(self, name: str, inputs: list[int], output: int, options: str | None, **fields: int) -> int:
        b = self.b
        opts = None
        if options is not None:
            getattr(tflite, f"{options}Start")(b)
            for key, value in fields.items():
                getattr(tflite, f"{options}Add{key}")(b, value)
            opts = getattr(tflite, f"{options}End")(b)
        ins = _vector(b, tflite.OperatorStartInputsVector, inputs, "PrependInt32")
        outs = _vector(b, tflite.OperatorStartOutputsVector, [output], "PrependInt32")
        code = getattr(tflite.BuiltinOperator, name)
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tflite.OperatorCodeAddBuiltinCode(b, code)
        tflite.OperatorCodeAddVersion(b, 1)
        self.codes.append(tflite.OperatorCodeEnd(b))
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, len(self.codes) - 1)
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if opts is not None and options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, options))
            tflite.OperatorAddBuiltinOptions(b, opts)
        self.operators.append(tflite.OperatorEnd(b))
        return output

    def finish(self, inputs: list[int], outputs: list[int]) -> bytes:
        b = self.b
        offsets = []
        for data in self.buffers:
            vec = b.CreateByteVector(data) if data else None
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            offsets.append(tflite.BufferEnd(b))
        tensors = _vector(b, tflite.SubGraphStartTensorsVector, self.tensors, "PrependUOffsetTRelative")
        ins = _vector(b, tflite.SubGraphStartInputsVector, inputs, "PrependInt32")
        outs = _vector(b, tflite.SubGraphStartOutputsVector, outputs, "PrependInt32")
        ops = _vector(b, tflite.SubGraphStartOperatorsVector, self.operators, "PrependUOffsetTRelative")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensors)
        tflite.SubGraphAddInputs(b, ins)
        tflite.SubGraphAddOutputs(b, outs)
        tflite.SubGraphAddOperators(b, ops)
        subgraph = tflite.SubGraphEnd(b)
        codes = _vector(b, tflite.ModelStartOperatorCodesVector, self.codes, "PrependUOffsetTRelative")
        subgraphs = _vector(b, tflite.ModelStartSubgraphsVector, [subgraph], "PrependUOffsetTRelative")
        buffers = _vector(b, tflite.ModelStartBuffersVector, offsets, "PrependUOffsetTRelative")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes)
        tflite.ModelAddSubgraphs(b, subgraphs)
        tflite.ModelAddBuffers(b, buffers)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def integer_tflite() -> bytes:
    """The model's bytes (int8, per-tensor scales, zero points 0)."""
    m = _Model()
    x = m.tensor((1, 6, 6, 4), INT8, [0.05])
    pads = m.tensor((4, 2), INT32, [1.0], np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    padded = m.op("PAD", [x, pads], m.tensor((1, 8, 8, 4), INT8, [0.05]), None)
    w, bias = m.weights((8, 3, 3, 4), 8, 0.05)
    conv = m.op("CONV_2D", [padded, w, bias], m.tensor((1, 6, 6, 8), INT8, [0.1]), "Conv2DOptions",
                Padding=1, StrideW=1, StrideH=1, FusedActivationFunction=RELU6)  # fmt: skip
    w, bias = m.weights((1, 3, 3, 8), 8, 0.1)
    depthwise = m.op("DEPTHWISE_CONV_2D", [conv, w, bias], m.tensor((1, 6, 6, 8), INT8, [0.1]),
                     "DepthwiseConv2DOptions", Padding=0, StrideW=1, StrideH=1, DepthMultiplier=1,
                     FusedActivationFunction=RELU6)  # fmt: skip
    w, bias = m.weights((24, 1, 1, 8), 24, 0.1)
    wide = m.op("CONV_2D", [depthwise, w, bias], m.tensor((1, 6, 6, 24), INT8, [0.1]), "Conv2DOptions",
                Padding=1, StrideW=1, StrideH=1)  # fmt: skip
    pooled = m.op("AVERAGE_POOL_2D", [wide], m.tensor((1, 3, 3, 24), INT8, [0.1]), "Pool2DOptions",
                  Padding=1, StrideW=2, StrideH=2, FilterWidth=2, FilterHeight=2)  # fmt: skip
    w, bias = m.weights((5, 24), 5, 0.1)
    dense = m.op("FULLY_CONNECTED", [pooled, w, bias], m.tensor((9, 5), INT8, [0.2]), "FullyConnectedOptions")
    return m.finish([x], [dense])


def lstm_int8_tflite() -> bytes:
    """A standard int8 LSTM (TFLite's integer LSTM: int16 cell state), batch-major."""
    inputs, outputs = lstm_tensors(np.int8)
    return one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, {"fused_activation_function": "TANH"})


def lstm_float_tflite() -> bytes:
    """The same LSTM in float32."""
    inputs, outputs = lstm_tensors(np.float32)
    return one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, {"fused_activation_function": "TANH"})


def svdf_int8_tflite() -> bytes:
    """An int8 SVDF of rank 2 with an int8 state, as keyword_scrambled's are."""
    random = np.random.default_rng(5)
    batches, depth, filters, memory = 1, 8, 4, 3
    inputs = [
        Tensor((batches, depth), np.int8, q(0.05)),
        Tensor((filters, depth), np.int8, q(0.004), random.integers(-127, 128, (filters, depth)).astype(np.int8)),
        Tensor((filters, memory), np.int8, q(0.01), random.integers(-64, 64, (filters, memory)).astype(np.int8)),
        Tensor((filters // 2,), np.int32, q(0.0002), np.zeros(filters // 2, np.int32)),
        Tensor((batches, filters * memory), np.int8, q(0.02), variable=True),
    ]
    outputs = [Tensor((batches, filters // 2), np.int8, q(0.08))]
    return one_op_model("SVDF", inputs, outputs, {"rank": 2, "fused_activation_function": "NONE"})
