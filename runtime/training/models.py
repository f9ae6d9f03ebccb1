"""Small networks written with onnx.helper, for tests, the demo and the training benchmark.

`mlp`, `small_cnn` and `mobilenet_v2_like` (inverted residual blocks: 1x1 expansion, 3x3
depthwise, 1x1 projection, BatchNormalization and Relu6 as Clip(0, 6), residual Add) return
ModelProtos with seeded He-initialised weights; `dtype` picks float32 or float64 (float64 for
gradient checks against finite differences).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17


class _Net:
    def __init__(self, seed: int, dtype: type) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, base: str, value: np.ndarray) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(self, base: str, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const(base, (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(self.dtype))

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{out}_node", **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, bias: bool = False) -> str:
        w = self.weight("W", (cout, cin // group, k, k), cin // group * k * k)
        ins = [x, w] + ([self.const("b", np.zeros(cout, self.dtype))] if bias else [])
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)

    def bn(self, x: str, c: int) -> str:
        params = [np.ones(c), np.zeros(c), np.zeros(c), np.ones(c)]
        return self.op(
            "BatchNormalization",
            [
                x,
                *(
                    self.const(p, v.astype(self.dtype))
                    for p, v in zip(("scale", "B", "mean", "var"), params, strict=True)
                ),
            ],
        )

    def dense(self, x: str, cin: int, cout: int) -> str:
        return self.op("Gemm", [x, self.weight("W", (cin, cout), cin), self.const("b", np.zeros(cout, self.dtype))])

    def model(self, x_shape: tuple[int, ...], y: str, y_shape: tuple[int, ...], name: str) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.nodes.append(helper.make_node("Identity", [y], ["logits"], name="logits_node"))
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("x", elem, list(x_shape))],
            [helper.make_tensor_value_info("logits", elem, list(y_shape))],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def mlp(
    batch: int = 8,
    inputs: int = 64,
    hidden: tuple[int, ...] = (32,),
    classes: int = 10,
    *,
    seed: int = 0,
    dtype: type = np.float32,
    activation: str = "Relu",
) -> onnx.ModelProto:
    """Gemm layers with `activation` between them; input (batch, inputs), logits (batch, classes)."""
    n = _Net(seed, dtype)
    x, width = "x", inputs
    for h in hidden:
        x = n.op(activation, [n.dense(x, width, h)])
        width = h
    return n.model((batch, inputs), n.dense(x, width, classes), (batch, classes), "mlp")


def small_cnn(
    batch: int = 8,
    size: int = 8,
    channels: tuple[int, int] = (8, 16),
    classes: int = 10,
    *,
    seed: int = 0,
    dtype: type = np.float32,
    batch_norm: bool = True,
) -> onnx.ModelProto:
    """Conv-BN-Relu, MaxPool, Conv-BN-Relu, GlobalAveragePool, Flatten, Gemm; input (batch, 1, size, size)."""
    n = _Net(seed, dtype)
    c1, c2 = channels
    x = n.conv("x", 1, c1, 3, bias=not batch_norm)
    x = n.op("Relu", [n.bn(x, c1) if batch_norm else x])
    x = n.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = n.conv(x, c1, c2, 3, bias=not batch_norm)
    x = n.op("Relu", [n.bn(x, c2) if batch_norm else x])
    x = n.op("Flatten", [n.op("GlobalAveragePool", [x])])
    return n.model((batch, 1, size, size), n.dense(x, c2, classes), (batch, classes), "small_cnn")


# (expansion t, output channels c, repeats n, first stride s), MobileNetV2's table (Sandler et al., 2018).
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2_like(
    batch: int = 1,
    size: int = 224,
    classes: int = 1000,
    width: float = 1.0,
    *,
    seed: int = 0,
    dtype: type = np.float32,
    blocks=MOBILENET_V2_BLOCKS,
) -> onnx.ModelProto:
    """MobileNetV2's layer structure: stem conv, inverted residual blocks, 1x1 conv to 1280, pool, classifier."""
    n = _Net(seed, dtype)
    lo, hi = n.const("relu6_min", np.array(0, dtype)), n.const("relu6_max", np.array(6, dtype))

    def relu6(x: str) -> str:
        return n.op("Clip", [x, lo, hi])

    def scaled(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    cin = scaled(32)
    x = relu6(n.bn(n.conv("x", 3, cin, 3, stride=2), cin))
    for t, c, repeats, s in blocks:
        cout = scaled(c)
        for r in range(repeats):
            stride, hidden = (s if r == 0 else 1), cin * t
            y = relu6(n.bn(n.conv(x, cin, hidden, 1), hidden)) if t != 1 else x
            y = relu6(n.bn(n.conv(y, hidden, hidden, 3, stride=stride, group=hidden), hidden))
            y = n.bn(n.conv(y, hidden, cout, 1), cout)
            x = n.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    last = scaled(1280) if width > 1 else 1280
    x = relu6(n.bn(n.conv(x, cin, last, 1), last))
    x = n.op("Flatten", [n.op("GlobalAveragePool", [x])])
    return n.model((batch, 3, size, size), n.dense(x, last, classes), (batch, classes), "mobilenet_v2_like")
