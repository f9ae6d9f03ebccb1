"""Do memplan's MiniMalloc CSV exports of plans with aliases pass MiniMalloc's own validator?

MiniMalloc knows no aliases, and its validator refuses two rows live at a common step that
share a byte. `planner.csvio.write_csv` therefore writes each alias group as the block the
planner placed (a row per stretch of the group's profile, ``root``, ``root#1``...), and the
plan's `alias_groups` keeps which buffers each row stands for. This bench exports real
models' plans and checks every file:

- models: the onnx wheel's nine light models and the torch models `bench/real_models.py`
  exported into ``bench/.models`` (those already there; nothing is exported here);
- problems: in place and concat in place on, both like for like (``--io external
  --workspace off``, as `bench/peer_bench.py` counts) and inclusive (the defaults);
- plans: every registered strategy (the searching ones under ``--time-limit``), each first
  checked against its own problem by `planner.check_plan`;
- memplan's checks of each CSV: *re-read*, the file read back by `planner.csvio.read_csv`
  is a problem whose offsets `planner.check_plan` accepts; *apart*, no two rows live at a
  common step share a byte, by MiniMalloc's rule (a row of size 0 strictly inside another
  row's bytes counts as sharing); *covers*, every buffer's bytes at every step of its life
  lie in a row of its group (groups as the plan's `alias_groups` says);
- with ``--validator PATH``, MiniMalloc's validator too: PATH is `bench/minimalloc_validate.cc`
  built against a MiniMalloc checkout, run on each file with the plan's arena as the capacity;
  it passes when it prints ``PASS height N`` with N the plan's arena.

Run from the repository root: ``python bench/interchange_bench.py [--validator PATH]
[--minimalloc-tree DIR] [--models a,b] [--time-limit S]``; ``--minimalloc-tree`` names the
MiniMalloc checkout the validator was built from, so that its version goes into the notes.
Prints a table per model, writes section "interchange" of docs/CONFORMANCE.md, and exits 1
when any check fails.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner  # noqa: E402
import runtime  # noqa: E402
from app.services.docsections import replace_section  # noqa: E402
from planner.csvio import read_csv, write_csv  # noqa: E402
from planner.errors import PlanningError, ProblemError  # noqa: E402

FORMS = {
    "like for like": runtime.MemoryOptions(io="external", workspace=False, inplace=True, concat_inplace=True),
    "inclusive": runtime.MemoryOptions(inplace=True, concat_inplace=True),
}
SEARCHING = ("hill_climb", "optimal", "best")  # run under --time-limit
REAL_MODELS = ROOT / "bench" / ".models"
CHECKS = ("re-read", "apart", "covers")
Row = tuple[str, int, int, int, int]  # id, lower, upper (exclusive), size, offset


def model_paths() -> dict[str, Path]:
    """The light models of the onnx wheel, then the real models already exported."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    paths = {p.stem.removeprefix("light_"): p for p in sorted(light.glob("light_*.onnx"))}
    paths.update({p.stem: p for p in sorted(REAL_MODELS.glob("*.onnx"))})
    return paths


def csv_rows(text: str, alignment: int) -> tuple[planner.Problem, list[Row]]:
    """The CSV read back by memplan's reader: the problem it stands for and its rows."""
    problem, offsets = read_csv(text, source="export.csv", alignment=alignment)
    assert offsets is not None, "the export has no offset column"
    return problem, [(b.id, b.first, b.last + 1, b.size, offsets[b.id]) for b in problem.buffers]


def reread_verdict(problem: planner.Problem, rows: list[Row]) -> str | None:
    """`planner.check_plan` on the re-read problem with the file's offsets, or None when valid."""
    top = max((offset + size for _, _, _, size, offset in rows), default=0)
    pool = problem.pools[0].name
    placed = planner.Plan(
        strategy="csv",
        offsets={r[0]: planner.Placement(pool, r[4]) for r in rows},
        pool_sizes={pool: top},
        lower_bound=planner.load(problem),
        naive=planner.naive(problem),
    )
    verdict = planner.check_plan(problem, placed)
    return None if verdict.ok else str(verdict)


def first_overlap(rows: list[Row]) -> str | None:
    """Two rows live at a common step that share a byte by MiniMalloc's validator's rule
    (neither ends at or below the other's offset), or None. A sweep over the rows by lower step."""
    live: list[Row] = []
    for row in sorted(rows, key=lambda r: (r[1], r[0])):
        live = [r for r in live if r[2] > row[1]]
        for other in live:
            if not (row[4] + row[3] <= other[4] or other[4] + other[3] <= row[4]):
                return f"rows {other[0]} and {row[0]} overlap"
        live.append(row)
    return None


def rows_by_root(plan: planner.Plan, rows: list[Row]) -> dict[str, list[Row]]:
    """The rows of each alias group (a buffer alone is a group of one), by its root's id:
    a group's rows are named after its root, ``root``, ``root#1``, ..."""
    by_root: dict[str, list[Row]] = {}
    for row in rows:
        head, _, tail = row[0].rpartition("#")
        root = head if head in plan.alias_groups and tail.isdigit() else row[0]
        by_root.setdefault(root, []).append(row)
    return by_root


def first_uncovered(problem: planner.Problem, plan: planner.Plan, rows: list[Row]) -> str | None:
    """A buffer whose bytes at some step of its life lie in no row of its group, or None."""
    root_of = {member: root for root, members in plan.alias_groups.items() for member in members}
    by_root = rows_by_root(plan, rows)
    for b in problem.buffers:
        if b.size == 0:
            continue
        start, end = plan.offset(b.id), plan.offset(b.id) + b.size
        spans = sorted(
            (max(lower, b.first), min(upper, b.last + 1))
            for _, lower, upper, size, offset in by_root.get(root_of.get(b.id, b.id), [])
            if offset <= start and end <= offset + size and lower <= b.last and b.first < upper
        )
        reached = b.first
        for lower, upper in spans:
            if lower > reached:
                break
            reached = max(reached, upper)
        if reached <= b.last:
            return f"{b.id} (bytes {start}..{end}) is in no row at step {reached}"
    return None


def run_validator(validator: Path, text: str, arena: int, folder: Path) -> str | None:
    """MiniMalloc's validator on the CSV with the arena as capacity: None when it prints
    ``PASS height <arena>``, else what it said."""
    path = folder / "export.csv"
    path.write_text(text)
    done = subprocess.run([str(validator), str(path), str(arena)], capture_output=True, text=True, timeout=600)
    said = (done.stdout + done.stderr).strip()
    if done.returncode == 0 and said == f"PASS height {arena}":
        return None
    return said or f"exit code {done.returncode}"


def check_export(problem, plan, validator: Path | None, folder: Path) -> dict:
    """Every check of one plan's CSV: a verdict per checker (None when it passes)."""
    own = planner.check_plan(problem, plan)
    if not own.ok:
        return {"plan": str(own), **dict.fromkeys(CHECKS, "plan invalid"), "rows": 0, "pieces": 0}
    text = write_csv(problem, plan)
    try:
        reread, rows = csv_rows(text, problem.alignment)
    except ProblemError as error:
        return {"plan": None, **dict.fromkeys(CHECKS, f"unreadable: {error}"), "rows": 0, "pieces": 0}
    split = [group for group in rows_by_root(plan, rows).values() if len(group) > 1]
    out = {
        "plan": None,
        "rows": len(rows),
        "pieces": sum(map(len, split)),
        "re-read": reread_verdict(reread, rows),
        "apart": first_overlap(rows),
        "covers": first_uncovered(problem, plan, rows),
    }
    if validator is not None:
        out["minimalloc"] = run_validator(validator, text, plan.arena_bytes, folder)
    return out


def measure(path: Path, strategies: list[str], time_limit: float, validator: Path | None, folder: Path) -> list[dict]:
    """One line per form and strategy: the export's rows, groups, pieces and verdicts."""
    graph = runtime.load_model(path)
    lines = []
    for form, options in FORMS.items():
        problem = runtime.memory_problem(graph, options)
        for name in strategies:
            line = {"form": form, "strategy": name, "buffers": len(problem.buffers)}
            extra = {"time_limit": time_limit} if name in SEARCHING else {}
            try:
                plan = planner.plan(problem, name, **extra)
            except PlanningError as error:  # a search that found nothing in time: no plan to export
                lines.append({**line, "skipped": f"{type(error).__name__}: {error}"[:120]})
                continue
            lines.append({**line, **check_export(problem, plan, validator, folder), "groups": len(plan.alias_groups)})
    return lines


def checkers(validator: Path | None) -> tuple[str, ...]:
    return ("plan", *CHECKS, *(("minimalloc",) if validator else ()))


def failures(lines: list[dict], validator: Path | None) -> int:
    return sum(1 for line in lines if "skipped" not in line for c in checkers(validator) if line[c] is not None)


def model_table(name: str, lines: list[dict], validator: Path | None) -> str:
    names = checkers(validator)
    out = [f"{name}", "| form | strategy | rows | groups | piece rows | " + " | ".join(names) + " |"]
    for line in lines:
        if "skipped" in line:
            out.append(f"| {line['form']} | {line['strategy']} | skipped: {line['skipped']} |")
            continue
        verdicts = " | ".join("PASS" if line[c] is None else f"FAIL {line[c]}" for c in names)
        out.append(
            f"| {line['form']} | {line['strategy']} | {line['rows']} | {line['groups']} | {line['pieces']} | "
            f"{verdicts} |"
        )
    return "\n".join(out)


def markdown(results: dict[str, list[dict]], args: argparse.Namespace, version: str | None) -> str:
    """The docs section: what ran, then a line per model and form with PASS counts."""
    import onnx

    names = checkers(args.validator)
    planned = [line for lines in results.values() for line in lines if "skipped" not in line]
    skipped = sum("skipped" in line for lines in results.values() for line in lines)
    command = "python bench/interchange_bench.py" + (" --validator PATH" if args.validator else "")
    if args.models:
        command += f" --models {args.models}"
    lines = [
        "## MiniMalloc CSV export of plans with aliases",
        "",
        f"`{command} --time-limit {args.time_limit:g}`: {len(results)} model(s) (onnx {onnx.__version__}'s light "
        "models and the torch models of `bench/real_models.py`), each with in place and concat in place on, like "
        "for like (`--io external --workspace off`) and inclusive (the defaults), planned by "
        f"{', '.join(args.strategies)} ({', '.join(s for s in SEARCHING if s in args.strategies)} within "
        f"{args.time_limit:g} s); each plan exported by `write_csv(problem, plan)` (what `memplan plan "
        "--output plan.csv` writes) and checked. *plan*: `planner.check_plan` on the plan itself; *re-read*: the "
        "file read back by `planner.csvio.read_csv`, its offsets accepted by `planner.check_plan`; *apart*: no two "
        "rows live at a common step share a byte, by MiniMalloc's validator's rule; *covers*: every buffer's bytes "
        "at every step of its life lie in a row of its alias group (membership from the plan's `alias_groups`).",
    ]
    if args.validator:
        source = f"MiniMalloc {version}" if version else "MiniMalloc (version not recorded)"
        lines[-1] += (
            f" *MiniMalloc*: the `FromCsv`, `Problem::strip_solution` and `Validate` of {source}, called by `bench/minimalloc_validate.cc` with the plan's arena as the capacity; a pass is "
            "`PASS height` equal to the arena."
        )
    else:
        lines[-1] += " MiniMalloc's validator was not run (no `--validator`)."
    passes = {c: sum(line[c] is None for line in planned) for c in names}
    lines += [
        "",
        f"{len(planned)} plans exported"
        + (f" ({skipped} searches found no plan in time, not counted)" if skipped else "")
        + ", "
        + ", ".join(f"{c}: {passes[c]} PASS / {len(planned) - passes[c]} FAIL" for c in names)
        + f". Rows: {sum(line['rows'] for line in planned):,} over all files, "
        f"{sum(line['pieces'] for line in planned):,} of them pieces of a split group's profile.",
        "",
        "| model | form | buffers | rows | alias groups | piece rows | plans | "
        + " | ".join(f"{c} PASS" for c in names)
        + " |",
        "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(names),
    ]
    for model, model_lines in results.items():
        for form in FORMS:
            done = [line for line in model_lines if line["form"] == form and "skipped" not in line]
            if not done:
                continue
            first = done[0]
            counts = " | ".join(f"{sum(line[c] is None for line in done)}/{len(done)}" for c in names)
            lines.append(
                f"| {model} | {form} | {first['buffers']:,} | {first['rows']:,} | {first['groups']} | "
                f"{first['pieces']} | {len(done)} | {counts} |"
            )
    return "\n".join(lines)


def minimalloc_version(tree: Path | None) -> str | None:
    """The checkout's git commit when it has one, else the version its pyproject.toml gives."""
    if tree is None:
        return None
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode == 0:
        return f"at commit {done.stdout.strip()}"
    pyproject = tree / "pyproject.toml"
    found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M) if pyproject.exists() else None
    return f"{found.group(1)}, as its pyproject.toml says (a source tree without git history)" if found else None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="Comma-separated names (default: every model found).")
    parser.add_argument("--strategies", help="Comma-separated strategies (default: every registered one).")
    parser.add_argument("--time-limit", type=float, default=1.0, help=f"Seconds for {', '.join(SEARCHING)}.")
    parser.add_argument("--validator", type=Path, help="bench/minimalloc_validate.cc, built.")
    parser.add_argument("--minimalloc-tree", type=Path, help="The MiniMalloc checkout it was built from.")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "CONFORMANCE.md")
    args = parser.parse_args()
    if args.validator is not None and not (args.validator.is_file() and os.access(args.validator, os.X_OK)):
        parser.error(
            f"--validator: {args.validator} is not an executable file "
            "(accepted: bench/minimalloc_validate.cc built against a MiniMalloc checkout)"
        )
    if args.time_limit <= 0:
        parser.error(f"--time-limit: must be > 0 seconds, got {args.time_limit}")
    known = planner.names()
    args.strategies = args.strategies.split(",") if args.strategies else known
    unknown = sorted(set(args.strategies) - set(known))
    if unknown:
        parser.error(f"--strategies: unknown {unknown}; accepted: {', '.join(known)}")
    return args


def main() -> None:
    args = parse_args()
    paths = model_paths()
    wanted = args.models.split(",") if args.models else list(paths)
    unknown = sorted(set(wanted) - set(paths))
    if unknown:
        raise SystemExit(f"--models: not found {unknown}; found: {', '.join(paths)}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="memplan-interchange-") as tmp:
        for name in wanted:
            results[name] = measure(paths[name], args.strategies, args.time_limit, args.validator, Path(tmp))
            print(model_table(name, results[name], args.validator), flush=True)
    text = markdown(results, args, minimalloc_version(args.minimalloc_tree))
    replace_section(args.output, "interchange", text, title="memplan conformance")
    print(text)
    print(f"wrote {args.output}")
    failed = sum(failures(lines, args.validator) for lines in results.values())
    if failed:
        raise SystemExit(f"{failed} checks failed")


if __name__ == "__main__":
    main()
