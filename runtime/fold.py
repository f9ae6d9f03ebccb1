"""Constant folding: nodes computed only from constants become constants.

A node folds when every input it reads is a constant, it is deterministic, it has no
subgraph, and none of its outputs is a graph output (those are what `run` computes).
`Shape` and `Size` fold too once their input's shape is static. Results are computed by
memplan's kernel when one is registered, else by onnx's reference implementation of that
single node.

Small results are computed at once (onnx's inference needs their values: shapes, axes);
large ones (weights made by ConstantOfShape, transposed weights, ...) become lazy
constants, computed when a session first needs them. Before anything is computed its
size is checked against the byte limit, so a ConstantOfShape of 10^12 elements is
refused by name instead of exhausting memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from runtime.constants import Constant, np_dtype
from runtime.errors import ModelError, TensorTooLargeError
from runtime.kernels import TensorMeta, attributes_of, call, kernel_of
from runtime.shapes import SMALL_CONSTANT_BYTES, TensorType

NON_DETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def foldable(node: onnx.NodeProto, constants: Mapping[str, Constant], keep: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type in NON_DETERMINISTIC:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
        return False  # training_mode given: the mask may be random
    if any(o in keep for o in node.output):
        return False
    return all(not name or name in constants for name in node.input)


def fold_pass(
    nodes: Sequence[onnx.NodeProto],
    constants: dict[str, Constant],
    types: Mapping[str, TensorType],
    keep: set[str],
    opset: int,
    max_bytes: int,
) -> tuple[list[onnx.NodeProto], int]:
    """Fold what can be folded, in order; returns the remaining nodes and how many folded."""
    remaining: list[onnx.NodeProto] = []
    folded = 0
    for node in nodes:
        if foldable(node, constants, keep):
            _fold_node(node, constants, types, opset, max_bytes)
        elif not _fold_shape(node, constants, types, keep):
            remaining.append(node)
            continue
        folded += 1
    return remaining, folded


def _fold_shape(
    node: onnx.NodeProto, constants: dict[str, Constant], types: Mapping[str, TensorType], keep: set[str]
) -> bool:
    """Shape and Size of a tensor whose shape is static are constants."""
    if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx") or node.output[0] in keep:
        return False
    t = types.get(node.input[0])
    if t is None or not t.static:
        return False
    shape = t.shape
    if node.op_type == "Size":
        value = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    else:
        attrs = attributes_of(node)
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        value = np.array(shape[slice(start, end)], dtype=np.int64)
    constants[node.output[0]] = Constant.of_array(node.output[0], value)
    return True


def _fold_node(
    node: onnx.NodeProto,
    constants: dict[str, Constant],
    types: Mapping[str, TensorType],
    opset: int,
    max_bytes: int,
) -> None:
    outs = [types.get(name) if name else None for name in node.output]
    known = all(t is not None and t.static for name, t in zip(node.output, outs, strict=True) if name)
    if known:
        sizes = {name: _type_bytes(t, name) for name, t in zip(node.output, outs, strict=True) if name and t}
    else:
        sizes = {node.output[0]: _predicted_bytes(node, constants)}
    for name, size in sizes.items():
        _check_size(node, name, size, max_bytes)
    inputs = [constants[name] if name else None for name in node.input]
    if known and sum(sizes.values()) > SMALL_CONSTANT_BYTES:

        @functools.cache
        def run() -> list[np.ndarray]:
            return evaluate(node, [c.value() if c else None for c in inputs], outs, opset)

        for k, (name, t) in enumerate(zip(node.output, outs, strict=True)):
            if name and t is not None:
                constants[name] = Constant.lazy(
                    name, t.shape, np_dtype(t.elem_type, name), functools.partial(_pick, run, k)
                )
        return
    results = evaluate(node, [c.value() if c else None for c in inputs], outs, opset)
    for name, value in zip(node.output, results, strict=False):
        if name:
            _check_size(node, name, value.nbytes, max_bytes)
            constants[name] = Constant.of_array(name, value)


def _pick(run: Callable[[], list[np.ndarray]], k: int) -> np.ndarray:
    return run()[k]


def _type_bytes(t: TensorType, name: str) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np_dtype(t.elem_type, f"tensor {name!r}").itemsize


def _predicted_bytes(node: onnx.NodeProto, constants: Mapping[str, Constant]) -> int:
    """Output size of ops that can make a large tensor from small inputs, before running them."""
    values: list[Any] = [constants[n].value() if n else None for n in node.input]
    try:
        if node.op_type == "ConstantOfShape":
            attr = attributes_of(node).get("value")
            itemsize = attr.dtype.itemsize if isinstance(attr, np.ndarray) else 4
            return int(np.prod(values[0].astype(np.float64))) * itemsize  # float64: no integer overflow
        if node.op_type == "Expand":
            return (
                int(np.prod(np.broadcast_shapes(values[0].shape, tuple(values[1])), dtype=np.float64))
                * values[0].itemsize
            )
        if node.op_type == "Tile":
            return int(values[0].size * np.prod(values[1].astype(np.float64))) * values[0].itemsize
        if node.op_type == "Range":
            start, limit, delta = (float(v) for v in values)
            return int(max(np.ceil((limit - start) / delta), 0)) * values[0].itemsize if delta else 0
    except (TypeError, ValueError, IndexError, AttributeError):
        return 0  # malformed inputs: let evaluation report them
    return 0


def _check_size(node: onnx.NodeProto, name: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise TensorTooLargeError(
            f"node {node.name or node.op_type!r} ({node.op_type}) would make tensor {name!r} of {size:,} bytes, "
            f"more than the limit of {max_bytes:,} bytes (max_tensor_bytes); refused before allocating it"
        )


def evaluate(
    node: onnx.NodeProto, inputs: list[np.ndarray | None], outs: Sequence[TensorType | None], opset: int
) -> list[np.ndarray]:
    """Run one node on arrays: its memplan kernel when registered (and output types are
    static), else onnx's reference implementation."""
    kernel = kernel_of(node)
    wanted = [bool(name) for name in node.output]
    if kernel is not None and all(t is not None and t.static for t, w in zip(outs, wanted, strict=True) if w):
        arrays = [
            np.empty(t.shape, np_dtype(t.elem_type, name)) if w and t is not None else None
            for name, t, w in zip(node.output, outs, wanted, strict=True)
        ]
        attrs = attributes_of(node)
        ws = None
        if kernel.workspace is not None:
            metas_in = [None if x is None else TensorMeta(tuple(x.shape), x.dtype) for x in inputs]
            metas_out = [None if a is None else TensorMeta(a.shape, a.dtype) for a in arrays]
            ws = np.empty(int(kernel.workspace(metas_in, metas_out, **attrs)), np.uint8)
        try:
            call(kernel, list(inputs), arrays, ws, attrs, opset)
            return [a if a is not None else np.empty(0) for a in arrays]
        except Exception:  # noqa: BLE001 - the reference below is the oracle; it reports its own failure
            pass
    return _reference(node, inputs, opset)


def _reference(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    feeds = {name: value for name, value in zip(node.input, inputs, strict=True) if name}
    try:
        results = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
    except Exception as e:  # the reference raises anything; say which node failed
        raise ModelError(f"folding node {node.name or node.op_type!r} ({node.op_type}) failed: {e}") from None
    return [np.asarray(r) for r in results]
