"""Quantized ONNX models: memplan's int8 run against onnxruntime's, and the int8 arena against the float one.

Each model is quantized by onnxruntime's own tool (`quantize_static`, QDQ format, int8 activations
and per-channel int8 weights, calibrated on two random inputs) from a model memplan already
benchmarks: the onnx wheel's light models and `bench/real_models.py`'s exports in `bench/.models`
(those present; run `python bench/real_models.py` first for the rest). memplan loads the QDQ file
with its load-time fusions (`runtime.fuse_qdq` folds each DequantizeLinear -> op -> QuantizeLinear
group into an integer op) and runs it in its arena; onnxruntime runs the same file with its own
QDQ fusions. Both at one thread, in one process, alternating; each time is the median of the
calls' thread CPU time after a warm-up.

Writes section "quantized-onnx" of docs/BENCHMARKS.md and prints the table; asserts nothing.
`--narrowing` instead prints, for each model whose QuantizeLinear writes over its own float input,
the arena and the median run time with that alias and without it (the two sessions alternating),
and the compiled QuantizeLinear pass over the input against apart; it writes no docs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "bench" / ".models"
QUANT = FOLDER / "quant"
LIGHT = ("squeezenet", "shufflenet", "resnet50")
REAL = ("mobilenetv2", "mobilenetv3_small", "resnet18", "efficientnet_b0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--models", default="", help="comma-separated names (default: every model found)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument("--narrowing", action="store_true", help="QuantizeLinear over its input against apart")
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # BLAS reads it when numpy loads: before any heavy import
    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.narrowing:
        for name, path in sources(wanted):
            print(narrowing_side_by_side(name, path, args.repeat * 20), flush=True)
        return
    started_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    for name, path in sources(wanted):
        row = bench_model(name, path, args.repeat)
        rows.append(row)
        print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    command = "python bench/quant_bench.py" + (f" --repeat {args.repeat}" if args.repeat != 9 else "")
    command += f" --models {','.join(wanted)}" if wanted else ""
    from app.services.docsections import replace_section

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = section(rows, command, args.repeat, (started_load, load))
    replace_section(args.output, "quantized-onnx", text)
    print(text)
    print(f"wrote {args.output}")


def sources(wanted: list[str]) -> list[tuple[str, Path]]:
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    found = [(n, light / f"light_{n}.onnx") for n in LIGHT]
    found += [(n, FOLDER / f"{n}.onnx") for n in REAL if (FOLDER / f"{n}.onnx").exists()]
    return [(n, p) for n, p in found if not wanted or n in wanted]


def quantized(name: str, path: Path) -> Path:
    """The QDQ model of `path`, made once by onnxruntime's quantizer and kept in bench/.models/quant."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    out = QUANT / f"{name}_qdq.onnx"
    if out.exists() and out.stat().st_mtime > path.stat().st_mtime:
        return out
    QUANT.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [_feeds(inputs, seed) for seed in range(2)]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return out


def _feeds(inputs, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in inputs:
        shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _alternating_ms(ours, theirs, repeat: int) -> tuple[float, float]:
    """The median thread CPU time of each side's calls, one call of each in turn after a warm-up call
    of each, so that both sides see the same load on a shared machine."""
    times: tuple[list[float], list[float]] = ([], [])
    ours(), theirs()
    for _ in range(repeat):
        for fn, spent in zip((ours, theirs), times, strict=True):
            start = time.thread_time()
            fn()
            spent.append((time.thread_time() - start) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def bench_model(name: str, path: Path, repeat: int) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    import runtime
    from runtime.session import Session

    qdq = quantized(name, path)
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    feeds = _feeds([i for i in model.graph.input if i.name not in inits], 7)
    float_session = Session(runtime.load_model(path))
    float_session.prepare()
    graph = runtime.load_model(qdq)
    session = Session(graph)
    ours = session.run(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(qdq), options, providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    mem_ms, ort_ms = _alternating_ms(lambda: session.run(feeds), lambda: sess.run(None, feeds), repeat)
    out = graph.outputs[0]
    got, want = np.asarray(ours[out], dtype=np.float64), np.asarray(expected[0], dtype=np.float64)
    agree = bool((got.reshape(got.shape[0], -1).argmax(1) == want.reshape(want.shape[0], -1).argmax(1)).all())
    ops = {n.op_type for n in graph.nodes}
    return {
        "model": name,
        "folded": graph.fusions["qdq"],
        "left float": ", ".join(sorted(ops & {"Conv", "MatMul", "Gemm", "Add", "Mul", "BatchNormalization"})) or "none",
        "float arena": float_session.plan.arena_bytes,
        "int8 arena": session.plan.arena_bytes,
        "ratio": session.plan.arena_bytes / float_session.plan.arena_bytes,
        "memplan ms": mem_ms,
        "onnxruntime ms": ort_ms,
        "speed ratio": mem_ms / ort_ms,
        "max abs diff": float(np.abs(got - want).max()),
        "top-1 agrees": agree,
    }


def narrowing_side_by_side(name: str, path: Path, runs: int) -> str:
    """The model's plan with its outputs over wider inputs (`Kernel.narrowing`) against the same plan
    without those aliases: arenas, and the median thread time of `runs` calls of each, alternating."""
    import dataclasses

    import numpy as np

    import runtime
    from runtime.arena import aligned_arena
    from runtime.inplace import narrowing_links
    from runtime.kernels.quantized.jit_qlinear import QUANTIZE
    from runtime.session import Session

    graph = runtime.load_model(quantized(name, path))
    problem = runtime.memory_problem(graph)
    over = set(narrowing_links(graph, {b.id: (b.alias_of, b.alias_offset) for b in problem.buffers if b.alias_of}))
    if not over:
        return f"{name}: no output over a wider input (declined or none)"
    unlinked = tuple(
        dataclasses.replace(b, alias_of=None, alias_offset=0) if b.id in over else b for b in problem.buffers
    )
    sessions = [Session(graph, problem=p).prepare() for p in (problem, problem.replace(buffers=unlinked))]
    x = graph.tensors[graph.inputs[0]]
    feeds = {x.name: np.random.default_rng(7).standard_normal(x.shape).astype(np.float32)}
    outs = [s.run(feeds)[graph.outputs[0]] for s in sessions]
    assert np.array_equal(outs[0], outs[1]), f"{name}: the two plans' outputs differ"
    times: tuple[list[float], list[float]] = ([], [])
    for k in range(runs):
        for i in (0, 1) if k % 2 else (1, 0):
            start = time.thread_time()
            sessions[i].run(feeds)
            times[i].append((time.thread_time() - start) * 1e3)
    loop = "compiled loops off"
    if QUANTIZE is not None:  # the pass alone, over the input and apart, on the input's size
        n = int(np.prod(x.shape))
        memory = aligned_arena(5 * n, 64)
        src, held = feeds[x.name].reshape(-1), memory[: 4 * n].view(np.float32)
        best = []
        for out in (memory[:n].view(np.int8), memory[4 * n :].view(np.int8)):
            spent = []
            for _ in range(50):
                held[:] = src
                start = time.perf_counter()
                QUANTIZE(held, np.float32(0.02), np.float32(0), np.float32(-128), np.float32(127), out)
                spent.append(time.perf_counter() - start)
            best.append(min(spent) * 1e3)
        loop = f"compiled QuantizeLinear pass over its input {best[0]:.3f} ms, apart {best[1]:.3f} ms (best of 50)"
    return (
        f"{name}: {len(over)} output(s) over a wider input; arena {sessions[0].plan.arena_bytes:,} bytes with, "
        f"{sessions[1].plan.arena_bytes:,} without; run {statistics.median(times[0]):.3f} ms with, "
        f"{statistics.median(times[1]):.3f} ms without (median of {runs}, alternating); {loop}"
    )


def section(rows: list[dict], command: str, repeat: int, load: tuple[float, float] = (float("nan"),) * 2) -> str:
    import numpy as np
    import onnxruntime as ort

    head = (
        f"`{command}` on {platform.machine()}, {os.cpu_count()} logical CPUs (shared), Python {platform.python_version()}, "
        f"numpy {np.__version__}, onnxruntime {ort.__version__}. Models: the onnx wheel's light models and "
        "`bench/real_models.py`'s, quantized by onnxruntime's `quantize_static` as they are (QDQ, int8 activations, per-channel "
        "int8 weights, two random calibration inputs). Arena: greedy_by_size with workspace and graph inputs/outputs "
        "inside it, for the float model and for the QDQ model after memplan folds its groups into integer ops "
        f"(folded: groups; left float: float ops still in the graph). ms: median thread CPU time of {repeat} calls at "
        "one thread after a warm-up, both sides in one process, one call of each in turn; onnxruntime runs the same "
        f"QDQ file with its own fusions (machine load average {load[0]:.1f} at the start, {load[1]:.1f} at the end: "
        "the machine is shared, and a loaded one slows both sides). max abs diff and top-1: memplan's output against onnxruntime's (float, after the last "
        "DequantizeLinear); the light models' weights are the onnx wheel's placeholders, so their outputs say "
        "little there, the `bench/real_models.py` ones (random weights) more."
    )
    lines = [head, "", "| model | folded | left float | float arena | int8 arena | int8 / float | memplan ms | "
             "onnxruntime ms | memplan / ort | max abs diff | top-1 agrees |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['folded']} | {r['left float']} | {r['float arena']:,} | {r['int8 arena']:,} | "
            f"{r['ratio']:.3f} | {r['memplan ms']:.1f} | {r['onnxruntime ms']:.1f} | {r['speed ratio']:.2f}x | "
            f"{r['max abs diff']:.3g} | {'yes' if r['top-1 agrees'] else 'no'} |"
        )
    if rows:
        geo = lambda key: float(np.exp(np.mean(np.log([r[key] for r in rows]))))  # noqa: E731
        lines += [
            "",
            f"Geometric mean: int8 / float arena {geo('ratio'):.3f}, memplan / onnxruntime time {geo('speed ratio'):.2f}x.",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
