"""Attention in blocks of query rows: each transformer's arena untiled and with `--tile auto`.

For `bench/real_models.py`'s transformers (random weights, batch 1) at their own sequence and at a
longer one (BERT and GPT-2 at 512 tokens, ViT at 448x448, 785 tokens; exported here with the same
definitions into ``bench/.models/<name>_s<tokens>.onnx``), and two accountings of the arena, graph
inputs and outputs outside it in both (as `bench/tile_bench.py` counts):

- activations: ``MemoryOptions(io="external", workspace=False)``;
- with scratch: ``MemoryOptions(io="external")``, kernels' scratch planned in the arena.

Columns: untiled arena and LOAD (`planner.plan(problem, "best")`), the arena of the graph
`tile_auto` returns ("best" again; attention in row blocks, `runtime.tiling.attention`, is taken
only when its placed arena is smaller), the ratio, the blocks, the median time of `--repeat` runs
of each in a `runtime.Session` (one BLAS thread, same process, untiled and tiled taking turns) and their
ratio, and whether the tiled run's outputs match onnxruntime's (`runtime.oracle.verify`).

Run from the repository root: ``python bench/attention_tile_bench.py [--models a,b] [--repeat 3]``
(needs torch to export the longer models). Writes section "attention-tiling" of
docs/BENCHMARKS.md and prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

# One BLAS thread, as the other time benches run, unless the caller sets it (read when numpy loads).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
from bench.tile_bench import median_seconds, turns  # noqa: E402
from runtime import MemoryOptions, Session, load_model, memory_problem  # noqa: E402
from runtime.oracle import verify  # noqa: E402
from runtime.tiling import tile_auto  # noqa: E402
from runtime.tiling.attention import attentions  # noqa: E402

FOLDER = ROOT / "bench" / ".models"
# (model of bench/real_models.py, tokens): None keeps the model's own size
CASES = (
    ("bert_minilm", None),
    ("bert_minilm", 512),
    ("vit_small", None),
    ("vit_small", 785),
    ("gpt2_small6", None),
    ("gpt2_small6", 512),
)
ACCOUNTS = {
    "activations": MemoryOptions(io="external", workspace=False),
    "with scratch": MemoryOptions(io="external"),
}


def export_long(name: str, tokens: int) -> Path:
    """``bench/.models/<name>_s<tokens>.onnx`` and its inputs, from bench/real_models.py's definitions."""
    path = FOLDER / f"{name}_s{tokens}.onnx"
    if path.exists() and path.with_suffix(".npz").exists():
        return path
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import real_models as models

    torch.manual_seed(0)
    if name == "bert_minilm":
        model = models.BertEncoder()
        mask = torch.ones(1, tokens, dtype=torch.int64)
        mask[:, -tokens // 5 :] = 0  # the last fifth padded, as the 128-token model pads 28
        feeds = {
            "input_ids": torch.randint(0, 30522, (1, tokens)),
            "token_type_ids": torch.zeros(1, tokens, dtype=torch.int64),
            "attention_mask": mask,
        }
        outputs = ["last_hidden_state", "pooled"]
    elif name == "gpt2_small6":
        model = models.GPT2(length=tokens)
        feeds, outputs = {"input_ids": torch.randint(0, 50257, (1, tokens))}, ["logits"]
    elif name == "vit_small":
        side = int(round((tokens - 1) ** 0.5)) * 16
        model = models.ViT(image=side)
        feeds, outputs = {"input": torch.randn(1, 3, side, side)}, ["logits"]
    else:
        raise SystemExit(f"no longer sequence defined for {name}")
    torch.set_num_threads(1)
    with torch.no_grad():
        torch.onnx.export(
            model.eval(),
            tuple(feeds.values()),
            str(path),
            opset_version=models.OPSET,
            dynamo=False,
            input_names=list(feeds),
            output_names=outputs,
        )
    np.savez(path.with_suffix(".npz"), **{k: v.numpy() for k, v in feeds.items()})
    return path


def measure(path: Path, account: str, options: MemoryOptions, repeat: int, limit: float) -> dict[str, Any]:
    graph = load_model(path)
    with np.load(path.with_suffix(".npz")) as archive:
        feeds = {k: archive[k] for k in archive.files}
    found = attentions(graph)
    tokens = graph.tensors[found[0].output].shape[2] if found else 0
    untiled = planner.plan(memory_problem(graph, options), "best", time_limit=limit)
    started = time.perf_counter()
    tiling = tile_auto(graph, options)
    search = time.perf_counter() - started
    row: dict[str, Any] = {
        "model": path.stem,
        "tokens": tokens,
        "account": account,
        "untiled": untiled.arena_bytes,
        "load": untiled.lower_bound,
        "search": search,
        "note": tiling.note,
    }
    plain = Session(graph, untiled, options).prepare()
    if tiling.chosen is None:
        base, _ = median_seconds(plain, feeds, repeat)
        return row | {"tiled": untiled.arena_bytes, "blocks": "untiled", "time": (base, base)}
    tiled = planner.plan(memory_problem(tiling.graph, options), "best", time_limit=limit)
    session = Session(tiling.graph, tiled, options).prepare()
    (base, _), (seconds, outputs) = turns([plain, session], feeds, repeat)
    verdict = verify(path, feeds, outputs, capture=lambda names: session.capture(feeds, names))
    c = tiling.chosen
    return row | {
        "tiled": tiled.arena_bytes,
        "tiled_load": tiled.lower_bound,
        "blocks": f"{c.method}: {len(found)} x {c.tiles} blocks of {c.rows} rows",
        "time": (base, seconds),
        "verified": bool(verdict["passed"]),
    }


def section(rows: list[dict[str, Any]], command: str, load: tuple[float, float]) -> str:
    lines = [
        "## Attention in row blocks: transformers below LOAD",
        "",
        f"`{command}`. Attention's scores computed in blocks of query rows (`runtime.tiling.attention`, "
        "taken by `--tile auto` only when its placed arena is smaller), so no seq x seq matrix is whole. Graph "
        "inputs and outputs outside the arena in every row; 'activations' leaves kernels' scratch outside too, "
        "'with scratch' plans it in the arena. Arenas: `best` on each problem. Times: median of timed runs in "
        f"one process, untiled and tiled taking turns, one BLAS thread; 1-minute load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end (2 cores, shared).",
        "",
        "| model | tokens | arena | untiled arena (LOAD) | tiled arena | untiled / tiled | blocks "
        "| ms untiled / tiled | time ratio | outputs match onnxruntime | search s |",
        "|---|---:|---|---:|---:|---:|---|---:|---:|---|---:|",
    ]
    for r in rows:
        base, tiled = r["time"]
        match = {True: "yes", False: "**no**", None: "-"}[r.get("verified")]
        lines.append(
            f"| {r['model']} | {r['tokens']} | {r['account']} | {r['untiled']:,} ({r['load']:,}) | {r['tiled']:,} | "
            f"{r['untiled'] / r['tiled']:.2f}x | {r['blocks']} | {base * 1e3:.1f} / {tiled * 1e3:.1f} | "
            f"{tiled / base:.2f}x | {match} | {r['search']:.1f} |"
        )
    lines += ["", "Notes:", ""] + [f"- {r['model']} ({r['account']}): {r['note']}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated names: name or name_s<tokens> (default: all)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds for each plan by best")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    cases = [(name, tokens, name if tokens is None else f"{name}_s{tokens}") for name, tokens in CASES]
    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(wanted) - {label for *_, label in cases})
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(label for *_, label in cases)}")
    load_start = os.getloadavg()[0]
    rows = []
    for name, tokens, label in cases:
        if wanted and label not in wanted:
            continue
        path = FOLDER / f"{name}.onnx" if tokens is None else export_long(name, tokens)
        for account, options in ACCOUNTS.items():
            rows.append(measure(path, account, options, args.repeat, args.time_limit))
            print(rows[-1], flush=True)
    command = "python bench/attention_tile_bench.py" + (f" --models {args.models}" if wanted else "")
    command += "" if args.repeat == 3 else f" --repeat {args.repeat}"
    command += "" if args.time_limit == 5.0 else f" --time-limit {args.time_limit:g}"
    text = section(rows, command, (load_start, os.getloadavg()[0]))
    from app.services.docsections import replace_section

    replace_section(args.output, "attention-tiling", text)
    print(text)


if __name__ == "__main__":
    main()
