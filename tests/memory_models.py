"""Small real models for the memory API tests and benchmark: an MLP, a language model cut
in two (a recurrent step model and an output layer tied to the same embedding), and models whose
kernels prepare their weights (Winograd's convs, a GRU or LSTM).

Weights are random but fixed by the seed, so outputs are meaningful and every module built
from one `network` seed holds byte-identical copies of the shared embedding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, name, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def mlp(features: int = 32, hidden: int = 64, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """x[N, features] -> MatMul -> Relu -> MatMul -> Add -> Softmax -> y[N, classes]."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((features, hidden)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((hidden, classes)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["m"], name="mm2"),
        helper.make_node("Add", ["m", "b2"], ["z"], name="bias"),
        helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])
    return _model(nodes, "mlp", [x], [y], inits)


def _network(vocab: int, hidden: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(hidden)
    return {
        "emb": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "w": (rng.standard_normal((hidden, hidden)) * scale).astype(np.float32),
        "u": (rng.standard_normal((hidden, hidden)) * scale).astype(np.float32),
        "b": rng.standard_normal(hidden).astype(np.float32),
    }


def rnn_step(vocab: int = 1000, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """tokens[N] (int64), h_prev[N, hidden] -> h[N, hidden] = tanh(emb[tokens] W + h_prev U + b)."""
    p = _network(vocab, hidden, seed)
    inits = [numpy_helper.from_array(p[k], k) for k in ("emb", "w", "u", "b")]
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], name="embed", axis=0),
        helper.make_node("MatMul", ["e", "w"], ["ew"], name="input_proj"),
        helper.make_node("MatMul", ["h_prev", "u"], ["hu"], name="state_proj"),
        helper.make_node("Add", ["ew", "hu"], ["s"], name="sum"),
        helper.make_node("Add", ["s", "b"], ["sb"], name="bias"),
        helper.make_node("Tanh", ["sb"], ["h"], name="tanh"),
    ]
    tokens = helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N"])
    h_prev = helper.make_tensor_value_info("h_prev", TensorProto.FLOAT, ["N", hidden])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", hidden])
    return _model(nodes, "rnn_step", [tokens, h_prev], [h], inits)


def rnn_output(vocab: int = 1000, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """h[N, hidden] -> probs[N, vocab] = softmax(h emb^T): the output layer tied to the embedding."""
    p = _network(vocab, hidden, seed)
    nodes = [
        helper.make_node("Gemm", ["h", "emb"], ["logits"], name="decode", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", hidden])
    probs = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", vocab])
    return _model(nodes, "rnn_output", [h], [probs], [numpy_helper.from_array(p["emb"], "emb")])


def save(model: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    """Write `model` to `path`; with `external`, every initializer goes to '<name>.data' beside it."""
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, location=f"{path.name}.data", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


def rnn_feeds(batch: int, vocab: int, hidden: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "tokens": rng.integers(0, vocab, size=batch).astype(np.int64),
        "h_prev": rng.standard_normal((batch, hidden)).astype(np.float32),
    }


def winograd_convs(channels: int = 128, size: int = 28):
    """(model, feeds): Conv + Relu (fused into ConvAct), then a plain Conv, both 3x3 'same' on a map
    that Winograd takes (prepared weights)."""
    rng = np.random.default_rng(7)
    weights = {
        "w1": rng.standard_normal((channels, channels, 3, 3)) * 0.05,
        "b1": rng.standard_normal(channels) * 0.1,
        "w2": rng.standard_normal((channels, channels, 3, 3)) * 0.05,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def recurrent(op: str, hidden: int = 48, size: int = 20, seq: int = 7):
    """(model, feeds): one bidirectional GRU or LSTM with constant W, R and B (prepared weights)."""
    gates = {"GRU": 3, "LSTM": 4}[op]
    rng = np.random.default_rng(11)
    weights = {
        "w": rng.standard_normal((2, gates * hidden, size)) * 0.3,
        "r": rng.standard_normal((2, gates * hidden, hidden)) * 0.3,
        "b": rng.standard_normal((2, 2 * gates * hidden)) * 0.3,
    }
    node = helper.make_node(op, ["x", "w", "r", "b"], ["y", "yh"], hidden_size=hidden, direction="bidirectional")
    graph = helper.make_graph(
        [node],
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, size])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 2, 1, hidden]),
            helper.make_tensor_value_info("yh", TensorProto.FLOAT, [2, 1, hidden]),
        ],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return model, {"x": rng.standard_normal((seq, 1, size)).astype(np.float32)}
