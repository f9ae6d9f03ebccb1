"""Inputs to run a model with, and an independent oracle to judge its outputs.

The oracle is onnxruntime when it is installed and accepts the model, else onnx's
reference evaluator: memplan's kernels are never judged by themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from runtime.errors import FeedError
from runtime.graph import Graph

RTOL, ATOL = 1e-3, 1e-4  # float32 kernels against another float32 implementation


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: normal floats, small non-negative ints, booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        info = graph.tensors[name]
        dtype, shape = np.dtype(info.dtype), tuple(info.shape)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 3, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise FeedError(f"input {name!r}: cannot make random {dtype} data; pass the inputs in an .npz")
    return feeds


def oracle_outputs(
    model: str | Path | bytes, feeds: Mapping[str, np.ndarray], prefer: str = "auto"
) -> tuple[str | None, dict[str, np.ndarray] | None, list[str]]:
    """(oracle name, outputs by name, notes on oracles that could not run, or on how they ran)."""
    notes: list[str] = []
    source = _accepting(model, feeds, notes)
    if prefer in ("auto", "onnxruntime"):
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.log_severity_level = 3  # its warnings about unused initializers are noise here
            session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            return "onnxruntime", dict(zip(names, session.run(names, dict(feeds)), strict=True)), notes
        except Exception as e:  # not installed, or it refuses the model: fall back
            notes.append(f"onnxruntime: {type(e).__name__}: {str(e)[:200]}")
    if prefer in ("auto", "reference"):
        try:
            from onnx.reference import ReferenceEvaluator

            evaluator = ReferenceEvaluator(source)
            values = evaluator.run(None, dict(feeds))
            return "onnx.reference", dict(zip(evaluator.output_names, values, strict=True)), notes
        except Exception as e:
            notes.append(f"onnx.reference: {type(e).__name__}: {str(e)[:200]}")
    return None, None, notes


def _accepting(model: str | Path | bytes, feeds: Mapping[str, np.ndarray], notes: list[str]) -> str | bytes:
    """The model as the oracle should see it: where a graph input declares a fixed size that the
    fed shape contradicts (a Paddle export's 0 for "unknown", bound by a whole shape), that
    dim is made unknown, as memplan treated it; otherwise the model untouched."""
    source = model if isinstance(model, bytes) else str(model)
    try:
        proto = (
            onnx.load_model_from_string(source)
            if isinstance(source, bytes)
            else onnx.load(source, load_external_data=False)
        )
    except Exception:  # the oracles will say what is wrong with it
        return source
    changed = []
    for vi in proto.graph.input:
        fed = feeds.get(vi.name)
        if fed is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != np.ndim(fed):
            continue
        for axis, (d, size) in enumerate(zip(dims, np.shape(fed), strict=True)):
            if d.HasField("dim_value") and 0 <= d.dim_value != size:  # onnxruntime takes -1 as unknown
                changed.append(f"{vi.name!r} axis {axis} ({d.dim_value})")
                d.Clear()
    if not changed:
        return source
    if not isinstance(source, bytes):
        onnx.load_external_data_for_model(proto, str(Path(source).parent))
    notes.append(f"declared sizes the fed shapes replace, left unknown for the oracle: {', '.join(changed)}")
    return proto.SerializeToString()


def verify(
    model: str | Path | bytes, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], prefer: str = "auto"
) -> dict[str, Any]:
    """Compare `outputs` with the oracle's; `passed` is True when every output is close.

    `prefer`: "auto" (onnxruntime, else onnx.reference), one of those two, or "none". The
    verdict holds JSON types only (str, bool, int, float, None, lists, objects; every float
    finite), whether it passes, fails or finds no oracle: `oracle`, `passed`, `tolerances`
    (and `rtol`, `atol`), `outputs` (per output: `max_abs_diff` over the finite elements,
    `mismatched` elements, `nonfinite_mismatched` among them, `close`, shapes) and `notes`.
    """
    tolerances = {"rtol": RTOL, "atol": ATOL}
    if prefer == "none":
        return {"oracle": None, "passed": None, "tolerances": tolerances, "detail": "verification skipped", "notes": []}
    used, expected, notes = oracle_outputs(model, feeds, prefer)
    if expected is None:
        return {
            "oracle": None,
            "passed": None,
            "tolerances": tolerances,
            "detail": "no oracle could run the model: " + "; ".join(notes),
            "notes": notes,
        }
    rows = [_difference(name, got, expected.get(name)) for name, got in outputs.items()]
    return {
        "oracle": used,
        "passed": all(r["close"] for r in rows),
        "tolerances": tolerances,
        **tolerances,
        "outputs": rows,
        "notes": notes,
    }


def _difference(name: str, got: np.ndarray, want: Any) -> dict[str, Any]:
    """How one output differs from the oracle's, in JSON types."""
    got = np.asarray(got)
    row: dict[str, Any] = {"name": name, "shape": [int(d) for d in got.shape], "dtype": str(got.dtype)}
    row.update(expected_shape=None, shape_matches=False, max_abs_diff=0.0, mismatched=int(got.size))
    row.update(nonfinite_mismatched=0, close=False)
    if want is None:
        return {**row, "detail": "the oracle has no output of this name"}
    want = np.asarray(want)
    row["expected_shape"] = [int(d) for d in want.shape]
    if want.shape != got.shape:
        return {**row, "mismatched": int(max(got.size, want.size))}
    row["shape_matches"] = True
    if got.dtype.kind not in "biuf" or want.dtype.kind not in "biuf":
        same = np.asarray(got == want)
        return {**row, "mismatched": int(np.count_nonzero(~same)), "close": bool(same.all())}
    a, b = got.astype(np.float64), want.astype(np.float64)
    close = np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a - b)[finite]
    row.update(max_abs_diff=float(diff.max()) if diff.size else 0.0, mismatched=int(np.count_nonzero(~close)))
    row.update(nonfinite_mismatched=int(np.count_nonzero(~close & ~finite)), close=bool(close.all()))
    return row
