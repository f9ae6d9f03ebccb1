"""Whether an output can judge a plan at all: the oracle's own spread, and witnesses for outputs it cannot.

Two float32 implementations that sum in different orders differ by rounding, and by how much
depends on the computation, not on the machine. Backward error analysis puts it in a form that
can be measured: a computation in another order is the exact one on operands moved by a few
units in the last place. So the oracle is run a second time with every float operand (the
inputs and the model's float initializers) moved by `PERTURBATION` of itself, with seeded
random signs, and the distance it moves is its *spread*: what rounding alone can do to that
element. An element memplan computes within the tolerance plus the spread agrees with the
oracle as far as float32 can tell.

An element whose spread is larger than the tolerance is *ill-conditioned*: the oracle cannot
even agree with itself there (a softmax over logits near 6.8e9, where one float32 step is 512,
flips between its nearly equal maxima). Such an output cannot tell a right plan from a wrong
one, so it is judged by its *witnesses* instead: the nearest tensors upstream of it that memplan
also computes and that are well-conditioned (the logits themselves), compared at the step that
writes them, before the arena reuses their bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

PERTURBATION = 2.0**-18  # 64 float32 units in the last place, relative
MAX_WITNESSES = 6  # tensors upstream of an ill-conditioned output, nearest first
MAX_DEPTH = 6  # producer levels walked back from an output

# memplan's values of the named tensors, each copied right after the step that writes it
# (`runtime.Session.capture`); names memplan's graph lacks (fused away) are left out.
Capture = Callable[[Sequence[str]], dict[str, np.ndarray]]
Oracle = Callable[[bytes, Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def tolerance(want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Per element: rtol * |want| + max(atol, rtol * rms(want)).

    An element's rounding error follows the magnitude of the terms summed to make it, which
    the elements of one output share (same weights, same input statistics); the output's
    root-mean-square is that size for any op. So an element that cancels to near zero is
    judged on its output's scale, not on its own tiny value."""
    want = np.asarray(want, dtype=np.float64)
    finite = want[np.isfinite(want)]
    rms = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0
    return rtol * np.abs(want) + max(atol, rtol * rms)


def candidates(proto: onnx.ModelProto, outputs: Sequence[str]) -> dict[str, list[str]]:
    """Per output, the float tensors upstream of it, nearest first: the inputs of its producer,
    then theirs, up to `MAX_DEPTH` levels (graph inputs and initializers left out: memplan was fed
    the same ones)."""
    graph = proto.graph
    given = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    producer = {o: n for n in graph.node for o in n.output if o}
    found: dict[str, list[str]] = {}
    for name in outputs:
        seen, order, frontier = {name}, [], [name]
        for _ in range(MAX_DEPTH):
            nxt = []
            for tensor in frontier:
                node = producer.get(tensor)
                for source in node.input if node is not None else ():
                    if source and source not in seen and source not in given and source in producer:
                        seen.add(source)
                        order.append(source)
                        nxt.append(source)
            frontier = nxt
        found[name] = order
    return found


def perturbed(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], seed: int = 0) -> tuple[bytes, dict]:
    """The model and feeds with every float operand moved by `PERTURBATION` of itself (random signs):
    the inputs, the initializers, Constant nodes' values, and the weights ConstantOfShape makes
    from a constant shape (written out as initializers, so that each element moves on its own:
    a perturbation shared by every element would keep exact ties tied)."""
    rng = np.random.default_rng(seed)
    moved = onnx.ModelProto()
    moved.CopyFrom(proto)
    graph = moved.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.data_type == onnx.TensorProto.INT64}
    kept = []
    for node in graph.node:
        made = _constant_of_shape(node, shapes)
        if made is not None and made.dtype.kind == "f":
            graph.initializer.append(numpy_helper.from_array(_move(made, rng), node.output[0]))
            continue
        for attr in node.attribute if node.op_type == "Constant" else ():
            if attr.name == "value" and attr.t.data_type in _FLOATS:
                attr.t.CopyFrom(numpy_helper.from_array(_move(numpy_helper.to_array(attr.t), rng), attr.t.name))
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    for tensor in graph.initializer:
        value = numpy_helper.to_array(tensor)
        if value.dtype.kind == "f" and value.size:
            tensor.CopyFrom(numpy_helper.from_array(_move(value, rng), tensor.name))
    new_feeds = {k: _move(v, rng) if np.asarray(v).dtype.kind == "f" else v for k, v in feeds.items()}
    return moved.SerializeToString(), new_feeds


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def _constant_of_shape(node: onnx.NodeProto, shapes: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The whole value of a ConstantOfShape whose shape is an initializer; None otherwise."""
    if node.op_type != "ConstantOfShape" or not node.input or node.input[0] not in shapes:
        return None
    fill = np.zeros(1, np.float32)
    for attr in node.attribute:
        if attr.name == "value":
            fill = numpy_helper.to_array(attr.t).reshape(-1)[:1]
    size = np.asarray(shapes[node.input[0]], dtype=np.int64).reshape(-1)
    if np.prod(size) > 1 << 26:  # a weight larger than 64M elements is not materialised for this
        return None
    return np.full(tuple(int(d) for d in size), fill[0], dtype=fill.dtype)


def _move(value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    signs = rng.choice(np.array([-1.0, 1.0]), size=np.shape(value))
    return (np.asarray(value, dtype=np.float64) * (1.0 + PERTURBATION * signs)).astype(np.asarray(value).dtype)


def exposing(proto: onnx.ModelProto, names: Mapping[str, np.dtype]) -> onnx.ModelProto:
    """The model with `names` added as graph outputs (dtype only: the oracle infers the shape)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    present = {o.name for o in out.graph.output}
    for name, dtype in names.items():
        if name not in present:
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            out.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
    return out


def load_full(model: str | Path | bytes) -> onnx.ModelProto:
    """The model with its external weights, which the perturbed run moves too."""
    if isinstance(model, bytes):
        return onnx.load_model_from_string(model)
    return onnx.load(str(model), load_external_data=True)


def compare(got: np.ndarray, want: np.ndarray, spread: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    """One tensor against the oracle, with the oracle's spread: counts in JSON types."""
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if a.shape != b.shape:
        return {"close": False, "mismatched": int(max(a.size, b.size)), "ill": 0, "max_abs_diff": 0.0, "spread": 0.0}
    tol = tolerance(b, rtol, atol)
    diff = np.abs(a - b)
    same_nonfinite = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    # Ill-conditioned: the oracle itself moves beyond the tolerance; such an element cannot judge.
    ill = (np.isfinite(spread) & (spread > tol)) | (~np.isfinite(spread) & ~same_nonfinite)
    beyond = ~((diff <= tol + spread) | same_nonfinite | ill)
    finite = np.isfinite(diff)
    return {
        "close": not bool(beyond.any()),
        "mismatched": int(np.count_nonzero(beyond)),
        "ill": int(np.count_nonzero(ill)),
        "max_abs_diff": float(diff[finite].max()) if finite.any() else 0.0,
        "spread": float(spread[np.isfinite(spread)].max()) if np.isfinite(spread).any() else 0.0,
    }


def judge(
    model: str | Path | bytes,
    feeds: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    run_oracle: Oracle,
    capture: Capture | None,
    rtol: float,
    atol: float,
) -> dict[str, dict[str, Any]]:
    """Each float output of `outputs` against the oracle's `expected` and its spread (`compare`); an
    ill-conditioned one also gets `witnesses` (name, close, max_abs_diff, mismatched), judged the
    same way. Two more oracle runs, as given and on moved operands; two more and one capture only
    when some output is ill-conditioned."""
    proto = load_full(model)
    # The spread is between two runs made here, so that it measures the oracle alone.
    base = run_oracle(proto.SerializeToString(), feeds)
    moved_model, moved_feeds = perturbed(proto, feeds)
    moved = run_oracle(moved_model, moved_feeds)
    result = {
        name: compare(outputs[name], expected[name], _spread(base[name], moved[name]), rtol, atol) for name in outputs
    }
    doubtful = [name for name, row in result.items() if row["close"] and row["ill"]]
    if not doubtful:
        return result
    upstream = candidates(proto, doubtful)
    wanted = list(dict.fromkeys(n for name in doubtful for n in upstream[name]))
    mine = capture(wanted) if capture is not None and wanted else {}
    exposed = exposing(proto, {n: v.dtype for n, v in mine.items() if v.dtype.kind == "f"})
    base = run_oracle(exposed.SerializeToString(), feeds)
    moved_model, moved_feeds = perturbed(exposed, feeds)
    moved = run_oracle(moved_model, moved_feeds)
    for name in doubtful:
        result[name]["witnesses"] = _witnesses(upstream[name], mine, base, moved, rtol, atol)
    return result


def _spread(want: np.ndarray, other: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(other, np.float64) - np.asarray(want, np.float64))


def _witnesses(names, mine, base, moved, rtol, atol) -> list[dict[str, Any]]:
    """The nearest well-conditioned tensors memplan computed, judged like outputs."""
    found = []
    for name in names:
        if name not in mine or name not in base or np.asarray(base[name]).dtype.kind != "f":
            continue
        row = compare(mine[name], base[name], _spread(base[name], moved[name]), rtol, atol)
        if row["ill"]:
            continue  # ill-conditioned too: look further up
        found.append({"name": name, **{k: row[k] for k in ("close", "max_abs_diff", "mismatched")}})
        if len(found) == MAX_WITNESSES:
            break
    return found
