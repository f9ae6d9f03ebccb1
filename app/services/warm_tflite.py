"""A tiny int8 `.tflite` model for `memplan warm`: PAD -> CONV_2D (3x3) -> DEPTHWISE_CONV_2D ->
CONV_2D (1x1, channels grow) -> AVERAGE_POOL_2D -> FULLY_CONNECTED, so that the integer kernels'
compiled loops (`runtime.kernels.quantized.jit_conv_int`, `jit_pad`, `jit_pool_int`) are compiled
once, with their outputs both beside and over their inputs; and the stateful operators' loops
(`jit_tflite_lstm`, `jit_svdf`) by one-operator models: an int8, an int16 (16x8) and a float32
UNIDIRECTIONAL_SEQUENCE_LSTM and an int8 SVDF. All written by `runtime.tflite.writer`."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.tflite.writer import Operator, Tensor, lstm_tensors, model_bytes, one_op_model, q


class _Model:
    """Tensors and operators of the warm-up model, in the order they are added."""

    def __init__(self) -> None:
        self.random = np.random.default_rng(3)
        self.tensors: list[Tensor] = []
        self.operators: list[Operator] = []

    def tensor(self, shape: tuple[int, ...], dtype: Any, quant: Any = None, data: np.ndarray | None = None) -> int:
        self.tensors.append(Tensor(shape, dtype, quant, data))
        return len(self.tensors) - 1

    def weights(self, shape: tuple[int, ...], channels: int, scale: float, axis: int = 0) -> tuple[int, int]:
        w = self.tensor(shape, np.int8, q([0.02] * channels, [0] * channels, axis),
                        self.random.integers(-127, 128, shape).astype(np.int8))  # fmt: skip
        bias = self.tensor(
            (channels,), np.int32, q([0.02 * scale] * channels, [0] * channels), np.zeros(channels, np.int32)
        )
        return w, bias

    def op(self, name: str, inputs: list[int], output: int, **options: Any) -> int:
        self.operators.append(Operator(name, inputs, [output], options))
        return output


def integer_tflite() -> bytes:
    """The model's bytes (int8, per-tensor scales of activations, zero points 0)."""
    m = _Model()
    x = m.tensor((1, 6, 6, 4), np.int8, q(0.05))
    pads = m.tensor((4, 2), np.int32, data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    padded = m.op("PAD", [x, pads], m.tensor((1, 8, 8, 4), np.int8, q(0.05)))
    w, bias = m.weights((8, 3, 3, 4), 8, 0.05)
    conv = m.op("CONV_2D", [padded, w, bias], m.tensor((1, 6, 6, 8), np.int8, q(0.1)),
                padding="VALID", stride_w=1, stride_h=1, fused_activation_function="RELU6")  # fmt: skip
    w, bias = m.weights((1, 3, 3, 8), 8, 0.1, axis=3)
    depthwise = m.op("DEPTHWISE_CONV_2D", [conv, w, bias], m.tensor((1, 6, 6, 8), np.int8, q(0.1)),
                     padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1,
                     fused_activation_function="RELU6")  # fmt: skip
    w, bias = m.weights((24, 1, 1, 8), 24, 0.1)
    wide = m.op("CONV_2D", [depthwise, w, bias], m.tensor((1, 6, 6, 24), np.int8, q(0.1)),
                padding="VALID", stride_w=1, stride_h=1)  # fmt: skip
    pooled = m.op("AVERAGE_POOL_2D", [wide], m.tensor((1, 3, 3, 24), np.int8, q(0.1)),
                  padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)  # fmt: skip
    w, bias = m.weights((5, 24), 5, 0.1)
    dense = m.op("FULLY_CONNECTED", [pooled, w, bias], m.tensor((9, 5), np.int8, q(0.2)))
    return model_bytes(m.tensors, m.operators, [x], [dense])


def lstm_int8_tflite() -> bytes:
    """A standard int8 LSTM (TFLite's integer LSTM: int16 cell state), batch-major."""
    inputs, outputs = lstm_tensors(np.int8)
    return one_op_model("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, {"fused_activation_function": "TANH"})


def lstm_int16_tflite() -> bytes:
    """The same LSTM with int16 activations (TFLite's 16x8 LSTM: int64 biases), its own signature."""
    inputs, outputs = lstm_tensors(np.int16)
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
