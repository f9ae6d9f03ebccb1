"""Small audio models written with onnx.helper, for the executor benchmark's per-step cost.

Where a large model spends milliseconds in each BLAS call, these spend microseconds: a step's
Python around its arithmetic is then most of memplan's time. Random weights (seed 0), batch 1,
float32, opset 17; no torch needed.

- vad_gru: a voice-activity detector of Silero VAD's size (about 300k parameters): 32 frames of 64
  log-mel features, two Conv1d layers of 128 channels (ReLU), a GRU of 64 over the frames, a
  per-frame Gemm head and Sigmoid; the GRU's state comes in and goes out (streaming).
- vad_lstm: the same front end with an LSTM of 64 (state h and c in and out).
- kws_dscnn: a keyword-spotting DS-CNN (Zhang et al., "Hello Edge", the medium model): 49 frames
  of 10 MFCCs, a 10x4 stride-2 Conv of 172 filters, four depthwise-separable blocks of 172
  channels (depthwise 3x3 and pointwise 1x1, each with ReLU; batch norm folded into the convs),
  average pooling and a Gemm over 12 classes.
- step_chain: 200 Adds of one element each in a chain: a step with no arithmetic at all, so its
  time per step is the executor's overhead per step alone.

``write(folder)`` writes ``<name>.onnx`` and ``<name>.npz`` (inputs by graph input name) for each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
FLOAT = TensorProto.FLOAT
CHAIN = 200


def _weights(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> onnx.TensorProto:
    fan_in = int(np.prod(shape[1:])) or 1
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)


def _model(name: str, nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _vad(cell: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    mels, frames, channels, hidden = 64, 32, 128, 64
    gates = {"GRU": 3, "LSTM": 4}[cell]
    inits = [
        _weights(rng, (channels, mels, 3), "c1_w"), _weights(rng, (channels,), "c1_b"),
        _weights(rng, (channels, channels, 3), "c2_w"), _weights(rng, (channels,), "c2_b"),
        _weights(rng, (1, gates * hidden, channels), "rnn_w"), _weights(rng, (1, gates * hidden, hidden), "rnn_r"),
        _weights(rng, (1, 2 * gates * hidden), "rnn_b"), _weights(rng, (hidden, 1), "head_w"),
        _weights(rng, (1,), "head_b"), numpy_helper.from_array(np.array([frames, hidden], np.int64), "rows"),
    ]  # fmt: skip
    states = ["h0"] + (["c0"] if cell == "LSTM" else [])
    outs = ["", "h1"] + (["c1"] if cell == "LSTM" else [])
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["a1"], pads=[1, 1]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2_w", "c2_b"], ["a2"], pads=[1, 1]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Transpose", ["r2"], ["seq"], perm=[2, 0, 1]),  # (frames, 1, channels)
        helper.make_node(cell, ["seq", "rnn_w", "rnn_r", "rnn_b", "", *states], ["ys", *outs[1:]], hidden_size=hidden),
        helper.make_node("Reshape", ["ys", "rows"], ["flat"]),
        helper.make_node("Gemm", ["flat", "head_w", "head_b"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["speech"]),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [1, mels, frames])]
    inputs += [helper.make_tensor_value_info(s, FLOAT, [1, 1, hidden]) for s in states]
    outputs = [helper.make_tensor_value_info("speech", FLOAT, [frames, 1])]
    outputs += [helper.make_tensor_value_info(o, FLOAT, [1, 1, hidden]) for o in outs[1:]]
    feeds = {"x": rng.standard_normal((1, mels, frames)).astype(np.float32)}
    feeds |= {s: np.zeros((1, 1, hidden), np.float32) for s in states}
    return _model(f"vad_{cell.lower()}", nodes, inputs, outputs, inits), feeds


def _kws() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    width, classes = 172, 12
    inits = [_weights(rng, (width, 1, 10, 4), "stem_w"), _weights(rng, (width,), "stem_b")]
    nodes = [
        helper.make_node("Conv", ["mfcc", "stem_w", "stem_b"], ["s"], strides=[2, 2], pads=[5, 1, 4, 2]),
        helper.make_node("Relu", ["s"], ["b0"]),
    ]
    for i in range(4):
        inits += [_weights(rng, (width, 1, 3, 3), f"dw{i}_w"), _weights(rng, (width,), f"dw{i}_b")]
        inits += [_weights(rng, (width, width, 1, 1), f"pw{i}_w"), _weights(rng, (width,), f"pw{i}_b")]
        nodes += [
            helper.make_node("Conv", [f"b{i}", f"dw{i}_w", f"dw{i}_b"], [f"d{i}"], group=width, pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"d{i}"], [f"dr{i}"]),
            helper.make_node("Conv", [f"dr{i}", f"pw{i}_w", f"pw{i}_b"], [f"p{i}"]),
            helper.make_node("Relu", [f"p{i}"], [f"b{i + 1}"]),
        ]
    inits += [_weights(rng, (width, classes), "fc_w"), _weights(rng, (classes,), "fc_b")]
    nodes += [
        helper.make_node("GlobalAveragePool", ["b4"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"]),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
    ]
    inputs = [helper.make_tensor_value_info("mfcc", FLOAT, [1, 1, 49, 10])]
    outputs = [helper.make_tensor_value_info("logits", FLOAT, [1, classes])]
    feeds = {"mfcc": rng.standard_normal((1, 1, 49, 10)).astype(np.float32)}
    return _model("kws_dscnn", nodes, inputs, outputs, inits), feeds


def _chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    one = numpy_helper.from_array(np.ones((1,), np.float32), "one")
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "one"], [f"t{i + 1}"]) for i in range(CHAIN)]
    nodes.append(helper.make_node("Identity", [f"t{CHAIN}"], ["y"]))
    inputs = [helper.make_tensor_value_info("x", FLOAT, [1])]
    outputs = [helper.make_tensor_value_info("y", FLOAT, [1])]
    return _model("step_chain", nodes, inputs, outputs, [one]), {"x": np.zeros(1, np.float32)}


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {
    "vad_gru": lambda: _vad("GRU"),
    "vad_lstm": lambda: _vad("LSTM"),
    "kws_dscnn": _kws,
    "step_chain": _chain,
}


def write(folder: Path, names: list[str] | None = None) -> list[Path]:
    """Each model (of `names`, default all) as ``folder/<name>.onnx`` with its inputs beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in MODELS.items():
        if names and name not in names:
            continue
        model, feeds = build()
        path = folder / f"{name}.onnx"
        onnx.save(model, path)
        np.savez(path.with_suffix(".npz"), **feeds)
        written.append(path)
    return written
