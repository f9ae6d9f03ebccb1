"""Memory API figures: copies of a two-model pipeline, joint against separate arenas, parameters
shared between sessions and between models cut from one network, lazy inputs, one arena for
several batch sizes. Writes section "memory-api" of docs/BENCHMARKS.md.

Each parameter-sharing scenario (with and without sharing) runs in a fresh process, after a
warm-up run, so that its resident-memory delta is its own: ``python bench/memory_api_bench.py [--vocab 50000 --hidden 256]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.services.docsections import replace_section  # noqa: E402
from runtime import MemoryOptions, Session, load_model  # noqa: E402
from runtime.batches import BatchSessions  # noqa: E402
from runtime.params import ParameterStore  # noqa: E402
from runtime.pipeline import Pipeline  # noqa: E402
from tests.memory_models import mlp, rnn_feeds, rnn_output, rnn_step, save  # noqa: E402

SCENARIOS = ("two_sessions", "two_models", "lazy")


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def pipeline_copies(batch: int) -> dict:
    first_model, second_model = mlp(256, 1024, 512, seed=1), mlp(512, 1024, 128, seed=2)
    first, second = (Session(load_model(m, {"N": batch})).prepare() for m in (first_model, second_model))
    x = np.random.default_rng(0).standard_normal((batch, 256)).astype(np.float32)
    y = second.run({"x": first.run({"x": x})["y"]})["y"]
    naive = {
        "copies": first.stats.copies + second.stats.copies,
        "copied_bytes": first.stats.copied_bytes + second.stats.copied_bytes,
    }
    rows = {"naive (two sessions)": naive}
    for io in ("arena", "external"):
        pipe = Pipeline({"a": first.graph, "b": second.graph}, {"a:y": "b:x"}, options=MemoryOptions(io=io)).prepare()
        if io == "external":
            out = np.empty_like(y)
            pipe.bind_input("a:x", x)
            pipe.bind_output("b:y", out)
        else:
            pipe.input_buffer("a:x")[...] = x  # the caller writes into the arena (not counted: its own write)
            pipe.output_buffer("b:y")
        got = pipe.run()["b:y"]
        assert np.array_equal(got, y)
        separate = pipe.separate_arena_bytes()
        rows[f"pipeline, io={io}"] = {
            "copies": pipe.stats.copies,
            "copied_bytes": pipe.stats.copied_bytes,
            "joint_arena": pipe.plan.arena_bytes,
            "separate_arenas": sum(separate.values()),
        }
    return rows


def scenario(name: str, mode: str, folder: Path, vocab: int, hidden: int) -> dict:
    """One parameter-sharing measurement in this (fresh) process: `mode` "without" or "with"."""
    step, head = folder / "step.onnx", folder / "head.onnx"
    feeds = rnn_feeds(4, vocab, hidden)
    Session(load_model(mlp(), {"N": 1})).prepare().run({"x": np.zeros((1, 32), np.float32)})  # imports, caches
    store = ParameterStore() if mode == "with" and name != "lazy" else None
    load = store.load_model if store else load_model
    rss0 = rss_bytes()
    tracemalloc.start()
    if name == "two_sessions":
        sessions = [Session(load(step, {"N": 4})).prepare() for _ in range(2)]
        for s in sessions:
            s.run(feeds)
    elif name == "two_models":
        s1, s2 = Session(load(step, {"N": 4})).prepare(), Session(load(head, {"N": 4})).prepare()
        s2.run({"h": s1.run(feeds)["h"]})
        sessions = [s1, s2]
    else:  # lazy: "with" prepares the step model with its embedding unbound
        unbound = ["emb"] if mode == "with" else []
        sessions = [Session(load_model(step, {"N": 4}), unbound=unbound).prepare()]
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss1 = rss_bytes()
    assert sessions
    return {
        "traced_bytes": held,
        "rss_delta": None if rss0 is None or rss1 is None else rss1 - rss0,
        "store": store.summary() if store else None,
    }


def parameter_figures(vocab: int, hidden: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save(rnn_step(vocab, hidden), folder / "step.onnx", external=True)
        save(rnn_output(vocab, hidden), folder / "head.onnx", external=True)
        out: dict = {}
        for name in SCENARIOS:
            for mode in ("without", "with"):
                args = [sys.executable, __file__, "--scenario", name, "--mode", mode, "--folder", tmp]
                args += ["--vocab", str(vocab), "--hidden", str(hidden)]
                done = subprocess.run(args, capture_output=True, text=True, check=True)
                out.setdefault(name, {})[mode] = json.loads(done.stdout)
        return out


def batch_figures(vocab: int, hidden: int, largest: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = save(rnn_step(vocab, hidden), Path(tmp) / "step.onnx", external=True)
        batches = BatchSessions(path, range(1, largest + 1))
        for b in batches.batches:
            batches.run(b, rnn_feeds(b, vocab, hidden))
        return {
            "shared_arena": batches.arena_bytes,
            "separate": sum(batches.separate_bytes.values()),
            "weights": batches.params.summary(),
        }


def mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e6:.2f} MB"


def markdown(copies: dict, params: dict, batches: dict, vocab: int, hidden: int, largest: int) -> str:
    lines = [
        "## Memory API: zero-copy I/O, pipelines, shared parameters",
        "",
        "Written by `python bench/memory_api_bench.py`. Two MLPs chained (256 -> 1024 -> 512, then",
        "512 -> 1024 -> 128, batch 64): the naive path runs two sessions and hands the first's output",
        "to the second; the pipeline connects `a:y` to `b:x` as one buffer.",
        "",
        "| path | copies | bytes copied | joint arena | sum of separate arenas |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, row in copies.items():
        joint = f"{row['joint_arena']:,}" if "joint_arena" in row else ""
        separate = f"{row['separate_arenas']:,}" if "separate_arenas" in row else ""
        lines.append(f"| {label} | {row['copies']} | {row['copied_bytes']:,} | {joint} | {separate} |")
    emb = vocab * hidden * 4
    lines += [
        "",
        f"Parameters: a language model cut in two (step model and output layer tied to one {vocab}x{hidden}",
        f"float32 embedding, {mb(emb)}; weights in external data files). Heap bytes as tracemalloc sees them",
        "while the sessions are held, and the growth of resident memory, each scenario in a fresh process;",
        "*without* loads each model on its own (`runtime.load_model`; for the lazy row, the embedding is",
        "bound at prepare), *with* loads both through one `ParameterStore` (for the lazy row, the",
        "embedding is left unbound). Resident figures include pages of the mapped weights the kernels touch.",
        "",
        "| scenario | without: heap | without: resident | with: heap | with: resident | held once |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "two_sessions": "two sessions of the step model",
        "two_models": "step model + output layer",
        "lazy": "step model prepared with the embedding unbound",
    }
    for name, row in params.items():
        u, s = row["without"], row["with"]
        once = mb(s["store"]["shared_bytes"]) + " not duplicated" if s["store"] else ""
        lines.append(
            f"| {labels[name]} | {mb(u['traced_bytes'])} | {mb(u['rss_delta'])} | {mb(s['traced_bytes'])} | "
            f"{mb(s['rss_delta'])} | {once} |"
        )
    lines += [
        "",
        f"One arena for batch sizes 1..{largest} of the step model: {batches['shared_arena']:,} bytes, against "
        f"{batches['separate']:,} for one arena per batch size; the weights are held once "
        f"({mb(batches['weights']['unique_bytes'])} for {mb(batches['weights']['requested_bytes'])} referenced).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=50000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--largest-batch", type=int, default=8)
    parser.add_argument("--scenario", choices=SCENARIOS, help="(internal) run one scenario and print JSON")
    parser.add_argument("--mode", choices=("without", "with"), default="with", help="(internal)")
    parser.add_argument("--folder", type=Path, help="(internal) where the scenario's models are")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    if args.scenario:
        print(json.dumps(scenario(args.scenario, args.mode, args.folder, args.vocab, args.hidden)))
        return
    copies = pipeline_copies(64)
    params = parameter_figures(args.vocab, args.hidden)
    batches = batch_figures(args.vocab, args.hidden, args.largest_batch)
    text = markdown(copies, params, batches, args.vocab, args.hidden, args.largest_batch)
    print(text)
    replace_section(args.output, "memory-api", text)


if __name__ == "__main__":
    main()
