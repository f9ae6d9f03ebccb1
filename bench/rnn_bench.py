"""Per-shape benchmark of memplan's recurrent kernels (GRU, LSTM) against onnxruntime at one thread.

Shapes: the recurrences of the executor benchmark's models and their neighbours: a GRU of 256
over 100 steps from 80 features (gru_audio), from 256 features, with linear_before_reset, and a
bidirectional LSTM of 256 over 80 steps from 512 features (crnn_ocr's), all at batch 1. Random
input and weights (scaled by 1 / sqrt(hidden)) and biases.

For each shape, in this one process: memplan's registered kernel called as a session calls it
(prepared first, so compiled loops are ready; its constants hook's weights; bound once where it
has a `bind`), into preallocated outputs with its workspace, the inputs read-only; and onnxruntime running a one-node model of the same shape (all graph
optimisations, intra- and inter-op threads 1). The figure is the fastest of `--repeat` repeats
of `--calls` calls each, CPU time of this process per call, the two sides alternating per repeat.
Each Y is checked against onnxruntime's (absolute 1e-4).

Run from the repository root: ``python bench/rnn_bench.py [--repeat N] [--calls M]``. Prints
the table; with ``--output FILE`` writes it as section "rnn-shapes" of FILE. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbours, when loaded by file path

from sidebyside import fastest_per_call  # noqa: E402

# (label, op, steps, features, hidden, directions, extra attributes)
SHAPES = (
    ("GRU 256, 100 steps from 80 (gru_audio)", "GRU", 100, 80, 256, 1, {}),
    ("GRU 256, 100 steps from 256", "GRU", 100, 256, 256, 1, {}),
    ("GRU 256, 100 steps from 256, linear_before_reset", "GRU", 100, 256, 256, 1, {"linear_before_reset": 1}),
    ("bidirectional LSTM 256, 80 steps from 512 (crnn_ocr)", "LSTM", 80, 512, 256, 2, {}),
)
GATES = {"GRU": 3, "LSTM": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="repeats per shape; the fastest counts")
    parser.add_argument("--calls", type=int, default=5, help="calls per repeat")
    parser.add_argument("--output", type=Path, default=None, help="a Markdown file to write the section into")
    args = parser.parse_args()
    if args.repeat < 1 or args.calls < 1:
        parser.error(f"--repeat and --calls take a positive count (got {args.repeat} and {args.calls})")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    rows = []
    for shape in SHAPES:
        mine, theirs, ok = bench_shape(shape, args.repeat, args.calls)
        rows.append((shape[0], mine, theirs, ok))
        print(f"{shape[0]:56s} memplan {mine * 1e3:7.3f} ms  onnxruntime {theirs * 1e3:7.3f} ms"
              f"  {mine / theirs:5.2f}x{'' if ok else '  MISMATCH'}", flush=True)  # fmt: skip
    text = section(rows, args)
    if args.output is not None:
        from app.services.docsections import replace_section

        replace_section(args.output, "rnn-shapes", text)
        print(f"wrote {args.output}")


def _onnx_model(op: str, x, w, r, b, attrs: dict):
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (r, "r"), (b, "b"))]
    node = helper.make_node(op, ["x", "w", "r", "b"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "recurrence",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bench_shape(shape: tuple, repeat: int, calls: int) -> tuple[float, float, bool]:
    """(memplan seconds, onnxruntime seconds, Y agrees) per call, fastest repeat each."""
    import numpy as np
    import onnxruntime as ort

    from runtime.kernels import TensorMeta, get_kernel

    _, op, steps, features, hidden, dirs, extra = shape
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if dirs == 2 else "forward", **extra}
    rng = np.random.default_rng(0)
    width, scale = GATES[op] * hidden, 1 / np.sqrt(hidden)
    x = rng.standard_normal((steps, 1, features)).astype(np.float32)
    w = (rng.standard_normal((dirs, width, features)) * scale).astype(np.float32)
    r = (rng.standard_normal((dirs, width, hidden)) * scale).astype(np.float32)
    b = (rng.standard_normal((dirs, 2 * width)) * scale).astype(np.float32)
    for a in (x, w, r, b):
        a.flags.writeable = False
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    model = _onnx_model(op, x, w, r, b, attrs).SerializeToString()
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]

    kernel = get_kernel(op)
    assert kernel is not None and kernel.workspace is not None
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, r, b)]
    out = np.empty(want.shape, np.float32)
    out_metas = [TensorMeta(out.shape, out.dtype)]
    ws = np.zeros(kernel.workspace(metas, out_metas, **attrs), np.uint8)
    if kernel.prepare is not None:
        kernel.prepare(metas, out_metas, **attrs)
    bound = kernel.constants([x, w, r, b], metas, out_metas, **attrs) if kernel.constants is not None else {}
    # Bound once, as a session's prepare binds the step (`runtime.step_calls`), where the kernel has a `bind`.
    made = kernel.bind(metas, out_metas, attrs) if kernel.bind is not None else None
    fn = kernel.fn if made is None else made.run
    outputs = (out,)

    def mine() -> None:
        fn(x, w, r, b, out=outputs, ws=ws, **attrs, **bound)

    def theirs() -> None:
        session.run(None, {"x": x})

    mine()
    ok = bool(np.allclose(out, want, rtol=0, atol=1e-4))
    best = fastest_per_call((mine, theirs), repeat, calls)
    return best[0], best[1], ok


def section(rows: list, args) -> str:
    lines = [
        "## Recurrences per shape, against onnxruntime",
        "",
        f"`python bench/rnn_bench.py --repeat {args.repeat} --calls {args.calls}`: memplan's GRU and LSTM kernels "
        "against onnxruntime running the same one node at one thread, batch 1, the fastest of the repeats, "
        "CPU time per call (ms), both in one process on a machine shared with other work.",
        "",
        "| shape | memplan ms | onnxruntime ms | ratio | matches |",
        "|---|---:|---:|---:|---|",
    ]
    for name, mine, theirs, ok in rows:
        lines.append(f"| {name} | {mine * 1e3:.2f} | {theirs * 1e3:.2f} | {mine / theirs:.2f}x | "
                     f"{'yes' if ok else 'NO'} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
