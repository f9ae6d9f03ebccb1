"""memplan against TensorFlow Lite Micro on its own int8 models: arenas, heads and time per inference.

For every `.tflite` model in ``../shared/models/tflite/`` (TensorFlow Lite Micro's examples), with the
`tflite-micro` wheel's interpreter (reference kernels):

- TFLM min arena: the smallest ``arena_size`` (to 16 bytes, by bisection) with which the interpreter
  allocates and invokes the model under its own GreedyMemoryPlanner; then the same with memplan's plan
  written into the model as its offline plan (`runtime.tflite.export_plan`);
- TFLM head / tail: what ``print_allocations()`` reports as its arena's head (activations and kernels'
  scratch, planned) and tail (persistent allocations), under its own planner and under memplan's;
- memplan arena and LOAD: ``planner.plan(problem, "best")`` of the model's problem as TensorFlow Lite
  Micro's kernels take it (no in-place aliases but RESHAPE views, memplan's scratch left out, 16-byte
  alignment), and the lower bound; the tensors the export left to TFLM's own planner;
- the same with the aliases TFLM's kernels also take (ADD, SUB, MUL over a dying same-shape input);
- outputs: whether TFLM's outputs under memplan's plans equal those under its own (seeded random input);
- memplan's own arena: ``best`` on the problem memplan's own executor runs (its in-place kernels: a
  convolution's output over its dying input, rows forward or backward, elementwise ops in place; its
  kernels' scratch planned in the arena; 16-byte alignment), its ratio to TFLM's head, and the
  geometric mean of that ratio over the three CNNs (micro_speech, person_detect, MobileNetV2);
- memplan's own arena tiled: the same options (inputs inside the arena, as TFLM counts them) on the
  graph `runtime.tiling.tile_auto` returns (its first layers run band by band where that lowers the
  arena: ``--tile auto``, 20% extra MACs at most), ``best`` on its problem, its ratio to TFLM's head and
  that ratio's geometric mean over the three CNNs; its outputs against TensorFlow Lite Micro's on one
  seeded input, bit for bit, and its time. The exported plan stays untiled: TFLM runs the file's graph;
- time per inference, side by side in one process, the executors alternating round after round, the
  fastest of each (at least ``--repeat`` rounds, more for fast models, within about a second): TFLM's
  ``invoke()`` with its input already in its input tensor; memplan's ``Session.invoker()`` with its
  input already in the arena (the model's compute alone: the whole-model compiled program,
  `runtime.program`, where every step has a compiled integer loop, else a run of the step loop);
  memplan's ``Session.run(inputs)`` (the input copied in, the output copied out, its stats); and the
  same run with ``program=False`` (the step loop, one bound kernel call per step); the tiled graph's
  ``Session.run`` is timed on its own.

Run from the repository root: ``python bench/tflm_bench.py [--models a,b] [--repeat 5]``.
Writes section "tflm" of docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
import runtime  # noqa: E402
from runtime.tflite import export_plan  # noqa: E402

MODELS_DIR = ROOT.parent / "shared" / "models" / "tflite"
FOR_TFLM = runtime.MemoryOptions(inplace=False, concat_inplace=False, workspace=False, alignment=16)
OWN = runtime.MemoryOptions(alignment=16)  # memplan's executor: in-place kernels, scratch in the arena
CNNS = ("micro_speech_quantized", "person_detect", "mobilenet_v2_quantized_1x3x224x224")
STEP = 16


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """What C code prints on fd 2 inside the block (TFLM's allocation report and its failures)."""
    out: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            out.append(f.read().decode("utf-8", "replace"))


def feed(interpreter: Any, seed: int = 7) -> np.ndarray:
    detail = interpreter.get_input_details(0)
    rng = np.random.default_rng(seed)
    dtype = np.dtype(detail["dtype"])
    if dtype.kind == "f":
        return rng.standard_normal(detail["shape"]).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=detail["shape"], endpoint=True).astype(dtype)


def runs(tflm: Any, data: bytes, arena: int) -> bool:
    with captured_stderr():
        try:
            interpreter = tflm.Interpreter.from_bytes(data, arena_size=arena)
            interpreter.set_input(feed(interpreter), 0)
            interpreter.invoke()
        except RuntimeError:
            return False
    return True


def min_arena(tflm: Any, data: bytes, high: int) -> int:
    """The smallest multiple of 16 bytes that allocates and invokes, by bisection."""
    while not runs(tflm, data, high):
        high *= 2
    low = 0  # fails
    while high - low > STEP:
        mid = (low + high) // 2 // STEP * STEP
        if mid <= low:
            break
        if runs(tflm, data, mid):
            high = mid
        else:
            low = mid
    return high


def allocations(tflm: Any, data: bytes, arena: int) -> dict[str, Any]:
    """Head, tail and outputs at a generous arena."""
    interpreter = tflm.Interpreter.from_bytes(data, arena_size=arena)
    interpreter.set_input(feed(interpreter), 0)
    interpreter.invoke()
    output = interpreter.get_output(0).copy()
    with captured_stderr() as printed:
        interpreter.print_allocations()
    text = "".join(printed)
    head = re.search(r"Arena allocation head (\d+) bytes", text)
    tail = re.search(r"Arena allocation tail (\d+) bytes", text)
    return {
        "head": int(head.group(1)) if head else None,
        "tail": int(tail.group(1)) if tail else None,
        "output": output,
    }


def tflm_safe_aliases(graph: Any, problem: Any) -> Any:
    """The problem with every alias TensorFlow Lite Micro's kernels take beyond RESHAPE's views (which
    the problem has already): an ADD, SUB or MUL output over an input of its shape dying there."""
    by_id = {b.id: b for b in problem.buffers}
    buffers = {b.id: b for b in problem.buffers}
    for step, node in enumerate(graph.nodes):
        if node.op_type not in ("ADD", "SUB", "MUL") or len(node.outputs) != 1 or node.outputs[0] not in by_id:
            continue
        out = node.outputs[0]
        shapes = {graph.tensors[name].shape for name in (*node.inputs, out) if name}
        dying = [i for i in node.inputs if i in by_id and by_id[i].last == step and by_id[i].kind == "activation"]
        if len(shapes) == 1 and dying:
            buffers[out] = dataclasses.replace(buffers[out], alias_of=dying[0], alias_offset=0)
    return problem.replace(buffers=tuple(buffers.values()))


def _timed(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def side_by_side(tflm: Any, data: bytes, graph: Any, arena: int, repeat: int, budget: float = 1.0) -> dict[str, Any]:
    """Fastest seconds of TFLM's invoke(), memplan's invoker() and Session.run(inputs) (program and step
    loop), alternating round after round on one seeded input: at least `repeat` rounds, then more while
    the rounds so far took under `budget` seconds (2,000 at most)."""
    interpreter = tflm.Interpreter.from_bytes(data, arena_size=arena)
    x = feed(interpreter)
    try:
        session = runtime.Session(graph, "best", OWN).prepare()
        # A library user's session: invoker() hands the session's buffers to its caller, after which
        # run() returns the output buffer itself instead of a copy the caller owns.
        caller = runtime.Session(graph, "best", OWN).prepare()
        loop = runtime.Session(graph, "best", OWN, program=False).prepare()
        feeds = {graph.inputs[0]: x}
        loop.run(feeds)
        caller.run(feeds)
        invoke, buffer = session.invoker(), session.input_buffer(graph.inputs[0])
    except (runtime.ModelError, runtime.ExecutionError, NotImplementedError) as e:
        why = str(e).splitlines()[0][:120]
        timed = ("tflm_seconds", "tflm_call_seconds", "invoke_seconds", "run_seconds", "loop_seconds")
        return {"route": "not run", "rounds": 0} | dict.fromkeys(timed, why)
    best = dict.fromkeys(("tflm_seconds", "tflm_call_seconds", "invoke_seconds", "run_seconds", "loop_seconds"), np.inf)

    def call() -> Any:  # TFLM's whole call from Python: the input in, invoke, the output out
        interpreter.set_input(x, 0)
        interpreter.invoke()
        return interpreter.get_output(0)

    started, rounds = time.perf_counter(), 0
    while rounds < repeat or (time.perf_counter() - started < budget and rounds < 2000):
        interpreter.set_input(x, 0)  # the input's bytes are reused once it dies: set it before every run
        best["tflm_seconds"] = min(best["tflm_seconds"], _timed(interpreter.invoke))
        best["tflm_call_seconds"] = min(best["tflm_call_seconds"], _timed(call))
        buffer[...] = x  # the same for memplan's arena
        best["invoke_seconds"] = min(best["invoke_seconds"], _timed(invoke))
        best["run_seconds"] = min(best["run_seconds"], _timed(lambda: caller.run(feeds)))
        best["loop_seconds"] = min(best["loop_seconds"], _timed(lambda: loop.run(feeds)))
        rounds += 1
    return best | {"route": session.route, "rounds": rounds}


def breakdown(tflm: Any, data: bytes, graph: Any, arena: int, budget: float = 1.0) -> dict[str, float]:
    """Where the whole call's time goes on the program route: each part called 50 times in a row per
    round, the parts alternating round after round, the fastest round's mean of each (about `budget`
    seconds). TFLM: `set_input`, `invoke()`, `get_output`. memplan: `Session.run(inputs)`; its one
    compiled call (`jit_fed`: the input's shape checked, the input copied in, the program run and
    timed); the output's copy into a fresh array and the dict holding it; the rest is Python (the
    call's frame, the feed checks, the stats kept)."""
    from runtime.arena import address
    from runtime.kernels.quantized.jit_fed import fed_entry, fed_frame

    interpreter = tflm.Interpreter.from_bytes(data, arena_size=arena)
    x = feed(interpreter)
    session, caller = runtime.Session(graph, "best", OWN).prepare(), runtime.Session(graph, "best", OWN).prepare()
    if session.route != "program" or len(graph.inputs) != 1:
        return {}
    program = session.invoker()  # a partial of the compiled entry over the arena, the blob and the code
    arrays, view = program.args, session.input_buffer(graph.inputs[0])
    fed = fed_entry(x)
    if fed is None:
        return {}
    frame, out = fed_frame(*arrays, address(view) - address(arrays[0]), view.shape), graph.outputs[0]
    at = address(frame)
    output, feeds, clock = session.output_buffer(out), {graph.inputs[0]: x}, time.perf_counter
    parts = {
        "set_input": lambda: interpreter.set_input(x, 0),
        "invoke": interpreter.invoke,
        "get_output": lambda: interpreter.get_output(0),
        "run": lambda: caller.run(feeds),
        "fed": lambda: fed(at, x),
        "copy": lambda: {out: output.copy()},
    }
    best = dict.fromkeys(parts, np.inf)
    started, rounds = clock(), 0
    while rounds == 0 or clock() - started < budget:
        rounds += 1
        for name, part in parts.items():
            t0 = clock()
            for _ in range(50):
                part()
            best[name] = min(best[name], (clock() - t0) / 50)
    return best


def tiled(data: bytes, graph: Any, repeat: int) -> dict[str, Any]:
    """memplan's own arena with `--tile auto`, its outputs against TFLM's and its time per inference."""
    from runtime.oracle import random_inputs
    from runtime.tflite.oracle import outputs_of
    from runtime.tiling import tile_auto

    tiling = tile_auto(graph, OWN)
    made = planner.plan(runtime.memory_problem(tiling.graph, OWN), "best")
    feeds = random_inputs(graph, seed=0)
    try:
        session = runtime.Session(tiling.graph, made, OWN).prepare()
        outputs = session.run(feeds)
    except (runtime.ModelError, runtime.ExecutionError, NotImplementedError) as e:
        return {"tiled_arena": made.arena_bytes, "tiled_note": tiling.note, "tiled_exact": None,
                "tiled_seconds": str(e).splitlines()[0][:120]}  # fmt: skip
    expected = outputs_of("tflite-micro", data, feeds)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(feeds)
        best = min(best, time.perf_counter() - start)
    return {
        "tiled_arena": made.arena_bytes,
        "tiled_note": tiling.note,
        "tiled_exact": all(np.array_equal(outputs[k], v) for k, v in expected.items()),
        "tiled_seconds": best,
    }


def measure(path: Path, repeat: int) -> dict[str, Any]:
    from tflite_micro.python.tflite_micro import runtime as tflm

    data = path.read_bytes()
    graph = runtime.load_model(data)
    problem = runtime.memory_problem(graph, FOR_TFLM)
    made = planner.plan(problem, "best")
    exported = export_plan(data, graph, made)
    aliased = planner.plan(tflm_safe_aliases(graph, problem), "best")
    own_arena = planner.plan(runtime.memory_problem(graph, OWN), "best").arena_bytes
    generous = 4 * made.arena_bytes + (1 << 20)
    own = allocations(tflm, data, generous)
    ours = allocations(tflm, exported.data, generous)
    with_aliases = allocations(tflm, export_plan(data, graph, aliased).data, generous)
    times = side_by_side(tflm, data, graph, generous, repeat)
    parts = breakdown(tflm, data, graph, generous)
    return (
        times
        | tiled(data, graph, repeat)
        | {
            "model": path.stem,
            "tflm_min": min_arena(tflm, data, generous),
            "tflm_min_memplan": min_arena(tflm, exported.data, generous),
            "head": own["head"],
            "tail": own["tail"],
            "head_memplan": ours["head"],
            "tail_memplan": ours["tail"],
            "arena": made.arena_bytes,
            "arena_aliased": aliased.arena_bytes,
            "own_arena": own_arena,
            "own_ratio": own_arena / own["head"] if own["head"] else float("nan"),
            "head_aliased": with_aliases["head"],
            "load": made.lower_bound,
            "left_out": len(exported.online),
            "parts": parts,
            "identical": bool(
                np.array_equal(own["output"], ours["output"]) and np.array_equal(own["output"], with_aliases["output"])
            ),
        }
    )


def _load() -> str:
    return ", ".join(f"{v:.1f}" for v in os.getloadavg())


def _exact(value: bool | None) -> str:
    return {True: "bit-exact", False: "**differs**", None: "not run"}[value]


def _us(value: float | str) -> str:
    if not isinstance(value, float):
        return f"not run: {value}"
    return f"{value * 1e6:,.0f}" if value >= 1e-3 else f"{value * 1e6:.3g}"


def _ratio(a: float | str, b: float | str) -> str:
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) else "-"


def time_table(rows: list[dict[str, Any]]) -> list[str]:
    """The side-by-side times and what each covers."""
    lines = [
        "",
        "Time per inference (microseconds), side by side in one process: the executors alternate round after round "
        "on one seeded input and each column is the fastest of its rounds. *TFLM `invoke()`*: the interpreter's "
        "invoke with its input already in its input tensor (set before each round, untimed), reference kernels, "
        "its own plan, called from Python. *memplan `invoker()`*: the same for memplan, its input already in the arena "
        "(written before each round, untimed) and its output left there: the model's compute alone; on the *program* "
        "route (`runtime.program`: every step a compiled integer loop) that is one compiled call, on the *steps* route "
        "a `Session.run` of the step loop. *`Session.run(inputs)`*: the whole call a library user makes, on a session of its own "
        "(one whose buffers `invoker()` has not handed out), the input copied into the arena, the output copied out "
        "into a fresh array the caller owns, its stats kept, by the same route (on the program route "
        "`runtime.fast_run`'s short call); against it, *TFLM's call*: "
        "`set_input`, `invoke()` and `get_output` in a row. *step loop*: that run with "
        "`program=False`, one bound kernel call per step (the route every model took before the program). *tiled*: "
        "`Session.run(inputs)` of the `--tile auto` graph, timed on its own. Every column is called from Python, "
        "whose call costs a few tenths of a microsecond on both sides.",
        "",
        "| model | route | rounds | TFLM `invoke()` | memplan `invoker()` | / TFLM | TFLM's call "
        "| `Session.run(inputs)` | / TFLM's call | step loop `Session.run(inputs)` | tiled `Session.run(inputs)` |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t = r["tflm_seconds"]
        lines.append(
            f"| {r['model']} | {r['route']} | {r['rounds']:,} | {_us(t)} | {_us(r['invoke_seconds'])} "
            f"| {_ratio(r['invoke_seconds'], t)} | {_us(r['tflm_call_seconds'])} | {_us(r['run_seconds'])} "
            f"| {_ratio(r['run_seconds'], r['tflm_call_seconds'])} "
            f"| {_us(r['loop_seconds'])} | {_us(r['tiled_seconds'])} |"
        )
    timed = [r for r in rows if isinstance(r["invoke_seconds"], float)]
    faster = [r["model"] for r in timed if r["invoke_seconds"] < r["tflm_seconds"]]
    slower = [
        f"{r['model']} ({r['invoke_seconds'] / r['tflm_seconds']:.2f}x)" for r in timed if r["model"] not in faster
    ]
    lines += [
        "",
        f"memplan's compute (`invoker()`) is faster than TFLM's `invoke()` on {len(faster)} of {len(rows)} models"
        + (f"; slower on {', '.join(slower)}" if slower else "")
        + ". `Session.run(inputs)` against TFLM's whole call: faster on "
        + f"{sum(1 for r in timed if r['run_seconds'] < r['tflm_call_seconds'])} of {len(rows)}.",
    ]
    split = [r for r in rows if r.get("parts")]
    if split:
        lines += [
            "",
            "Where the whole call's microseconds go on the program route (`breakdown`): each part called 50 times in "
            "a row, the parts alternating round after round for about a second, the fastest round's mean of each "
            "(hotter than the single calls above). memplan's `Session.run(inputs)` is `runtime.fast_run`'s call: "
            "one compiled call (`jit_fed`: two arguments, the address of a frame holding the arena's, blob's and "
            "code's addresses, and the input) that checks the input's shape, copies it in and runs the program "
            "between two reads of the monotonic clock for `stats.seconds`; then the output copied into a fresh array "
            "in a dict; *rest* is the run less those two: Python's frame, the feed checks by identity, the stats "
            "kept.",
            "",
            "| model | TFLM `set_input` | `invoke()` | `get_output` | sum | memplan `Session.run(inputs)` "
            "| compiled call: input in, program, clock | output copy + dict | rest |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in split:
            p = r["parts"]
            tflm = p["set_input"] + p["invoke"] + p["get_output"]
            rest = p["run"] - p["fed"] - p["copy"]
            cells = [p["set_input"], p["invoke"], p["get_output"], tflm, p["run"], p["fed"], p["copy"]]
            lines.append(f"| {r['model']} | " + " | ".join(f"{v * 1e6:.3f}" for v in [*cells, rest]) + " |")
    return lines


def section(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "## TensorFlow Lite Micro: its arena with its own plan and with memplan's",
        "",
        "TensorFlow Lite Micro's own int8 models (`../shared/models/tflite/`) in the `tflite-micro` wheel's interpreter "
        "(reference kernels), under its own GreedyMemoryPlanner and under memplan's plan written into the model as "
        "its offline plan (`OfflineMemoryAllocation`). *min arena*: the smallest `arena_size` (to 16 bytes, by "
        "bisection) that allocates and invokes; *head* and *tail*: `print_allocations()`'s arena head (planned "
        "activations and kernels' scratch) and tail (persistent); *memplan arena*: `best` on the model's problem as "
        "TFLM's kernels take it (RESHAPE views only, memplan's scratch left out, 16-byte alignment); *left out*: "
        "tensors the export gave back to TFLM's planner; *with ADD/SUB/MUL aliases*: the same with every "
        "elementwise output over a same-shape input dying there (what TFLM's kernels also take), its arena and "
        "TFLM's head under it; *same outputs*: TFLM's outputs under all three plans, one seeded input. Times: the "
        "second table.",
        "",
        "| model | TFLM min arena | with memplan's plan | TFLM head | with memplan's plan | tail | memplan arena "
        "| LOAD | with ADD/SUB/MUL aliases: arena, TFLM head | left out | same outputs | memplan's own arena "
        "| / TFLM head | tiled (`--tile auto`) | / TFLM head | tiled = TFLM |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['tflm_min']:,} | {r['tflm_min_memplan']:,} | {r['head']:,} | {r['head_memplan']:,} "
            f"| {r['tail']:,} | {r['arena']:,} | {r['load']:,} | {r['arena_aliased']:,}, {r['head_aliased']:,} "
            f"| {r['left_out']} | {'yes' if r['identical'] else 'NO'} | {r['own_arena']:,} | {r['own_ratio']:.3f} "
            f"| {r['tiled_arena']:,} | {r['tiled_arena'] / r['head'] if r['head'] else float('nan'):.3f} "
            f"| {_exact(r['tiled_exact'])} |"
        )
    lines += time_table(rows)
    cnn = [r for r in rows if r["model"] in CNNS]
    if cnn:
        mean = float(np.exp(np.mean(np.log([r["own_ratio"] for r in cnn]))))
        tiled_mean = float(np.exp(np.mean(np.log([r["tiled_arena"] / r["head"] for r in cnn]))))
        lines += [
            "",
            f"memplan's own arena / TFLM head, geometric mean over {len(cnn)} of the CNNs: **{mean:.3f}** untiled, "
            f"**{tiled_mean:.3f}** with `--tile auto` (inputs inside the arena in both, as TFLM counts them).",
            "",
            "Tiling (`--tile auto` on memplan's own arena): "
            + "; ".join(f"{r['model']}: {r['tiled_note']}" for r in cnn)
            + ". The exported plan (the TFLM columns) stays untiled: TFLM runs the file's own graph.",
        ]
    lines += [
        "",
        "TFLM's own planner already reaches the no-sharing floor (its head equals LOAD, or LOAD plus its kernels' "
        "scratch) on these models, so memplan's plan can at best equal it inside TFLM, and does: where the head "
        "exceeds memplan's arena, the difference is TFLM's kernels' scratch (keyword_scrambled's SVDF, "
        "micro_speech's 8 bytes), which TFLM places itself around the offline tensors. The sharing TFLM's kernels "
        "allow gives nothing here: RESHAPE's views are already in every column (micro_speech's and person_detect's "
        "RESHAPE never sits at the peak), and MobileNetV2's residual ADDs, the only elementwise ops over a dying "
        "input in these models, do not run at its peak (its first 112x112 layers), so the arena stays at LOAD. "
        "memplan's smaller arenas come from its own in-place kernels, which TFLM's do not have.",
        "",
        "*memplan's own arena* is the one its executor runs in: the integer CONV_2D and DEPTHWISE_CONV_2D (compiled "
        "loops summing each pixel from the input in place, a pixel's sums and a ring of the few output pixels held back as their only scratch) and PAD "
        "write their output from their dying input's first byte, pixels taken forward or backward (a channel-growing 1x1 "
        "conv, as vMCU overlaps them), so the peak of two maps becomes the larger one. What is left is that larger "
        "map: person_detect's 48x48x16 pointwise output (36,864 of 36,928), micro_speech's 25x20x8 first layer "
        "(4,000 of 4,240), MobileNetV2's padded 114x114x96 map (1,247,616 of 1,248,000); their ratios to TFLM's head "
        "are 0.667, 0.670 and 0.509 at best, geometric mean 0.61: below that only tiling goes (the expanded map never "
        "whole), the tiled column; micro_speech's first op is a RESHAPE and its one convolution feeds a "
        "FULLY_CONNECTED that reads the whole map, so it has nothing to tile. hello_world's arena equals TFLM's "
        "head (nothing there shares bytes); keyword_scrambled's is its LOAD, below TFLM's head: its SVDFs shift their "
        "states where they lie, outside the arena (as TFLM keeps variable tensors), and take no scratch.",
        "",
        f"Command: `{command}`. Machine load average (1, 5, 15 min) at the end of the run: {_load()}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated model names (default: every .tflite in the folder)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    paths = sorted(MODELS_DIR.glob("*.tflite"))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise SystemExit(f"no .tflite model in {MODELS_DIR}")
    rows = []
    for path in paths:
        rows.append(measure(path, args.repeat))
        print(f"{path.stem}: done", file=sys.stderr)
    command = "python bench/tflm_bench.py" + (f" --models {args.models}" if args.models else "")
    text = section(rows, command)
    from app.services.docsections import replace_section

    replace_section(args.output, "tflm", text)
    print(text)


if __name__ == "__main__":
    main()
