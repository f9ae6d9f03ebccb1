"""The tables and notes of bench/peer_bench.py, from its rows (pure: no model is loaded here).

A row is ``{"model", "memplan": {...}, "ort": {...}, "tvm": {...}, "tflite": {...}}`` plus
``best_peer`` (`best_peer`) and, where the previous table had it, ``like_before``. A peer's dict
holds its figure, or ``error`` (why it could not take the model), or its figure or error with
``previous`` (the peer could not be imported: the previous run's, `keep_previous`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

# Each peer: its key in a row, its column's header, the key of its figure (bytes).
PEERS = (("ort", "onnxruntime", "planned"), ("tvm", "TVM", "bytes"), ("tflite", "TFLite", "bytes"))
HEADING = "## Peers: memplan's arena against onnxruntime, TVM and TFLite"
# Columns read back from the previous table, by header.
KEPT = {"memplan like for like": "like", "TVM": "tvm", "TFLite": "tflite"}


def previous_figures(doc: Path) -> dict[str, dict[str, int | str]]:
    """Per model, the `KEPT` columns of the peers table of `doc` (the previous run): a figure, or
    the reason a peer gave none (``n/a: ...``). Columns are found by their headers, so older
    tables are read too."""
    text = doc.read_text() if doc.exists() else ""
    start = text.find("## Peers: memplan's arena against")
    figures: dict[str, dict[str, int | str]] = {}
    columns: dict[int, str] = {}
    for line in text[start:].splitlines()[1:] if start >= 0 else []:
        if line.startswith("## "):
            break
        cells = [c.strip().removesuffix("*") for c in line.strip().strip("|").split("|")]
        if cells[0] == "model":
            columns = {k: KEPT[name] for k, name in enumerate(cells) if name in KEPT}
        for k, key in columns.items():
            if k < len(cells) and re.fullmatch(r"[\d,]+", cells[k]):
                figures.setdefault(cells[0], {})[key] = int(cells[k].replace(",", ""))
            elif k < len(cells) and cells[k].startswith("n/a: ") and key != "like":
                figures.setdefault(cells[0], {})[key] = cells[k].removeprefix("n/a: ")
    return figures


def not_importable(error: str) -> bool:
    """Whether a child's error (the last line of its traceback, `peer_bench.in_child`) is a module
    that could not be found: the peer or one of its own dependencies (onnx2tf's sng4onnx, psutil,
    ...) is not installed here, which says nothing of the model."""
    return error.startswith(("ModuleNotFoundError: ", "No module named "))


def keep_previous(peer: str, figure: dict, before: dict[str, int | str]) -> dict:
    """`figure`, or what the previous run had for `peer` (from `before`, one model's
    `previous_figures`: bytes, or why there were none) marked previous when the peer cannot be
    imported at all."""
    if not not_importable(figure.get("error", "")) or peer not in before:
        return figure
    kept = before[peer]
    return {"bytes": kept, "previous": True} if isinstance(kept, int) else {"error": kept, "previous": True}


def best_peer(row: dict) -> int | None:
    """The smallest figure of the peers that took the model, or None."""
    figures = [row[key][figure] for key, _, figure in PEERS if figure in row.get(key, {})]
    return min(figures) if figures else None


def cell(figure: dict, key: str) -> str:
    """A peer's figure, or why it has none; * marks the previous run's."""
    mark = "*" if figure.get("previous") else ""
    if key in figure:
        return f"{figure[key]:,}{mark}"
    return "n/a: " + figure.get("error", "no figure").replace("|", "/") + mark


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(rows: list[dict], run: bool, check: dict | None = None) -> str:
    """The peers section; `check` is TFLite's hand-worked check (peer_tflite.chain_check, or
    {"error": why} where it could not run), if run."""
    lines = [
        HEADING,
        "",
        "`python bench/peer_bench.py`: bytes per model (batch 1). *memplan like for like*: `best` with "
        "`--io external --workspace off` (activations only, in-place and concat-in-place aliases on, the load-time "
        "fusions on: BatchNormalization into Conv, 1x1 Conv with its residual Add), the form the peers count; "
        "memplan's kernels pool and normalise (LRN) over their own input, and a dense 1x1 or 'same' KxK Conv "
        "writes its output from its dying input's first byte (pixel-wise or row-lagged, `runtime.kernels.conv.over`; "
        "one batch item or no more output channels than input channels). *onnxruntime* (1.31, CPU, default "
        "optimisations, arena and memory pattern on, profiling "
        "on, 3 runs): requested bytes in use before run 1's first node minus those before run 0's, i.e. the "
        "block its memory pattern planned in run 0. *TVM* (0.27, relax CPU passes through `CallTIRRewrite`, then "
        "`StaticPlanBlockMemory`): sum of the sizes of `R.memory.alloc_storage` in `main` (after operator "
        "fusion, so fused intermediates are never materialised). *TFLite* (TensorFlow 2.21's interpreter with its "
        "builtin reference kernels and no delegate, on onnx2tf 2.6's float32 conversion after onnxsim folded the "
        "constants; `bench/peer_tflite.py`): the activations in the arena its ArenaPlanner planned, read from the "
        "tensors' addresses: from the top of the graph inputs (the arena's bottom) to the highest end of an "
        "intermediate tensor, outputs and kernels' temporaries left out, recurrent states kept in another arena; "
        "the graph is onnx2tf's (NHWC, an explicit Pad where ONNX's pads are not TFLite's, a BatchNormalization "
        "with no Conv before it as Mul and Add). *best peer*: the smallest of the three. *memplan inclusive*: graph "
        "inputs/outputs in "
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
        "| model | memplan like for like | onnxruntime | TVM | TFLite | best peer | memplan / best peer "
        "| memplan inclusive | LOAD | rigid groups | LOAD, rigid groups |" + (" run verified |" if run else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if run else ""),
    ]
    ratios = []
    for r in rows:
        m, best = r["memplan"], r["best_peer"]
        ratio = m["like"] / best if best else None
        if ratio is not None:
            ratios.append(ratio)
        cells = [r["model"], f"{m['like']:,}", *(cell(r[key], figure) for key, _, figure in PEERS)]
        cells += [f"{best:,}" if best else "n/a", f"{ratio:.3f}" if ratio else "n/a"]
        cells += [f"{m['inclusive']:,}", f"{m['like_load']:,}", f"{m['like_rigid']:,}", f"{m['like_rigid_load']:,}"]
        if run:
            cells.append({True: "yes", False: "NO", None: "no oracle"}[m.get("verified")])
        lines.append("| " + " | ".join(cells) + " |")
    if ratios:
        lines.append(
            f"| geometric mean ({len(ratios)} models) | | | | | | {geomean(ratios):.3f} | | | | |"
            + (" |" if run else "")
        )
        lines += ["", *notes(rows), *tflite_notes(rows, check)]
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
    at_load = [r["model"] for r in compared if r["best_peer"] == r["memplan"]["like_load"]]
    under_load = [
        f"{r['model']} ({r['best_peer']:,} against LOAD {r['memplan']['like_load']:,})"
        for r in compared
        if r["best_peer"] < r["memplan"]["like_load"]
    ]
    floor = geomean([r["memplan"]["like_load"] / r["best_peer"] for r in compared])
    with_order = geomean([_best_order(r) / r["best_peer"] for r in compared])
    stiff = geomean([r["memplan"]["like_rigid"] / r["best_peer"] for r in compared])
    shrunk = [
        f"{r['model']} ({r['memplan']['like']:,} against {r['memplan']['like_rigid']:,})"
        for r in rows
        if r["memplan"]["like"] < r["memplan"]["like_rigid"]
    ]
    moved = [
        f"{r['model']} ({r['like_before']:,} -> {r['memplan']['like']:,})"
        for r in rows
        if r.get("like_before", r["memplan"]["like"]) != r["memplan"]["like"]
    ]
    return [
        "- Like-for-like arena against the previous run of this bench (the table this one replaced): "
        + (f"changed on {', '.join(moved)}; the others unchanged." if moved else "unchanged on every model."),
        *stale_notes(rows),
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
        + ("; there the peak is one step whose live tensors no placement can overlap." if at_load else ".")
        + (
            f" It is under memplan's LOAD on: {', '.join(under_load)}: there the peer plans another graph than "
            "memplan's (its own conversion and fusions), whose peak is lower."
            if under_load
            else ""
        ),
        "- Not in the table: with memplan's memory-aware node order (`runtime.reorder_graph`: the exact "
        "order search, within 1 s) the "
        f"like-for-like arena is lower on: {', '.join(lower) or 'none'}"
        + (f"; the reorder failed on: {', '.join(failed)}." if failed else ".")
        + f" Taking per model the smaller of the two orders, the geometric mean is {with_order:.3f}x the best peer.",
    ]


def stale_notes(rows: list[dict]) -> list[str]:
    """One line per peer whose figures come from the previous run (it could not be imported)."""
    lines = []
    for key, header, _ in PEERS:
        stale = [r["model"] for r in rows if r.get(key, {}).get("previous")]
        if stale:
            lines.append(
                f"- {header} could not be imported in this run: its figures marked * ({', '.join(stale)}) are those "
                f"of the previous run ({header}'s plan does not depend on memplan)."
            )
    return lines


def chain_note(check: dict | None) -> str | None:
    """The note on TFLite's hand-worked check: its figures, that it failed, or why it could not run;
    none where it was not run or TFLite cannot be imported (`stale_notes` says so)."""
    if check is None or not_importable(check.get("error", "")):
        return None
    if "error" in check:
        outcome = f"could not run: {check['error']}."
    elif check.get("passed"):
        outcome = f"activations {check['bytes']:,}, whole arena {check['arena']:,}, as expected."
    else:
        outcome = f"FAILED ({check})."
    return (
        "- TFLite's reading, checked first on a chain of four elementwise ops worked out by hand "
        "(`peer_tflite.chain_check`: 4,096 bytes a tensor, two buffers for three intermediates): " + outcome
    )


def tflite_notes(rows: list[dict], check: dict | None) -> list[str]:
    """TFLite's reading checked by hand, the models it could not take, and what its optimized kernels add."""
    note = chain_note(check)
    lines = [note] if note else []
    for r in rows:
        if "error" in r["tflite"]:
            when = " in the previous run" if r["tflite"].get("previous") else ""
            lines.append(f"- TFLite could not take {r['model']}{when}: {r['tflite']['error']}")
    grown = [
        f"{r['model']} ({r['tflite']['optimized']['bytes']:,})"
        for r in rows
        if "optimized" in r["tflite"] and r["tflite"]["optimized"]["bytes"] > r["tflite"]["bytes"]
    ]
    if grown:
        lines.append(
            "- TFLite with its optimized builtin kernels instead of the reference ones (no delegate either): their "
            "temporaries (im2col) share the arena and the activations span grows on "
            f"{', '.join(grown)}; the table keeps the reference kernels' plan, without kernels' scratch as memplan "
            "like for like."
        )
    return lines


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
