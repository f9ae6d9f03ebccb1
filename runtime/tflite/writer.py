"""Small `.tflite` models written from scratch, with the `flatbuffers` builder and the `tflite`
package's generated functions.

`model_bytes` writes a model (schema version 3, one subgraph) of tensors (constants carry their
bytes) and builtin operators, each with its options given as the reader hands them to kernels
(snake_case fields, enums by their schema names). `one_op_model` writes one operator from its
tensors: an input may be `OMITTED` (an optional input left out, index -1) or `variable` (a state,
as TFLite's LSTM and SVDF keep theirs). `lstm_tensors` makes a standard
UNIDIRECTIONAL_SEQUENCE_LSTM's 24 inputs. `memplan warm` runs such models to compile the
stateful operators' loops; the tests run them in TensorFlow Lite Micro and in memplan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

from runtime.quantization import QuantParams

TYPES = {
    np.dtype(np.float32): 0,
    np.dtype(np.int32): 2,
    np.dtype(np.uint8): 3,
    np.dtype(np.int64): 4,
    np.dtype(np.int16): 7,
    np.dtype(np.int8): 9,
}
ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4}
PADDINGS = {"SAME": 0, "VALID": 1}
OPTIONS: dict[str, str | None] = {  # builtin -> its options table in the schema (None: it has none)
    "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "ADD": "AddOptions",
    "SUB": "SubOptions",
    "MUL": "MulOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "SOFTMAX": "SoftmaxOptions",
    "CONCATENATION": "ConcatenationOptions",
    "MEAN": "ReducerOptions",
    "RESHAPE": "ReshapeOptions",
    "PAD": "PadOptions",
    "QUANTIZE": "QuantizeOptions",
    "DEQUANTIZE": "DequantizeOptions",
    "RELU": None,
    "LOGISTIC": None,
    "TANH": None,
    "PRELU": None,
    "HARD_SWISH": None,
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions",
    "SPLIT": "SplitOptions",
    "STRIDED_SLICE": "StridedSliceOptions",
    "RELU6": None,
    "SVDF": "SVDFOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
}


@dataclass
class Tensor:
    shape: tuple[int, ...]
    dtype: Any
    quant: QuantParams | None = None
    data: np.ndarray | None = None  # a constant's value
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    variable: bool = False  # a state (TFLite's variable tensor): no graph input, kept by the interpreter


OMITTED = None  # an optional input left out (tensor index -1), in `one_op_model`'s inputs


def q(scale: Any, zero_point: Any = 0, axis: int | None = None) -> QuantParams:
    return QuantParams(np.asarray(scale, dtype=np.float32), np.asarray(zero_point), axis)


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _option_value(name: str, value: Any) -> Any:
    if name == "padding":
        return PADDINGS[value]
    if name == "fused_activation_function":
        return ACTIVATIONS[value]
    return value


@dataclass(frozen=True)
class Operator:
    """One builtin operator of a model being written: tensor indices (-1: an optional input left out)."""

    op: str
    inputs: Sequence[int]
    outputs: Sequence[int]
    options: dict[str, Any] = field(default_factory=dict)
    intermediates: Sequence[int] = ()


def one_op_model(
    op: str,
    inputs: Sequence[Tensor | None],
    outputs: list[Tensor],
    options: dict[str, Any],
    intermediates: Sequence[Tensor] = (),
) -> bytes:
    """A `.tflite` model (schema version 3) with one subgraph and one operator `op`; an input given
    as `OMITTED` is an optional input left out, a `variable` one a state; `intermediates` are the
    operator's intermediate tensors (as the converter writes an integer LSTM's)."""
    given = [t for t in inputs if t is not None]
    index = {id(t): i for i, t in enumerate(given)}
    tensors = [*given, *outputs, *intermediates]
    outputs_end = len(given) + len(outputs)
    operator = Operator(
        op,
        [index[id(t)] if t is not None else -1 for t in inputs],
        list(range(len(given), outputs_end)),
        options,
        list(range(outputs_end, len(tensors))),
    )
    graph_inputs = [i for i, t in enumerate(given) if t.data is None and not t.variable]
    return model_bytes(tensors, [operator], graph_inputs, operator.outputs)


def model_bytes(
    tensors: Sequence[Tensor], operators: Sequence[Operator], inputs: Sequence[int], outputs: Sequence[int]
) -> bytes:
    """A `.tflite` model (schema version 3) of one subgraph: `tensors` (constants carry their bytes),
    `operators` in execution order, the subgraph's `inputs` and `outputs` by tensor index."""
    b = flatbuffers.Builder(1024)
    buffers = [b""]  # buffer 0: empty, as every converter writes it
    buffer_of = []
    for t in tensors:
        if t.data is None:
            buffer_of.append(0)
        else:
            buffers.append(np.ascontiguousarray(t.data, dtype=t.dtype).tobytes())
            buffer_of.append(len(buffers) - 1)
    buffer_offsets = []
    for data in buffers:
        vec = b.CreateByteVector(data) if data else None
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        buffer_offsets.append(tflite.BufferEnd(b))
    tensor_offsets = [_tensor(b, t, i, buffer_of[i]) for i, t in enumerate(tensors)]
    codes: dict[str, int] = {}  # builtin -> its index among the model's operator codes, in first use
    operator_offsets = [_operator(b, o, codes.setdefault(o.op, len(codes))) for o in operators]
    sub_tensors = _offset_vector(b, tflite.SubGraphStartTensorsVector, tensor_offsets)
    sub_inputs = _int_vector(b, tflite.SubGraphStartInputsVector, list(inputs))
    sub_outputs = _int_vector(b, tflite.SubGraphStartOutputsVector, list(outputs))
    sub_ops = _offset_vector(b, tflite.SubGraphStartOperatorsVector, operator_offsets)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, sub_tensors)
    tflite.SubGraphAddInputs(b, sub_inputs)
    tflite.SubGraphAddOutputs(b, sub_outputs)
    tflite.SubGraphAddOperators(b, sub_ops)
    subgraph = tflite.SubGraphEnd(b)
    opcodes = []
    for op in codes:
        code = getattr(tflite.BuiltinOperator, op)
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tflite.OperatorCodeAddBuiltinCode(b, code)
        tflite.OperatorCodeAddVersion(b, 1)
        opcodes.append(tflite.OperatorCodeEnd(b))
    code_vec = _offset_vector(b, tflite.ModelStartOperatorCodesVector, opcodes)
    subgraphs = _offset_vector(b, tflite.ModelStartSubgraphsVector, [subgraph])
    buffer_vec = _offset_vector(b, tflite.ModelStartBuffersVector, buffer_offsets)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, code_vec)
    tflite.ModelAddSubgraphs(b, subgraphs)
    tflite.ModelAddBuffers(b, buffer_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _operator(b: Any, o: Operator, opcode: int) -> int:
    opts = _options(b, o.op, o.options)
    inputs_vec = _int_vector(b, tflite.OperatorStartInputsVector, list(o.inputs))
    outputs_vec = _int_vector(b, tflite.OperatorStartOutputsVector, list(o.outputs))
    between = _int_vector(b, tflite.OperatorStartIntermediatesVector, list(o.intermediates))
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, opcode)
    tflite.OperatorAddInputs(b, inputs_vec)
    tflite.OperatorAddOutputs(b, outputs_vec)
    if o.intermediates:
        tflite.OperatorAddIntermediates(b, between)
    if opts is not None:
        tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, str(OPTIONS[o.op])))
        tflite.OperatorAddBuiltinOptions(b, opts)
    return tflite.OperatorEnd(b)


def _int_vector(b: Any, start: Any, values: list[int]) -> int:
    start(b, len(values))
    for v in reversed(values):
        b.PrependInt32(int(v))
    return b.EndVector()


def _offset_vector(b: Any, start: Any, offsets: list[int]) -> int:
    start(b, len(offsets))
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _float_vector(b: Any, start: Any, values: Any) -> int:
    start(b, len(values))
    for v in reversed(list(values)):
        b.PrependFloat32(float(v))
    return b.EndVector()


def _long_vector(b: Any, start: Any, values: Any) -> int:
    start(b, len(values))
    for v in reversed(list(values)):
        b.PrependInt64(int(v))
    return b.EndVector()


def _tensor(b: Any, t: Tensor, index: int, buffer: int) -> int:
    name = b.CreateString(t.name or f"t{index}")
    shape = _int_vector(b, tflite.TensorStartShapeVector, list(t.shape))
    quant = None
    if t.quant is not None:
        scales = _float_vector(b, tflite.QuantizationParametersStartScaleVector, t.quant.scale)
        zeros = _long_vector(b, tflite.QuantizationParametersStartZeroPointVector, t.quant.zero_point)
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zeros)
        tflite.QuantizationParametersAddQuantizedDimension(b, t.quant.axis or 0)
        quant = tflite.QuantizationParametersEnd(b)
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, TYPES[np.dtype(t.dtype)])
    tflite.TensorAddBuffer(b, buffer)
    tflite.TensorAddName(b, name)
    if t.variable:
        tflite.TensorAddIsVariable(b, True)
    if quant is not None:
        tflite.TensorAddQuantization(b, quant)
    return tflite.TensorEnd(b)


def _options(b: Any, op: str, options: dict[str, Any]) -> int | None:
    table = OPTIONS.get(op)
    if table is None:  # a builtin without options
        return None
    getattr(tflite, f"{table}Start")(b)
    for key, value in options.items():
        getattr(tflite, f"{table}Add{_camel(key)}")(b, _option_value(key, value))
    return getattr(tflite, f"{table}End")(b)


def lstm_tensors(
    dtype: Any,
    batches: int = 2,
    steps: int = 3,
    depth: int = 5,
    units: int = 4,
    time_major: bool = False,
    seed: int = 0,
    cell_scale: float = 2.0**-11,
) -> tuple[list[Tensor | None], list[Tensor]]:
    """The 24 inputs (None where left out) and the output of a standard UNIDIRECTIONAL_SEQUENCE_LSTM
    with seeded random weights: float32, or int8 or int16 activations with TFLite's integer LSTM
    quantization (int8 weights; int32 biases for int8, int64 for int16, the 16x8 LSTM)."""
    rng = np.random.default_rng(seed)
    x_shape = (steps, batches, depth) if time_major else (batches, steps, depth)
    y_shape = (*x_shape[:2], units)
    if dtype == np.float32:

        def weights(shape):
            return Tensor(shape, np.float32, data=(rng.standard_normal(shape) * 0.5).astype(np.float32))

        x, h, c, y = (Tensor(x_shape, np.float32), Tensor((batches, units), np.float32, variable=True),
                      Tensor((batches, units), np.float32, variable=True), Tensor(y_shape, np.float32))  # fmt: skip
        biases = [weights((units,)) for _ in range(4)]
    else:
        wide = np.dtype(dtype) == np.int16  # 16x8: symmetric int16 activations
        x_q, h_q = (q(2.0**-11), q(2.0**-15)) if wide else (q(0.04, 3), q(0.0078125, -2))

        def weights(shape):
            return Tensor(shape, np.int8, q(float(rng.uniform(0.01, 0.03))),
                          rng.integers(-127, 128, shape).astype(np.int8))  # fmt: skip

        x, h = Tensor(x_shape, dtype, x_q), Tensor((batches, units), dtype, h_q, variable=True)
        c = Tensor((batches, units), np.int16, q(cell_scale), variable=True)
        y = Tensor(y_shape, dtype, h_q)
        biases = []
    w_x = [weights((units, depth)) for _ in range(4)]
    w_h = [weights((units, units)) for _ in range(4)]
    if dtype != np.float32:
        bias_type, bias_range = (np.int64, 60000) if wide else (np.int32, 3000)
        biases = [Tensor((units,), bias_type, q(np.float32(x_q.scale[0]) * np.float32(w.quant.scale[0])),
                         rng.integers(-bias_range, bias_range, units).astype(bias_type)) for w in w_x]  # fmt: skip
    peepholes: list[Tensor | None] = [OMITTED] * 3
    projection: list[Tensor | None] = [OMITTED] * 2
    norms: list[Tensor | None] = [OMITTED] * 4
    inputs: list[Tensor | None] = [x, *w_x, *w_h, *peepholes, *biases, *projection, h, c, *norms]
    return inputs, [y]
