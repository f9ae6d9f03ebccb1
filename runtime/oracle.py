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

from runtime import conditioning
from runtime.conditioning import Capture
from runtime.errors import FeedError
from runtime.graph import Graph
from runtime.tflite import oracle as tflite_oracle
from runtime.tflite.model import is_tflite

RTOL, ATOL = 1e-3, 1e-4  # float32 kernels against another float32 implementation (`conditioning.tolerance`)


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: normal floats, quantized integers over their whole range,
    other integers small and non-negative (indices, say), booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        info = graph.tensors[name]
        dtype, shape = np.dtype(info.dtype), tuple(info.shape)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu" and info.quant is not None:  # a quantized input: its whole range
            limits = np.iinfo(dtype)
            feeds[name] = rng.integers(limits.min, limits.max, size=shape, endpoint=True).astype(dtype)
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
    data = _tflite_bytes(model)
    if data is not None:  # the format's own runtimes, by its content
        for engine in tflite_oracle.ENGINES:
            if prefer not in ("auto", engine):
                continue
            try:
                return engine, tflite_oracle.outputs_of(engine, data, feeds), notes
            except Exception as e:  # not installed, or an operator it lacks: the next one
                notes.append(f"{engine}: {type(e).__name__}: {str(e)[:200]}")
        return None, None, notes
    source = _accepting(model, feeds, notes)
    for key, engine in ORACLES:
        if prefer not in ("auto", key):
            continue
        try:
            return engine, run_oracle(engine, source, feeds), notes
        except Exception as e:  # not installed, or it refuses the model: fall back
            notes.append(f"{engine}: {type(e).__name__}: {str(e)[:200]}")
    return None, None, notes


ORACLES = (("onnxruntime", "onnxruntime"), ("reference", "onnx.reference"))  # (`prefer` value, oracle name)


def run_oracle(engine: str, source: str | bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of the model as `engine` ("onnxruntime" or "onnx.reference") computes it."""
    if engine == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # its warnings about unused initializers are noise here
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(source)
    return dict(zip(evaluator.output_names, evaluator.run(None, dict(feeds)), strict=True))


def _tflite_bytes(model: str | Path | bytes) -> bytes | None:
    """The model's bytes when it is a `.tflite` flatbuffer (by its identifier), else None."""
    if isinstance(model, bytes):
        return model if is_tflite(model[:8]) else None
    try:
        with open(model, "rb") as f:
            if not is_tflite(f.read(8)):
                return None
        return Path(model).read_bytes()
    except OSError:
        return None


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
    model: str | Path | bytes,
    feeds: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    prefer: str = "auto",
    *,
    capture: Capture | None = None,
) -> dict[str, Any]:
    """Compare `outputs` with the oracle's, with a tolerance that follows the arithmetic.

    `prefer`: "auto" (onnxruntime, else onnx.reference), one of those two, or "none". Each float
    element must lie within rtol * |oracle| + max(atol, rtol * rms of its output)
    (`conditioning.tolerance`). Outputs that do not are looked at again with the oracle's own
    spread (`runtime.conditioning`): an element within the tolerance plus that spread agrees as
    far as float32 can tell; an output the oracle cannot reproduce itself is ill-conditioned and
    is judged by its witnesses, the nearest well-conditioned tensors upstream, which `capture`
    (`Session.capture`) gives from memplan's run; without `capture` it stays undecided.

    The verdict holds JSON types only (every float finite): `verdict` ("passed", "failed",
    "ill-conditioned", "skipped"), `passed` (True, False, or None when nothing could decide),
    `check` (which check ran, in a sentence), `oracle`, `tolerances` (and `rtol`, `atol`),
    `outputs` (per output: `max_abs_diff` over the finite elements, `mismatched` elements,
    `nonfinite_mismatched` among them, `close`, shapes, `ill_conditioned` elements, and for an
    ill-conditioned output `evidence` and `witnesses`) and `notes`.
    """
    tolerances = {"rtol": RTOL, "atol": ATOL}
    if prefer == "none":
        return {
            "verdict": "skipped",
            "oracle": None,
            "passed": None,
            "tolerances": tolerances,
            "detail": "verification skipped",
            "notes": [],
        }
    used, expected, notes = oracle_outputs(model, feeds, prefer)
    if used is None or expected is None:
        return {
            "verdict": "skipped",
            "oracle": None,
            "passed": None,
            "tolerances": tolerances,
            "detail": "no oracle could run the model: " + "; ".join(notes),
            "notes": notes,
        }
    steps = 0 if used in tflite_oracle.ENGINES else 1
    rows = [_difference(name, got, expected.get(name), steps) for name, got in outputs.items()]
    check = f"every float element within rtol*|{used}| + max(atol, rtol*rms of its output)"
    check += (
        "; integer outputs bit-exact"
        if steps == 0
        else "; 8- and 16-bit integer outputs within one quantization step (the rounding of TensorFlow Lite's "
        f"fixed-point arithmetic against {used}'s float requantization), other integers exact"
    )
    floats = [r["name"] for r in rows if r["shape_matches"] and r["dtype"].startswith("float")]
    if floats and used not in tflite_oracle.ENGINES:  # the spread moves ONNX operands
        check += _second_look(model, feeds, {n: outputs[n] for n in floats}, expected, rows, used, capture, notes)
    verdict, passed = _overall(rows)
    return {
        "verdict": verdict,
        "oracle": used,
        "passed": passed,
        "check": check,
        "tolerances": tolerances,
        **tolerances,
        "outputs": rows,
        "notes": notes,
    }


def _second_look(model, feeds, outputs, expected, rows, used, capture, notes) -> str:
    """Judge the float outputs again with the oracle's spread, and the ill-conditioned ones by their
    witnesses (`conditioning.judge`); says what ran."""
    source = _accepting(model, feeds, [])
    try:
        judged = conditioning.judge(
            source, feeds, outputs, expected, lambda m, f: run_oracle(used, m, f), capture, RTOL, ATOL
        )
    except Exception as e:  # the second look is extra evidence; without it the first verdict stands
        notes.append(f"the oracle's spread could not be measured: {type(e).__name__}: {str(e)[:200]}")
        return ""
    by_name = {r["name"]: r for r in rows}
    for name, j in judged.items():
        row = by_name[name]
        row["ill_conditioned"] = j["ill"]
        if not j["close"]:  # beyond the tolerance and the spread, at well-conditioned elements
            row.update(close=False, mismatched=j["mismatched"])
        elif j["ill"]:
            row["witnesses"] = j.get("witnesses", [])
            row["evidence"] = _evidence(row, j, used)
        else:
            row.update(close=True, mismatched=0, nonfinite_mismatched=0)
    return (
        f", or within that plus {used}'s own spread when every float operand moves by "
        f"{conditioning.PERTURBATION:.2g} of itself (64 float32 units in the last place); an output "
        f"{used} cannot reproduce itself that closely is ill-conditioned and judged by the nearest "
        "well-conditioned tensors that feed it"
    )


def _evidence(row: dict[str, Any], judged: dict[str, Any], used: str) -> str:
    size = int(np.prod(row["shape"], dtype=np.int64))
    said = (
        f"{judged['ill']:,} of {size:,} elements move by up to {judged['spread']:.3g} in {used} itself when its "
        f"operands move by {conditioning.PERTURBATION:.2g} of themselves, more than the tolerance there; "
        f"memplan differs by up to {judged['max_abs_diff']:.3g}"
    )
    witnesses = row["witnesses"]
    if not witnesses:
        return said + "; no well-conditioned tensor upstream could be compared, so this output decides nothing"
    ok = all(w["close"] for w in witnesses)
    names = ", ".join(repr(w["name"]) for w in witnesses)
    return said + f"; judged by {names} instead: {'they match' if ok else 'they differ'}"


def _overall(rows: list[dict[str, Any]]) -> tuple[str, bool | None]:
    """The verdict's word and `passed` from the judged outputs."""
    ill = [r for r in rows if "evidence" in r]
    failed = [r for r in rows if not r["close"] and "evidence" not in r]
    if failed or any(not w["close"] for r in ill for w in r["witnesses"]):
        return "failed", False
    if not ill:
        return "passed", True
    return "ill-conditioned", (True if all(r["witnesses"] for r in ill) else None)


def _difference(name: str, got: np.ndarray, want: Any, steps: int = 0) -> dict[str, Any]:
    """How one output differs from the oracle's, in JSON types. 8- and 16-bit integers may differ by
    `steps` (`max_steps` says by how many they do, `differing` in how many elements)."""
    got = np.asarray(got)
    row: dict[str, Any] = {"name": name, "shape": [int(d) for d in got.shape], "dtype": str(got.dtype)}
    row.update(expected_shape=None, shape_matches=False, max_abs_diff=0.0, mismatched=int(got.size))
    row.update(nonfinite_mismatched=0, close=False, ill_conditioned=None)
    if want is None:
        return {**row, "detail": "the oracle has no output of this name"}
    want = np.asarray(want)
    row["expected_shape"] = [int(d) for d in want.shape]
    if want.shape != got.shape:
        return {**row, "mismatched": int(max(got.size, want.size))}
    row["shape_matches"] = True
    if got.dtype.kind in "iu" and want.dtype.kind in "iu":
        apart = np.abs(got.astype(np.int64) - want.astype(np.int64))
        allowed = steps if max(got.dtype.itemsize, want.dtype.itemsize) <= 2 else 0
        beyond = int(np.count_nonzero(apart > allowed))
        row.update(max_steps=int(apart.max()) if apart.size else 0, differing=int(np.count_nonzero(apart)))
        return {**row, "max_abs_diff": float(row["max_steps"]), "mismatched": beyond, "close": beyond == 0}
    if got.dtype.kind != "f" or want.dtype.kind != "f":  # booleans and the rest: computed exactly by both
        same = np.asarray(got == want)
        return {**row, "mismatched": int(np.count_nonzero(~same)), "close": bool(same.all())}
    a, b = got.astype(np.float64), want.astype(np.float64)
    diff = np.abs(a - b)
    close = (diff <= conditioning.tolerance(b, RTOL, ATOL)) | (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    finite = np.isfinite(a) & np.isfinite(b)
    diff = diff[finite]
    row.update(max_abs_diff=float(diff.max()) if diff.size else 0.0, mismatched=int(np.count_nonzero(~close)))
    row.update(nonfinite_mismatched=int(np.count_nonzero(~close & ~finite)), close=bool(close.all()))
    return row
