"""The peer benchmark's tiled column: memplan's like-for-like arena with `--tile auto` against the best peer.

For each model: the like-for-like problem (``MemoryOptions(io="external", workspace=False)``,
activations only, as the peers count) of the graph `runtime.tiling.tile_auto` returns at its
default budget of 20% extra multiply-accumulates, planned by "best" and checked by
`planner.check_plan`; the model then runs in a `runtime.Session` with that plan twice, with the
canary on (step by step) and without it (the route a user's run takes: a float tiled stage in
compiled calls, `runtime.tiling.band_program`), and both runs' outputs are compared with
onnxruntime's (`runtime.oracle.verify`). The best
peer (the smallest of onnxruntime's, TVM's and TFLite's figures) is read from the peers table
of the previous full run of `bench/peer_bench.py` in the same file: the peers' plans do not
depend on memplan, so they are not rerun here.

Used by ``python bench/peer_bench.py --tiled [--models a,b]``, which writes section
"peers-tiled" of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

from peer_table import HEADING

LIKE = {"io": "external", "workspace": False}
# runtime.oracle.verify's "passed": None where onnxruntime cannot reproduce an output itself
VERDICT = {True: "yes", False: "**no**", None: "undecided (ill-conditioned output; largest difference {:.2g})"}


def best_peers(doc: Path) -> dict[str, int]:
    """Per model, the "best peer" column of the peers table of `doc`."""
    text = doc.read_text() if doc.exists() else ""
    start = text.find(HEADING)
    found: dict[str, int] = {}
    column = None
    for line in text[start:].splitlines()[1:] if start >= 0 else []:
        if line.startswith("## ") or line.startswith("<!-- end"):
            break
        cells = [c.strip().removesuffix("*") for c in line.strip().strip("|").split("|")]
        if cells[0] == "model":
            column = cells.index("best peer") if "best peer" in cells else None
        elif column is not None and column < len(cells) and re.fullmatch(r"[\d,]+", cells[column]):
            found[cells[0]] = int(cells[column].replace(",", ""))
    return found


def tiled_figures(path: Path) -> dict:
    """Untiled and tiled like-for-like arenas of "best", the stage chosen, and one verified run."""
    import planner
    import runtime
    from runtime.oracle import random_inputs, verify
    from runtime.tiling import tile_auto

    options = runtime.MemoryOptions(**LIKE)
    graph = runtime.load_model(path)
    started = time.perf_counter()
    untiled = planner.plan(runtime.memory_problem(graph, options), "best").arena_bytes
    tiling = tile_auto(graph, options)
    problem = runtime.memory_problem(tiling.graph, options)
    plan = planner.plan(problem, "best")
    result = planner.check_plan(problem, plan)
    if not result.ok:
        raise SystemExit(f"{path.name}: the tiled plan fails the checker: {result.violations[:3]}")
    out: dict = {"untiled": untiled, "tiled": plan.arena_bytes, "note": tiling.note}
    if tiling.chosen is not None:
        c = tiling.chosen
        out |= {"stage": f"{len(c.chain.nodes)} nodes, {c.method}, {c.tiles} bands", "extra": c.extra_macs}
    feeds = random_inputs(graph, seed=0)
    reports = []
    for canary in (True, False):  # the canary's step loop, then the route a user's run takes
        session = runtime.Session(tiling.graph, plan, options, canary=canary).prepare()
        reports.append(verify(path, feeds, session.run(feeds), capture=lambda n, s=session: s.capture(feeds, n)))
        if not canary:
            out["route"] = session.stage_note
    verdicts = [r["passed"] for r in reports]
    out["verified"] = False if False in verdicts else None if None in verdicts else True
    out["oracle"] = reports[0]["oracle"]
    out["max_diff"] = max((o.get("max_abs_diff", 0.0) for r in reports for o in r.get("outputs", [])), default=0.0)
    out["seconds"] = time.perf_counter() - started
    return out


def markdown(rows: list[dict], command: str, complete: bool) -> str:
    """The "peers-tiled" section: one row per model and the geometric means of the ratios."""
    lines = [
        "## Peers, tiled: memplan's arena with `--tile auto` against the best peer",
        "",
        f"`{command}`. memplan like for like (activations only, graph inputs, outputs and kernels' scratch "
        "outside), untiled and with `--tile auto` (default budget of 20% extra MACs), each planned by `best` and "
        "checked; the tiled plan ran twice in a Session, once with the canary on (step by step) and once as a "
        "user's run goes (a float tiled stage in compiled calls), and both runs' outputs were compared with "
        "onnxruntime's (*run verified*: both matched). *best peer*: the smallest of onnxruntime's, TVM's and TFLite's figures, from the peers "
        "table above (the peers' plans do not depend on memplan)."
        + ("" if complete else " **A subset of the peer benchmark's models**: the geometric means are over it only."),
        "",
        "| model | best peer | untiled | untiled / best peer | tiled | tiled / best peer | stage | extra MACs "
        "| run verified |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        peer = r.get("best_peer")
        untiled, tiled = (f"{r[k] / peer:.3f}" if peer else "-" for k in ("untiled", "tiled"))
        lines.append(
            f"| {r['model']} | {f'{peer:,}' if peer else 'n/a'} | {r['untiled']:,} | {untiled} | "
            f"{r['tiled']:,} | {tiled} | {r.get('stage', 'untiled')} | {r.get('extra', 0.0):.1%} | "
            f"{VERDICT[r['verified']].format(r.get('max_diff', 0.0))} |"
        )
    rated = [r for r in rows if r.get("best_peer")]
    if rated:
        mean = {
            k: math.exp(sum(math.log(r[k] / r["best_peer"]) for r in rated) / len(rated)) for k in ("untiled", "tiled")
        }
        lines.append(
            f"| geometric mean ({len(rated)} models) | | | {mean['untiled']:.3f} | | {mean['tiled']:.3f} | | | |"
        )
    lines += ["", "Notes:", ""] + [
        f"- {r['model']}: {r['note']}" + (f"; the run without canary: {r['route']}" if r.get("route") else "")
        for r in rows
    ]
    return "\n".join(lines)
