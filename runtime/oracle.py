"""Inputs to run a model with, and an independent oracle to judge its outputs.

The oracle is onnxruntime when it is installed and accepts the model, else onnx's
reference evaluator: memplan's kernels are never judged by themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

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
    """(oracle name, outputs by name, notes on oracles that could not run)."""
    notes: list[str] = []
    source = model if isinstance(model, bytes) else str(model)
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


def verify(
    model: str | Path | bytes, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], prefer: str = "auto"
) -> dict[str, Any]:
    """Compare `outputs` with the oracle's; `passed` is True when every output is close.

    `prefer`: "auto" (onnxruntime, else onnx.reference), one of those two, or "none".
    """
    if prefer == "none":
        return {"oracle": None, "passed": None, "detail": "verification skipped"}
    used, expected, notes = oracle_outputs(model, feeds, prefer)
    if expected is None:
        return {
            "oracle": None,
            "passed": None,
            "detail": "no oracle could run the model: " + "; ".join(notes),
            "notes": notes,
        }
    rows = []
    for name, got in outputs.items():
        want = np.asarray(expected[name])
        same_shape = tuple(want.shape) == tuple(got.shape)
        diff = (
            float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if same_shape and got.size else 0.0
        )
        close = same_shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True))
        rows.append({"name": name, "max_abs_diff": diff, "close": close, "shape_matches": same_shape})
    return {
        "oracle": used,
        "passed": all(r["close"] for r in rows),
        "rtol": RTOL,
        "atol": ATOL,
        "outputs": rows,
        "notes": notes,
    }
