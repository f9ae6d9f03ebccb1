"""Recomputation for training: the arena and its activation part, without recomputation and at 10%,
20% and 30% extra FLOPs, against sqrt(n) checkpointing on the same step.

For a ResNet-18-like and a MobileNetV2-like network (32x32, batch 8, 10 classes) and a small
transformer encoder (`runtime.training.models`), and for `bench/real_models.py`'s ResNet-18 and
MobileNetV2 exported by torch at 32x32 and batch 8 (skipped without torch), builds the training step
(cross-entropy, SGD with momentum, batch norm's Conv input kept so that the search decides what to
recompute), runs the
recomputation search once at 30% (`runtime.training.remat_search.search`) and reads its Pareto
curve at each level, checks that one step with the 20% choice gives the same loss and gradients
bit for bit, and writes section "remat" of docs/BENCHMARKS.md.

    python bench/remat_bench.py [--output docs/BENCHMARKS.md] [--time-limit 40] [--models resnet18_like,...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # real_models (bench/ is not a package)

from app.services.docsections import replace_section  # noqa: E402
from runtime.training import TrainingSession, build_training_step, models  # noqa: E402
from runtime.training.remat import rematerialize  # noqa: E402
from runtime.training.remat_search import choose, search  # noqa: E402

LEVELS = (0.1, 0.2, 0.3)
MODELS = Path(__file__).resolve().parent / ".models"


def exported(name: str, batch: int = 8, size: int = 32) -> Path:
    """`bench/real_models.py`'s network `name` exported by torch at `size` x `size` and `batch`, its batch
    norms kept (eval mode with PRESERVE: the default EVAL folds them into the convolutions). Fresh batch
    norms all hold the same ones and zeros, which the exporter merges into one initializer read through
    Identity nodes (then neither trainable nor a running statistic apart); seeded noise keeps them apart."""
    path = MODELS / f"{name}_train_b{batch}_s{size}.onnx"
    here = Path(__file__).resolve().parent
    changed = max((here / source).stat().st_mtime for source in ("real_models.py", "peer_models.py", "remat_bench.py"))
    if path.exists() and path.stat().st_mtime > changed:  # written after the definitions last changed
        return path
    import torch
    from real_models import MODELS as DEFINITIONS

    torch.manual_seed(0)
    model = DEFINITIONS[name][0]().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                for t in (m.weight, m.bias, m.running_mean):
                    t.add_(0.1 * torch.randn_like(t))
                m.running_var.add_(0.1 * torch.rand_like(m.running_var))
        warnings.filterwarnings("ignore")  # the classic exporter's deprecation and tracing notes
        MODELS.mkdir(exist_ok=True)
        torch.onnx.export(
            model,
            (torch.randn(batch, 3, size, size),),
            str(path),
            opset_version=17,
            dynamo=False,
            training=torch.onnx.TrainingMode.PRESERVE,
            input_names=["image"],
            output_names=["logits"],
        )
    return path


NETWORKS = {
    "resnet18_like": lambda: models.resnet18_like(batch=8, size=32, classes=10),
    "mobilenet_v2_like": lambda: models.mobilenet_v2_like(batch=8, size=32, classes=10),
    "transformer_encoder": lambda: models.transformer_encoder(batch=8, tokens=64, features=64, heads=4, layers=4),
    "real_resnet18": lambda: exported("resnet18"),
    "real_mobilenetv2": lambda: exported("mobilenetv2"),
}
# Published figures (their papers' own networks and baselines; ratios, not bytes).
PUBLISHED = [
    ("MONeT (Shah et al., ICLR 2021)", "3x less memory at 9-16% extra compute"),
    ("Rockmate (Zhao et al., ICML 2023)", "2-5x less activation memory at 10-20% extra compute"),
    ("DTR (Kirisame et al., ICLR 2021)", "about 3x less memory for about 20% extra compute"),
    ("Chen et al., 2016 (sqrt(n) checkpoints)", "1,000-layer ResNet 48 GB -> 7 GB at +30% time"),
]


def _same_step(proto, recomputed) -> bool:
    """One step (gradients kept) with and without the recomputation: loss and gradients bit for bit."""
    plain = build_training_step(proto, optimizer="none", recompute=False)
    again = rematerialize(plain, recomputed)
    rng = np.random.default_rng(0)
    name = plain.data_inputs[0]
    x = plain.graph.tensors[name]
    feeds = {name: rng.standard_normal(x.shape).astype(x.dtype), plain.label: rng.integers(0, 10, (x.shape[0],))}
    a, b = TrainingSession(plain).prepare(), TrainingSession(again, canary=True).prepare()
    if a.run(feeds) != b.run(feeds):
        return False
    ga, gb = a.gradients(), b.gradients()
    return all(np.array_equal(ga[w], gb[w]) for w in ga)


def measure(names: list[str], strategy: str, time_limit: float) -> list[dict]:
    rows = []
    for name in names:
        try:
            proto = NETWORKS[name]()
        except ImportError as e:  # torch, for the exported ones
            print(f"{name}: skipped ({e})", flush=True)
            continue
        step = build_training_step(proto, optimizer="sgd", recompute=False)
        started = time.perf_counter()
        result = search(step, overhead=max(LEVELS), strategy=strategy, time_limit=time_limit)
        seconds = time.perf_counter() - started
        at = {f: choose(result.curve, None, f)[0] for f in LEVELS}
        row = {
            "name": name,
            "without": result.without,
            "at": at,
            "sqrt": result.sqrt_checkpoints,
            "seconds": seconds,
            "evaluated": result.evaluated,
            "method": result.method,
            "fixed": result.fixed_bytes,
            "activation": result.activation_bytes,
            "identical": _same_step(proto, at[0.2].recomputed),
        }
        rows.append(row)
        act0 = result.activation_bytes(result.without)
        print(
            f"{name}: arena {result.without.arena_bytes:,} (activations {act0:,}); "
            + "; ".join(
                f"+{f:.0%}: {p.arena_bytes:,} ({result.activation_bytes(p):,}, +{p.extra_flops:.1%})"
                for f, p in at.items()
            )
            + f"; search {seconds:.1f} s, {result.evaluated} placements; bit-identical {row['identical']}",
            flush=True,
        )
    return rows


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}x" if b else "inf"


def markdown(rows: list[dict], strategy: str, time_limit: float, load: str) -> str:
    lines = [
        "## Training below its floor: recomputation chosen by the placed arena",
        "",
        f"Generated by `python bench/remat_bench.py` (strategy `{strategy}`, search time limit {time_limit:g} s,",
        f"2-core machine, load average {load} during the run: other work shared the cores).",
        "The `real_` rows are `bench/real_models.py`'s ResNet-18 and MobileNetV2 (1,000 classes) exported by",
        "torch at 32x32, batch 8, batch norms kept; the others are `runtime.training.models`'. Each network's",
        "training step (batch 8, cross-entropy, SGD with momentum) keeps batch norm's Conv input, so the search",
        "decides all recomputation. *Activations* are the arena minus the peak",
        "of trainable parameters, their gradients and optimizer state (which no recomputation removes). Every",
        "point is the arena the planner placed and checked for the step with those tensors recomputed; `+10%`",
        "is the smallest arena at or under 10% extra FLOPs on the search's Pareto curve. *sqrt(n)* keeps every",
        "ceil(sqrt(n))-th articulation tensor of the forward pass and recomputes the rest (Chen et al., 2016).",
        "*Same bits*: one step with the +20% choice gives the loss and every gradient bit-identical to the",
        "step without recomputation (canary on).",
        "",
        "| network | arena without | activations without | +10% | +20% | +30% | activations at +20% "
        "| activation ratio at +20% | sqrt(n): arena, extra FLOPs | search | same bits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        act = r["activation"]
        without = r["without"]
        cells = [f"{r['at'][f].arena_bytes:,} (+{r['at'][f].extra_flops:.1%})" for f in LEVELS]
        sq = r["sqrt"]
        sqrt_cell = f"{sq.arena_bytes:,} ({act(sq):,} activations), +{sq.extra_flops:.1%}" if sq is not None else "none"
        lines.append(
            f"| {r['name']} | {without.arena_bytes:,} | {act(without):,} | "
            + " | ".join(cells)
            + f" | {act(r['at'][0.2]):,} | {_ratio(act(without), act(r['at'][0.2]))} | {sqrt_cell} | "
            f"{r['seconds']:.1f} s ({r['method']}, {r['evaluated']} placements) | "
            f"{'yes' if r['identical'] else 'NO'} |"
        )
    lines += ["", "Published ratios, on their own networks and baselines (compare ratios, not bytes):", ""]
    lines += [f"- {who}: {what}." for who, what in PUBLISHED]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
    )
    parser.add_argument("--strategy", default="greedy_by_size")
    # Two thirds of the 60 s goal: room for the cores being shared, and for placing the choice.
    parser.add_argument("--time-limit", type=float, default=40.0)
    parser.add_argument("--models", default=",".join(NETWORKS))
    args = parser.parse_args()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; accepted: {', '.join(NETWORKS)}")
    before = os.getloadavg()[0]
    rows = measure(names, args.strategy, args.time_limit)
    load = f"{before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    replace_section(args.output, "remat", markdown(rows, args.strategy, args.time_limit, load))
    print(f"wrote section 'remat' of {args.output}")


if __name__ == "__main__":
    main()
