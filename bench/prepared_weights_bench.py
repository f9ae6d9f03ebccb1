"""Prepared weights on and off (`MemoryOptions.prepared_weights`): parameter bytes, arena and time per model.

With the switch on (the default) kernels keep transformed copies of constant weights beside the
arena (Winograd's U, RNNs' R panels and W^T); off, they read their weights as stored. For each
model, in this one process: a Session per setting (greedy_by_size, the other options at their
defaults), their outputs judged against onnxruntime by `runtime.oracle.verify`, the parameter
bytes each holds (`Session.constant_bytes`: the initializers plus what the kernels made), the
arena, and the median CPU time of the calling thread over `--repeat` runs, the two settings
alternating after one warm-up each (numpy's BLAS held to one thread, set before numpy loads).

Models: resnet18, crnn_ocr and gru_audio as `bench/real_models.py` exported them into
``bench/.models`` (run it first when they are missing), and the onnx wheel's
``light_resnet50.onnx``.

Run from the repository root: ``python bench/prepared_weights_bench.py [--repeat N] [--models a,b]``.
Writes section "prepared-weights" of docs/BENCHMARKS.md and prints the table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "bench" / ".models"
ZOO = "resnet50_zoo"
MODELS = ("resnet18", ZOO, "crnn_ocr", "gru_audio")
SETTINGS = {"on": True, "off": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # before numpy loads
    rows = []
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        path, inputs = model_path(name)
        if not path.exists():
            print(f"{name}: {path} missing, skipped (run bench/real_models.py)")
            continue
        rows.append(bench_model(name, path, inputs, args.repeat))
        print(rows[-1])
    text = table(rows, args.repeat)
    print(text)
    from app.services.docsections import replace_section

    replace_section(args.output, "prepared-weights", text)


def model_path(name: str) -> tuple[Path, Path | None]:
    if name == ZOO:
        import onnx

        return Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx", None
    return FOLDER / f"{name}.onnx", FOLDER / f"{name}.npz"


def bench_model(name: str, path: Path, inputs: Path | None, repeat: int) -> dict[str, Any]:
    import numpy as np

    import runtime
    from runtime.oracle import random_inputs, verify

    graph = runtime.load_model(path)
    feeds = dict(np.load(inputs)) if inputs is not None else random_inputs(graph, seed=0)
    stored = sum(c.value().nbytes for c in graph.constants.values())
    row: dict[str, Any] = {"model": name, "stored": stored}
    sessions = {}
    for key, prepared in SETTINGS.items():
        options = runtime.MemoryOptions(prepared_weights=prepared)
        session = runtime.Session(graph, "greedy_by_size", options).prepare()
        outputs = session.run(feeds)
        judged = verify(path, feeds, outputs, capture=lambda names, s=session: s.capture(feeds, names))
        row[key] = {
            "parameters": session.constant_bytes,
            "arena": session.plan.arena_bytes,
            "passed": judged["passed"],
        }
        sessions[key] = session
    times: dict[str, list[float]] = {key: [] for key in SETTINGS}
    for _ in range(repeat):
        for key, session in sessions.items():
            start = time.thread_time()
            session.run(feeds)
            times[key].append(time.thread_time() - start)
    for key in SETTINGS:
        row[key]["ms"] = statistics.median(times[key]) * 1000
    return row


def table(rows: list[dict[str, Any]], repeat: int) -> str:
    lines = [
        "## Prepared weights on and off: parameter bytes, arena and time",
        "",
        "`MemoryOptions.prepared_weights` (`--prepared-weights on|off`, REST `prepared_weights`). Parameters: "
        "the bytes a session holds beside the arena (initializers and the kernels' transformed copies); "
        f"time: median CPU time of {repeat} runs at one thread, the two settings alternating; both judged "
        "against onnxruntime. Written by `python bench/prepared_weights_bench.py`.",
        "",
        "| model | stored MB | parameters on MB | parameters off MB | arena on MB | arena off MB "
        "| ms on | ms off | off / on time | outputs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        on, off = r["on"], r["off"]
        verdict = "both pass" if on["passed"] and off["passed"] else f"on {on['passed']}, off {off['passed']}"
        lines.append(
            f"| {r['model']} | {r['stored'] / 1e6:.1f} | {on['parameters'] / 1e6:.1f} | {off['parameters'] / 1e6:.1f} "
            f"| {on['arena'] / 1e6:.2f} | {off['arena'] / 1e6:.2f} | {on['ms']:.1f} | {off['ms']:.1f} "
            f"| {off['ms'] / on['ms']:.2f}x | {verdict} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
