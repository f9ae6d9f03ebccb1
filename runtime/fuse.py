"""Folding inference-time BatchNormalization into the convolution before it.

At inference a BatchNormalization is an affine map per channel, y = x * s + t with
s = scale / sqrt(var + epsilon) and t = B - mean * s. When its input comes straight from
a Conv whose weights are constants and that nothing else reads, the map can be moved into
the Conv: W' = W * s (per output channel), b' = b * s + t. One node and one tensor fewer:
less time, and one activation fewer to plan, as onnxruntime and TVM do.

The new weights are lazy constants: they are computed when a session first needs them, so
planning a model still reads none of its weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import onnx

from runtime.constants import Constant
from runtime.kernels import attributes_of


def fold_batchnorm(
    nodes: Sequence[onnx.NodeProto], constants: dict[str, Constant], keep: set[str]
) -> tuple[list[onnx.NodeProto], int]:
    """The nodes with every foldable Conv -> BatchNormalization pair merged; and how many."""
    readers = Counter(name for node in nodes for name in node.input if name)
    producer = {out: node for node in nodes for out in node.output if out}
    merged: dict[str, onnx.NodeProto] = {}  # conv name -> its replacement
    dropped: set[str] = set()  # batch norm names
    for bn in nodes:
        conv = _foldable_conv(bn, producer, readers, constants, keep)
        if conv is None or conv.name in merged:
            continue
        merged[conv.name] = _merge(conv, bn, constants)
        dropped.add(bn.name)
    out = [merged.get(n.name, n) for n in nodes if n.name not in dropped]
    return out, len(dropped)


def _foldable_conv(
    bn: onnx.NodeProto,
    producer: dict[str, onnx.NodeProto],
    readers: Counter[str],
    constants: dict[str, Constant],
    keep: set[str],
) -> onnx.NodeProto | None:
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
        return None
    if any(bn.output[1:]) or attributes_of(bn).get("training_mode", 0):
        return None  # training statistics are asked for
    if len(bn.input) != 5 or not all(name in constants for name in bn.input[1:]):
        return None
    x = bn.input[0]
    conv = producer.get(x)
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
        return None
    if readers[x] != 1 or x in keep or conv.input[1] not in constants:
        return None
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in constants:
        return None
    weights = constants[conv.input[1]]
    channels = constants[bn.input[1]].shape
    if not np.issubdtype(weights.dtype, np.floating) or channels != (weights.shape[0],):
        return None
    return conv


def _merge(conv: onnx.NodeProto, bn: onnx.NodeProto, constants: dict[str, Constant]) -> onnx.NodeProto:
    epsilon = float(attributes_of(bn).get("epsilon", 1e-5))
    w = constants[conv.input[1]]
    b = constants[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else None
    scale, shift, mean, var = (constants[name] for name in bn.input[1:])

    def factor() -> np.ndarray:
        return scale.value().astype(np.float64) / np.sqrt(var.value().astype(np.float64) + epsilon)

    def new_weights() -> np.ndarray:
        s = factor().reshape((-1,) + (1,) * (len(w.shape) - 1))
        return (w.value() * s).astype(w.dtype)

    def new_bias() -> np.ndarray:
        s = factor()
        base = b.value().astype(np.float64) if b is not None else 0.0
        return ((base - mean.value()) * s + shift.value()).astype(w.dtype)

    w_name, b_name = _fresh(f"{conv.name}::weights_bn", constants), _fresh(f"{conv.name}::bias_bn", constants)
    constants[w_name] = Constant(w_name, w.shape, w.dtype, "folded", new_weights)
    constants[b_name] = Constant(b_name, (w.shape[0],), w.dtype, "folded", new_bias)
    node = onnx.NodeProto()
    node.CopyFrom(conv)
    del node.input[:]
    node.input.extend([conv.input[0], w_name, b_name])
    node.output[0] = bn.output[0]
    node.doc_string = f"{conv.name} with {bn.name} folded in"
    del node.attribute[:]
    node.attribute.extend(conv.attribute)
    return node


def _fresh(name: str, taken: dict[str, Constant]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    return candidate
