"""memplan's arena against onnxruntime's and Apache TVM's memory planners on the same models.

Models: the onnx wheel's nine light models, and ResNet-18, MobileNetV2, a GPT-2-style stack and
an LSTM written in `bench/peer_models.py` and exported with torch (bench-only dependencies:
``torch==2.13.0`` CPU and ``apache-tvm==0.27.0.post1``; neither is needed by memplan).

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

TVM need not be installed beside memplan: ``--tvm-path FOLDER`` (or ``MEMPLAN_TVM_PATH``) names a
folder it was installed into (``pip install --target FOLDER apache-tvm==0.27.0.post1``), appended
to the TVM child's ``sys.path`` only. Where TVM cannot be imported at all, the TVM column keeps
the figure of the previous run from the output file, marked so in the table and the notes.

Run from the repository root: ``python bench/peer_bench.py [--models a,b] [--skip-run] [--tvm-path DIR]``.
Writes sections "peers" and "variable-size" of docs/BENCHMARKS.md and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ORT_RUNS = 3
TVM_TIMEOUT_S = 900


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
        report = verify(path, feeds, session.run(feeds))
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


def tvm_in_child(path: Path, tvm_path: str | None) -> dict:
    """`tvm_storage_bytes` in a fresh interpreter; an error or crash becomes {"error": why}."""
    command = [sys.executable, __file__, "--tvm-one", str(path)] + (["--tvm-path", tvm_path] if tvm_path else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TVM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {TVM_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
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


TVM_MISSING = "No module named 'tvm'"


def previous_figures(doc: Path) -> dict[str, dict[str, int]]:
    """Per model, memplan's like-for-like bytes ("like") and TVM's ("tvm") in the peers table of
    `doc` (the previous run), where it had them."""
    if not doc.exists():
        return {}
    text = doc.read_text()
    start = text.find("## Peers: memplan's arena against onnxruntime and TVM")
    figures: dict[str, dict[str, int]] = {}
    for line in text[start:].splitlines()[1:] if start >= 0 else []:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        for key, column in (("like", 1), ("tvm", 3)):
            if len(cells) > 3 and re.fullmatch(r"[\d,]+\*?", cells[column]):
                figures.setdefault(cells[0], {})[key] = int(cells[column].rstrip("*").replace(",", ""))
    return figures


def measure(name: str, path: Path, folder: Path, run: bool, tvm_path: str | None, before: dict[str, dict]) -> dict:
    """One row: memplan's figures and each peer's (a peer's failure is kept as its reason); TVM's
    figure of the previous run (`before`) where TVM cannot be imported."""
    row: dict = {"model": name, "memplan": memplan_figures(path, run)}
    try:
        row["ort"] = ort_planned_bytes(path, folder)
    except Exception as error:  # a peer that cannot take a model is a table cell, not a failed run
        row["ort"] = {"error": f"{type(error).__name__}: {str(error)[:160]}"}
    row["tvm"] = tvm_in_child(path, tvm_path)
    if TVM_MISSING in row["tvm"].get("error", "") and "tvm" in before.get(name, {}):
        row["tvm"] = {"bytes": before[name]["tvm"], "previous": True}
    if "like" in before.get(name, {}):
        row["like_before"] = before[name]["like"]
    peers = [v for v in (row["ort"].get("planned"), row["tvm"].get("bytes")) if v is not None]
    row["best_peer"] = min(peers) if peers else None
    return row


def cell(figure: dict, key: str) -> str:
    if key in figure:
        return f"{figure[key]:,}" + ("*" if figure.get("previous") else "")
    return "n/a: " + figure.get("error", "no figure").replace("|", "/")


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(rows: list[dict], run: bool) -> str:
    lines = [
        "## Peers: memplan's arena against onnxruntime and TVM",
        "",
        "`python bench/peer_bench.py`: bytes per model (batch 1). *memplan like for like*: `best` with "
        "`--io external --workspace off` (activations only, in-place and concat-in-place aliases on, the load-time "
        "fusions on: BatchNormalization into Conv, 1x1 Conv with its residual Add), the form the peers count; "
        "memplan's kernels pool and normalise (LRN) over their own input, and a dense 1x1 or 'same' KxK Conv "
        "writes its output from its dying input's first byte (pixel-wise or row-lagged, `runtime.kernels.conv_over`; "
        "one batch item or no more output channels than input channels). *onnxruntime* (1.31, CPU, default optimisations, arena and memory pattern on, profiling "
        "on, 3 runs): requested bytes in use before run 1's first node minus those before run 0's, i.e. the "
        "block its memory pattern planned in run 0. *TVM* (0.27, relax CPU passes through `CallTIRRewrite`, then "
        "`StaticPlanBlockMemory`): sum of the sizes of `R.memory.alloc_storage` in `main` (after operator "
        "fusion, so fused intermediates are never materialised). *memplan inclusive*: graph inputs/outputs in "
        "the arena and kernels' scratch on. LOAD: lower bound of the like-for-like problem. Alias groups are "
        "planned by their profiles (a group's height follows its live members step by step); *rigid groups*: "
        "the like-for-like arena with every group one rectangle (`planner.aliases.rigid`), as before profiles."
        + (
            " Every like-for-like plan passed `check_plan` and ran once in a Session with the canary on (every free "
            "byte poisoned, every live tensor's checksum checked after each step), verified against onnxruntime."
            if run
            else ""
        ),
        "",
        "| model | memplan like for like | onnxruntime | TVM | best peer | memplan / best peer "
        "| memplan inclusive | LOAD | rigid groups | LOAD, rigid groups |" + (" run verified |" if run else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if run else ""),
    ]
    ratios = []
    for r in rows:
        m, best = r["memplan"], r["best_peer"]
        ratio = m["like"] / best if best else None
        if ratio is not None:
            ratios.append(ratio)
        cells = [r["model"], f"{m['like']:,}", cell(r["ort"], "planned"), cell(r["tvm"], "bytes")]
        cells += [f"{best:,}" if best else "n/a", f"{ratio:.3f}" if ratio else "n/a"]
        cells += [f"{m['inclusive']:,}", f"{m['like_load']:,}", f"{m['like_rigid']:,}", f"{m['like_rigid_load']:,}"]
        if run:
            cells.append({True: "yes", False: "NO", None: "no oracle"}[m.get("verified")])
        lines.append("| " + " | ".join(cells) + " |")
    if ratios:
        lines.append(
            f"| geometric mean ({len(ratios)} models) | | | | | {geomean(ratios):.3f} | | | | |" + (" |" if run else "")
        )
        lines += ["", *notes(rows)]
    return "\n".join(lines)


def _best_order(row: dict) -> int:
    """memplan's like-for-like arena in the model's order or the memory-aware one, whichever is smaller."""
    reordered = row["memplan"]["reordered"]
    return min(row["memplan"]["like"], reordered) if isinstance(reordered, int) else row["memplan"]["like"]


def notes(rows: list[dict]) -> list[str]:
    """Where memplan loses, where it stays above LOAD, and the floor LOAD puts under the ratio."""
    compared = [r for r in rows if r["best_peer"]]
    losses = [r["model"] for r in compared if r["memplan"]["like"] > r["best_peer"]]
    ties = [r["model"] for r in compared if r["memplan"]["like"] == r["best_peer"]]
    above = [
        f"{r['model']} ({r['memplan']['like'] / r['memplan']['like_load']:.3f}x LOAD, {r['memplan']['like_winner']})"
        for r in rows
        if r["memplan"]["like"] > r["memplan"]["like_load"]
    ]
    cheaper = [
        f"{r['model']} ({r['memplan']['like_no_concat']:,})"
        for r in rows
        if r["memplan"]["like_no_concat"] < r["memplan"]["like"]
    ]
    lower = [
        f"{r['model']} ({r['memplan']['reordered']:,}, {r['memplan']['reordered'] / r['best_peer']:.3f}x the best peer)"
        for r in compared
        if isinstance(r["memplan"]["reordered"], int) and r["memplan"]["reordered"] < r["memplan"]["like"]
    ]
    failed = [f"{r['model']} ({r['memplan']['reordered']})" for r in rows if isinstance(r["memplan"]["reordered"], str)]
    at_load = [r["model"] for r in compared if r["best_peer"] <= r["memplan"]["like_load"]]
    floor = geomean([r["memplan"]["like_load"] / r["best_peer"] for r in compared])
    with_order = geomean([_best_order(r) / r["best_peer"] for r in compared])
    stiff = geomean([r["memplan"]["like_rigid"] / r["best_peer"] for r in compared])
    shrunk = [
        f"{r['model']} ({r['memplan']['like']:,} against {r['memplan']['like_rigid']:,})"
        for r in rows
        if r["memplan"]["like"] < r["memplan"]["like_rigid"]
    ]
    stale = [r["model"] for r in rows if r["tvm"].get("previous")]
    moved = [
        f"{r['model']} ({r['like_before']:,} -> {r['memplan']['like']:,})"
        for r in rows
        if r.get("like_before", r["memplan"]["like"]) != r["memplan"]["like"]
    ]
    return [
        "- Like-for-like arena against the previous run of this bench (the table this one replaced): "
        + (f"changed on {', '.join(moved)}; the others unchanged." if moved else "unchanged on every model."),
        *(
            [
                f"- TVM could not be imported in this run: its figures marked * ({', '.join(stale)}) are those "
                "of the previous run (TVM's plan does not depend on memplan)."
            ]
            if stale
            else []
        ),
        f"- Groups planned by their profiles against rigid groups: like-for-like arena lower on "
        f"{', '.join(shrunk) or 'none'}; with rigid groups the geometric mean would be {stiff:.3f}x the best peer.",
        f"- memplan above the best peer on: {', '.join(losses) or 'none'}; equal on: {', '.join(ties) or 'none'}.",
        f"- memplan above its LOAD on (the winning strategy in parentheses): {', '.join(above) or 'none'}.",
        (
            f"- With concat in place off (in place still on), memplan's like-for-like arena is smaller on: "
            f"{', '.join(cheaper)}: there a Concat and its producers form one group whose profile costs more "
            "than the copy."
            if cheaper
            else "- With concat in place off (in place still on), no model's like-for-like arena is smaller."
        ),
        f"- No placement of these problems can go under LOAD: the geometric mean of LOAD / best peer is "
        f"{floor:.3f}, the floor of the ratio column for memplan's graphs as loaded (fused, in the model's order). "
        f"The best peer already sits at memplan's LOAD on: {', '.join(at_load) or 'none'}"
        + ("; there the peak is one step whose live tensors no placement can overlap." if at_load else "."),
        "- Not in the table: with memplan's memory-aware node order (`runtime.reorder_graph`: the exact "
        "order search, within 1 s) the "
        f"like-for-like arena is lower on: {', '.join(lower) or 'none'}"
        + (f"; the reorder failed on: {', '.join(failed)}." if failed else ".")
        + f" Taking per model the smaller of the two orders, the geometric mean is {with_order:.3f}x the best peer.",
    ]


def variable_size_markdown(rows: list[dict]) -> str:
    """Per model: the like-for-like arena with rigid groups and with profiles, their LOADs, the
    reordered arena, and the ratios to the best peer."""
    lines = [
        "## Variable-size alias groups and reorder, per model",
        "",
        "`python bench/peer_bench.py` (the same run as the peers table): like-for-like bytes per model. *rigid*: "
        "every alias group planned as one rectangle, as tall as its tallest member end for its whole span "
        "(`planner.aliases.rigid`), as before; *profiles*: each group at one offset with a height that follows "
        "its live members step by step, so the bytes its early members no longer need are free for others (the "
        "default now). LOAD of each (per step, groups by their profiles, for *profiles*). *reordered*: profiles "
        "after `runtime.reorder_graph` (the exact order search, within 1 s). Plans by `best`, each checked by "
        "`planner.check_plan`. The machine was shared with other work; these are bytes, not times.",
        "",
        "| model | best peer | rigid | profiles | profiles / rigid | LOAD rigid | LOAD profiles | reordered "
        "| rigid / best peer | profiles / best peer | best order / best peer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    columns: dict[str, list[float]] = {"rigid": [], "like": [], "order": []}
    for r in rows:
        m, best = r["memplan"], r["best_peer"]
        reordered = m["reordered"]
        cells = [r["model"], f"{best:,}" if best else "n/a", f"{m['like_rigid']:,}", f"{m['like']:,}"]
        cells += [f"{m['like'] / m['like_rigid']:.3f}", f"{m['like_rigid_load']:,}", f"{m['like_load']:,}"]
        cells.append(f"{reordered:,}" if isinstance(reordered, int) else "failed")
        if best:
            figures = {"rigid": m["like_rigid"], "like": m["like"], "order": _best_order(r)}
            for key, value in figures.items():
                columns[key].append(value / best)
            cells += [f"{figures[k] / best:.3f}" for k in ("rigid", "like", "order")]
        else:
            cells += ["n/a"] * 3
        lines.append("| " + " | ".join(cells) + " |")
    if columns["like"]:
        means = " | ".join(f"{geomean(columns[k]):.3f}" for k in ("rigid", "like", "order"))
        lines.append(f"| geometric mean ({len(columns['like'])} models) | | | | | | | | {means} |")
    return "\n".join(lines)


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
    parser.add_argument("--tvm-one", type=Path, help=argparse.SUPPRESS)  # the child process of tvm_in_child
    args = parser.parse_args()
    if args.tvm_one:
        if args.tvm_path:
            sys.path.append(args.tvm_path)  # after memplan's own packages: TVM's numpy never shadows them
        print(json.dumps(tvm_storage_bytes(args.tvm_one)))
        return
    before = previous_figures(args.output)

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
            rows.append(measure(name, paths[name], folder, not args.skip_run, args.tvm_path, before))
            r = rows[-1]
            print(
                f"{name}: memplan {r['memplan']['like']:,} (LOAD {r['memplan']['like_load']:,}, "
                f"inclusive {r['memplan']['inclusive']:,}, verified {r['memplan'].get('verified')}), "
                f"onnxruntime {r['ort'].get('planned', r['ort'].get('error'))}, "
                f"TVM {r['tvm'].get('bytes', r['tvm'].get('error'))} [{time.perf_counter() - started:.0f} s]",
                flush=True,
            )
    text = markdown(rows, not args.skip_run)
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
