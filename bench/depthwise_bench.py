"""Per-shape benchmark of the depthwise Conv kernel against onnxruntime at one thread.

Shapes: every distinct depthwise Conv (group == channels) of MobileNetV2, MobileNetV3-Small and
EfficientNet-B0 as memplan loads them (``bench/.models``, exported by ``bench/real_models.py``),
each with the activation fused into it (memplan's ConvAct: ReLU6, Relu, HardSwish, SiLU, ...).
Random input, weights and bias of that shape.

For each shape, in this one process: memplan's registered kernel (ConvAct, or Conv when nothing
is fused) called as a session calls it, into a preallocated output with its workspace, the input
read-only; and onnxruntime running a Conv + activation model of the same shape (all graph
optimisations, intra- and inter-op threads 1). The figure is the fastest of `--repeat` repeats
of `--calls` calls each, as CPU time of this process per call, the two sides alternating per
repeat. Each output is checked against onnxruntime's (relative 1e-3).

Run from the repository root: ``python bench/depthwise_bench.py [--repeat N] [--calls M]``.
Prints the table; with ``--output FILE`` writes it as section "depthwise-shapes" of FILE.
Asserts nothing.
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

FOLDER = ROOT / "bench" / ".models"
MODELS = ("mobilenetv2", "mobilenetv3_small", "efficientnet_b0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="repeats per shape; the fastest counts")
    parser.add_argument("--calls", type=int, default=5, help="calls per repeat")
    parser.add_argument("--output", type=Path, default=None, help="a Markdown file to write the section into")
    parser.add_argument("--only", default="", help="measure only shapes whose label contains this text")
    args = parser.parse_args()
    if args.repeat < 1 or args.calls < 1:
        parser.error(f"--repeat and --calls take a positive count (got {args.repeat} and {args.calls})")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    missing = [m for m in MODELS if not (FOLDER / f"{m}.onnx").exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)} in {FOLDER}: run python bench/real_models.py {FOLDER} first")

    picked = [shape for shape in shapes() if args.only in label(shape)]
    if not picked:
        labels = ", ".join(label(shape) for shape in shapes())
        sys.exit(f"--only {args.only!r} matches no shape; the labels are: {labels}")
    rows = []
    for shape in picked:
        mine, theirs, ok = bench_shape(shape, args.repeat, args.calls)
        rows.append((shape, mine, theirs, ok))
        print(f"{label(shape):48s} memplan {mine * 1e6:8.1f} us  onnxruntime {theirs * 1e6:8.1f} us"
              f"  {mine / theirs:5.2f}x{'' if ok else '  MISMATCH'}", flush=True)  # fmt: skip
    text = section(rows, args)
    print(text.splitlines()[-1])
    if args.output is not None:
        from app.services.docsections import replace_section

        replace_section(args.output, "depthwise-shapes", text)
        print(f"wrote {args.output}")


def shapes() -> list[tuple]:
    """Distinct (input shape, attributes) of the models' depthwise convs, in first-seen order."""
    import runtime

    seen: dict[tuple, None] = {}
    for model in MODELS:
        graph = runtime.load_model(str(FOLDER / f"{model}.onnx"))
        for node in graph.nodes:
            if node.op_type not in ("Conv", "ConvAct"):
                continue
            x_shape = graph.tensors[node.inputs[0]].shape
            if x_shape[1] < 2 or node.attributes.get("group", 1) != x_shape[1]:
                continue
            attrs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in node.attributes.items()))
            seen.setdefault((tuple(x_shape), attrs), None)
    return list(seen)


def label(shape: tuple) -> str:
    x_shape, attrs = shape
    a = dict(attrs)
    k, s = a["kernel_shape"], a.get("strides", (1, 1))
    text = f"{x_shape[1]}x{x_shape[2]}x{x_shape[3]} {k[0]}x{k[1]}"
    text += f" s{s[0]}" if s[0] != 1 else ""
    return text + (f" {a['activation']}" if a.get("activation") else "")


def _onnx_model(x_shape, w, b, attrs: dict):
    """Conv + the activation's nodes, for onnxruntime."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    conv = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items() if k in
            ("group", "kernel_shape", "pads", "strides", "dilations", "auto_pad")}  # fmt: skip
    act = attrs.get("activation", "")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"], **conv)]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if act == "Silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["c", "g"], ["y"])]
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.array(attrs[k], np.float32), k) for k in ("lo", "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["c"], ["y"], alpha=attrs["alpha"], beta=attrs["beta"]))
    elif act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bench_shape(shape: tuple, repeat: int, calls: int) -> tuple[float, float, bool]:
    """(memplan seconds, onnxruntime seconds, outputs agree) per call, fastest repeat each."""
    import numpy as np
    import onnxruntime as ort

    from runtime.kernels import TensorMeta, get_kernel

    x_shape, attr_items = shape
    attrs = dict(attr_items)
    rng = np.random.default_rng(0)
    c, (kh, kw) = x_shape[1], attrs["kernel_shape"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    x.flags.writeable = False
    w = (rng.standard_normal((c, 1, kh, kw)) * 0.3).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        _onnx_model(x_shape, w, b, attrs).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = session.run(None, {"x": x})[0]

    kernel = get_kernel("ConvAct", "memplan") if "activation" in attrs else get_kernel("Conv")
    assert kernel is not None and kernel.workspace is not None
    kw_attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    metas = [TensorMeta(a.shape, a.dtype) for a in (x, w, b)]
    out = np.empty(want.shape, np.float32)
    ws = np.zeros(kernel.workspace(metas, [TensorMeta(out.shape, out.dtype)], **kw_attrs), np.uint8)
    if kernel.prepare is not None:
        kernel.prepare(metas, [TensorMeta(out.shape, out.dtype)], **kw_attrs)

    def mine() -> None:
        kernel.fn(x, w, b, out=out, ws=ws, **kw_attrs)

    def theirs() -> None:
        session.run(None, {"x": x})

    mine()
    ok = bool(np.allclose(out, want, rtol=1e-3, atol=1e-4))
    best = fastest_per_call((mine, theirs), repeat, calls)
    return best[0], best[1], ok


def section(rows: list, args) -> str:
    lines = [
        "## Depthwise Conv per shape, against onnxruntime",
        "",
        f"`python bench/depthwise_bench.py --repeat {args.repeat} --calls {args.calls}`: each distinct depthwise "
        f"Conv of {', '.join(MODELS)} with its fused activation, memplan's kernel against onnxruntime running "
        "Conv + activation at one thread, the fastest of the repeats, CPU time per call (us).",
        "",
        "| shape (C x H x W, filter, stride, activation) | memplan us | onnxruntime us | ratio | matches |",
        "|---|---:|---:|---:|---|",
    ]
    for shape, mine, theirs, ok in rows:
        lines.append(f"| {label(shape)} | {mine * 1e6:.0f} | {theirs * 1e6:.0f} | {mine / theirs:.2f}x | "
                     f"{'yes' if ok else 'NO'} |")  # fmt: skip
    total_mine, total_theirs = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines += [
        "",
        f"{len(rows)} shapes together: memplan {total_mine * 1e3:.2f} ms, onnxruntime {total_theirs * 1e3:.2f} ms "
        f"({total_mine / total_theirs:.2f}x).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
