"""memplan's arena against onnxruntime's, Apache TVM's and TensorFlow Lite's memory planners on the same models.

Models: the onnx wheel's nine light models, and ResNet-18, MobileNetV2, a GPT-2-style stack and
an LSTM written in `bench/peer_models.py` and exported with torch (bench-only dependencies:
``torch==2.13.0`` CPU, ``apache-tvm==0.27.0.post1``, ``tensorflow-cpu==2.21.0`` and
``onnx2tf==2.6.9``; none is needed by memplan).

What each column measures (bytes):
- memplan like for like: `planner.plan(problem, "best")` on
  ``runtime.memory_problem(graph, MemoryOptions(io="external", workspace=False))`` with in-place and
  concat-in-place aliases: activations only, as the peers count them (graph inputs, outputs
  and kernels' scratch stay outside). Checked with `planner.check_plan`; the model then runs
  once in a `runtime.Session` with that plan, the canary on, and its outputs are compared with onnxruntime's.
- memplan inclusive: the same with graph inputs/outputs in the arena and kernels' scratch on.
- LOAD: the lower bound (largest sum of sizes live at one step) of the like-for-like problem.
- memplan rigid groups: the like-for-like problem with every alias group planned as one
  rectangle (`planner.aliases.rigid`), as before groups were planned by their profiles (a
  height that follows the group's live members step by step), and its LOAD.
- onnxruntime: a CPU session with its defaults (all graph optimisations, CPU arena, memory
  pattern on) and profiling on runs three times; every node entry of the profile carries the
  allocator's counters after the node and the change during it. The planned pattern is what
  run 1 finds allocated before its first node (the block the memory pattern learnt in run 0)
  minus what run 0 found there.
- TVM: `tvm.relax.frontend.onnx.from_onnx` (weights bound as constants), then the CPU
  backend's own passes up to `CallTIRRewrite` (dispatch, legalize, fold, fuse, lower dataflow)
  and `StaticPlanBlockMemory`; the sum of the sizes of every `R.memory.alloc_storage` of
  ``main``. Graph outputs are allocated outside those storages, as in memplan like for like.
  Each model is compiled in a child process so that a crash or a slow import is one cell.
- TFLite (`bench/peer_tflite.py`, whose docstring gives the method): onnx2tf's float32 ``.tflite``
  of the model (constants folded by onnxsim first), loaded by TensorFlow's ``tf.lite.Interpreter``
  with the builtin reference kernels and no delegate; after ``allocate_tensors()`` the span its
  ArenaPlanner gave the activations, read from the tensors' addresses (graph inputs, outputs and
  kernels' temporaries left out). Also in a child process per model. Before the models, the same
  reading runs on a chain of four elementwise ops worked out by hand, and the notes say whether
  it gave the expected bytes. The optimized builtin kernels' plan (im2col scratch in the arena)
  is measured too and given in the notes.

The best peer is the smallest of the three figures; memplan / best peer and its geometric mean
over the models compare memplan's like-for-like arena with it.

TVM and TFLite need not be installed beside memplan: ``--tvm-path FOLDER`` (or ``MEMPLAN_TVM_PATH``)
names a folder TVM was installed into (``pip install --target FOLDER apache-tvm==0.27.0.post1``),
and ``--tflite-path FOLDER`` (or ``MEMPLAN_TFLITE_PATH``) one TensorFlow and onnx2tf were
installed into (``pip install --target FOLDER tensorflow-cpu==2.21.0``, then ``pip install
--target FOLDER --ignore-requires-python onnx2tf==2.6.9``, which brings onnxsim, sng4onnx,
psutil and the rest; onnx2tf asks for Python 3.12 but runs on 3.11). Each folder is appended to
its child's ``sys.path`` only, after memplan's own packages. Where a peer cannot be imported at
all, its column keeps the figure of the previous run from the output file, marked so in the
table and the notes.

Run from the repository root:
``python bench/peer_bench.py [--models a,b] [--skip-run] [--tvm-path DIR] [--tflite-path DIR]``.
Writes sections "peers" and "variable-size" of docs/BENCHMARKS.md and prints the tables.
``python bench/peer_bench.py --tiled [--models a,b]`` measures only memplan's tiled column
(`bench/peer_tiled.py`) and writes section "peers-tiled".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# bench/ is not a package: run as a script, this file's folder is first on sys.path.
from peer_table import (  # noqa: E402
    best_peer,
    chain_note,
    keep_previous,
    markdown,
    previous_figures,
    variable_size_markdown,
)

ORT_RUNS = 3
CHILD_TIMEOUT_S = 900  # per model and child peer (TVM's compile, TFLite's conversion)


def memplan_figures(path: Path, run: bool) -> dict:
    """Like-for-like and inclusive arenas of "best", LOAD, and (with `run`) one verified execution."""
    import planner
    import runtime
    from planner.aliases import rigid
    from runtime.oracle import random_inputs, verify

    graph = runtime.load_model(path)
    out: dict = {}
    # "like_no_concat" only shows what concat in place costs where its rigid blocks do not pack.
    settings = (
        ("like", "external", False, True),
        ("inclusive", "arena", True, True),
        ("like_no_concat", "external", False, False),
    )
    for label, io, workspace, concat in settings:
        problem = runtime.memory_problem(
            graph, runtime.MemoryOptions(io=io, workspace=workspace, inplace=True, concat_inplace=concat)
        )
        started = time.perf_counter()
        plan = planner.plan(problem, "best")
        out[f"{label}_seconds"] = time.perf_counter() - started
        result = planner.check_plan(problem, plan)
        if not result.ok:
            raise SystemExit(f"{path.name}: the {label} plan fails the checker: {result.violations[:3]}")
        out[label], out[f"{label}_winner"] = plan.arena_bytes, plan.stats.get("winner", plan.strategy)
        out[f"{label}_load"] = planner.load(problem)
        if label == "like":
            like_plan = plan
            stiff = rigid(problem)
            out["like_rigid"] = planner.plan(stiff, "best").arena_bytes
            out["like_rigid_load"] = planner.load(stiff)
    out["reordered"] = reordered_arena(graph)
    if run:
        feeds = random_inputs(graph, seed=0)
        session = runtime.Session(graph, like_plan, runtime.MemoryOptions(io="external", workspace=False), canary=True)
        report = verify(path, feeds, session.run(feeds), capture=lambda names: session.capture(feeds, names))
        out["verified"] = report["passed"]
        out["oracle"] = report["oracle"]
    return out


def reordered_arena(graph: object) -> int | str:
    """Like-for-like arena of "best" after `runtime.reorder_graph` (`planner.reorder`'s exact order
    search, within 1 s), or why it failed.

    Not a headline figure: the peers keep their own node order, this shows what order adds."""
    import planner
    import runtime

    try:
        graph, _ = runtime.reorder_graph(graph, runtime.MemoryOptions(io="external", workspace=False), time_limit=1.0)
    except Exception as error:  # reported in the notes, never hidden
        return f"{type(error).__name__}: {str(error)[:120]}"
    problem = runtime.memory_problem(graph, runtime.MemoryOptions(io="external", workspace=False))
    plan = planner.plan(problem, "best")
    if not planner.check_plan(problem, plan).ok:
        return "the plan of the reordered graph fails the checker"
    return plan.arena_bytes


def ort_planned_bytes(path: Path, folder: Path) -> dict:
    """onnxruntime's planned pattern from its profile; see the module docstring."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / f"ort_{path.stem}")
    options.enable_mem_pattern = True
    options.enable_cpu_mem_arena = True
    options.intra_op_num_threads = 1  # the counters do not depend on threads; the machine is shared
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in arg.shape]
        if "int" in arg.type:
            feeds[arg.name] = rng.integers(0, 3, size=shape).astype(np.int64)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    for _ in range(ORT_RUNS):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    before = before_first_node(events)
    if len(before) < 2:
        raise RuntimeError(f"{path.name}: the profile has memory counters for {len(before)} runs, expected {ORT_RUNS}")
    peak0 = max(int(e["args"]["mem_in_use_peak"]) for e in events if "mem_in_use_peak" in e.get("args", {}))
    return {"planned": before[1] - before[0], "before": before, "peak": peak0}


def before_first_node(events: list[dict]) -> list[int]:
    """Requested bytes in use before the first node of each run, in run order.

    A node entry's ``mem_bytes_requested_in_use`` is taken after the node, and
    ``mem_requested_in_use_delta`` is its change during the node; runs are the
    ``model_run`` session entries, and a node belongs to the run whose span holds it."""
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    counted = sorted(
        (e for e in events if e.get("cat") == "Node" and "mem_bytes_requested_in_use" in e.get("args", {})),
        key=lambda e: e["ts"],
    )
    before = []
    for start, end in runs:
        inside = [e for e in counted if start <= e["ts"] <= end]
        if inside:
            args = inside[0]["args"]
            before.append(int(args["mem_bytes_requested_in_use"]) - int(args["mem_requested_in_use_delta"]))
    return before


def tvm_storage_bytes(path: Path) -> dict:
    """Sum of TVM's `alloc_storage` sizes after StaticPlanBlockMemory (run in a child process)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(onnx.load(str(path)))
    target = tvm.target.Target("llvm")
    with target:
        passes = cpu.library_dispatch_passes(target) + cpu.legalize_passes(target) + cpu.dataflow_lower_passes(target)
        mod = tvm.transform.Sequential([*passes, relax.transform.StaticPlanBlockMemory()])(mod)
    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")
    sizes: list[int] = []

    def visit(expr: object) -> None:
        if isinstance(expr, relax.Call) and expr.op == alloc_storage:
            shape = expr.args[0]
            if not isinstance(shape, relax.ShapeExpr) or len(shape.values) != 1:
                raise RuntimeError(f"{path.name}: an alloc_storage of symbolic size {shape}")
            sizes.append(int(shape.values[0]))

    relax.analysis.post_order_visit(mod["main"], visit)
    return {"bytes": sum(sizes), "storages": len(sizes)}


def child_command(peer: str, path: Path | None, peer_path: str | None) -> list[str]:
    """How to run `peer` ("tvm" or "tflite") on the model at `path` in a fresh interpreter, with
    the folder it was installed into; TFLite without a model runs its hand-worked check."""
    if peer == "tvm":
        command = [sys.executable, __file__, "--tvm-one", str(path)]
    else:
        command = [sys.executable, str(Path(__file__).with_name("peer_tflite.py"))]
        command.append(str(path) if path else "--check")
    return command + ([f"--{peer}-path", peer_path] if peer_path else [])


def in_child(command: list[str]) -> dict:
    """The JSON line a child prints last; an error, crash or timeout becomes {"error": why}."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {CHILD_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode < 0:
        return {"error": f"the child process crashed (signal {-done.returncode})"}
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"error": last[:160]}
    return json.loads(lines[-1])


def model_paths(folder: Path) -> dict[str, Path]:
    """The nine light models of the onnx wheel, then the torch models exported into `folder`."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    paths = {p.stem.removeprefix("light_"): p for p in sorted(light.glob("light_*.onnx"))}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peer_models

    paths.update(peer_models.export_all(folder / "torch"))
    return paths


def measure(name: str, path: Path, folder: Path, run: bool, peer_paths: dict, before: dict[str, dict]) -> dict:
    """One row: memplan's figures and each peer's (a peer's failure is kept as its reason); a
    child peer's figure of the previous run (`before`) where it cannot be imported."""
    row: dict = {"model": name, "memplan": memplan_figures(path, run)}
    try:
        row["ort"] = ort_planned_bytes(path, folder)
    except Exception as error:  # a peer that cannot take a model is a table cell, not a failed run
        row["ort"] = {"error": f"{type(error).__name__}: {str(error)[:160]}"}
    for peer, peer_path in peer_paths.items():
        row[peer] = keep_previous(peer, in_child(child_command(peer, path, peer_path)), before.get(name, {}))
    if "like" in before.get(name, {}):
        row["like_before"] = before[name]["like"]
    row["best_peer"] = best_peer(row)
    return row


def tiled_column(models: str | None, output: Path) -> None:
    """Section "peers-tiled": memplan with `--tile auto` on `models` (default: all) against the best peers."""
    import peer_tiled

    from app.services.docsections import replace_section

    peers = peer_tiled.best_peers(output)
    with tempfile.TemporaryDirectory(prefix="memplan-peers-") as tmp:
        paths = model_paths(Path(tmp))
        wanted = models.split(",") if models else list(paths)
        unknown = sorted(set(wanted) - set(paths))
        if unknown:
            raise SystemExit(f"--models: unknown {unknown}; accepted: {sorted(paths)}")
        rows = []
        for name in wanted:
            rows.append({"model": name, "best_peer": peers.get(name)} | peer_tiled.tiled_figures(paths[name]))
            print(rows[-1], flush=True)
    command = "python bench/peer_bench.py --tiled" + (f" --models {models}" if models else "")
    text = peer_tiled.markdown(rows, command, complete=set(wanted) == set(paths))
    replace_section(output, "peers-tiled", text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="Comma-separated names (default: all).")
    parser.add_argument("--skip-run", action="store_true", help="Plan only; do not execute and verify each model.")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    parser.add_argument("--json", type=Path, help="Also write the raw figures here.")
    parser.add_argument(
        "--tvm-path",
        default=os.environ.get("MEMPLAN_TVM_PATH"),
        help="A folder TVM was installed into (pip install --target), appended to the TVM child's sys.path.",
    )
    parser.add_argument(
        "--tflite-path",
        default=os.environ.get("MEMPLAN_TFLITE_PATH"),
        help="A folder TensorFlow and onnx2tf were installed into (pip install --target), appended to the TFLite "
        "child's sys.path.",
    )
    parser.add_argument("--tvm-one", type=Path, help=argparse.SUPPRESS)  # the TVM child process (child_command)
    parser.add_argument(
        "--tiled",
        action="store_true",
        help="Only memplan's tiled column (bench/peer_tiled.py), against the best peers of the table in --output.",
    )
    args = parser.parse_args()
    if args.tiled:
        tiled_column(args.models, args.output)
        return
    if args.tvm_one:
        if args.tvm_path:
            sys.path.append(args.tvm_path)  # after memplan's own packages: TVM's numpy never shadows them
        print(json.dumps(tvm_storage_bytes(args.tvm_one)))
        return
    before = previous_figures(args.output)
    peer_paths = {"tvm": args.tvm_path, "tflite": args.tflite_path}
    check = in_child(child_command("tflite", None, args.tflite_path))
    print(chain_note(check) or f"TFLite's hand-worked chain: {check}", flush=True)

    from app.services.docsections import replace_section

    with tempfile.TemporaryDirectory(prefix="memplan-peers-") as tmp:
        folder = Path(tmp)
        paths = model_paths(folder)
        wanted = args.models.split(",") if args.models else list(paths)
        unknown = sorted(set(wanted) - set(paths))
        if unknown:
            raise SystemExit(f"--models: unknown {unknown}; accepted: {sorted(paths)}")
        rows = []
        for name in wanted:
            started = time.perf_counter()
            rows.append(measure(name, paths[name], folder, not args.skip_run, peer_paths, before))
            r = rows[-1]
            print(
                f"{name}: memplan {r['memplan']['like']:,} (LOAD {r['memplan']['like_load']:,}, "
                f"inclusive {r['memplan']['inclusive']:,}, verified {r['memplan'].get('verified')}), "
                f"onnxruntime {r['ort'].get('planned', r['ort'].get('error'))}, "
                f"TVM {r['tvm'].get('bytes', r['tvm'].get('error'))}, "
                f"TFLite {r['tflite'].get('bytes', r['tflite'].get('error'))} [{time.perf_counter() - started:.0f} s]",
                flush=True,
            )
    text = markdown(rows, not args.skip_run, check)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    replace_section(args.output, "peers", text)
    sizes = variable_size_markdown(rows)
    replace_section(args.output, "variable-size", sizes)
    print(text)
    print(sizes)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
