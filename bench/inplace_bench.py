"""What in-place and concat-in-place aliases save on the onnx wheel's nine light models.

For each model and each of the four settings (both forms off, in place only, concat in place
only, both on; views always alias) the arena of `--strategy` and LOAD, with workspace and
graph inputs/outputs in the arena as `memplan run` plans them by default. Alias groups are
planned by their profiles (a size that changes step by step, `planner.aliases`); the "rigid"
columns plan the same aliases as rectangles (`planner.aliases.rigid`), as before profiles.
With `--verify` every model also runs once with both forms off and once with both on (the
canary on), each verified against onnxruntime (`runtime.oracle.verify`): not bit for bit
against each other, since a dense Conv written over its own input takes its own route
(pixel-wise or row-lagged, `runtime.kernels.conv.over`), whose sums may round differently.

Run from the repository root: ``python bench/inplace_bench.py [--strategy S] [--verify]``.
Writes section "inplace" of docs/BENCHMARKS.md and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {
    "off": {"inplace": False, "concat_inplace": False},
    "in place": {"inplace": True, "concat_inplace": False},
    "concat": {"inplace": False, "concat_inplace": True},
    "both": {"inplace": True, "concat_inplace": True},
}


def measure(path: Path, strategy: str, verify: bool) -> dict:
    import numpy as np

    import planner
    import runtime
    from planner.aliases import rigid
    from runtime.oracle import random_inputs, verify

    graph = runtime.load_model(path)
    row: dict = {"model": path.stem.removeprefix("light_"), "arena": {}, "load": {}, "aliases": {}}
    for label, switches in SETTINGS.items():
        problem = runtime.memory_problem(graph, runtime.MemoryOptions(**switches))
        row["arena"][label] = planner.plan(problem, strategy).arena_bytes
        row["load"][label] = planner.load(problem)
        row["aliases"][label] = sum(b.alias_of is not None for b in problem.buffers)
        if label == "both":
            row["arena"]["rigid"] = planner.plan(rigid(problem), strategy).arena_bytes
            row["load"]["rigid"] = planner.load(rigid(problem))
    if verify:
        feeds = random_inputs(graph, seed=0)
        base = runtime.Session(graph, strategy, runtime.MemoryOptions(**SETTINGS["off"])).run(feeds)
        got = runtime.Session(graph, strategy, runtime.MemoryOptions(**SETTINGS["both"]), canary=True).run(feeds)
        row["identical"] = all(np.array_equal(base[k], got[k]) for k in base)
        row["verified"] = verify(path, feeds, base)["passed"] and verify(path, feeds, got)["passed"]
    return row


def markdown(rows: list[dict], strategy: str, verify: bool) -> str:
    lines = [
        "## In place and concat in place: arena per light model",
        "",
        f"`python bench/inplace_bench.py --strategy {strategy}{' --verify' if verify else ''}`: arena of "
        f"{strategy} (bytes) with workspace and graph inputs/outputs in the arena; views alias in every column. "
        "*in place*: elementwise ops and LRN write over an input that dies at that step, pooling and depthwise "
        "Conv write their smaller output from its first byte, and a dense 1x1 or 'same' KxK Conv (stride 1, one "
        "group, one item or no more output than input channels) writes its output of any size from its input's "
        "first byte (`runtime.kernels.conv.over`); *concat*: Concat's producers "
        "write into their slices (taken only where that does not raise the live bytes of the merged block). "
        "LOAD is the lower bound of each setting. Alias groups are planned by their profiles (a group's height "
        "follows its live members step by step, so the bytes its early members no longer need are free for "
        "others); *both, rigid*: the same aliases with every group planned as one rectangle "
        "(`planner.aliases.rigid`), as before profiles, and its LOAD."
        + (
            " *verified*: both off and both on (canary on) each match onnxruntime; *bit-identical*: both on against "
            "both off (a dense conv over its input sums in its own order, so not always)."
            if verify
            else ""
        ),
        "",
        "| model | off | in place | concat | both | both / off | LOAD off | LOAD both | aliases (both) "
        "| both, rigid | both / rigid | LOAD both, rigid |" + (" verified | bit-identical |" if verify else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---|---|" if verify else ""),
    ]
    for r in rows:
        a = r["arena"]
        cells = [r["model"], *(f"{a[k]:,}" for k in SETTINGS), f"{a['both'] / a['off']:.3f}"]
        cells += [f"{r['load']['off']:,}", f"{r['load']['both']:,}", str(r["aliases"]["both"])]
        cells += [f"{a['rigid']:,}", f"{a['both'] / a['rigid']:.3f}", f"{r['load']['rigid']:,}"]
        if verify:
            cells += ["yes" if r["verified"] else "NO", "yes" if r["identical"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="greedy_by_size")
    parser.add_argument("--verify", action="store_true", help="Run each model with both forms off and on.")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()

    import onnx

    from app.services.docsections import replace_section

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rows = []
    for path in sorted(light.glob("light_*.onnx")):
        rows.append(measure(path, args.strategy, args.verify))
        print(rows[-1]["model"], rows[-1]["arena"], rows[-1].get("verified", ""), flush=True)
    text = markdown(rows, args.strategy, args.verify)
    replace_section(args.output, "inplace", text)
    print(text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
