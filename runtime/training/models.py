"""Small networks written with onnx.helper, for tests, the demo and the training benchmark.

`mlp`, `small_cnn`, `mobilenet_v2_like` (inverted residual blocks: 1x1 expansion, 3x3
depthwise, 1x1 projection, BatchNormalization and Relu6 as Clip(0, 6), residual Add),
`resnet18_like` and `transformer_encoder` (opset 20 for Gelu) return
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

    def model(
        self, x_shape: tuple[int, ...], y: str, y_shape: tuple[int, ...], name: str, opset: int = OPSET
    ) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.nodes.append(helper.make_node("Identity", [y], ["logits"], name="logits_node"))
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("x", elem, list(x_shape))],
            [helper.make_tensor_value_info("logits", elem, list(y_shape))],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8 if opset < 19 else 9
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


def resnet18_like(
    batch: int = 8,
    size: int = 32,
    classes: int = 10,
    width: int = 64,
    *,
    stages: tuple[int, ...] = (2, 2, 2, 2),
    seed: int = 0,
    dtype: type = np.float32,
) -> onnx.ModelProto:
    """ResNet-18's layer structure (He et al., 2016): 7x7 stem, max pool, four stages of two basic
    blocks (Conv-BN-Relu twice, a 1x1 Conv-BN shortcut where the shape changes), pool, classifier."""
    n = _Net(seed, dtype)
    x = n.op("Relu", [n.bn(n.conv("x", 3, width, 7, stride=2), width)])
    x = n.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for i, blocks in enumerate(stages):
        cout = width * 2**i
        for r in range(blocks):
            stride = 2 if i > 0 and r == 0 else 1
            y = n.op("Relu", [n.bn(n.conv(x, cin, cout, 3, stride=stride), cout)])
            y = n.bn(n.conv(y, cout, cout, 3), cout)
            short = n.bn(n.conv(x, cin, cout, 1, stride=stride), cout) if stride != 1 or cin != cout else x
            x = n.op("Relu", [n.op("Add", [y, short])])
            cin = cout
    x = n.op("Flatten", [n.op("GlobalAveragePool", [x])])
    return n.model((batch, 3, size, size), n.dense(x, cin, classes), (batch, classes), "resnet18_like")


def transformer_encoder(
    batch: int = 8,
    tokens: int = 16,
    features: int = 32,
    heads: int = 4,
    layers: int = 2,
    classes: int = 10,
    *,
    seed: int = 0,
    dtype: type = np.float32,
) -> onnx.ModelProto:
    """A pre-norm transformer encoder over `tokens` vectors of `features`: per layer LayerNormalization,
    multi-head self-attention (MatMuls, Transpose, Softmax over scaled scores), residual Add,
    LayerNormalization, an MLP with Gelu, residual Add; then mean over tokens and a classifier."""
    n = _Net(seed, dtype)
    d, h = features, heads
    split = n.const("heads_shape", np.array([batch, tokens, h, d // h], np.int64))
    merge = n.const("merge_shape", np.array([batch, tokens, d], np.int64))
    root = n.const("sqrt_dk", np.array(np.sqrt(d // h), dtype))

    def linear(x: str, cin: int, cout: int) -> str:
        w = n.weight("W", (cin, cout), cin)
        return n.op("Add", [n.op("MatMul", [x, w]), n.const("b", np.zeros(cout, n.dtype))])

    def norm(x: str) -> str:
        scale, bias = n.const("ln_scale", np.ones(d, n.dtype)), n.const("ln_bias", np.zeros(d, n.dtype))
        return n.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)

    def heads_of(x: str, perm: list[int]) -> str:
        return n.op("Transpose", [n.op("Reshape", [x, split])], perm=perm)

    x = "x"
    for _ in range(layers):
        y = norm(x)
        q = heads_of(linear(y, d, d), [0, 2, 1, 3])
        k = heads_of(linear(y, d, d), [0, 2, 3, 1])
        v = heads_of(linear(y, d, d), [0, 2, 1, 3])
        scores = n.op("Softmax", [n.op("Div", [n.op("MatMul", [q, k]), root])], axis=-1)
        att = n.op("Reshape", [n.op("Transpose", [n.op("MatMul", [scores, v])], perm=[0, 2, 1, 3]), merge])
        x = n.op("Add", [x, linear(att, d, d)])
        y = linear(n.op("Gelu", [linear(norm(x), d, 2 * d)]), 2 * d, d)
        x = n.op("Add", [x, y])
    pooled = n.op("ReduceMean", [x, n.const("token_axis", np.array([1], np.int64))], keepdims=0)
    return n.model((batch, tokens, features), n.dense(pooled, d, classes), (batch, classes), "transformer_encoder", 20)
